/**
 * `OpenAiCompatible.stream` (design 0180) against recorded real streams served event by event
 * from the loopback server: the folded stream equals `generate`'s reply for the same content
 * (the recorded chunks assembled into one completion), deltas arrive before the stream ends, a
 * cut stream is a retryable `ModelError`, an interrupted stream closes the connection; and whole
 * runs: a stream broken half-way is never logged and its retry finishes the run, a run
 * interrupted mid-stream resumes.
 */
import * as NodeHttpClient from "@effect/platform-node/NodeHttpClient"
import { assert, describe, it } from "@effect/vitest"
import * as Chunk from "effect/Chunk"
import * as Deferred from "effect/Deferred"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Fiber from "effect/Fiber"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Redacted from "effect/Redacted"
import * as Schema from "effect/Schema"
import * as Stream from "effect/Stream"
import * as Agent from "@polyloop/core/Agent"
import * as AgentDefinition from "@polyloop/core/AgentDefinition"
import * as EventSink from "@polyloop/core/EventSink"
import { runId } from "@polyloop/core/Ids"
import type { LoopEvent } from "@polyloop/core/LoopEvent"
import type { ModelClient, ModelRequest } from "@polyloop/core/ModelClient"
import * as ModelDelta from "@polyloop/core/ModelDelta"
import * as NativeToolCallParser from "@polyloop/core/NativeToolCallParser"
import * as RunLogStore from "@polyloop/core/RunLogStore"
import * as Tool from "@polyloop/core/Tool"
import * as ToolRegistry from "@polyloop/core/ToolRegistry"
import * as OpenAiCompatible from "@polyloop/ai/OpenAiCompatible"
import * as FakeServer from "./FakeServer.js"
import { clientOf, interruptedMidStream, modelError, streamOf } from "./helpers.js"
import * as Replay from "./Replay.js"

const request: ModelRequest = {
  messages: [{ _tag: "User", text: "What is the weather in San Francisco?" }],
  tools: [{ name: "weather", description: "The weather of a location", parameters: { type: "object", properties: { location: { type: "string" } } } }],
  settings: {}
}

const layerFor = (baseUrl: string) =>
  OpenAiCompatible.layer({ model: "recorded", baseUrl, apiKey: Redacted.make("sk-stream-DO-NOT-LEAK") }).pipe(Layer.provide(NodeHttpClient.layerUndici))

const withServer = <A, E>(use: (client: ModelClient.Service, server: FakeServer.FakeServer) => Effect.Effect<A, E>) =>
  Effect.gen(function*() {
    const server = yield* FakeServer.make
    const client = yield* clientOf(layerFor(server.baseUrl))
    return yield* use(client, server)
  })


const isRecord = (value: unknown): value is Record<string, unknown> => typeof value === "object" && value !== null && !Array.isArray(value)

/**
 * The one completion a recorded stream's chunks amount to, assembled naively here (content,
 * reasoning and refusal concatenated, each call's pieces joined by index, the last finish
 * reason and usage): what the server would have answered without `stream: true`.
 */
const completionOf = (chunks: ReadonlyArray<unknown>) => {
  let content = ""
  let reasoning = ""
  let refusal = ""
  const calls: Array<{ id: string; type: "function"; function: { name: string; arguments: string } }> = []
  let finish: unknown = null
  let usage: unknown = undefined
  for (const chunk of chunks) {
    if (!isRecord(chunk)) continue
    if (chunk.usage !== undefined && chunk.usage !== null) usage = chunk.usage
    const choice = Array.isArray(chunk.choices) ? chunk.choices[0] : undefined
    if (!isRecord(choice)) continue
    if (typeof choice.finish_reason === "string") finish = choice.finish_reason
    const delta = choice.delta
    if (!isRecord(delta)) continue
    if (typeof delta.content === "string") content += delta.content
    if (typeof delta.reasoning_content === "string") reasoning += delta.reasoning_content
    if (typeof delta.refusal === "string") refusal += delta.refusal
    for (const call of Array.isArray(delta.tool_calls) ? delta.tool_calls : []) {
      if (!isRecord(call) || typeof call.index !== "number") continue
      const slot = calls[call.index] ?? (calls[call.index] = { id: "", type: "function", function: { name: "", arguments: "" } })
      if (typeof call.id === "string" && call.id !== "") slot.id = call.id
      const fn = isRecord(call.function) ? call.function : {}
      if (typeof fn.name === "string" && fn.name !== "") slot.function.name = fn.name
      if (typeof fn.arguments === "string") slot.function.arguments += fn.arguments
    }
  }
  return {
    object: "chat.completion",
    choices: [{
      index: 0,
      message: {
        role: "assistant",
        content: content === "" ? null : content,
        ...(refusal === "" ? {} : { refusal }),
        ...(reasoning === "" ? {} : { reasoning_content: reasoning }),
        ...(calls.length === 0 ? {} : { tool_calls: calls })
      },
      finish_reason: finish
    }],
    ...(usage === undefined ? {} : { usage })
  }
}

