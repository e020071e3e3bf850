/**
 * The enumerated crash suite (design 0220). A *variant* is a scripted run (`chaos-scripts.ts`:
 * tool calls, several calls per reply, code actions, approvals) on a store (SQLite, a fresh file
 * per scenario; PostgreSQL, one database for the suite whose rows each scenario removes, or a
 * fresh database per scenario to enumerate its migration), with appends through the store's
 * fault hook (`hooked`: record by record in a transaction, a point between records) or as
 * applications run them (one statement). The uncrashed run of a variant (its *reference*)
 * names every crash point each of its lives passes (`chaos-child.ts`); each one is a scenario:
 * the lives before it run as in the reference, the child of that life SIGKILLs itself exactly
 * there, and the run is resumed (sometimes — one time in five, at most twice — killed again at a point chosen by the seed)
 * until it finishes. Then every invariant is checked:
 *
 * - the log decodes in full and passes `polyloop verify`'s audit (`Verify.runFindings`: sequence
 *   without gap or duplicate, every result with its step, step order, the summary row against
 *   the log);
 * - every acknowledged write (a store write that returned before the kill, reported by the child
 *   before it went on) is in the log, its last record of the acknowledged kind;
 * - no `"Never"` call ran twice, and a `"Never"` result recorded `Executed` ran exactly once;
 * - the final log equals the reference's, apart from `RunResumed` records and interrupted
 *   actions (`NotExecuted` with the synthetic text, and their step's `effective`).
 *
 * Renewal points of the lease (`renew`, `renew check`) come from a timer: their occurrences 1
 * and 2 in each life that claims the run are scenarios, and the life holds its claim at its end
 * until it passed its point (`chaos-child.ts`), so every one is reached; one that is not (after
 * 10 s of waiting) counts as *unreached*. A scenario's id is `<variant>/p<point>/r<seed>`.
 */
import * as Reactivity from "@effect/experimental/Reactivity"
import * as PgClient from "@effect/sql-pg/PgClient"
import * as SqlClient from "@effect/sql/SqlClient"
import * as Ids from "@polyloop/core/Ids"
import * as RunLog from "@polyloop/core/RunLog"
import * as RunLogAudit from "@polyloop/core/RunLogAudit"
import * as RunLogStore from "@polyloop/core/RunLogStore"
import * as SqlRunLogStore from "@polyloop/sql/SqlRunLogStore"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as ManagedRuntime from "effect/ManagedRuntime"
import * as Option from "effect/Option"
import * as Redacted from "effect/Redacted"
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import type { Crash, Job } from "./chaos-scripts.js"
import * as Pool from "./chaos-pool.js"
import * as Scripts from "./chaos-scripts.js"
import { prng } from "./crash-child.js"
import * as Scenario from "./crash-scenario.js"

/** Where a variant's store is. */
export type StoreKind = "sqlite" | "pg" | "pgfresh"

/** A scripted run on a store. */
export interface Variant {
  readonly script: Scripts.ScriptName
  readonly store: StoreKind
  readonly hooked: boolean
  readonly steps: number
  /** Runs at once in each life, in lockstep (`Job.runs`): more than one, their appends are grouped. */
  readonly runs: number
}

export const variantId = (v: Variant): string =>
  `${v.script}.${v.store}.${v.hooked ? "hooked" : "plain"}.s${v.steps}${v.runs > 1 ? `.x${v.runs}` : ""}`

export const parseVariant = (id: string): Variant => {
  const match = /^(\w+)\.(sqlite|pg|pgfresh)\.(hooked|plain)\.s(\d+)(?:\.x(\d+))?$/.exec(id)
  if (match === null || !(Scripts.scriptNames as ReadonlyArray<string>).includes(match[1]!)) throw new Error(`${JSON.stringify(id)} is not a variant id`)
  return {
    script: match[1] as Scripts.ScriptName,
    store: match[2] as StoreKind,
    hooked: match[3] === "hooked",
    steps: Number(match[4]),
    runs: match[5] === undefined ? 1 : Number(match[5])
  }
}

