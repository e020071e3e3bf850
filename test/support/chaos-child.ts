/**
 * A child of the enumerated crash suite's pool (`chaos-pool.ts`, design 0220). Started once and
 * kept warm: it loads everything (from a V8 start-up snapshot when the pool could build one, else
 * from its bundle), then reads jobs from stdin, one JSON line each, and runs them one after
 * another — a life of a scenario: run or resume a script (`chaos-scripts.ts`) on a store (one
 * run, or several at once in lockstep, whose appends the store writes grouped), or record the
 * pending approval decisions. It SIGKILLs itself at the job's crash point; the pool replaces a
 * dead child with a fresh one.
 *
 * Crash points, named, in the order a life passes them (`point`):
 * - `before <write>` / `after <write>`: around each store write (`start`, `reply <step>`,
 *   `results <step>`, `completion <step>`, `resume`, `approvals <seq>`, `finish`, …) — the
 *   "after" point is passed once the write returned, i.e. after its commit; a sub-agent's child
 *   run's writes and claim carry its call id (`before start [call_s0_0]`, design 0405);
 * - `in transaction BeforeRecord <i>` / `in transaction BeforeCommit <n>`: inside the write's
 *   transaction (the store's fault hook);
 * - `before claim` / `after claim`, and the statements of the claim and its lease
 *   (`before claim upsert`, `after claim read`, `before renew`, `after release`, …);
 * - `before open: <statement>` / `after open: <statement>`: every SQL statement run while the
 *   store is opened and its schema migrated (a fresh SQLite file: the whole migration);
 * - `before begin` / `after commit`: the transaction statements themselves;
 * - `before append statement` / `before grouped append` (and `after …`): an append of one
 *   statement, and the one statement of several runs' appends grouped (design 0350);
 * - `before <tool> effect` / `after <tool> effect`: around each side effect.
 * Statement points come from wrapping the drivers' statement methods (better-sqlite3's
 * `Statement` and node-postgres's `Client.query`), so they see exactly what reaches the database.
 *
 * A job's crash point is a named point and its occurrence in the life (`{ name, occurrence }`)
 * or the n-th point the life passes (`{ ordinal }`). Reports go to file descriptor 3, each line
 * written with `writeSync` before anything else happens, so a report made before the kill
 * reaches the parent:
 *   `p <name>`              a point passed (only when the job traces)
 *   `a <first> <last> <tag> <run>` an acknowledged write: records first..last of run <run>, the last one a <tag>
 *   `k <ordinal> <name>`    about to SIGKILL itself here
 *   `e <json>`              the life ended: { status: "finished" | "suspended" | "decided" | "error", detail }
 */
import * as ActionExecutor from "@polyloop/core/ActionExecutor"
import * as Agent from "@polyloop/core/Agent"
import * as Approval from "@polyloop/core/Approval"
import type * as Errors from "@polyloop/core/Errors"
import * as EventSink from "@polyloop/core/EventSink"
import * as Ids from "@polyloop/core/Ids"
import * as RunLogStore from "@polyloop/core/RunLogStore"
import * as SqlRunLogStore from "@polyloop/sql/SqlRunLogStore"
import * as ScriptedModel from "@polyloop/testing/ScriptedModel"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Redacted from "effect/Redacted"
import * as fs from "node:fs"
import { createRequire } from "node:module"
import * as path from "node:path"
import * as v8 from "node:v8"
import * as Scripts from "./chaos-scripts.js"

type Job = Scripts.Job
type End = Scripts.End

// ---- reports --------------------------------------------------------------------------------

const report = (line: string) => {
  const bytes = Buffer.from(line + "\n")
  let offset = 0
  while (offset < bytes.length) {
    try {
      offset += fs.writeSync(3, bytes, offset)
    } catch (error) {
      if ((error as { code?: unknown }).code !== "EAGAIN") throw error
    }
  }
}

// ---- crash points ---------------------------------------------------------------------------

