/**
 * `AiModelClient.stream` through `@effect/ai`'s `streamText` (design 0180): a recorded OpenAI
 * Responses API stream served from the loopback server folds into what `generate` returns for
 * the same content (the stream's items assembled into one response); deltas come before the
 * end; a cut or unfinished stream is a retryable `ModelError`; interrupting the consumer closes
 * the connection; and a fake `LanguageModel` whose parts cover text, two reasoning parts,
 * tool calls and Anthropic's cache usage shows the fold rules part by part.
 */
import * as LanguageModel from "@effect/ai/LanguageModel"
import type * as Response from "@effect/ai/Response"
import * as NodeHttpClient from "@effect/platform-node/NodeHttpClient"
import { assert, describe, it } from "@effect/vitest"
import * as Chunk from "effect/Chunk"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Redacted from "effect/Redacted"
import * as Stream from "effect/Stream"
import * as Message from "@polyloop/core/Message"
import type { ModelClient, ModelRequest } from "@polyloop/core/ModelClient"
import * as ModelDelta from "@polyloop/core/ModelDelta"
import * as AiModelClient from "@polyloop/ai/AiModelClient"
import * as Anthropic from "@polyloop/ai/Anthropic"
import * as OpenAiResponses from "@polyloop/ai/OpenAiResponses"
import * as FakeServer from "./FakeServer.js"
import { clientOf, interruptedMidStream, modelError, streamOf } from "./helpers.js"
import * as Replay from "./Replay.js"

const area = { type: "object", properties: { area: { type: "string" } }, required: ["area"] }
const request: ModelRequest = {
  messages: [Message.User.make({ text: "Weather and time in Shanghai and Beijing?" })],
  tools: [
    { name: "get_local_weather", description: "The weather of an area", parameters: area },
    { name: "get_local_date", description: "The time of an area", parameters: area }
  ],
  settings: {}
}

const file = "openai-responses-two-function-calls.sse"

const isRecord = (value: unknown): value is Record<string, unknown> => typeof value === "object" && value !== null && !Array.isArray(value)

/** The recorded events' JSON data. */
const eventData = (): ReadonlyArray<Record<string, unknown>> =>
  Replay.streamEvents(file).flatMap((event) => {
    const data = event.split("\n").find((line) => line.startsWith("data: "))
    const json: unknown = data === undefined ? undefined : JSON.parse(data.slice(6))
    return isRecord(json) ? [json] : []
  })

/** The one response the stream amounts to: the completed response with the items the stream finished (it was sent with `output: []`). */
const wholeResponse = () => {
  const data = eventData()
  const items = data.flatMap((d) => (d.type === "response.output_item.done" ? [d.item] : []))
  const completed = data.find((d) => d.type === "response.completed")
  const response = isRecord(completed) && isRecord(completed.response) ? completed.response : {}
  return { ...response, output: items }
}

const withServer = <A, E>(use: (client: ModelClient.Service, server: FakeServer.FakeServer) => Effect.Effect<A, E>) =>
  Effect.gen(function*() {
    const server = yield* FakeServer.make
    const client = yield* clientOf(
      OpenAiResponses.layer({ model: "gpt-5.4", baseUrl: server.baseUrl, apiKey: Redacted.make("sk-responses-DO-NOT-LEAK") }).pipe(
        Layer.provide(NodeHttpClient.layerUndici)
      )
    )
    return yield* use(client, server)
  })


