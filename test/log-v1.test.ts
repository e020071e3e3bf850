/**
 * Logs written by the code before design 0150 (log schema version 1: one action per step,
 * `StepCompleted.resultId`, `Act.action`) still read, resume and show with today's code. The
 * fixture (`test/fixtures/log-v1/`, see its README) was written by that code: a SQLite store and
 * each run exported as JSON lines, with `polyloop show`'s output and, for the three unfinished
 * runs, how that code resumed them (every model request, every handler call, every result).
 *
 * - both readers (`decodeLog`, the trusting one, and `verifyLog`, which decodes every record)
 *   read every record of both forms as version 2, and agree;
 * - `polyloop show` prints exactly what the old code printed (SQLite store, real command);
 * - resuming each unfinished run on a copy of the SQLite store, and on a memory store holding
 *   the exported lines, calls the model with exactly the messages the old code sent, runs
 *   exactly the handlers it ran, records the same outcomes and ends the same way; the resumed
 *   log (version-1 records, then version-2 ones) reads back and shows;
 * - an unset `parallelToolCalls` resumes such a run as it ran (one action per step); setting it
 *   to true is a `SnapshotMismatch` naming `agent.parallelToolCalls`.
 */
import { assert, describe, it } from "@effect/vitest"
import * as Agent from "@polyloop/core/Agent"
import * as EventSink from "@polyloop/core/EventSink"
import { runId as makeRunId, type RunId } from "@polyloop/core/Ids"
import * as NativeToolCallParser from "@polyloop/core/NativeToolCallParser"
import * as RunLog from "@polyloop/core/RunLog"
import * as RunLogStore from "@polyloop/core/RunLogStore"
import * as ToolRegistry from "@polyloop/core/ToolRegistry"
import * as SqlRunLogStore from "@polyloop/sql/SqlRunLogStore"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import { spawn } from "node:child_process"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { fileURLToPath } from "node:url"
import * as V1 from "./support/log-v1-agent.js"

const fixtures = fileURLToPath(new URL("./fixtures/log-v1/", import.meta.url))
const launcher = fileURLToPath(new URL("../packages/cli/bin/polyloop.js", import.meta.url))
const runIds = ["v1-finished", "v1-pending-always", "v1-pending-never", "v1-boundary"] as const
const unfinished = ["v1-pending-always", "v1-pending-never", "v1-boundary"] as const

const lines = (runId: string): ReadonlyArray<string> =>
  fs.readFileSync(path.join(fixtures, `${runId}.jsonl`), "utf8").split("\n").filter((line) => line !== "")

interface ResumedByV1 {
  readonly result: { readonly stopReason: unknown; readonly steps: number; readonly effectiveSteps: number; readonly usage: unknown; readonly resumedCount: number }
  readonly handlerCalls: ReadonlyArray<string>
  readonly requests: ReadonlyArray<{ readonly step: number; readonly messages: unknown }>
  readonly results: ReadonlyArray<{ readonly step: number; readonly resultId: string; readonly action: unknown; readonly outcome: unknown; readonly executorObservation: string; readonly handlerFailed: boolean }>
}

const resumedByV1 = (runId: string): ResumedByV1 =>
  JSON.parse(fs.readFileSync(path.join(fixtures, `${runId}.resumed-by-v1.json`), "utf8")) as ResumedByV1

/** A copy of the fixture store in a fresh directory (the fixture itself is never opened for writing). */
const copyOfStore = (): { readonly dir: string; readonly db: string } => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "polyloop-log-v1-"))
  const db = path.join(dir, "runs.db")
  fs.copyFileSync(path.join(fixtures, "runs.db"), db)
  return { dir, db }
}

/** A memory store holding the exported lines as they are (what a backend read back from an old store holds). */
const memoryWithLines = (runIds: ReadonlyArray<string>) =>
  Effect.gen(function*() {
    const backend = RunLogStore.makeMemoryBackend()
    for (const runId of runIds) {
      const stored = lines(runId).map((json): RunLogStore.StoredRecord => {
        const record = JSON.parse(json) as RunLog.RunRecord
        return { seq: record.seq, kind: record._tag, json, record }
      })
      const [first, ...rest] = stored
      yield* backend.append(makeRunId(runId), [first!, ...rest])
    }
    return RunLogStore.make(backend)
  })

const resume = (runId: string, agent = V1.agent) =>
  Effect.gen(function*() {
    const model = yield* V1.model(runId)
    V1.calls.length = 0
    const result = yield* Agent.run({ runId: makeRunId(runId), agent, task: V1.task, tools: V1.tools }).pipe(
      Effect.provide(model.layer),
      Effect.provide(ToolRegistry.layerExecutor(V1.tools)),
      Effect.provide(NativeToolCallParser.layer()),
      Effect.provide(EventSink.layerNoop)
    )
    return { result, requests: yield* model.requests, handlerCalls: V1.calls.slice() }
  })

