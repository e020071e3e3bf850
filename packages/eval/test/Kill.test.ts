/**
 * An experiment killed by SIGKILL at random moments (design 0320; issue 32's check): 200 samples
 * × 3 epochs × 2 configurations of the scripted arithmetic agent, run by a child process on a
 * SQLite file and killed at ≥ 20 random moments, resumed each time. It completes; the model
 * calls recorded in all the runs' logs equal the uninterrupted experiment's (no recorded call is
 * made again); the final results (scores, standard errors, CIs) are byte-equal to the
 * uninterrupted experiment's. About 45 s, most of it the children's start-up (60 samples take as
 * long); `npm run test:eval-kill` kills 60 times; `POLYLOOP_EVAL_SAMPLES` and
 * `POLYLOOP_EVAL_KILLS` size it, `POLYLOOP_EVAL_SEED` replays a kill schedule.
 */
import { assert, describe, it } from "@effect/vitest"
import { RunId } from "@polyloop/core/Ids"
import * as RunLogStore from "@polyloop/core/RunLogStore"
import * as RunLogAudit from "@polyloop/core/RunLogAudit"
import * as SqlRunLogStore from "@polyloop/sql/SqlRunLogStore"
import * as Effect from "effect/Effect"
import { spawn } from "node:child_process"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { fileURLToPath } from "node:url"

const child = fileURLToPath(new URL("./support/kill-child.ts", import.meta.url))
const SAMPLES = Number(process.env["POLYLOOP_EVAL_SAMPLES"] ?? 200)
const EPOCHS = 3
const KILLS = Number(process.env["POLYLOOP_EVAL_KILLS"] ?? 20)

/** A small seeded generator (mulberry32) for the kill schedule: the seed is printed to replay it. */
const prng = (seed: number): (() => number) => {
  let a = seed >>> 0
  return () => {
    a = (a + 0x6d2b79f5) >>> 0
    let t = a
    t = Math.imul(t ^ (t >>> 15), t | 1)
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61)
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296
  }
}

interface Life {
  readonly lines: ReadonlyArray<string>
  readonly signal: NodeJS.Signals | null
  readonly code: number | null
  readonly stderr: string
}

/** Starts the child; kills it `killAfter` ms after it printed `ready` (never when undefined). */
const life = (db: string, killAfter: number | undefined): Promise<Life> =>
  new Promise((resolve) => {
    const proc = spawn(process.execPath, [child, db, String(SAMPLES), String(EPOCHS)], { stdio: ["ignore", "pipe", "pipe"] })
    const lines: Array<string> = []
    let buffer = ""
    let stderr = ""
    proc.stdout.on("data", (chunk: Buffer) => {
      buffer += chunk.toString("utf8")
      let nl: number
      while ((nl = buffer.indexOf("\n")) >= 0) {
        const line = buffer.slice(0, nl)
        buffer = buffer.slice(nl + 1)
        lines.push(line)
        if (line === "ready" && killAfter !== undefined) setTimeout(() => proc.kill("SIGKILL"), killAfter)
      }
    })
    proc.stderr.on("data", (chunk: Buffer) => (stderr += chunk.toString("utf8")))
    proc.on("exit", (code, signal) => resolve({ lines, signal, code, stderr }))
  })

const resultsOf = (l: Life): string => {
  const line = l.lines.find((x) => x.startsWith("results "))
  if (line === undefined || l.code !== 0) throw new Error(`the child failed (code ${l.code}, signal ${l.signal}): ${l.stderr}`)
  return line.slice("results ".length)
}

/** Model calls recorded in all the runs' logs of a store, and each log's audit findings. */
const readBack = (db: string) =>
  Effect.gen(function*() {
    const store = yield* RunLogStore.RunLogStore
    const runs = yield* store.listRuns()
    let calls = 0
    let unfinished = 0
    const problems: Array<string> = []
    for (const run of runs) {
      const log = yield* store.readLog(RunId.make(run.runId), { verify: true })
      calls += log.replies.length
      if (run.status !== "Finished") unfinished++
      for (const finding of RunLogAudit.logProblems(log)) problems.push(`${run.runId}: ${finding}`)
    }
    return { runs: runs.length, calls, unfinished, problems }
  }).pipe(Effect.provide(SqlRunLogStore.layerSqlite({ filename: db })))

describe.sequential("an experiment killed at random moments", () => {
  it.live(`${SAMPLES} samples × ${EPOCHS} epochs × 2 configurations, SIGKILLed ≥ ${KILLS} times: the same model calls and byte-equal results`, () =>
    Effect.gen(function*() {
      const dir = fs.mkdtempSync(path.join(os.tmpdir(), "polyloop-eval-kill-"))
      const seed = Number(process.env["POLYLOOP_EVAL_SEED"] ?? Math.floor(Math.random() * 2 ** 31))
      const random = prng(seed)
      // The uninterrupted experiment, timed from `ready` to the last progress line.
      const reference = path.join(dir, "reference.db")
      const started = Date.now()
      const whole = yield* Effect.promise(() => life(reference, undefined))
      const expected = resultsOf(whole)
      const duration = Date.now() - started
      const total = 2 * SAMPLES * EPOCHS

      // Rounds: a round's experiment is killed until it finishes. If it finishes before all the
      // kills are made (the lives ran faster than the reference, timed on a busier machine), the
      // next round starts a fresh experiment with the estimate halved; every round is checked.
      const delays: Array<number> = []
      const progress: Array<number> = []
      const rounds: Array<{ readonly db: string; readonly final: string }> = []
      let estimate = duration
      let lives = 0
      while (delays.length < KILLS && rounds.length < 6) {
        const killed = path.join(dir, `killed-${rounds.length}.db`)
        let final: string | undefined
        while (final === undefined) {
          lives++
          if (lives > KILLS * 8) throw new Error(`no end after ${lives} lives (seed ${seed}; delays ${delays.join(",")})`)
          // Kill within about 1/KILLS of the work (most lives make some progress), until enough kills.
          const delay = delays.length < KILLS ? Math.round(random() * (1.6 * estimate / KILLS)) : undefined
          const l = yield* Effect.promise(() => life(killed, delay))
          const done = l.lines.filter((x) => x.startsWith("progress ")).map((x) => Number(x.slice(9)))
          if (l.signal === "SIGKILL") {
            delays.push(delay!)
            progress.push(done.length === 0 ? -1 : done[done.length - 1]!)
            continue
          }
          final = resultsOf(l)
        }
        rounds.push({ db: killed, final })
        estimate = estimate / 2
      }
      const a = yield* readBack(reference)
      const note = `seed ${seed}; ${delays.length} kills over ${lives} lives in ${rounds.length} round(s); reference ${duration} ms; delays ${delays.join(",")}; done at each kill ${progress.join(",")}`
      assert.isAtLeast(delays.length, KILLS, note)
      // The kills landed while the experiment was under way, not only after it had finished.
      assert.isAtLeast(progress.filter((p) => p < total).length, Math.ceil(KILLS / 2), note)
      assert.deepStrictEqual(a.problems, [], note)
      assert.strictEqual(a.runs, total)
      assert.strictEqual(a.calls, 2 * total)
      for (const round of rounds) {
        const b = yield* readBack(round.db)
        assert.deepStrictEqual(b.problems, [], note)
        assert.strictEqual(b.runs, total, note)
        assert.strictEqual(b.unfinished, 0, note)
        assert.strictEqual(b.calls, a.calls, note)
        assert.strictEqual(round.final, expected, note)
      }
      fs.rmSync(dir, { recursive: true, force: true })
    }), { timeout: 900_000 })
})