describe("AiModelClient.stream: the OpenAI Responses API", () => {
  it.scopedLive("a recorded stream of two function calls folds into generate's reply to the same response", () =>
    withServer((client, server) =>
      Effect.gen(function*() {
        yield* server.reply(FakeServer.events(Replay.streamEvents(file)), FakeServer.json(wholeResponse()))
        const deltas = Chunk.toReadonlyArray(yield* Stream.runCollect(streamOf(client)(request)))
        const whole = yield* client.generate(request)
        const folded = ModelDelta.fold(deltas)
        assert.deepStrictEqual(folded, whole)
        assert.deepStrictEqual(folded.toolCalls, [
          { id: "call_pYUWuWYa6bvE25kogvRkLNrf", name: "get_local_weather", argumentsText: "{\"area\":\"Shanghai\"}" },
          { id: "call_dCn8RbrFpaX0ng3zhIt9IL66", name: "get_local_date", argumentsText: "{\"area\":\"Beijing\"}" }
        ])
        assert.strictEqual(folded.finishReason, "tool-calls")
        assert.deepStrictEqual(folded.usage, { inputTokens: 146, outputTokens: 51, cachedInputTokens: 0, reasoningTokens: 0 })
        const sent = yield* server.next
        assert.isTrue(isRecord(sent.body) && sent.body.stream === true)
      })))

  it.scopedLive("deltas come before the stream ends: the server holds response.completed until the first delta was read", () =>
    withServer((client, server) =>
      Effect.gen(function*() {
        const events = Replay.streamEvents(file)
        let release: () => void = () => undefined
        const held = new Promise<void>((resolve) => {
          release = resolve
        })
        yield* server.reply(FakeServer.events(events, { gate: (i) => (i === events.length - 1 ? held : undefined) }))
        const folded = yield* ModelDelta.collect(streamOf(client)(request), () => Effect.sync(() => release()))
        assert.lengthOf(folded.toolCalls, 2)
      })))

  it.scopedLive("a stream broken half-way, or ended without response.completed, is a retryable ModelError", () =>
    withServer((client, server) =>
      Effect.gen(function*() {
        const events = Replay.streamEvents(file)
        yield* server.reply(
          FakeServer.events(events, { cutAfter: 4, cut: "destroy" }),
          FakeServer.events(events, { cutAfter: events.length - 1, cut: "end" })
        )
        const broken = yield* modelError(ModelDelta.collect(streamOf(client)(request)))
        assert.isTrue(broken.retryable, broken.message)
        const unfinished = yield* modelError(ModelDelta.collect(streamOf(client)(request)))
        assert.isTrue(unfinished.retryable, unfinished.message)
      })))

  it.scopedLive("interrupting the consumer closes the connection", () =>
    // The first call is decoded at its output_item.done (event 3); the server stalls at event 5.
    withServer((client, server) => interruptedMidStream(client, server, request, Replay.streamEvents(file), 5)))
})

describe("AiModelClient.stream: Anthropic's Messages API", () => {
  const recorded = "anthropic-text-tool-use.chunks.txt"
  const tools = [{ name: "updateIssueList", description: "Updates the issue list", parameters: { type: "object", properties: {} } }]
  const anthropicRequest: ModelRequest = { ...request, tools }

  /** The one message the recorded events amount to: the started message, its blocks completed, the final stop reason and usage. */
  const wholeMessage = () => {
    const events = Replay.streamText(recorded).split("\n").map((line) => JSON.parse(line) as Record<string, unknown>)
    const start = events.find((e) => e.type === "message_start")
    const message = isRecord(start) && isRecord(start.message) ? start.message : {}
    const blocks: Array<Record<string, unknown>> = []
    const json: Array<string> = []
    let stopReason: unknown = null
    let usage: Record<string, unknown> = isRecord(message.usage) ? message.usage : {}
    for (const e of events) {
      const index = typeof e.index === "number" ? e.index : -1
      if (e.type === "content_block_start" && isRecord(e.content_block)) {
        blocks[index] = { ...e.content_block }
        json[index] = ""
      }
      if (e.type === "content_block_delta" && isRecord(e.delta)) {
        if (e.delta.type === "text_delta") blocks[index]!.text = `${String(blocks[index]!.text)}${String(e.delta.text)}`
        if (e.delta.type === "input_json_delta") json[index] = `${json[index]}${String(e.delta.partial_json)}`
      }
      if (e.type === "content_block_stop" && blocks[index]!.type === "tool_use" && json[index] !== "") blocks[index]!.input = JSON.parse(json[index]!)
      if (e.type === "message_delta" && isRecord(e.delta)) {
        stopReason = e.delta.stop_reason
        if (isRecord(e.usage)) usage = { ...usage, ...e.usage }
      }
    }
    return { ...message, content: blocks, stop_reason: stopReason, usage }
  }

  it.scopedLive("a recorded stream of text and a tool use folds into generate's reply to the same message", () =>
    Effect.gen(function*() {
      const server = yield* FakeServer.make
      const client = yield* clientOf(
        Anthropic.layer({ model: "claude-sonnet-4-5", baseUrl: server.baseUrl, apiKey: Redacted.make("sk-ant-DO-NOT-LEAK") }).pipe(
          Layer.provide(NodeHttpClient.layerUndici)
        )
      )
      yield* server.reply(FakeServer.events(Replay.streamEvents(recorded)), FakeServer.json(wholeMessage()))
      const deltas = Chunk.toReadonlyArray(yield* Stream.runCollect(streamOf(client)(anthropicRequest)))
      const whole = yield* client.generate(anthropicRequest)
      const folded = ModelDelta.fold(deltas)
      assert.deepStrictEqual(folded, whole)
      assert.strictEqual(folded.text, "I'll update the issue list for you.")
      assert.deepStrictEqual(folded.toolCalls, [{ id: "toolu_01QE1WLsSVp5hy5Q3GmGTmjP", name: "updateIssueList", argumentsText: "{}" }])
      assert.strictEqual(folded.finishReason, "tool-calls")
      assert.strictEqual(folded.usage.outputTokens, 48)
      assert.deepStrictEqual(deltas.filter((d) => d._tag === "TextDelta").length, 2)
    }))
})

