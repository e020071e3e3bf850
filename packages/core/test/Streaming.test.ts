/**
 * Streaming (design 0180): the one fold (a reply cut into deltas folds back into itself), the
 * loop's `ModelDelta` events with the log unchanged, a stream cut mid-reply (never logged,
 * retried whole), interruption during a stream (an interrupt, not a failure; the run resumes),
 * and `Agent.stream` (events as they happen, the result last).
 */
import { assert, describe, it } from "@effect/vitest"
import * as Agent from "@polyloop/core/Agent"
import * as AgentDefinition from "@polyloop/core/AgentDefinition"
import * as EventSink from "@polyloop/core/EventSink"
import * as Ids from "@polyloop/core/Ids"
import type { LoopEvent } from "@polyloop/core/LoopEvent"
import * as ModelClient from "@polyloop/core/ModelClient"
import * as ModelDelta from "@polyloop/core/ModelDelta"
import * as ModelReply from "@polyloop/core/ModelReply"
import * as NativeToolCallParser from "@polyloop/core/NativeToolCallParser"
import * as RunLogStore from "@polyloop/core/RunLogStore"
import * as Tool from "@polyloop/core/Tool"
import * as ToolRegistry from "@polyloop/core/ToolRegistry"
import * as ScriptedModel from "@polyloop/testing/ScriptedModel"
import * as Arbitrary from "effect/Arbitrary"
import * as Cause from "effect/Cause"
import * as Chunk from "effect/Chunk"
import * as Deferred from "effect/Deferred"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as FastCheck from "effect/FastCheck"
import * as Fiber from "effect/Fiber"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Schema from "effect/Schema"
import * as Stream from "effect/Stream"

const lookup = Tool.make({
  name: "lookup",
  description: "Looks a word up.",
  parameters: Schema.Struct({ word: Schema.String }),
  replayPolicy: "Always",
  handler: ({ word }) => Effect.succeed(`${word}: a word`)
})
const tools = ToolRegistry.make(lookup)

const agent = (maxAttempts: number) =>
  AgentDefinition.make({
    name: "stream-test",
    systemPrompt: "Look words up.",
    budget: { maxSteps: 5 },
    modelRetry: { maxAttempts, baseDelay: Duration.millis(1), maxDelay: Duration.millis(1) }
  })

const usage = { inputTokens: 12, outputTokens: 7 }
const script = [
  ModelReply.make({
    text: "Let me look both up.",
    reasoning: "Two words, two calls.",
    toolCalls: [
      { id: "call_a", name: "lookup", argumentsText: "{\"word\":\"streaming\"}" },
      { id: "call_b", name: "lookup", argumentsText: "{\"word\":\"fold\"}" }
    ],
    usage,
    finishReason: "tool_calls"
  }),
  ScriptedModel.text("Both are words: streaming and fold.", usage)
]

const recorder = () => {
  const events: Array<LoopEvent> = []
  return { events, layer: EventSink.layer((event) => Effect.sync(() => void events.push(event))) }
}

/** Every service a run needs, the model, store and sink being the test's. */
const services = (model: ModelClient.ModelClient.Service, store: RunLogStore.RunLogStore.Service, sink: Layer.Layer<EventSink.EventSink>) =>
  Layer.mergeAll(
    Layer.succeed(ModelClient.ModelClient, model),
    NativeToolCallParser.layer(),
    Layer.orDie(ToolRegistry.layerExecutor(tools)),
    sink,
    Layer.succeed(RunLogStore.RunLogStore, store)
  )

const runWith = (
  runId: string,
  model: ModelClient.ModelClient.Service,
  store: RunLogStore.RunLogStore.Service,
  sink: Layer.Layer<EventSink.EventSink>,
  options: { readonly streaming?: boolean; readonly maxAttempts?: number } = {}
) =>
  Agent.run({ runId: Ids.RunId.make(runId), agent: agent(options.maxAttempts ?? 3), task: "Look up two words.", tools, streaming: options.streaming ?? true }).pipe(
    Effect.provide(services(model, store, sink))
  )

