/**
 * Sub-agents inside a conversation (issue 47, design 0392 with design 0300): a turn's sub-agent
 * call runs a child under `<conversation>/<step>/<callId>` — the conversation's step, so the
 * children of two turns never share an id even when the provider reuses a call id; each turn's
 * result and `TurnFinished` count that turn's children; the children's steps and tokens count
 * in the turn's budget and in the conversation's budget over every turn; and a retried send of
 * a message whose turn ran a child returns the recorded result with no child run again.
 */
import { assert, describe, it } from "@effect/vitest"
import * as Agent from "@polyloop/core/Agent"
import * as AgentDefinition from "@polyloop/core/AgentDefinition"
import * as EventSink from "@polyloop/core/EventSink"
import * as Ids from "@polyloop/core/Ids"
import type * as ModelClient from "@polyloop/core/ModelClient"
import * as ModelReply from "@polyloop/core/ModelReply"
import * as NativeToolCallParser from "@polyloop/core/NativeToolCallParser"
import * as RunLogAudit from "@polyloop/core/RunLogAudit"
import * as RunLogStore from "@polyloop/core/RunLogStore"
import * as SubAgent from "@polyloop/core/SubAgent"
import * as Tool from "@polyloop/core/Tool"
import * as ToolRegistry from "@polyloop/core/ToolRegistry"
import * as ScriptedModel from "@polyloop/testing/ScriptedModel"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Schema from "effect/Schema"

const usage = { inputTokens: 10, outputTokens: 5 }

const makeWorld = () => {
  const charges: Array<string> = []
  const charge = Tool.make({
    name: "charge",
    description: "Charges the reading of a file (must not run twice).",
    parameters: Schema.Struct({ path: Schema.String }),
    replayPolicy: "Never",
    handler: ({ path }) => Effect.sync(() => (charges.push(path), `charged ${path}`))
  })
  const reader = AgentDefinition.make({ name: "reader", systemPrompt: "You read one file.", budget: { maxSteps: 6 } })
  const read = SubAgent.tool({
    name: "read",
    description: "Hands a file to a reader.",
    parameters: Schema.Struct({ path: Schema.String }),
    agent: reader,
    tools: ToolRegistry.make(charge),
    task: ({ path }) => `Read ${path}.`
  })
  const tools = ToolRegistry.make(read)
  // The provider reuses one call id in every turn ("call_1"), as some do.
  const script: ScriptedModel.Script = (request: ModelClient.ModelRequest) => {
    const system = request.messages[0]
    const messages = request.messages
    let since = 0
    for (let i = messages.length - 1; i >= 0 && messages[i]!._tag !== "User"; i--) if (messages[i]!._tag === "Assistant") since++
    const last = [...messages].reverse().find((m) => m._tag === "User")
    const text = last?._tag === "User" ? last.text : ""
    if (system?._tag === "System" && system.text === "You read one file.") {
      return since === 0
        ? ModelReply.make({ text: "", toolCalls: [{ id: "call_1", name: "charge", argumentsText: JSON.stringify({ path: text.slice(5, -1) }) }], usage })
        : ModelReply.make({ text: `summary of ${text.slice(5, -1)}`, usage })
    }
    return since === 0
      ? ModelReply.make({ text: "", toolCalls: [{ id: "call_1", name: "read", argumentsText: JSON.stringify({ path: text }) }], usage })
      : ModelReply.make({ text: `done with ${text}`, usage })
  }
  return { charges, tools, script }
}

const services = (store: RunLogStore.RunLogStore.Service, tools: ToolRegistry.ToolRegistry<never, never>, model: Layer.Layer<ModelClient.ModelClient>) =>
  Layer.mergeAll(NativeToolCallParser.layer(), Layer.orDie(ToolRegistry.layerExecutor(tools)), EventSink.layerNoop, Layer.succeed(RunLogStore.RunLogStore, store), model)

describe("sub-agents in a conversation", () => {
  it.effect("each turn's child is its own run, counted in the turn and in the conversation; a retried send runs no child again", () =>
    Effect.gen(function*() {
      const world = makeWorld()
      const store = yield* RunLogStore.makeMemory
      const model = yield* ScriptedModel.make(world.script)
      const agent = AgentDefinition.make({ name: "desk", systemPrompt: "You delegate.", budget: { maxSteps: 8 } })
      const runId = Ids.runId("chat-sub")
      const send = (messageId: string, text: string) =>
        Agent.send({ runId, messageId, text, agent, tools: world.tools }).pipe(Effect.provide(services(store, world.tools, model.layer)))
      const first = yield* send("m1", "a.md")
      const second = yield* send("m2", "b.md")
      assert.deepStrictEqual([first.stopReason, second.stopReason], [
        { _tag: "Completed", by: "Answer", answer: "done with a.md" },
        { _tag: "Completed", by: "Answer", answer: "done with b.md" }
      ])
      // Each turn counts its own child: one run of 2 steps and 30 tokens.
      for (const turn of [first, second]) {
        assert.deepStrictEqual(turn.children, { runs: 1, steps: 2, usage: { inputTokens: 20, outputTokens: 10 } })
      }
      // The children are two runs, under the conversation's steps (0 and 2), though both calls were "call_1".
      const log = yield* store.readLog(runId)
      const children = log.results.map((r) => r.child?.runId)
      assert.deepStrictEqual(children, [SubAgent.childRunId(runId, 0, "call_1"), SubAgent.childRunId(runId, 2, "call_1")])
      assert.deepStrictEqual(world.charges, ["a.md", "b.md"])
      assert.deepStrictEqual(log.turns.map((t) => t.counters.children?.runs), [1, 1])
      assert.deepStrictEqual(RunLogAudit.logProblems(log), [])
      // A retried send of the first message: its recorded result, no child run again.
      const retried = yield* send("m1", "a.md")
      assert.deepStrictEqual(retried.stopReason, first.stopReason)
      assert.deepStrictEqual(world.charges, ["a.md", "b.md"])
    }))

  it.effect("the conversation's budget counts the children of every turn: exhausted, the next turn ends at once", () =>
    Effect.gen(function*() {
      const world = makeWorld()
      const store = yield* RunLogStore.makeMemory
      const model = yield* ScriptedModel.make(world.script)
      // Per turn: 2 own steps + 2 of the child. Over the conversation at most 7: the second turn
      // is cut, the third stops before any model call.
      const agent = AgentDefinition.make({ name: "desk", systemPrompt: "You delegate.", budget: { maxSteps: 8 }, conversationBudget: { maxSteps: 7 } })
      const runId = Ids.runId("chat-sub-budget")
      const send = (messageId: string, text: string) =>
        Agent.send({ runId, messageId, text, agent, tools: world.tools }).pipe(Effect.provide(services(store, world.tools, model.layer)))
      const first = yield* send("m1", "a.md")
      assert.strictEqual(first.stopReason._tag, "Completed")
      const second = yield* send("m2", "b.md")
      assert.strictEqual(second.stopReason._tag, "BudgetExhausted", JSON.stringify(second.stopReason))
      const callsBefore = yield* model.calls
      const third = yield* send("m3", "c.md")
      assert.strictEqual(third.stopReason._tag, "BudgetExhausted")
      assert.strictEqual(yield* model.calls, callsBefore, "the exhausted conversation called the model")
      assert.notInclude(world.charges, "c.md")
    }))
})