describe("AiModelClient.stream: parts as deltas", () => {
  // What a provider gives for one reply, whole (for generateText) and as stream parts.
  const whole: Array<Response.PartEncoded> = [
    { type: "reasoning", text: "First thought." },
    { type: "reasoning", text: "Second thought." },
    { type: "text", text: "Reading both." },
    { type: "tool-call", id: "toolu_1", name: "get_local_weather", params: { area: "Shanghai" }, providerExecuted: false },
    { type: "tool-call", id: "toolu_2", name: "get_local_date", params: { area: "Beijing" }, providerExecuted: false },
    {
      type: "finish",
      reason: "tool-calls",
      usage: { inputTokens: 3, outputTokens: 40, totalTokens: 43 },
      metadata: { anthropic: { usage: { input_tokens: 3, cache_read_input_tokens: 1111, cache_creation_input_tokens: 20, output_tokens: 40 } } }
    }
  ]
  const streamed: Array<Response.StreamPartEncoded> = [
    { type: "reasoning-start", id: "r1" },
    { type: "reasoning-delta", id: "r1", delta: "First " },
    { type: "reasoning-delta", id: "r1", delta: "thought." },
    { type: "reasoning-end", id: "r1" },
    { type: "reasoning-start", id: "r2" },
    { type: "reasoning-delta", id: "r2", delta: "Second thought." },
    { type: "reasoning-end", id: "r2" },
    { type: "text-start", id: "t1" },
    { type: "text-delta", id: "t1", delta: "Reading" },
    { type: "text-delta", id: "t1", delta: " both." },
    { type: "text-end", id: "t1" },
    { type: "tool-params-start", id: "toolu_1", name: "get_local_weather", providerExecuted: false },
    { type: "tool-params-delta", id: "toolu_1", delta: "{ \"area\" : \"Shanghai\" }" },
    { type: "tool-params-end", id: "toolu_1" },
    { type: "tool-call", id: "toolu_1", name: "get_local_weather", params: { area: "Shanghai" }, providerExecuted: false },
    { type: "tool-call", id: "toolu_2", name: "get_local_date", params: { area: "Beijing" }, providerExecuted: false },
    whole[5] as Response.StreamPartEncoded
  ]

  const fake = (parts: ReadonlyArray<Response.StreamPartEncoded>) =>
    Effect.flatMap(
      LanguageModel.make({
        generateText: () => Effect.succeed(whole),
        streamText: () => Stream.fromIterable(parts)
      }),
      (model) => Effect.provideService(AiModelClient.make(), LanguageModel.LanguageModel, model)
    )

  it.effect("reasoning parts joined by a newline, arguments as generate logs them, Anthropic's cache in the usage: the fold equals generate", () =>
    Effect.gen(function*() {
      const client = yield* fake(streamed)
      const deltas = Chunk.toReadonlyArray(yield* Stream.runCollect(streamOf(client)(request)))
      const reply = yield* client.generate(request)
      assert.deepStrictEqual(ModelDelta.fold(deltas), reply)
      assert.strictEqual(reply.reasoning, "First thought.\nSecond thought.")
      assert.deepStrictEqual(reply.usage, { inputTokens: 1134, outputTokens: 40, cachedInputTokens: 1111, cacheWriteInputTokens: 20 })
      assert.deepStrictEqual(reply.toolCalls.map((c) => c.argumentsText), ["{\"area\":\"Shanghai\"}", "{\"area\":\"Beijing\"}"])
      assert.deepStrictEqual(deltas.filter((d) => d._tag === "TextDelta").length, 2)
    }))

  it.effect("a stream without its finish part is a retryable ModelError; an error part too", () =>
    Effect.gen(function*() {
      const unfinished = yield* modelError(ModelDelta.collect(streamOf(yield* fake(streamed.slice(0, -1)))(request)))
      assert.isTrue(unfinished.retryable)
      const erred = yield* modelError(ModelDelta.collect(streamOf(yield* fake([...streamed.slice(0, 3), { type: "error", error: { message: "overloaded" } }]))(request)))
      assert.isTrue(erred.retryable)
      assert.notInclude(erred.message, "overloaded")
    }))
})