/** The folded stream of a recorded file, and `generate`'s reply to the same content as one completion. */
const foldAndWhole = (file: string) =>
  withServer((client, server) =>
    Effect.gen(function*() {
      yield* server.reply(FakeServer.events(Replay.streamEvents(file)), FakeServer.json(completionOf(Replay.streamChunks(file))))
      const deltas = Chunk.toReadonlyArray(yield* Stream.runCollect(streamOf(client)(request)))
      const whole = yield* client.generate(request)
      const sent = yield* server.next
      return { deltas, folded: ModelDelta.fold(deltas), whole, sent }
    }))

describe("OpenAiCompatible.stream against recorded streams", () => {
  it.scopedLive("OpenAI (gpt-4o): text, then a tool call without arguments pieces beyond {}; usage in a last chunk of its own", () =>
    Effect.gen(function*() {
      const { deltas, folded, sent, whole } = yield* foldAndWhole("openai-chat-text-tool-call.chunks.txt")
      assert.deepStrictEqual(folded, whole)
      assert.deepStrictEqual(folded, {
        text: "PRE_TOOL",
        toolCalls: [{ id: "call_NZa7xqfefoaMI2YYHowVXVlU", name: "weather", argumentsText: "{}" }],
        usage: { inputTokens: 58, outputTokens: 12, cachedInputTokens: 0, reasoningTokens: 0 },
        finishReason: "tool-calls",
        rawFinishReason: "tool_calls"
      })
      assert.deepStrictEqual(deltas.filter((d) => d._tag === "TextDelta").map((d) => d._tag === "TextDelta" && d.text), ["PRE", "_TOOL"])
      // The request asks for a stream with usage.
      assert.isTrue(isRecord(sent.body) && sent.body.stream === true)
      assert.deepStrictEqual(isRecord(sent.body) && sent.body.stream_options, { include_usage: true })
    }))

  it.scopedLive("OpenAI (gpt-5.2): two tool calls, pieces by index; usage without details", () =>
    Effect.gen(function*() {
      const { deltas, folded, whole } = yield* foldAndWhole("openai-chat-two-tool-calls.sse")
      assert.deepStrictEqual(folded, whole)
      assert.deepStrictEqual(folded.toolCalls, [
        { id: "call_ZogyTlZEZW1UhS1KNyH7b1O2", name: "get_local_weather", argumentsText: "{\"area\":\"Shanghai\"}" },
        { id: "call_MEdPCSVxuSuiCiUW04tsaxuH", name: "get_local_date", argumentsText: "{\"area\":\"Beijing\"}" }
      ])
      assert.deepStrictEqual(folded.usage, { inputTokens: 146, outputTokens: 81 })
      assert.deepStrictEqual(deltas.filter((d) => d._tag === "ToolCallDelta").map((d) => d._tag === "ToolCallDelta" && d.index), [0, 0, 1, 1])
    }))

  it.scopedLive("DeepSeek (an OpenAI-compatible server): reasoning pieces, argument pieces, usage with cache hits on the finishing chunk", () =>
    Effect.gen(function*() {
      const { deltas, folded, whole } = yield* foldAndWhole("deepseek-reasoning-tool-call.chunks.txt")
      assert.deepStrictEqual(folded, whole)
      assert.strictEqual(folded.reasoning, "The user asks about the weather in San Francisco. I should use the weather tool.")
      assert.deepStrictEqual(folded.toolCalls, [{ id: "call_00_IhCAliIHtM9gKpgfqbBV9873", name: "weather", argumentsText: "{\"location\": \"San Francisco\"}" }])
      assert.deepStrictEqual(folded.usage, { inputTokens: 374, outputTokens: 61, cachedInputTokens: 256, reasoningTokens: 17 })
      assert.strictEqual(folded.text, "")
      assert.isAbove(deltas.filter((d) => d._tag === "ReasoningDelta").length, 10)
    }))

  it.scopedLive("generate folds an event stream asked for through ModelSettings.extra (it used to fail as 'not JSON')", () =>
    withServer((client, server) =>
      Effect.gen(function*() {
        yield* server.reply(FakeServer.events(Replay.streamEvents("openai-chat-two-tool-calls.sse")))
        const reply = yield* client.generate({ ...request, settings: { extra: { stream: true } } })
        assert.lengthOf(reply.toolCalls, 2)
        assert.strictEqual(reply.finishReason, "tool-calls")
      })))

  it.scopedLive("deltas arrive before the stream ends: the server holds the last event until the first delta was read", () =>
    withServer((client, server) =>
      Effect.gen(function*() {
        const events = Replay.streamEvents("deepseek-reasoning-tool-call.chunks.txt")
        let release: () => void = () => undefined
        const held = new Promise<void>((resolve) => {
          release = resolve
        })
        yield* server.reply(FakeServer.events(events, { gate: (i) => (i === events.length - 1 ? held : undefined) }))
        const folded = yield* ModelDelta.collect(streamOf(client)(request), () => Effect.sync(() => release()))
        assert.strictEqual(folded.usage.inputTokens, 374)
      })))

  it.scopedLive("a stream broken after half its events, or ended before [DONE], is a retryable ModelError", () =>
    withServer((client, server) =>
      Effect.gen(function*() {
        const events = Replay.streamEvents("deepseek-reasoning-tool-call.chunks.txt")
        const half = Math.floor(events.length / 2)
        yield* server.reply(FakeServer.events(events, { cutAfter: half, cut: "destroy" }), FakeServer.events(events, { cutAfter: half, cut: "end" }))
        const broken = yield* modelError(ModelDelta.collect(streamOf(client)(request)))
        assert.isTrue(broken.retryable)
        const ended = yield* modelError(ModelDelta.collect(streamOf(client)(request)))
        assert.isTrue(ended.retryable)
        assert.match(ended.message, /broke off before its end/)
      })))

  it.scopedLive("an error event mid-stream is classified by its code; a 429 before the stream is the provider's error", () =>
    withServer((client, server) =>
      Effect.gen(function*() {
        const events = Replay.streamEvents("openai-chat-two-tool-calls.sse")
        yield* server.reply(
          FakeServer.events([...events.slice(0, 2), "data: {\"error\":{\"code\":502,\"message\":\"upstream\"}}\n\n"]),
          Replay.reply("openai-rate-limit.429.json")
        )
        const midway = yield* modelError(ModelDelta.collect(streamOf(client)(request)))
        assert.isTrue(midway.retryable)
        assert.strictEqual(midway.status, 502)
        const limited = yield* modelError(ModelDelta.collect(streamOf(client)(request)))
        assert.isTrue(limited.retryable)
        assert.strictEqual(limited.status, 429)
      })))

  it.scopedLive("interrupting the stream's consumer closes the connection", () =>
    withServer((client, server) =>
      interruptedMidStream(client, server, request, Replay.streamEvents("deepseek-reasoning-tool-call.chunks.txt"), 3)))
})