/** A crash point of the reference: the life it is in, its name, its occurrence in that life. */
export interface Key {
  readonly life: number
  readonly name: string
  readonly occurrence: number
  /** Passed on a timer (lease renewal): may be unreached. */
  readonly timed: boolean
}

/** The tools whose replay policy is "Never" (`chaos-scripts.ts`). */
const neverTools = ["write", "refund"]

const timedNames = Scripts.timedPoints

/** The uncrashed run of a variant. */
export interface Reference {
  readonly variant: Variant
  /** The kind of each life, in order (`run`, then `decide` and `run` again after each suspension). */
  readonly lives: ReadonlyArray<Job["life"]>
  /** How many points each life passed. */
  readonly lengths: ReadonlyArray<number>
  /** The scenarios: the crash points, deterministic ones in order, then the timed ones. */
  readonly keys: ReadonlyArray<Key>
  /** The log of each run, in the order of `Scripts.checkedRunIdsOf` (a sub-agent's children after their parent). */
  readonly logs: ReadonlyArray<RunLog.RunLog>
}

/** What one scenario found. */
export interface Outcome {
  readonly id: string
  readonly deaths: number
  readonly invariants: number
  readonly unreached: boolean
  readonly failures: ReadonlyArray<string>
}

/** The environment scenarios run in: the pool, the PostgreSQL server if any. */
export interface Env {
  readonly pool: Pool.Pool
  /** The suite's PostgreSQL database (URL), migrated; undefined: no PostgreSQL variants. */
  readonly pgUrl?: string
  readonly pg?: ManagedRuntime.ManagedRuntime<RunLogStore.RunLogStore | SqlClient.SqlClient, unknown>
  readonly tmp: string
  /** Makes a fresh database on the server and returns its URL (`pgfresh`). */
  readonly freshPg?: () => Promise<{ readonly url: string; readonly drop: () => Promise<void> }>
}

const adminRun = <A>(url: string, f: (sql: SqlClient.SqlClient) => Effect.Effect<A, unknown>) =>
  Effect.runPromise(
    Effect.scoped(Effect.flatMap(PgClient.make({ url: Redacted.make(url), maxConnections: 1 }), f)).pipe(Effect.provide(Reactivity.layer))
  )

let databases = 0

