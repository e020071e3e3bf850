/**
 * Approvals under SIGKILL (design 0160), on SQLite and on PostgreSQL, every process a separate
 * `node` (the decision made in one process, the run resumed in others). Each round:
 *
 * 1. the run starts and is killed at random moments before it suspends, again and again, until
 *    a life suspends: while undecided, the refund (replay policy "Never") never runs;
 * 2. a decision is recorded by another process (approve, or in one round of three reject);
 * 3. the run is resumed and killed at random moments — between the decision and the execution
 *    (soon after the store opened or the resume was durable) and during the execution (after the
 *    handler started, before or after its side effect) — several times, then run to its end.
 *
 * Checks: an approved refund ran at most once (its ledger line at most once) and, when the log
 * says it was executed, exactly once; a rejected or undecided refund never ran; every run
 * finished with the refund's result recorded once.
 *
 * Whether a random kill lands before a life ends is a race with the clock, so how many did is
 * only reported. What the verdict counts on are the pinned rounds: each life there stops at an
 * event (`approval-agent.ts`'s hold: the run's start durable, the handler started, the side
 * effect done) and is killed there, every time.
 */
import { assert, describe, it } from "@effect/vitest"
import * as Ids from "@polyloop/core/Ids"
import * as RunLogStore from "@polyloop/core/RunLogStore"
import * as SqlRunLogStore from "@polyloop/sql/SqlRunLogStore"
import * as Effect from "effect/Effect"
import type * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Redacted from "effect/Redacted"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { type CrashChild, prng, startAgent } from "./support/crash-child.js"
import { freshDatabaseUrl } from "./support/pg-database.js"

const start = (args: ReadonlyArray<string>): CrashChild => startAgent(args, "approval-agent.ts")

const ledgerLines = (ledger: string): ReadonlyArray<string> =>
  fs.existsSync(ledger) ? fs.readFileSync(ledger, "utf8").split("\n").filter((l) => l !== "") : []

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms))