/** The log without times and hashes that differ between two runs of one configuration. */
const comparable = (log: import("@polyloop/core/RunLog").RunLog) => ({
  replies: log.replies.map((r) => [r.step, r.reply]),
  results: log.results.map((r) => [r.step, r.callIndex, r.action, r.outcome]),
  steps: log.steps.map((s) => [s.step, s.decision, s.resultIds, s.usage]),
  stop: Option.map(log.finished, (f) => f.stopReason)
})

const deltasOf = (events: ReadonlyArray<LoopEvent>) =>
  events.filter((e): e is Extract<LoopEvent, { _tag: "ModelDelta" }> => e._tag === "ModelDelta")

/** Replies as every client returns them (a call's id may be empty); the text is the refusal when there is no other. */
const replyArbitrary = Arbitrary.make(ModelReply.ModelReply).map((reply) =>
  // An absent field, not one present as `undefined` (what clients return).
  Object.fromEntries(Object.entries(reply).filter(([, value]) => value !== undefined)) as ModelReply.ModelReply
).filter((reply) =>
  (reply.refusal === undefined || reply.text !== "") &&
  reply.refusal !== "" && reply.reasoning !== "" &&
  // `make` keeps a raw word only when it differs from its normalisation.
  (reply.rawFinishReason === undefined || (reply.finishReason !== undefined && ModelReply.normaliseFinishReason(reply.rawFinishReason) === reply.finishReason && reply.rawFinishReason !== reply.finishReason)) &&
  (reply.finishReason === undefined || reply.rawFinishReason !== undefined || ModelReply.normaliseFinishReason(reply.finishReason) === reply.finishReason)
)

describe("ModelDelta.fold", () => {
  it.prop("a reply's deltas, whole or in chunks of any size, fold back into the reply", [replyArbitrary, FastCheck.integer({ min: 1, max: 9 })], ([reply, size]) => {
    assert.deepStrictEqual(ModelDelta.fold(ModelDelta.fromReply(reply)), reply)
    assert.deepStrictEqual(ModelDelta.fold(ModelDelta.chunked(reply, size)), reply)
  })

  it("follows the reply rules of design 0140: interleaved calls by index, missing ids, refusal as text, raw finish reason kept", () => {
    const reply = ModelDelta.fold([
      { _tag: "ToolCallDelta", index: 1, name: "b", arguments: "{\"y\":" },
      { _tag: "ToolCallDelta", index: 0, id: "call_x", name: "a", arguments: "{}" },
      { _tag: "ToolCallDelta", index: 1, arguments: "2}" },
      { _tag: "RefusalDelta", text: "I can" },
      { _tag: "RefusalDelta", text: "not." },
      { _tag: "UsageDelta", usage: { inputTokens: 1, outputTokens: 1 } },
      { _tag: "UsageDelta", usage },
      { _tag: "FinishDelta", finishReason: "end_turn" }
    ])
    assert.deepStrictEqual(reply, {
      text: "I cannot.",
      refusal: "I cannot.",
      // A call without an id keeps the empty one: the loop gives it `call_<step>_<index>` (issue 29).
      toolCalls: [{ id: "call_x", name: "a", argumentsText: "{}" }, { id: "", name: "b", argumentsText: "{\"y\":2}" }],
      usage,
      finishReason: "stop",
      rawFinishReason: "end_turn"
    })
    assert.deepStrictEqual(ModelDelta.fold([]), ModelReply.make({}))
  })

  it.effect("streamOf: a client that does not stream gives its whole reply as one burst that folds into it", () =>
    Effect.gen(function*() {
      const client = ModelClient.make(() => Effect.succeed(script[0]!))
      assert.isFalse(ModelClient.streams(client))
      const request = { messages: [], tools: [], settings: {} }
      assert.deepStrictEqual(yield* ModelDelta.collect(ModelClient.streamOf(client)(request)), script[0])
    }))
})