/** Starts the pool (and connects to PostgreSQL, creating the suite's database, when `pgUrl` is given). */
export const makeEnv = async (options: { readonly poolSize: number; readonly pgUrl?: string; readonly v8Flags?: ReadonlyArray<string> }): Promise<Env> => {
  const pool = await Pool.make({ size: options.poolSize, ...(options.v8Flags === undefined ? {} : { v8Flags: options.v8Flags }) })
  const tmp = Fs.mkdtempSync(Path.join(Os.tmpdir(), "polyloop-chaos-"))
  if (options.pgUrl === undefined) return { pool, tmp }
  const server = options.pgUrl
  const create = async (prefix: string) => {
    const name = `${prefix}_${process.pid}_${++databases}`
    await adminRun(server, (sql) => sql.unsafe(`CREATE DATABASE ${name}`))
    const url = new URL(server)
    url.pathname = `/${name}`
    return { url: url.toString(), drop: () => adminRun(server, (sql) => sql.unsafe(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`)).then(() => undefined) }
  }
  const suite = await create("chaos")
  const pg = ManagedRuntime.make(
    SqlRunLogStore.layer({}).pipe(Layer.provideMerge(SqlRunLogStore.layerPgClient({ url: Redacted.make(suite.url), maxConnections: 2 })))
  )
  await pg.runPromise(Effect.void)
  return { pool, tmp, pgUrl: suite.url, pg, freshPg: () => create("chaosfresh") }
}

export const closeEnv = async (env: Env) => {
  env.pool.close()
  if (env.pg !== undefined) await env.pg.dispose()
  Fs.rmSync(env.tmp, { recursive: true, force: true })
}

/** Where one scenario's run lives. */
interface Place {
  readonly store: Job["store"]
  /** The life's run id (`Job.runId`); its runs are `Scripts.runIdsOf(runId, variant.runs)` (and their children, `Scripts.checkedRunIdsOf`). */
  readonly runId: string
  readonly runIds: ReadonlyArray<string>
  readonly side: string
  /** Reads the run's log and its summary. */
  readonly read: <A>(f: (store: RunLogStore.RunLogStore.Service) => Effect.Effect<A, unknown>) => Promise<A>
  readonly cleanup: () => Promise<void>
}

let places = 0

const place = async (env: Env, variant: Variant, label: string): Promise<Place> => {
  const dir = Path.join(env.tmp, `${++places}`)
  Fs.mkdirSync(dir)
  const side = Path.join(dir, "side.jsonl")
  const runId = `chaos-${label}-${process.pid}-${places}`
  const runIds = Scripts.checkedRunIdsOf(variant.script, runId, variant.runs)
  const removeDir = () => Fs.rmSync(dir, { recursive: true, force: true })
  if (variant.store === "sqlite") {
    const file = Path.join(dir, "run.db")
    return {
      store: { kind: "sqlite", file },
      runId,
      runIds,
      side,
      read: (f) => Effect.runPromise(Effect.flatMap(RunLogStore.RunLogStore, f).pipe(Effect.provide(SqlRunLogStore.layerSqlite({ filename: file })))),
      cleanup: async () => removeDir()
    }
  }
  if (variant.store === "pgfresh") {
    if (env.freshPg === undefined) throw new Error("no PostgreSQL server for a pgfresh variant")
    const fresh = await env.freshPg()
    return {
      store: { kind: "pg", url: fresh.url },
      runId,
      runIds,
      side,
      read: (f) =>
        Effect.runPromise(
          Effect.flatMap(RunLogStore.RunLogStore, f).pipe(Effect.provide(SqlRunLogStore.layerPg({ url: Redacted.make(fresh.url), maxConnections: 1 })))
        ),
      cleanup: async () => {
        removeDir()
        await fresh.drop()
      }
    }
  }
  const pg = env.pg
  if (pg === undefined || env.pgUrl === undefined) throw new Error("no PostgreSQL server for a pg variant")
  return {
    store: { kind: "pg", url: env.pgUrl },
    runId,
    runIds,
    side,
    read: (f) => pg.runPromise(Effect.flatMap(RunLogStore.RunLogStore, f)),
    cleanup: async () => {
      removeDir()
      // The suite's database keeps only the runs in progress: listing runs stays cheap.
      await pg.runPromise(
        Effect.flatMap(SqlClient.SqlClient, (sql) =>
          Effect.all([
            sql`DELETE FROM polyloop_records WHERE run_id IN ${sql.in(runIds)}`,
            sql`DELETE FROM polyloop_claims WHERE run_id IN ${sql.in(runIds)}`,
            sql`DELETE FROM polyloop_runs WHERE run_id IN ${sql.in(runIds)}`
          ]))
      )
    }
  }
}

const jobOf = (variant: Variant, where: Place, life: Job["life"], crash: Crash | null, trace: boolean): Job => ({
  life,
  store: where.store,
  hooked: variant.hooked,
  script: variant.script,
  steps: variant.steps,
  runId: where.runId,
  runs: variant.runs,
  side: where.side,
  crash,
  trace
})

const nextLife = (end: NonNullable<Pool.Life["end"]>, current: Job["life"]): Job["life"] | "done" | "again" | "fail" => {
  if (end.status === "finished") return "done"
  if (end.status === "suspended") return "decide"
  if (end.status === "decided") return "run"
  if (end.status === "error" && end.detail.startsWith("RunBusy")) return current === "run" ? "again" : "fail"
  return "fail"
}

/** Runs a variant once without a crash: its lives, their points, its log. */
export const reference = async (env: Env, variant: Variant): Promise<Reference> => {
  const where = await place(env, variant, "ref")
  try {
    const lives: Array<Job["life"]> = []
    const lengths: Array<number> = []
    const keys: Array<Key> = []
    const timed: Array<Key> = []
    let life: Job["life"] = "run"
    for (let i = 0; i < 20; i++) {
      const result = await env.pool.run(jobOf(variant, where, life, null, true))
      if (result.end === null) throw new Error(`the uncrashed ${variantId(variant)} died (${result.exit}): ${result.output}`)
      lives.push(life)
      lengths.push(result.points.length)
      const seen = new Map<string, number>()
      for (const name of result.points) {
        const occurrence = (seen.get(name) ?? 0) + 1
        seen.set(name, occurrence)
        if (!timedNames.includes(name)) keys.push({ life: lives.length - 1, name, occurrence, timed: false })
      }
      // Only a life that claims the run renews a lease (recording decisions takes no claim).
      if (result.points.includes("after claim")) {
        for (const name of timedNames) for (const occurrence of [1, 2]) timed.push({ life: lives.length - 1, name, occurrence, timed: true })
      }
      const next = nextLife(result.end, life)
      if (next === "done") break
      if (next === "again" || next === "fail") throw new Error(`the uncrashed ${variantId(variant)} ended with ${JSON.stringify(result.end)}: ${result.output}`)
      life = next
    }
    const logs: Array<RunLog.RunLog> = []
    for (const runId of where.runIds) {
      const read = await where.read((store) => Effect.either(store.readLog(Ids.runId(runId), { verify: true })))
      if (read._tag === "Left") throw new Error(`the uncrashed ${variantId(variant)}'s log of ${runId} does not verify: ${String(read.left)}`)
      if (Option.isNone(read.right.finished)) throw new Error(`the uncrashed ${variantId(variant)}'s ${runId} did not finish`)
      logs.push(read.right)
    }
    // A variant on a fresh database enumerates only the opening of the store (its migration).
    const all = variant.store === "pgfresh" ? keys.filter((k) => k.name.includes("open: ")) : [...keys, ...timed]
    return { variant, lives, lengths, keys: all, logs }
  } finally {
    await where.cleanup()
  }
}

/** The records the uncrashed run must share, in order. */
const comparable = (log: RunLog.RunLog): ReadonlyArray<RunLog.RunRecord> => RunLog.records(log).filter((r) => r._tag !== "RunResumed")

const same = (a: unknown, b: unknown) => JSON.stringify(a) === JSON.stringify(b)

/** Why `crashed` differs from `uncrashed`, apart from what a crash may change; undefined when they agree. */
const difference = (
  crashed: RunLog.RunRecord,
  uncrashed: RunLog.RunRecord,
  interrupted: { readonly seqs: ReadonlySet<number>; readonly ids: ReadonlySet<string> }
): string | undefined => {
  if (crashed._tag !== uncrashed._tag) return `${crashed._tag} where the uncrashed run has ${uncrashed._tag}`
  switch (crashed._tag) {
    case "RunStarted":
      return crashed.snapshotHash === (uncrashed as RunLog.RunStarted).snapshotHash ? undefined : "another snapshot"
    case "ModelReplied": {
      const other = uncrashed as RunLog.ModelReplied
      return crashed.step === other.step && same(crashed.reply, other.reply) ? undefined : `another reply at step ${crashed.step}`
    }
    case "ActionResulted": {
      const other = uncrashed as RunLog.ActionResulted
      if (crashed.step !== other.step || crashed.callIndex !== other.callIndex || !same(crashed.action, other.action)) return `another action at step ${crashed.step}`
      // A sub-agent's child (design 0405): the same run, stop reason, steps and usage; its
      // effective steps fewer only by a step whose "Never" call a kill interrupted.
      if (crashed.child !== undefined || other.child !== undefined) {
        if (crashed.child === undefined || other.child === undefined) return `a child recorded at step ${crashed.step} in one log only`
        // Its run id relative to its parent's (`<parent>/<step>/<callId>`): the scenarios' parents have other ids.
        const relative = (child: RunLog.ChildRun) => ({ ...child, runId: child.runId.slice(child.runId.indexOf("/")), effectiveSteps: 0 })
        if (!same(relative(crashed.child), relative(other.child)) || crashed.child.effectiveSteps > other.child.effectiveSteps) {
          return `another child at step ${crashed.step}: ${JSON.stringify(crashed.child)}`
        }
      }
      if (same(crashed.outcome, other.outcome)) return undefined
      return interrupted.seqs.has(crashed.seq) ? undefined : `another outcome at step ${crashed.step}: ${JSON.stringify(crashed.outcome)}`
    }
    case "StepCompleted": {
      const other = uncrashed as RunLog.StepCompleted
      if (crashed.step !== other.step || !same(crashed.decision, other.decision) || crashed.resultIds.length !== other.resultIds.length) {
        return `another step ${crashed.step}`
      }
      return crashed.effective === other.effective || crashed.resultIds.some((id) => interrupted.ids.has(id)) ? undefined : `another effective at step ${crashed.step}`
    }
    case "ApprovalRequested": {
      const other = uncrashed as RunLog.ApprovalRequested
      return crashed.step === other.step && crashed.callId === other.callId && same(crashed.action, other.action) ? undefined : `another approval request at step ${crashed.step}`
    }
    case "ApprovalDecided": {
      const other = uncrashed as RunLog.ApprovalDecided
      return crashed.step === other.step && crashed.callId === other.callId && same(crashed.decision, other.decision) ? undefined : `another decision at step ${crashed.step}`
    }
    case "RunFinished":
      return same(crashed.stopReason, (uncrashed as RunLog.RunFinished).stopReason) ? undefined : "another stop reason"
    default:
      return undefined
  }
}

/** The first difference of the final log from the reference's, or undefined. */
const compare = (log: RunLog.RunLog, ref: RunLog.RunLog): string | undefined => {
  const mine = comparable(log)
  const theirs = comparable(ref)
  if (mine.length !== theirs.length) return `${mine.length} records apart from resumes; the uncrashed run has ${theirs.length}`
  const interrupted = log.results.filter((r) => r.outcome.status === "NotExecuted" && r.outcome.observationIsSynthetic && /interrupt/i.test(r.outcome.observation))
  const sets = { seqs: new Set(interrupted.map((r) => r.seq)), ids: new Set<string>(interrupted.map((r) => r.resultId)) }
  for (let i = 0; i < mine.length; i++) {
    const why = difference(mine[i]!, theirs[i]!, sets)
    if (why !== undefined) return `record ${mine[i]!.seq}: ${why}`
  }
  return undefined
}

/**
 * Every invariant of one run of a finished scenario: its log verifies and passes the audit, its
 * acknowledged writes are in it, no `"Never"` call ran twice (and one recorded `Executed` ran
 * once), and it equals the uncrashed run's log `reference`.
 */
const checkRun = async (
  where: Place,
  runIdText: string,
  reference: RunLog.RunLog,
  allAcks: ReadonlyArray<Pool.Ack>,
  allExecutions: ReadonlyArray<Scenario.Execution>,
  id: string
): Promise<{ readonly invariants: number; readonly failures: ReadonlyArray<string> }> => {
  const failures: Array<string> = []
  let invariants = 0
  const runId = Ids.runId(runIdText)
  const read = await where.read((store) =>
    Effect.gen(function*() {
      const log = yield* Effect.either(store.readLog(runId, { verify: true }))
      const summary = (yield* store.listRuns()).find((s) => s.runId === runIdText)
      return { log, summary }
    })
  )
  invariants += 2
  if (read.log._tag === "Left") {
    failures.push(`${id}: the log does not verify: ${read.log.left.message}`)
    return { invariants, failures }
  }
  // polyloop verify's audit (Verify.runFindings) on the log read in full above.
  const findings = [
    ...RunLogAudit.logProblems(read.log.right),
    ...(read.summary === undefined ? ["the store does not list the run"] : RunLogAudit.summaryProblems(read.summary, read.log.right))
  ]
  for (const finding of findings) failures.push(`${id}: verify: ${finding}`)
  const log = read.log.right
  const records = RunLog.records(log)
  for (const ack of allAcks) {
    if (ack.runId !== runIdText) continue
    invariants++
    const last = records[ack.last]
    if (last === undefined || last.seq !== ack.last || last._tag !== ack.tag) {
      failures.push(`${id}: the acknowledged write of records ${ack.first}..${ack.last} (${ack.tag}) is not in the log (${records.length} records)`)
    }
  }
  const executions = allExecutions.filter((e) => e.runId === runIdText)
  const runs = new Map<string, number>()
  for (const execution of executions) {
    if (execution.replay === "Never") runs.set(`${execution.step}:${execution.callId}`, (runs.get(`${execution.step}:${execution.callId}`) ?? 0) + 1)
  }
  for (const [call, count] of runs) {
    invariants++
    if (count > 1) failures.push(`${id}: the "Never" call ${call} ran ${count} times`)
  }
  // A "Never" result recorded Executed ran exactly once.
  for (const result of log.results) {
    const action = result.action
    const never = action._tag === "ToolCall" ? neverTools.includes(action.name) : action.code.startsWith("never ")
    if (result.outcome.status !== "Executed" || !never) continue
    invariants++
    const count = action._tag === "ToolCall"
      ? runs.get(`${result.step}:${action.id}`) ?? 0
      : executions.filter((e) => e.step === result.step && e.replay === "Never").length
    if (count !== 1) failures.push(`${id}: the "Never" call of step ${result.step} is recorded Executed but ran ${count} times`)
  }
  invariants++
  const why = compare(log, reference)
  if (why !== undefined) failures.push(`${id}: ${why}`)
  return { invariants, failures }
}

/** The most lives a scenario gets before it counts as not finishing. */
const maxLives = 14

/**
 * Runs one scenario: the reference's lives up to the key's, that life killed at the key, then
 * lives until the run finishes (after the first kill, one life in five, and at most one more,
 * killed at a point the seed chooses), then every invariant checked.
 */
export const runScenario = async (env: Env, ref: Reference, point: number, seed: number): Promise<Outcome> => {
  const key = ref.keys[point - 1]
  const id = `${variantId(ref.variant)}/p${point}/r${seed}`
  if (key === undefined) throw new Error(`${id}: the variant has ${ref.keys.length} crash points`)
  const failures: Array<string> = []
  let invariants = 0
  let deaths = 0
  let unreached = false
  const random = prng(seed * 1_000_003 + point)
  const where = await place(env, ref.variant, `${ref.variant.script}-${point}-${seed}`)
  const acks: Array<Pool.Ack> = []
  try {
    let life: Job["life"] = "run"
    let completedLives = 0
    let firstKillDone = false
    let finished = false
    for (let n = 0; n < maxLives && !finished; n++) {
      let crash: Crash | null = null
      if (!firstKillDone && completedLives === key.life) crash = { name: key.name, occurrence: key.occurrence }
      else if (firstKillDone && deaths < 2 && random() < 0.2) {
        crash = { ordinal: 1 + Math.floor(random() * Math.max(1, ref.lengths[Math.min(completedLives, ref.lengths.length - 1)] ?? 1)) }
      }
      const result = await env.pool.run(jobOf(ref.variant, where, life, crash, false))
      acks.push(...result.acks)
      if (crash !== null && !firstKillDone && "name" in crash) {
        firstKillDone = true
        if (result.killedAt === null) {
          if (key.timed) unreached = true
          else failures.push(`${id}: the child of life ${n + 1} was not killed at ${key.name} #${key.occurrence} (${result.end === null ? result.exit : JSON.stringify(result.end)})`)
        }
      }
      if (result.end === null) {
        deaths++
        if (result.killedAt === null) {
          failures.push(`${id}: life ${n + 1} died (${result.exit}) without reaching its crash point: ${result.output.slice(-600)}`)
          break
        }
        continue
      }
      const next = nextLife(result.end, life)
      if (next === "fail") {
        failures.push(`${id}: life ${n + 1} (${life}) ended with ${JSON.stringify(result.end)}: ${result.output.slice(-600)}`)
        break
      }
      if (next === "again") continue
      completedLives++
      if (next === "done") finished = true
      else life = next
    }
    invariants++
    if (!finished) {
      if (failures.length === 0) failures.push(`${id}: the run did not finish in ${maxLives} lives`)
      return { id, deaths, invariants, unreached, failures }
    }
    const executions = Scenario.readExecutions(where.side)
    for (let r = 0; r < where.runIds.length; r++) {
      const checked = await checkRun(where, where.runIds[r]!, ref.logs[r]!, acks, executions, where.runIds.length > 1 ? `${id} (${where.runIds[r]})` : id)
      invariants += checked.invariants
      failures.push(...checked.failures)
    }
    return { id, deaths, invariants, unreached, failures }
  } finally {
    await where.cleanup()
  }
}

/**
 * CPU seconds used so far by this process and by its children that have ended (the pool's dead
 * children; `/proc/self/stat`'s `cutime`/`cstime`, zero where there is no `/proc`): a figure of
 * the suite's cost that does not depend on what else the machine runs.
 */
const cpuSeconds = (): { readonly parent: number; readonly children: number } => {
  const own = process.cpuUsage()
  let children = 0
  try {
    const fields = Fs.readFileSync("/proc/self/stat", "utf8").split(") ")[1]!.split(" ")
    children = (Number(fields[13]) + Number(fields[14])) / 100
  } catch {
    children = 0
  }
  return { parent: (own.user + own.system) / 1e6, children }
}

/** Totals of a set of scenarios. */
export interface Summary {
  readonly scenarios: number
  readonly processDeaths: number
  readonly invariantsChecked: number
  readonly unreached: number
  readonly childrenStarted: number
  readonly failures: ReadonlyArray<string>
  readonly seconds: number
  readonly scenariosPerSecond: number
  /** CPU seconds of the parent and of the children that ended (live pool children not counted). */
  readonly cpuSeconds: { readonly parent: number; readonly children: number }
  readonly cpuSecondsPerScenario: number
  readonly byVariant: Record<string, { readonly points: number; readonly scenarios: number }>
}

/** One scenario to run. */
export interface Work {
  readonly ref: Reference
  readonly point: number
  readonly seed: number
}

/**
 * Runs `work`, `concurrency` scenarios at a time, on `env`; `onOutcome` sees each as it ends.
 */
export const runWork = async (
  env: Env,
  work: ReadonlyArray<Work>,
  options: {
    readonly concurrency: number
    readonly onOutcome?: (outcome: Outcome) => void
    /** Take no new scenario after this many seconds (the summary then counts those run). */
    readonly maxSeconds?: number
  }
): Promise<Omit<Summary, "byVariant"> & { readonly stoppedEarly: boolean }> => {
  const started = performance.now()
  const cpuBefore = cpuSeconds()
  const childrenBefore = env.pool.started()
  let next = 0
  let deaths = 0
  let invariants = 0
  let unreached = 0
  const failures: Array<string> = []
  let done = 0
  const deadline = options.maxSeconds === undefined ? Number.POSITIVE_INFINITY : started + options.maxSeconds * 1000
  const worker = async () => {
    while (next < work.length && performance.now() < deadline) {
      const item = work[next++]!
      const outcome = await runScenario(env, item.ref, item.point, item.seed).catch((error: unknown): Outcome => ({
        id: `${variantId(item.ref.variant)}/p${item.point}/r${item.seed}`,
        deaths: 0,
        invariants: 0,
        unreached: false,
        failures: [`${variantId(item.ref.variant)}/p${item.point}/r${item.seed}: ${error instanceof Error ? error.stack ?? error.message : String(error)}`]
      }))
      deaths += outcome.deaths
      invariants += outcome.invariants
      if (outcome.unreached) unreached++
      failures.push(...outcome.failures)
      done++
      options.onOutcome?.(outcome)
    }
  }
  await Promise.all(Array.from({ length: options.concurrency }, worker))
  const seconds = (performance.now() - started) / 1000
  const cpuAfter = cpuSeconds()
  const cpu = { parent: cpuAfter.parent - cpuBefore.parent, children: cpuAfter.children - cpuBefore.children }
  return {
    cpuSeconds: cpu,
    cpuSecondsPerScenario: done === 0 ? 0 : (cpu.parent + cpu.children) / done,
    scenarios: done,
    stoppedEarly: done < work.length,
    processDeaths: deaths,
    invariantsChecked: invariants,
    unreached,
    childrenStarted: env.pool.started() - childrenBefore,
    failures,
    seconds,
    scenariosPerSecond: done / seconds
  }
}

/** Every crash point of each reference, `rounds` times with seeds `seed`, `seed + 1`, …; interleaved across variants. */
export const enumerate = (refs: ReadonlyArray<Reference>, seed: number, rounds: number): ReadonlyArray<Work> => {
  const work: Array<Work> = []
  for (let round = 0; round < rounds; round++) {
    const lists = refs.map((ref) => ref.keys.map((_, i) => ({ ref, point: i + 1, seed: seed + round })))
    const longest = Math.max(0, ...lists.map((l) => l.length))
    for (let i = 0; i < longest; i++) for (const list of lists) if (i < list.length) work.push(list[i]!)
  }
  return work
}

/** Parses a scenario id (`<variant>/p<point>/r<seed>`). */
export const parseId = (id: string): { readonly variant: Variant; readonly point: number; readonly seed: number } => {
  const match = /^([^/]+)\/p(\d+)\/r(\d+)$/.exec(id)
  if (match === null) throw new Error(`${JSON.stringify(id)} is not a scenario id (<variant>/p<point>/r<seed>)`)
  return { variant: parseVariant(match[1]!), point: Number(match[2]), seed: Number(match[3]) }
}

/** Steps of the tool script in the variants of several runs at once (a write, an echo, a reply without action, the submit). */
const groupedSteps = 4

/**
 * The suite's variants: every script on SQLite through the fault hook, the tool script also
 * without it (appends as applications run them), and three runs of it at once in lockstep, whose
 * appends the store writes grouped in one statement (design 0350), and a planner with two
 * sub-agent children (design 0405); with PostgreSQL the same on the suite's database, and the
 * opening of a fresh database (its migration) for the tool script.
 */
export const suiteVariants = (options: { readonly pg: boolean }): ReadonlyArray<Variant> => {
  const on = (store: StoreKind): ReadonlyArray<Variant> => [
    { script: "tools", store, hooked: true, steps: Scripts.defaultSteps.tools, runs: 1 },
    { script: "tools", store, hooked: false, steps: Scripts.defaultSteps.tools, runs: 1 },
    { script: "multi", store, hooked: true, steps: Scripts.defaultSteps.multi, runs: 1 },
    { script: "code", store, hooked: true, steps: Scripts.defaultSteps.code, runs: 1 },
    { script: "approval", store, hooked: true, steps: Scripts.defaultSteps.approval, runs: 1 },
    // Three runs at once, appends as applications run them: grouped (design 0350).
    { script: "tools", store, hooked: false, steps: groupedSteps, runs: 3 },
    // A planner and two sub-agent children, one after the other (design 0405).
    { script: "subagents", store, hooked: true, steps: Scripts.defaultSteps.subagents, runs: 1 }
  ]
  return [
    ...on("sqlite"),
    ...(options.pg ? [...on("pg"), { script: "tools", store: "pgfresh", hooked: true, steps: 2, runs: 1 } as const] : [])
  ]
}

/** The references of `variants` (each run once without a crash). */
export const references = async (env: Env, variants: ReadonlyArray<Variant>): Promise<ReadonlyArray<Reference>> => {
  const refs: Array<Reference> = []
  for (const variant of variants) {
    // On the suite's database, the first run of the store migrates it: the reference is the second.
    if (variant.store === "pg") await reference(env, variant)
    refs.push(await reference(env, variant))
  }
  return refs
}

/** The points and scenarios per variant of `work`. */
export const byVariant = (refs: ReadonlyArray<Reference>, work: ReadonlyArray<Work>): Summary["byVariant"] => {
  const out: Record<string, { points: number; scenarios: number }> = {}
  for (const ref of refs) out[variantId(ref.variant)] = { points: ref.keys.length, scenarios: 0 }
  for (const item of work) out[variantId(item.ref.variant)]!.scenarios++
  return out
}
