/**
 * The loop suite, failures outside the action: a model that is down or retried, a store write that fails, a parser or executor defect (a crash that stays resumable).
 *
 * @internal
 */
import * as Cause from "effect/Cause"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Option from "effect/Option"
import * as DecisionParser from "@polyloop/core/DecisionParser"
import * as Ids from "@polyloop/core/Ids"
import * as RunLog from "@polyloop/core/RunLog"
import * as RunLogStore from "@polyloop/core/RunLogStore"
import * as SyntheticObservations from "@polyloop/core/SyntheticObservations"
import * as ToolRegistry from "@polyloop/core/ToolRegistry"
import * as ScriptedModel from "../../ScriptedModel.js"
import type { Assert } from "../vitest.js"
import { parserId, decide, makeFixture, usage, call, say, codeExecutor } from "./fixtures.js"
import { type SuiteContext, comparable, failingWrites, makeHarness, request, resultOfStep, sixSteps } from "./harness.js"

/** Registers this concern's tests. */
export const register = (ctx: SuiteContext): void => {
  const { describe, liveTest, test } = ctx
  const assert: Assert = ctx.assert
  describe("SPEC §13: what each failure becomes", () => {
    liveTest("a model unavailable after its retries fails the run with ModelError; the log stays resumable", (h) =>
      Effect.gen(function*() {
        const f = makeFixture()
        const runId = Ids.runId("model-down-1")
        const retry = { maxAttempts: 3, baseDelay: Duration.millis(1), maxDelay: Duration.millis(2) }
        const down = yield* ScriptedModel.make([call("echo", { text: "a" }), say("FINISH: done")], {
          failures: [{ step: 1, times: 100, retryable: true, message: "503 upstream" }]
        })
        const failed = yield* Effect.flip(h.run(request(runId, f.tools, { modelRetry: retry }), { model: down.layer }))
        assert.strictEqual(failed._tag, "ModelError")
        if (failed._tag === "ModelError") assert.isTrue(failed.retryable)
        // Step 0 once, then three attempts at step 1.
        assert.strictEqual(yield* down.calls, 4)
        const log = yield* h.log(runId)
        assert.strictEqual(log.steps.length, 1)
        assert.strictEqual(log.replies.length, 1)
        assert.isTrue(Option.isNone(log.finished))
        const up = yield* ScriptedModel.make([call("echo", { text: "a" }), say("FINISH: done")])
        const result = yield* h.run(request(runId, f.tools, { modelRetry: retry }), { model: up.layer })
        assert.deepStrictEqual(result.stopReason, { _tag: "Completed", by: "Answer", answer: "done" })
        assert.strictEqual(result.resumedCount, 1)
        assert.strictEqual(yield* up.calls, 1)
        assert.strictEqual(f.calls.get("echo"), 1)
      }))

    liveTest("a retryable ModelError is retried per modelRetry; a non-retryable one is not", (h) =>
      Effect.gen(function*() {
        const f = makeFixture()
        const retry = { maxAttempts: 3, baseDelay: Duration.millis(1), maxDelay: Duration.millis(2) }
        const flaky = yield* ScriptedModel.make([say("FINISH: done")], { failures: [{ times: 2, retryable: true }] })
        const ok = yield* h.run(request("retry-1", f.tools, { modelRetry: retry }), { model: flaky.layer })
        assert.strictEqual(ok.stopReason._tag, "Completed")
        assert.strictEqual(yield* flaky.calls, 3)
        const rejected = yield* ScriptedModel.make([say("FINISH: done")], { failures: [{ times: 1, retryable: false, status: 400 }] })
        const error = yield* Effect.flip(h.run(request("retry-2", f.tools, { modelRetry: retry }), { model: rejected.layer }))
        assert.strictEqual(error._tag, "ModelError")
        assert.strictEqual(yield* rejected.calls, 1)
      }))

    test("a store write that fails is a StoreError: nothing already written is lost and the run resumes", (h) =>
      Effect.gen(function*() {
        const f = makeFixture()
        const runId = Ids.runId("store-fail-1")
        const reference = yield* Effect.flatMap(RunLogStore.makeMemory, (memory) =>
          Effect.gen(function*() {
            const g = makeFixture()
            const model = yield* ScriptedModel.make(sixSteps)
            yield* makeHarness(memory).run(request(runId, g.tools), { model: model.layer })
            return yield* memory.readLog(runId)
          }))
        for (const kind of ["appendReply", "completeStep", "finish"] as const) {
          // A reply of step 3 (write, Never) that is never durable; the completion of step 4 (echo, Always); the finish.
          const failing = failingWrites(h.store, (k, step) => k === kind && (kind === "finish" || step === (kind === "appendReply" ? 3 : 4)))
          const before = yield* h.log(runId)
          const model = yield* ScriptedModel.make(sixSteps)
          const error = yield* Effect.flip(h.run(request(runId, f.tools), { model: model.layer, store: failing }))
          assert.strictEqual(error._tag, "StoreError", kind)
          const after = yield* h.log(runId)
          // Nothing already written was lost.
          assert.deepStrictEqual(RunLog.records(after).slice(0, RunLog.size(before)), RunLog.records(before))
        }
        const model = yield* ScriptedModel.make(sixSteps)
        const result = yield* h.run(request(runId, f.tools), { model: model.layer })
        assert.deepStrictEqual(result.stopReason, { _tag: "Completed", by: "Tool", answer: "submitted 42" })
        assert.strictEqual(result.resumedCount, 3)
        const log = yield* h.log(runId)
        assert.deepStrictEqual(comparable(log), comparable(reference))
        assert.deepStrictEqual(f.effects, ["write k1=v1", "write k2=v2"])
      }))

    test("a parser that throws crashes the run (a defect, not caught); with the bug fixed the run resumes", (h) =>
      Effect.gen(function*() {
        const f = makeFixture()
        const runId = Ids.runId("parser-bug-1")
        const buggy: DecisionParser.DecisionParser.Service = {
          id: parserId,
          parse: (reply) =>
            Effect.sync(() => {
              if (reply.text === "CRASH") throw new Error("parser bug")
              return decide(reply)
            })
        }
        const script = [call("echo", { text: "a" }), say("CRASH"), say("FINISH: done")]
        const model = yield* ScriptedModel.make(script)
        const exit = yield* Effect.exit(h.run(request(runId, f.tools), { model: model.layer, parser: buggy }))
        assert.isTrue(Exit.isFailure(exit) && Cause.isDie(exit.cause) && Option.isNone(Cause.failureOption(exit.cause)))
        const log = yield* h.log(runId)
        assert.strictEqual(log.steps.length, 1)
        assert.strictEqual(log.replies.length, 2)
        assert.isTrue(Option.isNone(log.finished))
        const again = yield* ScriptedModel.make(script)
        const result = yield* h.run(request(runId, f.tools), { model: again.layer })
        assert.deepStrictEqual(result.stopReason, { _tag: "Completed", by: "Answer", answer: "done" })
        // The crashed step's logged reply was re-parsed, not asked again.
        assert.deepStrictEqual((yield* again.requests).map((r) => r.call.step), [2])
        const final = yield* h.log(runId)
        assert.strictEqual(final.steps[1]!.decision._tag, "InvalidDecision")
      }))

    test("an executor defect crashes the run; on resume the interrupted action is not re-run (replay Never)", (h) =>
      Effect.gen(function*() {
        const ran: Array<string> = []
        const runId = Ids.runId("executor-bug-1")
        const script = [ScriptedModel.code("python", "DIE", { usage }), say("FINISH: done")]
        const model = yield* ScriptedModel.make(script)
        const exit = yield* Effect.exit(h.run(request(runId, ToolRegistry.empty), { model: model.layer, executor: codeExecutor(ran) }))
        assert.isTrue(Exit.isFailure(exit) && Cause.isDie(exit.cause))
        const log = yield* h.log(runId)
        assert.strictEqual(log.replies.length, 1)
        assert.strictEqual(log.steps.length, 0)
        const again = yield* ScriptedModel.make(script)
        const result = yield* h.run(request(runId, ToolRegistry.empty), { model: again.layer, executor: codeExecutor(ran) })
        assert.strictEqual(result.stopReason._tag, "Completed")
        assert.deepStrictEqual(ran, ["DIE"])
        const final = yield* h.log(runId)
        const r = resultOfStep(final, 0)!
        assert.strictEqual(r.outcome.status, "NotExecuted")
        assert.strictEqual(
          r.outcome.observation,
          SyntheticObservations.fill(SyntheticObservations.defaults.interrupted, {
            tool: "python",
            issues: "the run stopped while the action was in flight",
            tools: "(none)"
          })
        )
      }))
  })
}
