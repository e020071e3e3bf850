/**
 * `Agent.run` beyond the store suite: spans, linear history rendering, the shipped parsers end
 * to end, the result schema.
 */
import { assert, describe, it } from "@effect/vitest"
import * as ActionExecutor from "@polyloop/core/ActionExecutor"
import * as ActionOutcome from "@polyloop/core/ActionOutcome"
import * as Agent from "@polyloop/core/Agent"
import * as AgentDefinition from "@polyloop/core/AgentDefinition"
import * as CodeBlockParser from "@polyloop/core/CodeBlockParser"
import * as EventSink from "@polyloop/core/EventSink"
import * as Ids from "@polyloop/core/Ids"
import * as JsonActionParser from "@polyloop/core/JsonActionParser"
import type * as Message from "@polyloop/core/Message"
import * as ModelClient from "@polyloop/core/ModelClient"
import * as NativeToolCallParser from "@polyloop/core/NativeToolCallParser"
import * as RunLogStore from "@polyloop/core/RunLogStore"
import * as Snapshot from "@polyloop/core/Snapshot"
import * as Tool from "@polyloop/core/Tool"
import * as ToolContext from "@polyloop/core/ToolContext"
import * as ToolRegistry from "@polyloop/core/ToolRegistry"
import * as ScriptedModel from "@polyloop/testing/ScriptedModel"
import * as SpanRecorder from "@polyloop/testing/SpanRecorder"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Schema from "effect/Schema"

const contexts: Array<ToolContext.ToolContext.Service> = []

const lookup = Tool.make({
  name: "lookup",
  description: "Looks a word up.",
  parameters: Schema.Struct({ word: Schema.String }),
  replayPolicy: "Always",
  handler: ({ word }) =>
    Effect.map(ToolContext.ToolContext, (ctx) => {
      contexts.push(ctx)
      return `${word}: a word`
    })
})

const tools = ToolRegistry.make(lookup)

const agent = (maxSteps: number) =>
  AgentDefinition.make({
    name: "agent-test",
    systemPrompt: "Look words up.",
    budget: { maxSteps },
    modelRetry: { maxAttempts: 1, baseDelay: Duration.millis(1), maxDelay: Duration.millis(1) }
  })

const services = (model: Layer.Layer<ModelClient.ModelClient>, parser = NativeToolCallParser.layer()) =>
  Layer.mergeAll(model, parser, Layer.orDie(ToolRegistry.layerExecutor(tools)), EventSink.layerNoop, RunLogStore.layerMemory)

