/**
 * Sub-agents under SIGKILL (issue 47, design 0405), on SQLite and on PostgreSQL, every life a
 * separate `node` process on one shared store. A planner hands three files to reader sub-agents
 * (two at a time; `support/subagent-agent.ts`); each reader's `charge` (replay policy "Never")
 * appends a line to a ledger file, so a doubled call is visible.
 *
 * Each round is one planner run: killed at random moments (seeded delays after the life said it
 * was running, or, one life in five, after its store opened), up to four times, then run to its
 * end in a new process. Where each kill landed is read from the store after it — before the
 * planner started, before a child started, mid-child, a child finished but its result not yet
 * recorded by the planner, after every child was recorded — and reported: where a delay lands is
 * a race with the machine, so it is never asserted. Three pinned rounds per store kill a life at
 * an event instead (a child's start delivered; a charge's ledger line written; a child's finish
 * delivered, before its parent recorded it), so those windows are covered on every run.
 *
 * Checks per round: no ledger line twice (0 doubled "Never" calls), a charge recorded `Executed`
 * has its one line; each child's log has one `RunStarted` and one `RunFinished` (and no life saw
 * a child start or finish twice); the planner's final log equals an uninterrupted reference
 * run's apart from resume records (normalised as the loop suite's `comparable`: no clock
 * readings, results of a step in call order, run ids renamed, a child's `effectiveSteps` counted
 * with its interrupted steps).
 *
 * `POLYLOOP_SUBAGENT_KILLS` sets the random kills to land per store (default 6; `npm run
 * test:subagent-kill` sets 30).
 */
import { assert, describe, it } from "@effect/vitest"
import * as Ids from "@polyloop/core/Ids"
import * as RunLog from "@polyloop/core/RunLog"
import * as RunLogStore from "@polyloop/core/RunLogStore"
import * as SubAgent from "@polyloop/core/SubAgent"
import * as SqlRunLogStore from "@polyloop/sql/SqlRunLogStore"
import type * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Redacted from "effect/Redacted"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { type CrashChild, prng, startAgent } from "./support/crash-child.js"
import { freshDatabaseUrl } from "./support/pg-database.js"

/** Random kills to land per store. */
const KILLS = Number(process.env["POLYLOOP_SUBAGENT_KILLS"] ?? "6")
/** Kills at most per round before it is run to its end. */
const KILLS_PER_ROUND = 4
/** The children's call ids (the planner's step 0 calls `read` three times). */
const callIds = ["call_s0_0", "call_s0_1", "call_s0_2"]

const start = (args: ReadonlyArray<string>): CrashChild => startAgent(args, "subagent-agent.ts")

const ledgerLines = (ledger: string): ReadonlyArray<string> =>
  fs.existsSync(ledger) ? fs.readFileSync(ledger, "utf8").split("\n").filter((l) => l !== "") : []

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms))

/** Runs a life to its end (again while a killed life's claim lasts); returns its lines. */
const toEnd = async (args: ReadonlyArray<string>): Promise<ReadonlyArray<string>> => {
  for (let attempt = 0; attempt < 50; attempt++) {
    const child = start(args)
    const exit = await child.exited
    const last = child.lines[child.lines.length - 1] ?? ""
    if (last === "error RunBusy" || last === "error ConcurrentWriter") {
      await sleep(150)
      continue
    }
    if (exit.code !== 0 || !last.startsWith("finished")) {
      throw new Error(`life failed (code ${exit.code}): ${child.lines.join("\n")}\n${child.stderr()}`)
    }
    return child.lines
  }
  throw new Error("the run stayed busy")
}

/** Resolves with the time `line` was printed, or null if the life exited first. */
const printed = (child: CrashChild, line: string) =>
  new Promise<number | null>((resolve) => {
    const timer = setInterval(() => {
      if (child.lines.includes(line)) {
        clearInterval(timer)
        resolve(performance.now())
      }
    }, 1)
    void child.exited.then(() => {
      clearInterval(timer)
      resolve(null)
    })
  })

