/**
 * The loop suite, what a reply and an action become (SPEC §13: invalid decisions, unknown tools, invalid arguments, tool and executor failures, EnvError) and when a run is complete.
 *
 * @internal
 */
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Option from "effect/Option"
import * as ActionExecutor from "@polyloop/core/ActionExecutor"
import * as ActionOutcome from "@polyloop/core/ActionOutcome"
import * as Ids from "@polyloop/core/Ids"
import * as NativeToolCallParser from "@polyloop/core/NativeToolCallParser"
import * as SyntheticObservations from "@polyloop/core/SyntheticObservations"
import * as ToolRegistry from "@polyloop/core/ToolRegistry"
import * as ScriptedModel from "../../ScriptedModel.js"
import type { Assert } from "../vitest.js"
import { makeFixture, usage, call, calls, say, recordingSink, codeExecutor } from "./fixtures.js"
import { type SuiteContext, lastMessages, request, resultOfStep } from "./harness.js"

/** Registers this concern's tests. */
export const register = (ctx: SuiteContext): void => {
  const { describe, test } = ctx
  const assert: Assert = ctx.assert
  describe("SPEC §13: what each failure becomes", () => {
    test("a reply the parser cannot interpret is an InvalidDecision whose explanation is fed back; the run goes on", (h) =>
      Effect.gen(function*() {
        const f = makeFixture()
        const model = yield* ScriptedModel.make([say("hmm, what now?"), say("FINISH: done")])
        const result = yield* h.run(request("invalid-1", f.tools), { model: model.layer })
        assert.deepStrictEqual(result.stopReason, { _tag: "Completed", by: "Answer", answer: "done" })
        assert.strictEqual(result.steps, 2)
        assert.strictEqual(result.effectiveSteps, 0)
        const log = yield* h.log(Ids.runId("invalid-1"))
        const first = log.steps[0]!
        assert.strictEqual(first.decision._tag, "InvalidDecision")
        assert.deepStrictEqual(first.resultIds, [])
        assert.strictEqual(log.results.length, 0)
        const fed = lastMessages(yield* model.requests, 1, 2)
        assert.deepStrictEqual(fed, [
          { _tag: "Assistant", text: "hmm, what now?", toolCalls: [] },
          { _tag: "User", text: "No decision could be read from: hmm, what now?" }
        ])
      }))

    test("an unknown tool and invalid arguments are NotExecuted with the synthetic text filled from validation; the run goes on", (h) =>
      Effect.gen(function*() {
        const f = makeFixture()
        const model = yield* ScriptedModel.make([
          call("nope", {}),
          call("echo", { txt: 1 }),
          call("echo", { text: "ok" }),
          say("FINISH: done")
        ])
        const result = yield* h.run(request("notexec-1", f.tools), { model: model.layer })
        assert.deepStrictEqual(result.stopReason, { _tag: "Completed", by: "Answer", answer: "done" })
        assert.strictEqual(result.steps, 4)
        assert.strictEqual(result.effectiveSteps, 1)
        const log = yield* h.log(Ids.runId("notexec-1"))
        const names = f.tools.names.join(", ")
        const unknown = resultOfStep(log, 0)!
        assert.strictEqual(unknown.outcome.status, "NotExecuted")
        assert.isTrue(unknown.outcome.observationIsSynthetic)
        assert.strictEqual(unknown.outcome.observationTruncatedChars, 0)
        assert.strictEqual(
          unknown.outcome.observation,
          SyntheticObservations.fill(SyntheticObservations.defaults.notExecuted, { tool: "nope", issues: "unknown tool \"nope\"", tools: names })
        )
        const invalid = resultOfStep(log, 1)!
        assert.strictEqual(invalid.outcome.status, "NotExecuted")
        const validation = f.tools.validate({ _tag: "ToolCall", id: "x", name: "echo", arguments: { txt: 1 } })
        assert.isTrue(Either.isLeft(validation))
        assert.strictEqual(
          invalid.outcome.observation,
          SyntheticObservations.fill(SyntheticObservations.defaults.notExecuted, {
            tool: "echo",
            issues: Either.isLeft(validation) ? validation.left.message : "",
            tools: names
          })
        )
        assert.include(invalid.outcome.observation, "text")
        assert.strictEqual(f.calls.get("echo"), 1)
        // The synthetic text answers the native call in history.
        const fed = lastMessages(yield* model.requests, 1, 1)
        assert.deepStrictEqual(fed, [{ _tag: "Tool", callId: "call_s0_0", name: "nope", text: unknown.outcome.observation }])
      }))

    test("the executor's own text never enters history: it goes to executorObservation and the ActionExecuted event", (h) =>
      Effect.gen(function*() {
        const ran: Array<string> = []
        const sink = recordingSink()
        const model = yield* ScriptedModel.make([ScriptedModel.code("ruby", "puts 1", { usage }), say("FINISH: ok")])
        const tools = ToolRegistry.empty
        const result = yield* h.run(
          request("own-text-1", tools, {
            syntheticObservations: { notExecuted: "[{tool}] not run: {issues} (tools: {tools})" }
          }),
          { model: model.layer, executor: codeExecutor(ran), sink: sink.layer }
        )
        assert.strictEqual(result.steps, 2)
        const log = yield* h.log(Ids.runId("own-text-1"))
        const r = resultOfStep(log, 0)!
        assert.strictEqual(r.outcome.status, "NotExecuted")
        assert.strictEqual(r.outcome.observation, "[ruby] not run: the executor refused the ruby code action (tools: (none))")
        assert.strictEqual(r.executorObservation, "CODE-EXECUTOR: no ruby runtime")
        for (const seen of yield* model.requests) {
          for (const message of seen.request.messages) assert.notInclude(JSON.stringify(message), "CODE-EXECUTOR")
        }
        const executed = sink.events.find((e) => e._tag === "ActionExecuted")
        assert.isDefined(executed)
        if (executed?._tag === "ActionExecuted") {
          assert.strictEqual(executed.executorObservation, "CODE-EXECUTOR: no ruby runtime")
          assert.strictEqual(executed.outcome.observation, r.outcome.observation)
        }
        assert.deepStrictEqual(ran, [])
      }))

    test("a custom executor that refuses a valid tool call: synthetic text, not the executor's", (h) =>
      Effect.gen(function*() {
        const f = makeFixture()
        const model = yield* ScriptedModel.make([call("echo", { text: "hi" }), say("FINISH: ok")])
        const refusing = ActionExecutor.make({ execute: () => Effect.succeed(ActionOutcome.notExecuted("REFUSED-BY-POLICY-7")) })
        yield* h.run(request("refuse-1", f.tools), { model: model.layer, executor: refusing })
        const log = yield* h.log(Ids.runId("refuse-1"))
        const r = resultOfStep(log, 0)!
        assert.strictEqual(
          r.outcome.observation,
          SyntheticObservations.fill(SyntheticObservations.defaults.notExecuted, {
            tool: "echo",
            issues: "the executor refused the action",
            tools: f.tools.names.join(", ")
          })
        )
        assert.strictEqual(r.executorObservation, "REFUSED-BY-POLICY-7")
        assert.notInclude(JSON.stringify(yield* model.requests), "REFUSED-BY-POLICY-7")
      }))

    test("a tool that fails with an ordinary error or throws is Executed with `Name: message`; the run goes on", (h) =>
      Effect.gen(function*() {
        const f = makeFixture()
        const model = yield* ScriptedModel.make([call("flaky", {}), call("thrower", {}), say("FINISH: done")])
        const result = yield* h.run(request("ordinary-1", f.tools), { model: model.layer })
        assert.strictEqual(result.stopReason._tag, "Completed")
        assert.strictEqual(result.effectiveSteps, 2)
        const log = yield* h.log(Ids.runId("ordinary-1"))
        const flaky = resultOfStep(log, 0)!
        assert.strictEqual(flaky.outcome.status, "Executed")
        assert.strictEqual(flaky.outcome.observation, "Oops: bad input row 3")
        assert.isFalse(flaky.outcome.observationIsSynthetic)
        assert.isTrue(flaky.handlerFailed)
        const thrower = resultOfStep(log, 1)!
        assert.strictEqual(thrower.outcome.status, "Executed")
        assert.strictEqual(thrower.outcome.observation, "TypeError: cannot read property x of undefined")
        assert.notInclude(thrower.outcome.observation, "    at ")
        assert.deepStrictEqual(lastMessages(yield* model.requests, 2, 1), [
          { _tag: "Tool", callId: "call_s1_0", name: "thrower", text: "TypeError: cannot read property x of undefined" }
        ])
      }))

    test("a ToolEnvironmentError is EnvError: the run ends with StopReason.EnvError and no further model call", (h) =>
      Effect.gen(function*() {
        const f = makeFixture()
        const model = yield* ScriptedModel.make([call("broken", {}), say("FINISH: never reached")])
        const result = yield* h.run(request("env-1", f.tools), { model: model.layer })
        assert.deepStrictEqual(result.stopReason, { _tag: "EnvError", message: "database unreachable at db:5432" })
        assert.strictEqual(result.steps, 1)
        assert.strictEqual(result.effectiveSteps, 0)
        assert.strictEqual(yield* model.calls, 1)
        const log = yield* h.log(Ids.runId("env-1"))
        const r = resultOfStep(log, 0)!
        assert.strictEqual(r.outcome.status, "EnvError")
        assert.isTrue(r.outcome.observationIsSynthetic)
        assert.strictEqual(
          r.outcome.observation,
          SyntheticObservations.fill(SyntheticObservations.defaults.envError, {
            tool: "broken",
            issues: "the environment reported a failure",
            tools: f.tools.names.join(", ")
          })
        )
        assert.strictEqual(r.executorObservation, "database unreachable at db:5432")
        assert.deepStrictEqual(Option.map(log.finished, (x) => x.stopReason), Option.some(result.stopReason))
      }))

    test("an EnvError from a custom code executor ends the run too", (h) =>
      Effect.gen(function*() {
        const ran: Array<string> = []
        const model = yield* ScriptedModel.make([ScriptedModel.code("python", "x = 1", { usage }), ScriptedModel.code("python", "ENV", { usage }), say("FINISH: no")])
        const result = yield* h.run(request("env-2", ToolRegistry.empty), { model: model.layer, executor: codeExecutor(ran) })
        assert.deepStrictEqual(result.stopReason, { _tag: "EnvError", message: "sandbox process died (exit 137)" })
        assert.strictEqual(result.steps, 2)
        assert.strictEqual(result.effectiveSteps, 1)
        assert.deepStrictEqual(ran, ["x = 1", "ENV"])
      }))
  })

  describe("completion", () => {
    test("a completing tool that returned completes the run; one that failed does not", (h) =>
      Effect.gen(function*() {
        const f = makeFixture({ completingFails: true })
        const model = yield* ScriptedModel.make([call("submit", { answer: "wrong" }), call("submit", { answer: "right" })])
        const result = yield* h.run(request("complete-1", f.tools), { model: model.layer })
        assert.deepStrictEqual(result.stopReason, { _tag: "Completed", by: "Tool", answer: "submitted right" })
        assert.strictEqual(result.steps, 2)
        assert.strictEqual(result.effectiveSteps, 2)
        const log = yield* h.log(Ids.runId("complete-1"))
        assert.isTrue(resultOfStep(log, 0)!.handlerFailed)
        assert.isFalse(resultOfStep(log, 1)!.handlerFailed)
      }))

    test("an environment that reports completion completes the run (Completed(Environment))", (h) =>
      Effect.gen(function*() {
        const ran: Array<string> = []
        const model = yield* ScriptedModel.make([ScriptedModel.code("python", "x = 1", { usage }), ScriptedModel.code("python", "DONE", { usage }), say("FINISH: never")])
        const result = yield* h.run(request("complete-2", ToolRegistry.empty), { model: model.layer, executor: codeExecutor(ran) })
        assert.deepStrictEqual(result.stopReason, { _tag: "Completed", by: "Environment" })
        assert.strictEqual(result.steps, 2)
        assert.strictEqual(yield* model.calls, 2)
      }))

    test("EnvError is judged before completion and Finish before budgets", (h) =>
      Effect.gen(function*() {
        const f = makeFixture()
        const model = yield* ScriptedModel.make([say("FINISH: at the last step")])
        const result = yield* h.run(request("order-1", f.tools, { budget: { maxSteps: 1, maxTokens: 1 } }), { model: model.layer })
        assert.deepStrictEqual(result.stopReason, { _tag: "Completed", by: "Answer", answer: "at the last step" })
        const env = yield* ScriptedModel.make([call("broken", {})])
        const ended = yield* h.run(request("order-2", f.tools, { budget: { maxSteps: 1 } }), { model: env.layer })
        assert.deepStrictEqual(ended.stopReason, { _tag: "EnvError", message: "database unreachable at db:5432" })
        // One step in which the completing tool returned and a later call failed in the environment:
        // the step completes the run by the tool and meets EnvError; EnvError wins.
        const both = yield* ScriptedModel.make([calls(["submit", { answer: "42" }], ["broken", {}]), say("FINISH: never")])
        const judged = yield* h.run(request("order-3", f.tools, { budget: { maxSteps: 1 } }), { model: both.layer, parser: NativeToolCallParser.make() })
        assert.deepStrictEqual(judged.stopReason, { _tag: "EnvError", message: "database unreachable at db:5432" })
        assert.strictEqual(yield* both.calls, 1)
        const log = yield* h.log(Ids.runId("order-3"))
        assert.deepStrictEqual(log.results.map((r) => [r.action._tag === "ToolCall" ? r.action.name : "", r.outcome.status, r.handlerFailed]), [
          ["submit", "Executed", false],
          ["broken", "EnvError", true]
        ])
      }))
  })
}