/** The resume of an unfinished fixture run is the resume the old code did. */
const assertResumedAsV1 = (runId: string, resumed: Effect.Effect.Success<ReturnType<typeof resume>>, log: RunLog.RunLog) => {
  const expected = resumedByV1(runId)
  const { result } = resumed
  assert.deepStrictEqual(
    { stopReason: result.stopReason, steps: result.steps, effectiveSteps: result.effectiveSteps, usage: result.usage, resumedCount: result.resumedCount },
    expected.result,
    `${runId}: result`
  )
  assert.deepStrictEqual(resumed.handlerCalls, expected.handlerCalls, `${runId}: handler calls`)
  assert.deepStrictEqual(
    resumed.requests.map((r) => ({ step: r.call.step, messages: r.request.messages })),
    expected.requests,
    `${runId}: what the model was sent`
  )
  assert.deepStrictEqual(
    log.results.map((r) => ({ step: r.step, resultId: r.resultId, action: r.action, outcome: r.outcome, executorObservation: r.executorObservation, handlerFailed: r.handlerFailed })),
    expected.results,
    `${runId}: results`
  )
}

/** `polyloop show <runId> --db <db>`, the real command in a child process (not blocking this one). */
const show = (db: string, runId: string) =>
  Effect.promise(() =>
    new Promise<{ readonly status: number | null; readonly stdout: string; readonly stderr: string }>((resolve, reject) => {
      const child = spawn(process.execPath, [launcher, "show", runId, "--db", db], { env: { ...process.env, NO_COLOR: "1" }, stdio: ["ignore", "pipe", "pipe"] })
      let stdout = ""
      let stderr = ""
      child.stdout.setEncoding("utf8").on("data", (chunk: string) => (stdout += chunk))
      child.stderr.setEncoding("utf8").on("data", (chunk: string) => (stderr += chunk))
      child.on("error", reject)
      child.on("close", (status) => resolve({ status, stdout, stderr }))
    })
  )

/** Tests that run the command several times get more than the default minute on a loaded machine. */
const slow = { timeout: 240_000 }