/** One life killed `delay` ms after `ready` or `running`. */
const killAfter = async (args: ReadonlyArray<string>, at: "ready" | "running", delay: number) => {
  const child = start(args)
  const from = await (at === "ready" ? child.ready : child.running)
  if (from !== null) {
    await Promise.race([sleep(delay), child.exited])
    child.child.kill("SIGKILL")
  }
  const exit = await child.exited
  return { killed: exit.signal === "SIGKILL", lines: child.lines }
}

/** One life that stops at `point` (`subagent-agent.ts`'s hold) and is killed there. */
const killAtHold = async (args: ReadonlyArray<string>, point: "child-started" | "charged" | "child-finished") => {
  const child = start([...args, point])
  const held = await printed(child, `holding ${point}`)
  if (held !== null) child.child.kill("SIGKILL")
  const exit = await child.exited
  return { killed: held !== null && exit.signal === "SIGKILL", lines: child.lines }
}

type Store = Context.Context<RunLogStore.RunLogStore>

const readLog = (store: Store, runId: string) =>
  Effect.provide(Effect.flatMap(RunLogStore.RunLogStore, (s) => s.readLog(Ids.runId(runId), { verify: true })), store)

const childIdsOf = (runId: string): ReadonlyArray<string> => callIds.map((callId) => SubAgent.childRunId(runId, 0, callId))

/** The windows a kill can land in, read from what the store holds after it. */
const windows = [
  "before the planner started",
  "before a child started",
  "mid-child",
  "a child finished, not yet recorded by the planner",
  "after every child was recorded"
] as const
type Window = (typeof windows)[number]

const landedIn = (store: Store, runId: string) =>
  Effect.gen(function*() {
    const parent = yield* readLog(store, runId)
    if (RunLog.records(parent).length === 0) return "before the planner started" as Window
    const recorded = new Set(parent.results.flatMap((r) => (r.child === undefined ? [] : [r.child.runId as string])))
    const children: Array<{ readonly id: string; readonly started: boolean; readonly finished: boolean }> = []
    for (const id of childIdsOf(runId)) {
      const log = yield* readLog(store, id)
      children.push({ id, started: RunLog.records(log).length > 0, finished: Option.isSome(log.finished) })
    }
    if (children.some((c) => c.finished && !recorded.has(c.id))) return "a child finished, not yet recorded by the planner" as Window
    if (children.some((c) => c.started && !c.finished)) return "mid-child" as Window
    if (children.some((c) => !c.started)) return "before a child started" as Window
    return "after every child was recorded" as Window
  })

/** Keys of clock readings and resume counts: not compared. */
const clockKeys = new Set(["seq", "startedAt", "finishedAt", "at", "elapsed", "modelElapsed", "resumedCount"])

const isInterrupted = (r: RunLog.ActionResulted) =>
  r.outcome.status === "NotExecuted" && r.outcome.observationIsSynthetic && /interrupt/i.test(r.outcome.observation)

/** A child's steps whose "Never" charge was interrupted by a kill (not effective, so not counted in its `effectiveSteps`). */
const interruptedSteps = (log: RunLog.RunLog): number => new Set(log.results.filter(isInterrupted).map((r) => r.step)).size

/**
 * The planner's log as compared: no `RunResumed`; no clock readings; each step's results in call
 * order; run ids renamed to `as`; a child's `effectiveSteps` with its interrupted steps counted.
 */
const comparable = (log: RunLog.RunLog, runId: string, as: string, interrupted: ReadonlyMap<string, number>): ReadonlyArray<unknown> => {
  const records = RunLog.records(log).filter((r) => r._tag !== "RunResumed")
  const ordered: Array<RunLog.RunRecord> = []
  for (let i = 0; i < records.length;) {
    const record = records[i]!
    if (record._tag !== "ActionResulted") {
      ordered.push(record)
      i++
      continue
    }
    const group: Array<RunLog.ActionResulted> = []
    while (i < records.length && records[i]!._tag === "ActionResulted" && (records[i] as RunLog.ActionResulted).step === record.step) {
      group.push(records[i] as RunLog.ActionResulted)
      i++
    }
    ordered.push(...group.sort((a, b) => a.callIndex - b.callIndex))
  }
  const counted = ordered.map((r) =>
    r._tag === "ActionResulted" && r.child !== undefined
      ? { ...r, child: { ...r.child, effectiveSteps: r.child.effectiveSteps + (interrupted.get(r.child.runId) ?? 0) } }
      : r
  )
  const text = JSON.stringify(counted, (key, value: unknown) => (clockKeys.has(key) ? undefined : value))
  return JSON.parse(text.split(`"${runId}`).join(`"${as}`)) as ReadonlyArray<unknown>
}