describe("a streaming run", () => {
  it.effect("emits the reply's deltas before ModelReplied, and logs exactly what a non-streaming run logs", () =>
    Effect.gen(function*() {
      const plain = yield* ScriptedModel.make(script)
      const streamed = yield* ScriptedModel.make(script, { streaming: { chunkSize: 3 } })
      assert.isTrue(ModelClient.streams(streamed.client))
      const plainStore = yield* RunLogStore.makeMemory
      const streamStore = yield* RunLogStore.makeMemory
      const plainEvents = recorder()
      const streamEvents = recorder()
      const a = yield* runWith("plain", plain.client, plainStore, plainEvents.layer, { streaming: false })
      const b = yield* runWith("streamed", streamed.client, streamStore, streamEvents.layer)
      assert.deepStrictEqual({ ...b, runId: a.runId }, a)
      const plainLog = yield* plainStore.readLog(Ids.RunId.make("plain"))
      const streamLog = yield* streamStore.readLog(Ids.RunId.make("streamed"))
      assert.deepStrictEqual(comparable(streamLog), comparable(plainLog))
      assert.deepStrictEqual(streamLog.replies.map((r) => r.reply), script.map((r) => ({ ...r, toolCalls: r.toolCalls })))

      assert.lengthOf(deltasOf(plainEvents.events), 0)
      const events = streamEvents.events
      // Step 0: its deltas come after StepStarted and before ModelReplied, and fold into the logged reply.
      const started = events.findIndex((e) => e._tag === "StepStarted" && e.step === 0)
      const replied = events.findIndex((e) => e._tag === "ModelReplied" && e.step === 0)
      const between = deltasOf(events.slice(started, replied))
      assert.isAbove(between.length, 10)
      assert.isTrue(between.every((e) => e.step === 0 && e.attempt === 0))
      assert.deepStrictEqual(ModelDelta.fold(between.map((e) => e.delta)), streamLog.replies[0]!.reply)
      assert.deepStrictEqual(ModelDelta.fold(deltasOf(events).filter((e) => e.step === 1).map((e) => e.delta)), streamLog.replies[1]!.reply)
    }))

  it.effect("a tool call without an id: one deterministic id, byte-identical logs with and without streaming, and the model is told the call's result", () =>
    Effect.gen(function*() {
      // A client of the user's own (neither ScriptedModel nor a shipped one) whose provider sends
      // calls without ids, as Gemini's OpenAI endpoint does: the first reply calls twice.
      const idless = [
        ModelReply.make({
          text: "",
          toolCalls: [
            { id: "", name: "lookup", argumentsText: "{\"word\":\"streaming\"}" },
            { id: "", name: "lookup", argumentsText: "{\"word\":\"fold\"}" }
          ],
          usage
        }),
        ModelReply.make({ text: "", toolCalls: [{ id: "", name: "lookup", argumentsText: "{\"word\":\"id\"}" }], usage }),
        ScriptedModel.text("Done.", usage)
      ]
      const seen: Array<ReadonlyArray<import("@polyloop/core/Message").Message>> = []
      const serve = (request: ModelClient.ModelRequest) => {
        seen.push(request.messages)
        let step = 0
        for (const m of request.messages) if (m._tag === "Assistant") step++
        return idless[step]!
      }
      const plain = ModelClient.make((request) => Effect.sync(() => serve(request)))
      const streamed: ModelClient.ModelClient.Service = {
        generate: (request) => Effect.sync(() => serve(request)),
        stream: (request) => Stream.suspend(() => Stream.fromIterable(ModelDelta.chunked(serve(request), 4)))
      }
      assert.isTrue(ModelClient.streams(streamed))
      const logs: Array<string> = []
      for (const [model, streaming] of [[plain, false], [plain, true], [streamed, true], [streamed, false]] as const) {
        const store = yield* RunLogStore.makeMemory
        yield* runWith("idless", model, store, EventSink.layerNoop, { streaming })
        const log = yield* store.readLog(Ids.RunId.make("idless"))
        logs.push(JSON.stringify(comparable(log)) + JSON.stringify(log.replies.map((r) => r.requestHash)))
        // The logged replies carry the loop's ids; the actions and the history use the same.
        assert.deepStrictEqual(log.replies.map((r) => r.reply.toolCalls.map((c) => c.id)), [["call_0", "call_0_1"], ["call_1"], []])
        assert.deepStrictEqual(log.results.map((r) => r.action._tag === "ToolCall" ? r.action.id : ""), ["call_0", "call_0_1", "call_1"])
      }
      assert.strictEqual(new Set(logs).size, 1, "the four runs logged the same")
      // The model was told each call's result, never "not run".
      const last = seen[seen.length - 1]!
      const tools = last.filter((m) => m._tag === "Tool")
      assert.deepStrictEqual(tools.map((m) => [m.callId, m.text]), [
        ["call_0", "streaming: a word"],
        ["call_0_1", "fold: a word"],
        ["call_1", "id: a word"]
      ])
      assert.isFalse(last.some((m) => m._tag === "User" && m.text.includes("a word")), "no observation is sent as a user message")
    }))

  it.live("a stream cut after half its chunks: no ModelReplied for it, the retry gives the whole reply, the run finishes", () =>
    Effect.gen(function*() {
      const model = yield* ScriptedModel.make(script, { streaming: { chunkSize: 3, cuts: [{ step: 0, times: 1 }] } })
      const store = yield* RunLogStore.makeMemory
      const sink = recorder()
      const result = yield* runWith("cut", model.client, store, sink.layer)
      assert.deepStrictEqual(result.stopReason, { _tag: "Completed", by: "Answer", answer: "Both are words: streaming and fold." })
      const log = yield* store.readLog(Ids.RunId.make("cut"))
      assert.deepStrictEqual(log.replies.map((r) => [r.step, r.reply]), [[0, script[0]], [1, script[1]]])
      const step0 = deltasOf(sink.events).filter((e) => e.step === 0)
      const first = step0.filter((e) => e.attempt === 0)
      const second = step0.filter((e) => e.attempt === 1)
      const whole = ModelDelta.chunked(script[0]!, 3)
      assert.strictEqual(first.length, Math.floor(whole.length / 2))
      assert.deepStrictEqual(second.map((e) => e.delta), whole)
      assert.strictEqual(yield* model.calls, 3)
    }))

  it.live("cut on every attempt: the run fails with the retryable ModelError, nothing of the step is logged, and it resumes", () =>
    Effect.gen(function*() {
      const model = yield* ScriptedModel.make(script, { streaming: { cuts: [{ step: 1, times: 2 }] } })
      const store = yield* RunLogStore.makeMemory
      const error = yield* Effect.flip(runWith("cut-twice", model.client, store, EventSink.layerNoop, { maxAttempts: 2 }))
      assert.strictEqual(error._tag, "ModelError")
      assert.isTrue(error._tag === "ModelError" && error.retryable)
      const log = yield* store.readLog(Ids.RunId.make("cut-twice"))
      assert.deepStrictEqual(log.replies.map((r) => r.step), [0])
      assert.isTrue(Option.isNone(log.finished))
      const result = yield* runWith("cut-twice", model.client, store, EventSink.layerNoop)
      assert.strictEqual(result.steps, 2)
      assert.strictEqual(result.resumedCount, 1)
    }))

  it.effect("interrupted during a stream: the run ends interrupted (not failed), writes nothing for the step, and resumes", () =>
    Effect.gen(function*() {
      const midway = yield* Deferred.make<void>()
      const never = yield* Deferred.make<void>()
      const model = yield* ScriptedModel.make(script, {
        streaming: {
          chunkSize: 2,
          beforeDelta: (call, index) =>
            call.step === 1 && call.attempt === 0 && index === 3 ? Effect.zipRight(Deferred.succeed(midway, undefined), Deferred.await(never)) : Effect.void
        }
      })
      const store = yield* RunLogStore.makeMemory
      const sink = recorder()
      const fiber = yield* Effect.fork(runWith("interrupted", model.client, store, sink.layer))
      yield* Deferred.await(midway)
      yield* Fiber.interrupt(fiber)
      const exit = yield* Fiber.await(fiber)
      assert.isTrue(Exit.isFailure(exit) && Cause.isInterruptedOnly(exit.cause))
      assert.strictEqual(yield* model.interruptions, 1)
      assert.lengthOf(deltasOf(sink.events).filter((e) => e.step === 1), 3)
      const log = yield* store.readLog(Ids.RunId.make("interrupted"))
      assert.deepStrictEqual(log.replies.map((r) => r.step), [0])
      const result = yield* runWith("interrupted", model.client, store, EventSink.layerNoop)
      assert.deepStrictEqual(result.stopReason, { _tag: "Completed", by: "Answer", answer: "Both are words: streaming and fold." })
      assert.strictEqual(result.resumedCount, 1)
    }))
})

