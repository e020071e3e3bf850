/**
 * The loop suite, history rendering: what the model sees of each step (native tool calls, a text action language, code actions, invalid replies, observation limits).
 *
 * @internal
 */
import * as Effect from "effect/Effect"
import * as Ids from "@polyloop/core/Ids"
import * as ModelReply from "@polyloop/core/ModelReply"
import * as SyntheticObservations from "@polyloop/core/SyntheticObservations"
import * as ToolContext from "@polyloop/core/ToolContext"
import * as ToolRegistry from "@polyloop/core/ToolRegistry"
import * as ScriptedModel from "../../ScriptedModel.js"
import type { Assert } from "../vitest.js"
import { makeFixture, usage, call, say, codeExecutor } from "./fixtures.js"
import { type SuiteContext, lastMessages, request, resultOfStep } from "./harness.js"

/** Registers this concern's tests. */
export const register = (ctx: SuiteContext): void => {
  const { describe, test } = ctx
  const assert: Assert = ctx.assert
  describe("history rendering", () => {
    test("native tool calls render as Assistant{toolCalls} + Tool{callId}; the handler sees its ToolContext", (h) =>
      Effect.gen(function*() {
        const f = makeFixture()
        const model = yield* ScriptedModel.make([ScriptedModel.toolCall("echo", { text: "hi" }, { id: "abc", text: "calling", usage }), say("FINISH: done")])
        yield* h.run(request("render-1", f.tools), { model: model.layer })
        const requests = yield* model.requests
        assert.deepStrictEqual(requests[1]!.request.messages, [
          { _tag: "System", text: "You are a careful agent." },
          { _tag: "User", text: "Do the task." },
          { _tag: "Assistant", text: "calling", toolCalls: [{ id: "abc", name: "echo", argumentsText: "{\"text\":\"hi\"}" }] },
          { _tag: "Tool", callId: "abc", name: "echo", text: "echo: hi" }
        ])
        assert.deepStrictEqual(requests[0]!.request.tools, f.tools.modelView())
        assert.deepStrictEqual(f.contexts, [ToolContext.make({ runId: "render-1", step: 0, callId: "abc" })])
      }))

    test("a text action language gets call id call_<step> and its observation as a User message through the template", (h) =>
      Effect.gen(function*() {
        const f = makeFixture()
        const model = yield* ScriptedModel.make([
          say("I will echo.\nACT {\"tool\":\"echo\",\"arguments\":{\"text\":\"yo\"}}"),
          say("ACT {\"tool\":\"echo\",\"arguments\":{\"text\":\"again\"}}"),
          say("FINISH: done")
        ])
        yield* h.run(
          request("render-2", f.tools, { historyRendering: { observationTemplate: "<obs>{observation}</obs>" } }),
          { model: model.layer }
        )
        const log = yield* h.log(Ids.runId("render-2"))
        const action = resultOfStep(log, 1)!.action
        assert.strictEqual(action._tag === "ToolCall" ? action.id : "", "call_1")
        const step = log.steps[1]!.decision
        assert.deepStrictEqual(step._tag === "Act" ? step.actions : undefined, [action])
        assert.deepStrictEqual(f.contexts.map((c) => c.idempotencyKey), ["render-2/0/call_0", "render-2/1/call_1"])
        assert.deepStrictEqual(lastMessages(yield* model.requests, 2, 4), [
          { _tag: "Assistant", text: "I will echo.\nACT {\"tool\":\"echo\",\"arguments\":{\"text\":\"yo\"}}", toolCalls: [] },
          { _tag: "User", text: "<obs>echo: yo</obs>" },
          { _tag: "Assistant", text: "ACT {\"tool\":\"echo\",\"arguments\":{\"text\":\"again\"}}", toolCalls: [] },
          { _tag: "User", text: "<obs>echo: again</obs>" }
        ])
      }))

    test("code actions render through the default template; NoAction gets the noAction text", (h) =>
      Effect.gen(function*() {
        const ran: Array<string> = []
        const model = yield* ScriptedModel.make([ScriptedModel.code("python", "print(1)", { usage }), say(""), say("FINISH: done")])
        yield* h.run(request("render-3", ToolRegistry.empty), { model: model.layer, executor: codeExecutor(ran) })
        assert.deepStrictEqual(lastMessages(yield* model.requests, 2, 4), [
          { _tag: "Assistant", text: "```python\nprint(1)\n```", toolCalls: [] },
          { _tag: "User", text: "Observation:\nran print(1)" },
          { _tag: "Assistant", text: "", toolCalls: [] },
          { _tag: "User", text: SyntheticObservations.defaults.noAction }
        ])
        const log = yield* h.log(Ids.runId("render-3"))
        assert.deepStrictEqual(log.steps.map((s) => s.resultIds), [[Ids.resultIdFor(0)], [], []])
      }))

    test("an invalid native reply answers each tool call with the explanation (every call gets an answer)", (h) =>
      Effect.gen(function*() {
        const f = makeFixture()
        const two = ModelReply.make({
          text: "",
          toolCalls: [{ id: "a", name: "echo", argumentsText: "{}" }, { id: "b", name: "write", argumentsText: "{}" }],
          usage
        })
        const model = yield* ScriptedModel.make([two, say("FINISH: done")])
        yield* h.run(request("render-4", f.tools), { model: model.layer })
        assert.deepStrictEqual(lastMessages(yield* model.requests, 1, 3), [
          { _tag: "Assistant", text: "", toolCalls: two.toolCalls },
          { _tag: "Tool", callId: "a", name: "echo", text: "Reply with one tool call per step." },
          { _tag: "Tool", callId: "b", name: "write", text: "Reply with one tool call per step." }
        ])
      }))

    test("observationLimit cuts Executed observations entering history and counts the cut", (h) =>
      Effect.gen(function*() {
        const f = makeFixture()
        const model = yield* ScriptedModel.make([call("big", { n: 100 }), call("big", { n: 5 }), say("FINISH: done")])
        yield* h.run(request("limit-1", f.tools, { observationLimit: 10 }), { model: model.layer })
        const log = yield* h.log(Ids.runId("limit-1"))
        const cut = resultOfStep(log, 0)!
        assert.strictEqual(cut.outcome.observation, "x".repeat(10))
        assert.strictEqual(cut.outcome.observationTruncatedChars, 90)
        assert.strictEqual(cut.executorObservation, "x".repeat(100))
        const whole = resultOfStep(log, 1)!
        assert.strictEqual(whole.outcome.observation, "xxxxx")
        assert.strictEqual(whole.outcome.observationTruncatedChars, 0)
        assert.deepStrictEqual(lastMessages(yield* model.requests, 1, 1), [{ _tag: "Tool", callId: "call_s0_0", name: "big", text: "x".repeat(10) }])
      }))
  })
}