describe("Agent.run", () => {
  it.effect("makes a span per run, step, model call and tool call when a tracer listens, nested run > step > model / action", () =>
    Effect.gen(function*() {
      const recorder = yield* SpanRecorder.make
      const spans = recorder.spans
      const script = [ScriptedModel.toolCall("lookup", { word: "a" }), ScriptedModel.toolCall("lookup", { word: "b" }), ScriptedModel.text("done")]
      const request: Agent.RunRequest = { runId: Ids.runId("spans-1"), agent: agent(10), task: "Look up a and b.", tools }
      yield* Agent.run(request).pipe(Effect.provide(services(ScriptedModel.layer(script))), Effect.withTracer(recorder.tracer))
      const count = (name: string) => spans.filter((s) => s.name === name).length
      assert.strictEqual(count("Agent.run"), 1)
      assert.strictEqual(count("Agent.step"), 3)
      assert.strictEqual(count("Agent.model"), 3)
      assert.strictEqual(count("Agent.action"), 2)
      assert.strictEqual(count("ToolRegistry.execute"), 2)
      const parentName = SpanRecorder.parentName
      for (const span of spans) {
        if (span.name === "Agent.step") assert.strictEqual(parentName(span), "Agent.run")
        if (span.name === "Agent.model" || span.name === "Agent.action") assert.strictEqual(parentName(span), "Agent.step")
        if (span.name === "ToolRegistry.execute") assert.strictEqual(parentName(span), "Agent.action")
        assert.strictEqual(span.status._tag, "Ended", span.name)
      }
      const step = spans.find((s) => s.name === "Agent.step")
      assert.strictEqual(step?.attributes.get("polyloop.run_id"), "spans-1")
    }))

  it.effect("renders history linearly: one message history, appended to, never rebuilt during a run; each request sees its prefix", () =>
    Effect.gen(function*() {
      const steps = 3000
      const seen: Array<{ readonly messages: ReadonlyArray<Message.Message>; readonly length: number }> = []
      const model = ModelClient.layer((request) =>
        Effect.sync(() => {
          seen.push({ messages: request.messages, length: request.messages.length })
          return ScriptedModel.toolCall("lookup", { word: `w${seen.length}` }, { id: `c${seen.length}` })
        })
      )
      const result = yield* Agent.run({ runId: Ids.runId("linear-1"), agent: agent(steps), task: "Look up everything.", tools }).pipe(
        Effect.provide(services(model))
      )
      assert.strictEqual(result.steps, steps)
      assert.strictEqual(seen.length, steps)
      // Each request is a view of the history's prefix at its call (design 0211): the same
      // message objects as the last request's, never re-rendered, and never grown afterwards.
      const first = seen[steps - 1]!.messages
      for (let k = 0; k < steps; k++) {
        const call = seen[k]!
        assert.strictEqual(call.length, 2 + 2 * k)
        assert.strictEqual(call.messages.length, call.length, `step ${k}'s request changed after its call`)
        assert.strictEqual(call.messages[call.length - 1], first[call.length - 1], `step ${k} got another message object`)
      }
      // The history is exactly what rendering the log would give: the last request's last two messages.
      const last = steps - 1
      assert.deepStrictEqual(first.slice(first.length - 2), [
        { _tag: "Assistant", text: "", toolCalls: [{ id: `c${last}`, name: "lookup", argumentsText: `{"word":"w${last}"}` }] },
        { _tag: "Tool", callId: `c${last}`, name: "lookup", text: `w${last}: a word` }
      ])
    }))

  it.effect("runs JSON actions written in text (JsonActionParser): the loop gives them call ids call_<step>", () =>
    Effect.gen(function*() {
      contexts.length = 0
      const script = [
        ScriptedModel.text("I will look it up.\n```json\n{\"tool\": \"lookup\", \"word\": \"alpha\"}\n```"),
        ScriptedModel.text("{\"final_answer\": \"alpha is a word\"}")
      ]
      const model = yield* ScriptedModel.make(script)
      const result = yield* Agent.run({ runId: Ids.runId("json-1"), agent: agent(5), task: "What is alpha?", tools }).pipe(
        Effect.provide(services(model.layer, JsonActionParser.layer()))
      )
      assert.deepStrictEqual(result.stopReason, { _tag: "Completed", by: "Answer", answer: "alpha is a word" })
      assert.deepStrictEqual(contexts.map((c) => c.idempotencyKey), ["json-1/0/call_0"])
      const second = (yield* model.requests)[1]!.request.messages
      assert.deepStrictEqual(second.slice(2), [
        { _tag: "Assistant", text: script[0]!.text, toolCalls: [] },
        { _tag: "User", text: "Observation:\nalpha: a word" }
      ])
    }))

  it.effect("runs code actions (CodeBlockParser) with a custom executor; the environment completes the run", () =>
    Effect.gen(function*() {
      const ran: Array<string> = []
      const executor = ActionExecutor.make({
        execute: (action) =>
          Effect.sync(() => {
            if (action._tag !== "CodeAction") return ActionOutcome.notExecuted("code only")
            ran.push(action.code)
            return ActionOutcome.executed(`ran ${ran.length}`, { envReportedCompletion: ran.length === 2 })
          })
      })
      const model = ScriptedModel.layer([ScriptedModel.code("python", "print(1)"), ScriptedModel.code("python", "print(2)")])
      const result = yield* Agent.run({ runId: Ids.runId("code-1"), agent: agent(5), task: "Print.", tools: ToolRegistry.empty }).pipe(
        Effect.provide(
          Layer.mergeAll(model, CodeBlockParser.layer({ language: "python" }), ActionExecutor.layer(executor), EventSink.layerNoop, RunLogStore.layerMemory)
        )
      )
      assert.deepStrictEqual(result.stopReason, { _tag: "Completed", by: "Environment" })
      assert.deepStrictEqual(ran, ["print(1)", "print(2)"])
      assert.strictEqual(result.effectiveSteps, 2)
    }))

  it.effect("records the snapshot and its hash in RunStarted; the parser id is part of it", () =>
    Effect.gen(function*() {
      const store = yield* RunLogStore.makeMemory
      const request: Agent.RunRequest = { runId: Ids.runId("snap-1"), agent: agent(3), task: "t", tools }
      const layer = Layer.mergeAll(
        ScriptedModel.layer([ScriptedModel.text("done")]),
        NativeToolCallParser.layer(),
        Layer.orDie(ToolRegistry.layerExecutor(tools)),
        EventSink.layerNoop,
        Layer.succeed(RunLogStore.RunLogStore, store)
      )
      yield* Agent.run(request).pipe(Effect.provide(layer))
      const started = Option.getOrThrow((yield* store.readLog(request.runId)).started)
      const expected = Agent.snapshotOf(request, NativeToolCallParser.idOf())
      assert.strictEqual(started.snapshotHash, expected.hash)
      assert.deepStrictEqual(started.snapshot, expected.value)
      assert.strictEqual(Snapshot.hash(started.snapshot), started.snapshotHash)
      assert.notStrictEqual(Agent.snapshotOf(request, NativeToolCallParser.idOf({ onText: "NoAction" })).hash, expected.hash)
      const listed = yield* store.listRuns()
      assert.strictEqual(listed[0]?.agent, "agent-test")
    }))

  it("RunResult round-trips through its schema", () => {
    const result: Agent.RunResult = {
      runId: Ids.runId("r"),
      stopReason: { _tag: "BudgetExhausted", budget: "Tokens" },
      steps: 3,
      effectiveSteps: 1,
      usage: { inputTokens: 5, outputTokens: 7 },
      resumedCount: 2,
      eventDeliveryFailures: 1
    }
    assert.deepStrictEqual(Schema.decodeUnknownSync(Agent.RunResult)(JSON.parse(JSON.stringify(Schema.encodeSync(Agent.RunResult)(result)))), result)
  })
})