describe("Agent.stream", () => {
  const streamRun = (runId: string, model: ModelClient.ModelClient.Service, store: RunLogStore.RunLogStore.Service, sink: Layer.Layer<EventSink.EventSink> = EventSink.layerNoop) =>
    Agent.stream({ runId: Ids.RunId.make(runId), agent: agent(3), task: "Look up two words.", tools }).pipe(
      Stream.provideLayer(services(model, store, sink))
    )

  it.effect("yields the run's events as they happen, deltas before the reply's end, then the result; the sink in context gets them too", () =>
    Effect.gen(function*() {
      // The last delta of step 0 is held back until the consumer has seen the first one: the
      // stream would never end if deltas were delivered only after the reply.
      const seenFirst = yield* Deferred.make<void>()
      const model = yield* ScriptedModel.make(script, {
        streaming: { beforeDelta: (call, index, count) => (call.step === 0 && index === count - 1 ? Deferred.await(seenFirst) : Effect.void) }
      })
      const store = yield* RunLogStore.makeMemory
      const outer = recorder()
      const items = yield* streamRun("agent-stream", model.client, store, outer.layer).pipe(
        Stream.tap((item) => (item._tag === "ModelDelta" ? Deferred.succeed(seenFirst, undefined) : Effect.void)),
        Stream.runCollect,
        Effect.map(Chunk.toReadonlyArray)
      )
      const last = items[items.length - 1]!
      assert.strictEqual(last._tag, "RunCompleted")
      assert.isTrue(last._tag === "RunCompleted" && last.result.steps === 2)
      const tags = items.map((item) => item._tag)
      assert.strictEqual(tags[0], "RunStarted")
      assert.isTrue(tags.indexOf("ModelDelta") < tags.indexOf("ModelReplied"))
      assert.deepStrictEqual(outer.events, items.slice(0, -1))
    }))

  it.live("fails with the run's error; stopping the consumer interrupts the run, which resumes", () =>
    Effect.gen(function*() {
      const broken = yield* ScriptedModel.make(script, { streaming: true, failures: [{ times: 1, retryable: false }] })
      const store = yield* RunLogStore.makeMemory
      const error = yield* Effect.flip(Stream.runDrain(streamRun("stream-fails", broken.client, store)))
      assert.strictEqual(error._tag, "ModelError")

      const model = yield* ScriptedModel.make(script, { streaming: { delay: "1 millis" } })
      // The consumer stops at the first delta: the run's fiber is interrupted mid-stream.
      const taken = yield* streamRun("stream-stopped", model.client, store).pipe(
        Stream.takeUntil((item) => item._tag === "ModelDelta"),
        Stream.runCollect
      )
      assert.strictEqual(Chunk.unsafeLast(taken)._tag, "ModelDelta")
      assert.strictEqual(yield* model.interruptions, 1)
      const log = yield* store.readLog(Ids.RunId.make("stream-stopped"))
      assert.lengthOf(log.replies, 0)
      assert.isTrue(Option.isNone(log.finished))
      const resumed = yield* streamRun("stream-stopped", model.client, store).pipe(Stream.runCollect)
      const done = Chunk.unsafeLast(resumed)
      assert.isTrue(done._tag === "RunCompleted" && done.result.resumedCount === 1 && done.result.steps === 2)
    }))
})