// -----------------------------------------------------------------------------
// Whole runs
// -----------------------------------------------------------------------------

const weather = Tool.make({
  name: "weather",
  description: "The weather of a location",
  parameters: Schema.Struct({ location: Schema.String }),
  handler: ({ location }) => Effect.succeed(`${location}: foggy, 14°C`)
})
const registry = ToolRegistry.make(weather)
const agent = AgentDefinition.make({
  name: "weather",
  systemPrompt: "Answer with the weather tool.",
  budget: { maxSteps: 4 },
  modelRetry: { maxAttempts: 3, baseDelay: Duration.millis(1), maxDelay: Duration.millis(5) }
})

const finalAnswer = [
  "data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"Foggy,\"},\"finish_reason\":null}]}\n\n",
  "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\" 14°C.\"},\"finish_reason\":\"stop\"}]}\n\n",
  "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":20,\"completion_tokens\":4,\"total_tokens\":24}}\n\n",
  "data: [DONE]\n\n"
]

const runStreaming = (baseUrl: string, store: RunLogStore.RunLogStore.Service, events: Array<LoopEvent>, id: string) =>
  Agent.run({ runId: runId(id), agent, task: "Weather in San Francisco?", tools: registry, streaming: true }).pipe(
    Effect.provide(Layer.mergeAll(
      layerFor(baseUrl),
      NativeToolCallParser.layer(),
      Layer.orDie(ToolRegistry.layerExecutor(registry)),
      EventSink.layer((event) => Effect.sync(() => void events.push(event))),
      Layer.succeed(RunLogStore.RunLogStore, store)
    ))
  )