/**
 * The uninterrupted reference run: its planner's log, compared as above, and how long its life
 * ran from `running` to its exit (the span the random delays are drawn over).
 */
const reference = (where: string, dir: string, store: Store) =>
  Effect.gen(function*() {
    const runId = "reference-run"
    const life = start([where, path.join(dir, "ledger-reference.txt"), runId])
    const from = yield* Effect.promise(() => life.running)
    const exit = yield* Effect.promise(() => life.exited)
    assert.strictEqual(life.lines[life.lines.length - 1], "finished all read", `${life.lines.join("\n")}\n${life.stderr()}`)
    const log = yield* readLog(store, runId)
    return { expected: comparable(log, runId, "R", new Map()), span: Math.max(50, exit.at - (from ?? exit.at)) }
  })

/** Every check of a round once its run finished; `lives` are the lines of all its lives. */
const checkRound = (store: Store, runId: string, ledger: string, lives: ReadonlyArray<ReadonlyArray<string>>, expected: ReadonlyArray<unknown>) =>
  Effect.gen(function*() {
    // One charge per file, whatever run charged it: a child started again under another id would show.
    const lines = ledgerLines(ledger)
    const charged = lines.map((l) => l.split(" ")[0])
    assert.strictEqual(new Set(charged).size, charged.length, `${runId}: a "Never" charge ran twice: ${lines.join(" | ")}`)
    const interrupted = new Map<string, number>()
    for (const id of childIdsOf(runId)) {
      const log = yield* readLog(store, id)
      const records = RunLog.records(log)
      assert.strictEqual(records.filter((r) => r._tag === "RunStarted").length, 1, `${id}: started once`)
      assert.strictEqual(records.filter((r) => r._tag === "RunFinished").length, 1, `${id}: finished once`)
      assert.strictEqual(Option.getOrThrow(log.finished).stopReason._tag, "Completed", `${id}: completed`)
      for (const tag of ["RunStarted", "RunFinished"]) {
        const seen = lives.flat().filter((l) => l === `ev ${tag} ${id}`).length
        assert.isAtMost(seen, 1, `${id}: ${tag} delivered ${seen} times over the lives`)
      }
      assert.strictEqual(log.results.length, 1, `${id}: its charge recorded once`)
      const charge = log.results[0]!
      const ran = lines.filter((l) => l.split(" ")[1] === id).length
      if (charge.outcome.status === "Executed") assert.strictEqual(ran, 1, `${id}: its charge is recorded Executed and ran ${ran} times`)
      else {
        assert.isTrue(isInterrupted(charge), `${id}: its charge: ${JSON.stringify(charge.outcome)}`)
        assert.isAtMost(ran, 1)
      }
      interrupted.set(id, interruptedSteps(log))
    }
    const log = yield* readLog(store, runId)
    assert.strictEqual(Option.getOrThrow(log.finished).stopReason._tag, "Completed")
    assert.deepStrictEqual(comparable(log, runId, "R", interrupted), expected, `${runId}: the planner's log equals the uninterrupted one apart from resumes`)
  })

/** A round whose one kill is pinned to an event; returns where it landed. */
const pinnedRound = (where: string, dir: string, store: Store, expected: ReadonlyArray<unknown>, point: "child-started" | "charged" | "child-finished") =>
  Effect.gen(function*() {
    const runId = `pin-${point}`
    const ledger = path.join(dir, `ledger-${runId}.txt`)
    const args = [where, ledger, runId]
    const life = yield* Effect.promise(() => killAtHold(args, point))
    assert.isTrue(life.killed, `${point}: not killed at the hold: ${life.lines.join(" | ")}`)
    const landed = yield* landedIn(store, runId)
    if (point === "child-finished") {
      // The child whose finish was delivered is finished in the store, and its parent has not recorded it.
      const id = life.lines.find((l) => l.startsWith("ev RunFinished ") && l !== `ev RunFinished ${runId}`)!.slice("ev RunFinished ".length)
      assert.isTrue(Option.isSome((yield* readLog(store, id)).finished), `${id} finished`)
      assert.isFalse((yield* readLog(store, runId)).results.some((r) => r.child?.runId === id), `${id} not yet recorded`)
      assert.strictEqual(landed, "a child finished, not yet recorded by the planner")
    } else {
      // Held inside a child: it started and did not finish.
      assert.include(["mid-child", "a child finished, not yet recorded by the planner"], landed)
    }
    if (point === "charged") assert.isAtLeast(ledgerLines(ledger).length, 1, "the held charge wrote its line")
    const last = yield* Effect.promise(() => toEnd(args))
    yield* checkRound(store, runId, ledger, [life.lines, last], expected)
    return landed
  })