let job: Job | null = null
let ordinal = 0
const occurrences = new Map<string, number>()
/** Statements before the store is ready are the opening's (probe, WAL, migration). */
let opening = false
/** A renewal's update ran and its read of the holder has not: that read is the renewal's. */
let renewing = false

const pass = (name: string): void => {
  const current = job
  if (current === null) return
  ordinal++
  const occurrence = (occurrences.get(name) ?? 0) + 1
  occurrences.set(name, occurrence)
  if (current.trace) report(`p ${name}`)
  const crash = current.crash
  if (crash === null) return
  if ("ordinal" in crash ? crash.ordinal === ordinal : crash.name === name && crash.occurrence === occurrence) {
    report(`k ${ordinal} ${name}`)
    process.kill(process.pid, "SIGKILL")
  }
}

const point = (name: string) => Effect.sync(() => pass(name))

/** The crash-point name of a SQL statement, or null for a statement that is not one. */
const statementPoint = (source: string): string | null => {
  const text = source.replace(/\s+/g, " ").trim()
  if (opening) return `open: ${text.slice(0, 60)}`
  if (/^BEGIN/i.test(text)) return "begin"
  if (/^COMMIT/i.test(text)) return "commit"
  // PostgreSQL's appends of one statement (design 0350) fence on the lease in a sub-select of
  // the claims table: they are appends, not claim reads. The grouped one (several runs' appends
  // in one statement) starts with the runs' values.
  if (/^WITH v \(run_id/.test(text)) return "grouped append"
  if (/^WITH (upd|run) AS/.test(text) && /polyloop_records/.test(text)) return "append statement"
  if (/polyloop_claims/.test(text)) {
    if (/^INSERT/i.test(text)) return "claim upsert"
    if (/^DELETE/i.test(text)) return "release"
    if (/^UPDATE/i.test(text)) {
      // A renewal (on its timer) updates the lease, then reads who holds it.
      renewing = true
      return "renew"
    }
    // Only the renewal's own read (a plain SELECT) ends it: an append's fence read (`FOR SHARE`)
    // or one-statement append on another connection may come in between on PostgreSQL, and
    // naming it "renew check" made the count of "claim read" depend on the renewal timer.
    if (renewing && /^SELECT/i.test(text) && !/FOR SHARE/i.test(text)) {
      renewing = false
      return "renew check"
    }
    return "claim read"
  }
  if (/polyloop_append/.test(text)) return "append statement"
  return null
}

const around = <A>(name: string | null, run: () => A): A => {
  if (name === null) return run()
  pass(`before ${name}`)
  const result = run()
  pass(`after ${name}`)
  return result
}

interface SqliteStatement {
  readonly source: string
  run(...args: ReadonlyArray<unknown>): unknown
  get(...args: ReadonlyArray<unknown>): unknown
  all(...args: ReadonlyArray<unknown>): unknown
}
type SqliteDatabase = new (filename: string) => {
  prepare(source: string): SqliteStatement
  close(): void
}
type PgCallback = (error: unknown, result: unknown) => void
interface PgModule {
  readonly Client: { readonly prototype: { query(this: unknown, ...args: Array<unknown>): unknown } }
}

/** Columns of a row of SQLite's append view (`packages/sql/src/internal/sqlite.ts`), its run id first. */
const appendViewWidth = 15

/** How many runs' records an append-view statement writes: more than one, it is a group's. */
const appendedRuns = (args: ReadonlyArray<unknown>): number => {
  const params = args.length === 1 && Array.isArray(args[0]) ? (args[0] as ReadonlyArray<unknown>) : args
  const runs = new Set<unknown>()
  for (let i = 0; i < params.length; i += appendViewWidth) runs.add(params[i])
  return runs.size
}

/** Wraps better-sqlite3's statement methods so that statements pass crash points. */
const wrapSqlite = (requireFrom: NodeJS.Require) => {
  const Database = requireFrom("better-sqlite3") as SqliteDatabase
  const probe = new Database(":memory:")
  const Statement = Object.getPrototypeOf(probe.prepare("SELECT 1")) as SqliteStatement
  probe.close()
  for (const method of ["run", "get", "all"] as const) {
    const original = Statement[method]
    Statement[method] = function(this: SqliteStatement, ...args: ReadonlyArray<unknown>) {
      const name = statementPoint(this.source)
      return around(name === "append statement" && appendedRuns(args) > 1 ? "grouped append" : name, () => original.apply(this, [...args]))
    }
  }
}

/**
 * Wraps node-postgres's `Client.query` so that statements pass crash points. Done when the
 * first PostgreSQL job comes: loading `pg` costs a child that only runs SQLite lives (it loads
 * node's fetch implementation) about a fifth of its start.
 */
const wrapPg = (requireFrom: NodeJS.Require) => {
  const Pg = requireFrom("pg") as PgModule
  const query = Pg.Client.prototype.query
  Pg.Client.prototype.query = function(this: unknown, ...args: Array<unknown>) {
    // `query(text, values, callback)` or `query({ text, values, rowMode }, callback)`.
    const config = args[0]
    const text = typeof config === "string" ? config : typeof config === "object" && config !== null && "text" in config ? String(config.text) : null
    const last = args.length - 1
    const callback = args[last]
    const name = text !== null && typeof callback === "function" ? statementPoint(text) : null
    if (name === null) return query.apply(this, args)
    pass(`before ${name}`)
    args[last] = (error: unknown, result: unknown) => {
      if (error === null || error === undefined) pass(`after ${name}`)
      ;(callback as PgCallback)(error, result)
    }
    return query.apply(this, args)
  }
}

// ---- the store with crash points --------------------------------------------------------------

const ack = (runId: string, first: number, last: number, tag: string) =>
  Effect.sync(() => {
    if (job !== null) report(`a ${first} ${last} ${tag} ${runId}`)
  })

/**
 * A sub-agent's child run (`<parent>/<step>/<callId>`, design 0392) names its points with its
 * call id — `before start [call_s0_1]` — apart from its parent's; "" for a top-level run.
 */
const childOf = (runId: string): string => {
  const slash = runId.lastIndexOf("/")
  return slash < 0 ? "" : ` [${runId.slice(slash + 1)}]`
}

/** The store with crash points around each write and the claim; each write returned is acknowledged. */
const withPoints = (store: RunLogStore.RunLogStore.Service): RunLogStore.RunLogStore.Service => {
  const write = <A, E, R>(runId: string, name: string, first: number, last: number, tag: string, effect: Effect.Effect<A, E, R>) =>
    point(`before ${name}${childOf(runId)}`).pipe(
      Effect.zipRight(effect),
      Effect.tap(() => ack(runId, first, last, tag)),
      Effect.tap(() => point(`after ${name}${childOf(runId)}`))
    )
  return {
    ...store,
    start: (record) => write(record.runId, "start", record.seq, record.seq, record._tag, store.start(record)),
    appendReply: (runId, record) => write(runId, `reply ${record.step}`, record.seq, record.seq, record._tag, store.appendReply(runId, record)),
    appendResults: (runId, results) =>
      write(runId, `results ${results[0].step}`, results[0].seq, results[results.length - 1]!.seq, "ActionResulted", store.appendResults(runId, results)),
    completeStep: (runId, results, step) =>
      write(runId, `completion ${step.step}`, results[0]?.seq ?? step.seq, step.seq, step._tag, store.completeStep(runId, results, step)),
    appendResume: (runId, record) => write(runId, "resume", record.seq, record.seq, record._tag, store.appendResume(runId, record)),
    finish: (runId, record) => write(runId, "finish", record.seq, record.seq, record._tag, store.finish(runId, record)),
    ...(store.appendRecords === undefined ? {} : {
      appendRecords: (runId, records) =>
        write(runId, `records ${records[0].seq}`, records[0].seq, records[records.length - 1]!.seq, records[records.length - 1]!._tag, store.appendRecords!(runId, records))
    }),
    appendApprovals: (runId, records) =>
      write(runId, `approvals ${records[0].seq}`, records[0].seq, records[records.length - 1]!.seq, records[records.length - 1]!._tag, store.appendApprovals(runId, records)),
    appendCompaction: (runId, record) =>
      write(runId, `compaction ${record.step}`, record.seq, record.seq, record._tag, store.appendCompaction(runId, record)),
    appendTurn: (runId, record) => write(runId, `turn ${record.turn}`, record.seq, record.seq, record._tag, store.appendTurn(runId, record)),
    claim: (runId) =>
      point(`before claim${childOf(runId)}`).pipe(
        Effect.zipRight(store.claim(runId)),
        Effect.tap(() => point(`after claim${childOf(runId)}`)),
        // Added after the claim's own finalizers, so run before them: the lease is still held
        // and its heartbeat still renews while this waits.
        Effect.tap(() => Effect.addFinalizer(() => awaitTimedCrash))
      )
  }
}

/**
 * At the end of a claim, a life whose crash point is a renewal (`Scripts.timedPoints`) it has not
 * passed yet waits for it: the renewal timer then kills it there. Whether a timed point is reached
 * is then an event (the life held its claim), not a race between the timer and the life's length.
 * Bounded (renewals come every 15 ms): after 10 s the life ends, and the scenario counts the point
 * as unreached.
 */
const awaitTimedCrash = Effect.suspend(() => {
  const crash = job?.crash ?? null
  if (crash === null || !("name" in crash) || !Scripts.timedPoints.includes(crash.name)) return Effect.void
  const reached = () => (occurrences.get(crash.name) ?? 0) >= crash.occurrence
  if (reached()) return Effect.void
  return Effect.sleep("5 millis").pipe(Effect.repeat({ until: reached }), Effect.timeout("10 seconds"), Effect.ignore)
})

const storeLayer = (current: Job) => {
  const lease = {
    // Renewals often, so that lives pass renewal points; a long lease, because a dead owner's
    // claim is taken over at once (its pid is gone: reclaimDeadLocalOwners).
    leaseDuration: "5 seconds",
    heartbeatInterval: "15 millis",
    reclaimDeadLocalOwners: true,
    ...(current.hooked ? { faultPoint: ({ index, stage }: SqlRunLogStore.FaultContext) => point(`in transaction ${stage} ${index}`) } : {})
  } as const
  const base = current.store.kind === "sqlite"
    // A SIGKILL loses nothing a commit returned with `synchronous: "NORMAL"` (only an OS crash
    // or power loss can, SqlRunLogStore.SqliteOptions); without an fsync per commit, lives are shorter.
    ? SqlRunLogStore.layerSqlite({ filename: current.store.file, synchronous: "NORMAL", ...lease })
    : SqlRunLogStore.layerPg({ url: Redacted.make(current.store.url), maxConnections: 3, ...lease })
  return Layer.effect(RunLogStore.RunLogStore, Effect.map(RunLogStore.RunLogStore, withPoints)).pipe(Layer.provide(base))
}

// ---- a life ---------------------------------------------------------------------------------

/**
 * The runs of a life of several runs, in lockstep: a model call waits until every run still
 * running made its call, then all go on together, in the order they came. Their next appends
 * then reach the store before its group's maker takes them (it lets the other fibers run once),
 * so each round of appends is one grouped statement, in every life alike. A run that ended
 * (or was interrupted) leaves, and no longer holds the others back.
 */
const lockstep = (parties: number) => {
  let live = parties
  let waiting: Array<() => void> = []
  const releaseIfAll = () => {
    if (waiting.length === 0 || waiting.length < live) return
    const released = waiting
    waiting = []
    for (const go of released) go()
  }
  const arrive = Effect.async<void>((resume) => {
    const go = () => resume(Effect.void)
    waiting.push(go)
    releaseIfAll()
    return Effect.sync(() => {
      waiting = waiting.filter((other) => other !== go)
    })
  })
  const leave = Effect.sync(() => {
    live--
    releaseIfAll()
  })
  return { arrive, leave }
}

const life = (current: Job): Effect.Effect<End, never> => {
  const store = storeLayer(current)
  const hook: Scripts.EffectHook = (what, phase) => point(`${phase === "BeforeEffect" ? "before" : "after"} ${what} effect`)
  const setup = Scripts.setup(current.script, current.steps, current.side, hook)
  const ids = Scripts.runIdsOf(current.runId, current.runs)
  const step = ids.length > 1 ? lockstep(ids.length) : undefined
  const one = (id: string) =>
    Effect.gen(function*() {
      const model = yield* ScriptedModel.make(setup.replies, step === undefined ? {} : { onCall: () => step.arrive })
      const executor = yield* setup.executor
      yield* Agent.run({ runId: Ids.runId(id), agent: setup.agent, task: Scripts.task, tools: setup.tools }).pipe(
        Effect.provide(Layer.mergeAll(model.layer, ActionExecutor.layer(executor), setup.parser, EventSink.layerNoop))
      )
    }).pipe(Effect.ensuring(step === undefined ? Effect.void : step.leave))
  const run = Effect.as(
    ids.length === 1 ? one(ids[0]!) : Effect.forEach(ids, one, { concurrency: "unbounded", discard: true }),
    { status: "finished", detail: "" } as End
  )
  const decide = Effect.gen(function*() {
    const store = yield* RunLogStore.RunLogStore
    const waiting: Array<Approval.Waiting> = []
    for (const id of Scripts.runIdsOf(current.runId, current.runs)) waiting.push(...Approval.waiting(yield* store.readLog(Ids.runId(id))))
    for (const call of waiting) yield* Agent.decide(Scripts.decisionFor(call))
    return { status: "decided", detail: waiting.map((w) => w.callId).join(",") } as End
  })
  const body: Effect.Effect<End, Errors.RunError | Approval.DecideError, RunLogStore.RunLogStore> = current.life === "run" ? run : decide
  // The statements from here until the store is built (the layer, below) are the opening's.
  const opened = Effect.zipRight(Effect.sync(() => (opening = false)), body)
  return Effect.sync(() => (opening = true)).pipe(
    Effect.zipRight(opened.pipe(
      Effect.catchTag("Suspended", (s) => Effect.succeed<End>({ status: "suspended", detail: s.waiting.map((w) => w.callId).join(",") })),
      Effect.provide(store)
    )),
    Effect.catchAll((error) => Effect.succeed<End>({ status: "error", detail: `${error._tag}: ${"message" in error ? String(error.message) : ""}` })),
    Effect.scoped
  )
}

let requireFrom: NodeJS.Require | undefined
let pgWrapped = false

const runJob = async (next: Job) => {
  if (next.store.kind === "pg" && !pgWrapped && requireFrom !== undefined) {
    wrapPg(requireFrom)
    pgWrapped = true
  }
  job = next
  ordinal = 0
  occurrences.clear()
  opening = false
  renewing = false
  const end = await Effect.runPromise(life(next))
  job = null
  report(`e ${JSON.stringify(end)}`)
}

/** Reads jobs from stdin, one JSON line each, and runs them one after another. */
const main = () => {
  requireFrom = createRequire(path.join(process.env["POLYLOOP_REPO_ROOT"] ?? process.cwd(), "package.json"))
  wrapSqlite(requireFrom)
  let buffer = ""
  let queue = Promise.resolve()
  process.stdin.setEncoding("utf8")
  process.stdin.on("data", (chunk: string) => {
    buffer += chunk
    let newline = buffer.indexOf("\n")
    while (newline >= 0) {
      const line = buffer.slice(0, newline)
      buffer = buffer.slice(newline + 1)
      newline = buffer.indexOf("\n")
      if (line.length > 0) queue = queue.then(() => runJob(JSON.parse(line) as Job))
    }
  })
  process.stdin.on("end", () => void queue.then(() => process.exit(0)))
  report("r")
}

if (v8.startupSnapshot?.isBuildingSnapshot()) v8.startupSnapshot.setDeserializeMainFunction(main)
else main()