describe("streaming runs through OpenAiCompatible", () => {
  it.scopedLive("a tool call without an id (Gemini's endpoint sends \"\"): streamed or not, the logs are byte-identical, with the loop's call_0", () =>
    Effect.gen(function*() {
      // The recorded DeepSeek stream with its call id emptied, and the same content as one completion.
      const idless = Replay.streamEvents("deepseek-reasoning-tool-call.chunks.txt").map((event) => event.replace(/"id":"call_[^"]*"/g, "\"id\":\"\""))
      const whole = completionOf(idless.map((event) => event.replace(/^data: /, "").trim()).filter((data) => data !== "[DONE]").map((data) => JSON.parse(data)))
      const finalWhole = completionOf(finalAnswer.map((event) => event.replace(/^data: /, "").trim()).filter((data) => data !== "[DONE]").map((data) => JSON.parse(data)))
      const logs: Array<string> = []
      for (const streaming of [true, false]) {
        const server = yield* FakeServer.make
        yield* streaming
          ? server.reply(FakeServer.events(idless), FakeServer.events(finalAnswer))
          : server.reply(FakeServer.json(whole), FakeServer.json(finalWhole))
        const store = yield* RunLogStore.makeMemory
        yield* Agent.run({ runId: runId("idless"), agent, task: "Weather in San Francisco?", tools: registry, streaming }).pipe(
          Effect.provide(Layer.mergeAll(
            layerFor(server.baseUrl),
            NativeToolCallParser.layer(),
            Layer.orDie(ToolRegistry.layerExecutor(registry)),
            EventSink.layerNoop,
            Layer.succeed(RunLogStore.RunLogStore, store)
          ))
        )
        const log = yield* store.readLog(runId("idless"))
        assert.deepStrictEqual(log.replies[0]!.reply.toolCalls.map((c) => c.id), ["call_0"])
        assert.deepStrictEqual(log.results.map((r) => r.outcome.observation), ["San Francisco: foggy, 14°C"])
        const sent = (yield* server.all)[1]!.body as { messages: ReadonlyArray<{ role: string; tool_call_id?: string; content?: unknown }> }
        assert.deepStrictEqual(sent.messages.filter((m) => m.role === "tool").map((m) => [m.tool_call_id, m.content]), [["call_0", "San Francisco: foggy, 14°C"]])
        logs.push(JSON.stringify([log.replies.map((r) => [r.reply, r.requestHash]), log.results.map((r) => [r.action, r.outcome]), log.steps.map((s) => [s.decision, s.resultIds, s.usage])]))
      }
      assert.strictEqual(logs[0], logs[1])
    }))

  it.scopedLive("a stream broken after half its chunks: no ModelReplied for it, the retry gives the whole reply, the run finishes", () =>
    Effect.gen(function*() {
      const server = yield* FakeServer.make
      const recorded = Replay.streamEvents("deepseek-reasoning-tool-call.chunks.txt")
      yield* server.reply(
        FakeServer.events(recorded, { cutAfter: Math.floor(recorded.length / 2) }),
        FakeServer.events(recorded),
        FakeServer.events(finalAnswer)
      )
      const store = yield* RunLogStore.makeMemory
      const events: Array<LoopEvent> = []
      const result = yield* runStreaming(server.baseUrl, store, events, "broken-half")
      assert.deepStrictEqual(result.stopReason, { _tag: "Completed", by: "Answer", answer: "Foggy, 14°C." })
      const log = yield* store.readLog(runId("broken-half"))
      assert.deepStrictEqual(log.replies.map((r) => r.step), [0, 1])
      assert.strictEqual(log.replies[0]!.reply.reasoning, "The user asks about the weather in San Francisco. I should use the weather tool.")
      assert.deepStrictEqual(log.replies[0]!.reply.toolCalls.map((c) => c.argumentsText), ["{\"location\": \"San Francisco\"}"])
      const attempts = events.flatMap((e) => (e._tag === "ModelDelta" && e.step === 0 ? [e.attempt] : []))
      assert.isTrue(attempts.includes(0) && attempts.includes(1))
      assert.lengthOf(yield* server.all, 3)
    }))

  it.scopedLive("interrupting a run mid-stream: the server sees the connection close, nothing of the step is logged, the run resumes", () =>
    Effect.gen(function*() {
      const server = yield* FakeServer.make
      const recorded = Replay.streamEvents("deepseek-reasoning-tool-call.chunks.txt")
      yield* server.reply(FakeServer.events(recorded, { gate: (i) => (i === 5 ? new Promise<void>(() => undefined) : undefined) }))
      const store = yield* RunLogStore.makeMemory
      const events: Array<LoopEvent> = []
      const fiber = yield* Effect.fork(runStreaming(server.baseUrl, store, events, "interrupted"))
      const received = yield* server.next
      while (!events.some((e) => e._tag === "ModelDelta")) yield* Effect.sleep(Duration.millis(5))
      yield* Fiber.interrupt(fiber)
      assert.isTrue(Exit.isInterrupted(yield* Fiber.await(fiber)))
      yield* Deferred.await(received.abortedByClient)
      const log = yield* store.readLog(runId("interrupted"))
      assert.lengthOf(log.replies, 0)
      assert.isTrue(Option.isSome(log.started) && Option.isNone(log.finished))

      yield* server.reply(FakeServer.events(recorded), FakeServer.events(finalAnswer))
      const result = yield* runStreaming(server.baseUrl, store, [], "interrupted")
      assert.strictEqual(result.resumedCount, 1)
      assert.strictEqual(result.steps, 2)
    }))
})