/** Random rounds until `kills` kills landed, delays drawn over `span` ms; returns where each landed. */
const randomRounds = (where: string, dir: string, store: Store, expected: ReadonlyArray<unknown>, span: number, kills: number, seed: number) =>
  Effect.gen(function*() {
    const random = prng(seed)
    const landed: Array<Window> = []
    for (let round = 0; landed.length < kills; round++) {
      assert.isBelow(round, kills * 3, `only ${landed.length} of ${kills} kills landed`)
      const runId = `round-${String(round).padStart(3, "0")}`
      const ledger = path.join(dir, `ledger-${runId}.txt`)
      const args = [where, ledger, runId]
      const lives: Array<ReadonlyArray<string>> = []
      for (let k = 0; k < KILLS_PER_ROUND && landed.length < kills; k++) {
        const at = random() < 0.2 ? "ready" : "running"
        const delay = random() * span * (at === "ready" ? 0.3 : 1)
        const life = yield* Effect.promise(() => killAfter(args, at, delay))
        lives.push(life.lines)
        if (life.killed) landed.push(yield* landedIn(store, runId))
        if (life.lines.some((l) => l.startsWith("finished"))) break
      }
      lives.push(yield* Effect.promise(() => toEnd(args)))
      yield* checkRound(store, runId, ledger, lives, expected)
    }
    return landed
  })

const counts = (landed: ReadonlyArray<Window>) => windows.map((w) => `${w}: ${landed.filter((l) => l === w).length}`).join("; ")

const suite = (name: string, where: string, dir: string, layer: Layer.Layer<RunLogStore.RunLogStore, unknown>, seed: number) =>
  Effect.gen(function*() {
    const store = yield* Layer.build(layer).pipe(Effect.orDie)
    const { expected, span } = yield* reference(where, dir, store)
    const pinned: Array<Window> = []
    for (const point of ["child-started", "charged", "child-finished"] as const) pinned.push(yield* pinnedRound(where, dir, store, expected, point))
    const landed = yield* randomRounds(where, dir, store, expected, span, KILLS, seed)
    console.log(`${name}: 3 pinned kills (${pinned.join(", ")}); ${landed.length} random kills (seed ${seed}, delays over ${span.toFixed(0)} ms) landed: ${counts(landed)}`)
    assert.isAtLeast(landed.length, KILLS)
  })

const tempDir = (prefix: string) =>
  Effect.acquireRelease(
    Effect.sync(() => fs.mkdtempSync(path.join(os.tmpdir(), prefix))),
    (d) => Effect.sync(() => fs.rmSync(d, { recursive: true, force: true }))
  )

describe.sequential("sub-agents under SIGKILL", () => {
  it.scoped("SQLite: a planner with three children killed at random moments and at pinned events, resumed in new processes", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir("polyloop-subagent-kill-")
      const db = path.join(dir, "runs.db")
      yield* suite("SQLite", `sqlite:${db}`, dir, SqlRunLogStore.layerSqlite({ filename: db }), 47)
    }), 1_800_000)

  it.scoped("PostgreSQL: the same, on one database shared by the processes", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir("polyloop-subagent-kill-pg-")
      const url = yield* freshDatabaseUrl("subagent_kill")
      yield* suite("PostgreSQL", `pg:${url}`, dir, SqlRunLogStore.layerPg({ url: Redacted.make(url), maxConnections: 2 }), 470)
    }), 1_800_000)
})
