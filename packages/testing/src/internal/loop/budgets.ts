/**
 * The loop suite, budgets: maxSteps, maxEffectiveSteps, maxTokens and maxDuration (measured with Clock).
 *
 * @internal
 */
import * as Deferred from "effect/Deferred"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as Option from "effect/Option"
import * as TestClock from "effect/TestClock"
import * as Ids from "@polyloop/core/Ids"
import * as ScriptedModel from "../../ScriptedModel.js"
import type { Assert } from "../vitest.js"
import { makeFixture, call, say } from "./fixtures.js"
import { type SuiteContext, request } from "./harness.js"

/** Registers this concern's tests. */
export const register = (ctx: SuiteContext): void => {
  const { describe, test } = ctx
  const assert: Assert = ctx.assert
  describe("budgets", () => {
    test("maxSteps stops with BudgetExhausted(Steps)", (h) =>
      Effect.gen(function*() {
        const f = makeFixture()
        const model = yield* ScriptedModel.make(() => call("echo", { text: "again" }))
        const result = yield* h.run(request("steps-1", f.tools, { budget: { maxSteps: 3 } }), { model: model.layer })
        assert.deepStrictEqual(result.stopReason, { _tag: "BudgetExhausted", budget: "Steps" })
        assert.strictEqual(result.steps, 3)
        assert.strictEqual(yield* model.calls, 3)
      }))

    test("a model that keeps calling an unknown tool is stopped by maxSteps with zero effective steps", (h) =>
      Effect.gen(function*() {
        const f = makeFixture()
        const model = yield* ScriptedModel.make(() => call("delete_everything", { really: true }))
        const result = yield* h.run(request("unknown-loop-1", f.tools, { budget: { maxSteps: 7, maxEffectiveSteps: 1 } }), { model: model.layer })
        assert.deepStrictEqual(result.stopReason, { _tag: "BudgetExhausted", budget: "Steps" })
        assert.strictEqual(result.steps, 7)
        assert.strictEqual(result.effectiveSteps, 0)
      }))

    test("maxEffectiveSteps stops with BudgetExhausted(EffectiveSteps); invalid, NotExecuted and NoAction steps do not count", (h) =>
      Effect.gen(function*() {
        const f = makeFixture()
        const model = yield* ScriptedModel.make([
          say("gibberish"),
          call("echo", { text: "1" }),
          call("nope", {}),
          say(""),
          call("echo", { text: "2" }),
          call("echo", { text: "3" })
        ])
        const result = yield* h.run(request("effective-1", f.tools, { budget: { maxSteps: 10, maxEffectiveSteps: 2 } }), { model: model.layer })
        assert.deepStrictEqual(result.stopReason, { _tag: "BudgetExhausted", budget: "EffectiveSteps" })
        assert.strictEqual(result.steps, 5)
        assert.strictEqual(result.effectiveSteps, 2)
        const log = yield* h.log(Ids.runId("effective-1"))
        assert.deepStrictEqual(log.steps.map((s) => s.decision._tag), ["InvalidDecision", "Act", "Act", "NoAction", "Act"])
      }))

    test("maxTokens stops with BudgetExhausted(Tokens)", (h) =>
      Effect.gen(function*() {
        const f = makeFixture()
        const model = yield* ScriptedModel.make(() => call("echo", { text: "t" }))
        const result = yield* h.run(request("tokens-1", f.tools, { budget: { maxSteps: 100, maxTokens: 40 } }), { model: model.layer })
        assert.deepStrictEqual(result.stopReason, { _tag: "BudgetExhausted", budget: "Tokens" })
        assert.strictEqual(result.steps, 4)
        assert.deepStrictEqual(result.usage, { inputTokens: 40, outputTokens: 8 })
      }))

    test("maxDuration stops with BudgetExhausted(Duration), measured with Clock; time the run was down does not count", (h) =>
      Effect.gen(function*() {
        const f = makeFixture({ tickBy: "20 seconds" })
        const runId = Ids.runId("duration-1")
        const budget = { maxSteps: 100, maxDuration: Duration.minutes(1) }
        const reached = yield* Deferred.make<void>()
        const blocking = yield* ScriptedModel.make(() => call("tick", {}), {
          onCall: (c) => (c.step === 2 && c.attempt === 0 ? Effect.zipRight(Deferred.succeed(reached, undefined), Effect.never) : Effect.void)
        })
        const fiber = yield* Effect.fork(h.run(request(runId, f.tools, { budget }), { model: blocking.layer }))
        yield* Deferred.await(reached)
        yield* Fiber.interrupt(fiber)
        // Down for an hour.
        yield* TestClock.adjust("1 hour")
        const model = yield* ScriptedModel.make(() => call("tick", {}))
        const result = yield* h.run(request(runId, f.tools, { budget }), { model: model.layer })
        assert.deepStrictEqual(result.stopReason, { _tag: "BudgetExhausted", budget: "Duration" })
        assert.strictEqual(result.steps, 3)
        const log = yield* h.log(runId)
        assert.deepStrictEqual(log.steps.map((s) => s.elapsed), [20_000, 20_000, 20_000])
        assert.deepStrictEqual(Option.map(log.finished, (x) => x.counters.elapsed), Option.some(60_000))
      }))
  })
}