/** What `approval-agent.ts` says (`say`), one line each. */
const protocol = /^(ready|running|executing|decided|holding \w+|suspended \S*|finished \{.*|error \w+|failed: .*)$/

/** Runs a child to its end (retrying while a killed child's lease lasts); returns its last line of `protocol`. */
const toEnd = async (args: ReadonlyArray<string>): Promise<string> => {
  for (let attempt = 0; attempt < 50; attempt++) {
    const child = start(args)
    const exit = await child.exited
    // The agent's own lines only: a log line a store's client writes (a PostgreSQL connection
    // retried, its message spanning lines) may come after the agent's last word.
    const said = child.lines.filter((line) => protocol.test(line))
    const last = said[said.length - 1] ?? ""
    if (last === "error RunBusy" || last === "error ConcurrentWriter") {
      await sleep(150)
      continue
    }
    if (exit.code !== 0 || last.startsWith("error") || last.startsWith("failed")) {
      throw new Error(`child failed (code ${exit.code}): ${child.lines.join("\n")}\n${child.stderr()}`)
    }
    return last
  }
  throw new Error("the run stayed busy")
}

/** One life killed at a random moment after `ready`, `running` or `executing`; returns what it reached. */
const killOnce = async (args: ReadonlyArray<string>, random: () => number, at: "ready" | "running" | "executing") => {
  const child = start(args)
  const marker = at === "ready" ? child.ready : at === "running" ? child.running : new Promise<number | null>((resolve) => {
    const timer = setInterval(() => {
      if (child.lines.includes("executing")) {
        clearInterval(timer)
        resolve(performance.now())
      }
    }, 1)
    void child.exited.then(() => {
      clearInterval(timer)
      resolve(null)
    })
  })
  const from = await marker
  const delay = random() * (at === "executing" ? 60 : 40)
  if (from !== null) {
    await Promise.race([sleep(delay), child.exited])
    child.child.kill("SIGKILL")
  }
  const exit = await child.exited
  return { killed: exit.signal === "SIGKILL", lines: child.lines, delay }
}

/** One life that stops at `point` (`approval-agent.ts`'s hold) and is killed there: a kill defined by an event. */
const killAtHold = async (args: ReadonlyArray<string>, point: "running" | "executing" | "effected") => {
  const child = start([...args, point])
  const held = await new Promise<boolean>((resolve) => {
    const timer = setInterval(() => {
      if (child.lines.includes(`holding ${point}`)) {
        clearInterval(timer)
        resolve(true)
      }
    }, 1)
    void child.exited.then(() => {
      clearInterval(timer)
      resolve(false)
    })
  })
  if (held) child.child.kill("SIGKILL")
  const exit = await child.exited
  return { killed: held && exit.signal === "SIGKILL", lines: child.lines }
}

/**
 * A round whose kills are pinned to events: killed once its start is durable (undecided), then
 * decided, then — approved — killed once the refund handler started (`executing`) or once its
 * side effect is done (`effected`); then run to its end.
 */
const pinnedRound = (where: string, dir: string, store: Layer.Layer<RunLogStore.RunLogStore, unknown>, at: "executing" | "effected" | "rejected") =>
  Effect.gen(function*() {
    const runId = `approval-pinned-${at}`
    const ledger = path.join(dir, `ledger-pinned-${at}.txt`)
    const args = (mode: string) => [where, ledger, runId, mode]
    const undecided = yield* Effect.promise(() => killAtHold(args("run"), "running"))
    assert.isTrue(undecided.killed, `${at}: not killed once its start was durable: ${undecided.lines.join(" | ")}`)
    assert.deepStrictEqual(ledgerLines(ledger), [], "an undecided refund never runs")
    assert.strictEqual(yield* Effect.promise(() => toEnd(args("run"))), "suspended r1")
    assert.strictEqual(yield* Effect.promise(() => toEnd(args(at === "rejected" ? "reject" : "approve"))), "decided")
    if (at !== "rejected") {
      const life = yield* Effect.promise(() => killAtHold(args("run"), at))
      assert.isTrue(life.killed, `${at}: not killed at the hold: ${life.lines.join(" | ")}`)
      assert.strictEqual(ledgerLines(ledger).length, at === "effected" ? 1 : 0, `${at}: the ledger when killed`)
    }
    const before = ledgerLines(ledger).length
    assert.match(yield* Effect.promise(() => toEnd(args("run"))), /^finished /)
    const lines = ledgerLines(ledger)
    const log = yield* Effect.provide(Effect.flatMap(RunLogStore.RunLogStore, (s) => s.readLog(Ids.runId(runId), { verify: true })), store)
    assert.isTrue(Option.isSome(log.finished))
    assert.strictEqual(log.results.length, 1, "the refund's result is recorded once")
    const result = log.results[0]!
    if (at === "rejected") {
      assert.deepStrictEqual(lines, [], "a rejected refund never runs")
      assert.match(result.outcome.observation, /rejected by a person.*Reason: not this one/)
    } else {
      // The "Never" refund was in flight when its life died: it is not run again.
      assert.strictEqual(lines.length, before, `${at}: the refund ran again after the kill`)
      assert.strictEqual(result.outcome.status, "NotExecuted")
      assert.match(result.outcome.observation, /interrupted and may or may not have taken effect/)
    }
  })

const rounds = (where: string, dir: string, store: Layer.Layer<RunLogStore.RunLogStore, unknown>, count: number, seed: number) =>
  Effect.gen(function*() {
    const random = prng(seed)
    const kills: Array<string> = []
    for (let round = 0; round < count; round++) {
      const runId = `approval-crash-${round}`
      const ledger = path.join(dir, `ledger-${round}.txt`)
      const args = (mode: string) => [where, ledger, runId, mode]
      const reject = round % 3 === 2
      // 1. Killed before it suspends, then suspended: nothing ran.
      for (let k = 0; k < 2; k++) {
        const at = random() < 0.5 ? "ready" : "running"
        const life = yield* Effect.promise(() => killOnce(args("run"), random, at))
        if (life.killed) kills.push(`undecided ${at}+${life.delay.toFixed(0)}`)
        assert.deepStrictEqual(ledgerLines(ledger), [], "an undecided refund never runs")
      }
      const suspended = yield* Effect.promise(() => toEnd(args("run")))
      assert.strictEqual(suspended, "suspended r1")
      assert.deepStrictEqual(ledgerLines(ledger), [])
      // 2. Decided by another process.
      assert.strictEqual(yield* Effect.promise(() => toEnd(args(reject ? "reject" : "approve"))), "decided")
      // 3. Killed between the decision and the execution, and during the execution.
      for (let k = 0; k < 3; k++) {
        const at = k === 0 ? "ready" : random() < 0.35 ? "running" : "executing"
        const life = yield* Effect.promise(() => killOnce(args("run"), random, at))
        if (life.killed) kills.push(`${reject ? "rejected" : "approved"} ${at}+${life.delay.toFixed(0)}${life.lines.includes("executing") ? " (in the handler)" : ""}`)
        assert.isAtMost(ledgerLines(ledger).length, reject ? 0 : 1, `round ${round}: after a kill ${at} +${life.delay.toFixed(1)} ms`)
        if (life.lines.some((l) => l.startsWith("finished"))) break
      }
      const last = yield* Effect.promise(() => toEnd(args("run")))
      assert.match(last, /^finished /)
      const lines = ledgerLines(ledger)
      const log = yield* Effect.provide(Effect.flatMap(RunLogStore.RunLogStore, (s) => s.readLog(Ids.runId(runId), { verify: true })), store)
      assert.isTrue(Option.isSome(log.finished))
      assert.strictEqual(log.results.length, 1, "the refund's result is recorded once")
      const result = log.results[0]!
      if (reject) {
        assert.deepStrictEqual(lines, [], "a rejected refund never runs")
        assert.match(result.outcome.observation, /rejected by a person.*Reason: not this one/)
      } else {
        assert.isAtMost(lines.length, 1, "an approved Never refund runs at most once")
        if (result.outcome.status === "Executed") assert.strictEqual(lines.length, 1)
        else assert.match(result.outcome.observation, /interrupted and may or may not have taken effect/)
      }
    }
    return kills
  })

describe.sequential("approvals under SIGKILL", () => {
  it.scoped("SQLite: decided in one process, resumed in others, killed before suspension, between decision and execution, and during execution", () =>
    Effect.gen(function*() {
      const dir = yield* Effect.acquireRelease(
        Effect.sync(() => fs.mkdtempSync(path.join(os.tmpdir(), "polyloop-approval-crash-"))),
        (d) => Effect.sync(() => fs.rmSync(d, { recursive: true, force: true }))
      )
      const db = path.join(dir, "runs.db")
      const store = SqlRunLogStore.layerSqlite({ filename: db })
      for (const at of ["executing", "effected", "rejected"] as const) yield* pinnedRound(`sqlite:${db}`, dir, store, at)
      const kills = yield* rounds(`sqlite:${db}`, dir, store, 4, 16)
      console.log(`SQLite: 5 pinned kills; ${kills.length} random kills landed: ${kills.join(", ")}`)
    }), 1_800_000)

  it.scoped("PostgreSQL: the same, on one database shared by the processes", () =>
    Effect.gen(function*() {
      const dir = yield* Effect.acquireRelease(
        Effect.sync(() => fs.mkdtempSync(path.join(os.tmpdir(), "polyloop-approval-crash-pg-"))),
        (d) => Effect.sync(() => fs.rmSync(d, { recursive: true, force: true }))
      )
      const url = yield* freshDatabaseUrl("approval_crash")
      const store = SqlRunLogStore.layerPg({ url: Redacted.make(url) })
      for (const at of ["executing", "effected"] as const) yield* pinnedRound(`pg:${url}`, dir, store, at)
      const kills = yield* rounds(`pg:${url}`, dir, store, 3, 160)
      console.log(`PostgreSQL: 4 pinned kills; ${kills.length} random kills landed: ${kills.join(", ")}`)
    }), 1_800_000)
})