describe("logs of schema version 1 (before design 0150)", () => {
  it.effect("both readers read every exported line as version 2, and agree", () =>
    Effect.gen(function*() {
      for (const runId of runIds) {
        const texts = lines(runId)
        const trusted = yield* RunLogStore.decodeLog(makeRunId(runId), texts)
        const verified = yield* RunLogStore.verifyLog(makeRunId(runId), texts)
        assert.deepStrictEqual(trusted, verified, runId)
        for (const step of verified.steps) {
          const own = verified.results.filter((r) => r.step === step.step)
          assert.deepStrictEqual(step.resultIds, own.map((r) => r.resultId), `${runId} step ${step.step}`)
          assert.strictEqual(step.effective, own.some((r) => r.outcome.status === "Executed"))
          if (step.decision._tag === "Act") assert.deepStrictEqual([...step.decision.actions], own.map((r) => r.action))
        }
        for (const result of verified.results) assert.strictEqual(result.callIndex, 0)
        assert.isUndefined(Option.getOrThrow(verified.started).logVersion, "version 1 names no version")
      }
      const finished = yield* RunLogStore.verifyLog(makeRunId("v1-finished"), lines("v1-finished"))
      assert.deepStrictEqual(finished.steps.map((s) => s.resultIds.length), [1, 1, 0, 1, 0, 1, 1])
      assert.deepStrictEqual(finished.steps.map((s) => s.effective), [true, false, false, false, false, false, true])
      const summary = Option.getOrThrow(RunLogStore.summarize(finished))
      assert.strictEqual(summary.effectiveSteps, 2)
      assert.strictEqual(summary.steps, 7)
    }))

  it.effect("the SQLite store reads them, lists them with the summaries the old code wrote, and polyloop show prints what it printed", () =>
    Effect.gen(function*() {
      const { db, dir } = copyOfStore()
      try {
        const summaries = yield* Effect.gen(function*() {
          const store = yield* RunLogStore.RunLogStore
          for (const runId of runIds) {
            const log = yield* store.readLog(makeRunId(runId), { verify: true })
            assert.deepStrictEqual(log, yield* RunLogStore.verifyLog(makeRunId(runId), lines(runId)), runId)
          }
          return yield* store.listRuns()
        }).pipe(Effect.provide(SqlRunLogStore.layerSqlite({ filename: db })))
        const byId = new Map(summaries.map((s) => [s.runId, s]))
        assert.deepStrictEqual(
          runIds.map((id) => [byId.get(id)?.steps, byId.get(id)?.effectiveSteps, byId.get(id)?.status]),
          [[7, 2, "Finished"], [1, 1, "Unfinished"], [0, 0, "Unfinished"], [2, 2, "Unfinished"]]
        )
        for (const runId of runIds) {
          const printed = yield* show(db, runId)
          assert.strictEqual(printed.status, 0, printed.stderr)
          assert.strictEqual(printed.stdout, fs.readFileSync(path.join(fixtures, `${runId}.show.txt`), "utf8"), `polyloop show ${runId}`)
        }
      } finally {
        fs.rmSync(dir, { recursive: true, force: true })
      }
    }), slow)

  it.effect("the unfinished runs resume on the SQLite store exactly as the old code resumed them; the mixed log reads and shows", () =>
    Effect.gen(function*() {
      const { db, dir } = copyOfStore()
      try {
        yield* Effect.gen(function*() {
          const store = yield* RunLogStore.RunLogStore
          for (const runId of unfinished) {
            const resumed = yield* resume(runId)
            const log = yield* store.readLog(makeRunId(runId), { verify: true })
            assertResumedAsV1(runId, resumed, log)
            // Records written by the resume are version 2; the old ones read as version 2.
            assert.strictEqual(log.resumes[log.resumes.length - 1]!.logVersion, RunLog.logVersion)
            assert.isTrue(Option.isSome(log.finished))
          }
        }).pipe(Effect.provide(SqlRunLogStore.layerSqlite({ filename: db })))
        for (const runId of unfinished) {
          const printed = yield* show(db, runId)
          assert.strictEqual(printed.status, 0, printed.stderr)
          assert.include(printed.stdout, "finished")
          assert.include(printed.stdout, "resumed 1×")
        }
        const never = (yield* show(db, "v1-pending-never")).stdout
        assert.include(never, "settled on resume: not run again (replay policy Never)")
        const always = (yield* show(db, "v1-pending-always")).stdout
        assert.include(always, "settled on resume: run again (replay policy Always)")
      } finally {
        fs.rmSync(dir, { recursive: true, force: true })
      }
    }), slow)

  it.effect("the exported lines, held by a memory store, resume the same way", () =>
    Effect.gen(function*() {
      const store = yield* memoryWithLines(unfinished)
      for (const runId of unfinished) {
        const resumed = yield* resume(runId).pipe(Effect.provideService(RunLogStore.RunLogStore, store))
        assertResumedAsV1(runId, resumed, yield* store.readLog(makeRunId(runId), { verify: true }))
      }
    }))

  it.effect("a finished version-1 run returns its recorded result; parallelToolCalls: true on a version-1 run is a SnapshotMismatch", () =>
    Effect.gen(function*() {
      const store = yield* memoryWithLines(["v1-finished", "v1-boundary"])
      const finished = yield* resume("v1-finished").pipe(Effect.provideService(RunLogStore.RunLogStore, store))
      assert.deepStrictEqual(finished.result.stopReason, { _tag: "Completed", by: "Tool", answer: "done" })
      assert.strictEqual(finished.requests.length, 0)
      const refused = yield* Effect.flip(
        resume("v1-boundary", { ...V1.agent, parallelToolCalls: true }).pipe(Effect.provideService(RunLogStore.RunLogStore, store))
      )
      assert.strictEqual(refused._tag, "SnapshotMismatch")
      // The recorded snapshot reads as one action per step (other differences are texts added since, which that check forgives on its own).
      const differences = refused._tag === "SnapshotMismatch" ? refused.differences : []
      assert.deepInclude(differences, ["agent.parallelToolCalls", false, true])
      const log = yield* store.readLog(makeRunId("v1-boundary") as RunId)
      assert.strictEqual(log.resumes.length, 0, "nothing written")
    }))

  it.effect("a log naming a newer schema version is refused with SchemaVersion, by both readers", () =>
    Effect.gen(function*() {
      const texts = lines("v1-boundary").map((line, i) => (i === 0 ? line.replace(/}$/, `,"logVersion":${RunLog.logVersion + 1}}`) : line))
      for (const read of [RunLogStore.decodeLog, RunLogStore.verifyLog]) {
        const error = yield* Effect.flip(read(makeRunId("v1-boundary"), texts))
        assert.strictEqual(error.reason, "SchemaVersion")
        assert.include(error.message, `log schema version ${RunLog.logVersion + 1}, newer than this polyloop reads`)
      }
    }))
})
