/**
 * A request longer than the model's context window (issue 30, design 0300 decision 4), with the
 * providers' real refusals (`fixtures/recorded/`, sources in `SOURCES.md`): OpenAI's
 * `context_length_exceeded` and Anthropic's "prompt is too long" (no code: its message says it)
 * both become `ModelError { code: "context_length_exceeded" }`, and drive the loop's emergency
 * step end to end through `OpenAiCompatible` and `Anthropic`: the refused request is shrunk,
 * recorded, sent again once, and the run completes. And the real tokenizer: a 500-step run
 * fitted to a 32k window with `o200k_base` (js-tiktoken) sends no request over the window by
 * that tokenizer's own count.
 */
import * as NodeHttpClient from "@effect/platform-node/NodeHttpClient"
import { assert, describe, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Redacted from "effect/Redacted"
import * as Schema from "effect/Schema"
import * as Agent from "@polyloop/core/Agent"
import * as AgentDefinition from "@polyloop/core/AgentDefinition"
import * as EventSink from "@polyloop/core/EventSink"
import * as HistoryPolicy from "@polyloop/core/HistoryPolicy"
import { runId } from "@polyloop/core/Ids"
import type * as Message from "@polyloop/core/Message"
import type { ModelClient, ModelRequest } from "@polyloop/core/ModelClient"
import * as ModelReply from "@polyloop/core/ModelReply"
import * as NativeToolCallParser from "@polyloop/core/NativeToolCallParser"
import * as RunLogStore from "@polyloop/core/RunLogStore"
import * as Tool from "@polyloop/core/Tool"
import * as ToolRegistry from "@polyloop/core/ToolRegistry"
import * as Anthropic from "@polyloop/ai/Anthropic"
import * as OpenAiCompatible from "@polyloop/ai/OpenAiCompatible"
import * as Tokenizers from "@polyloop/ai/Tokenizers"
import * as ScriptedModel from "@polyloop/testing/ScriptedModel"
import o200k from "js-tiktoken/ranks/o200k_base"
import { Tiktoken } from "js-tiktoken/lite"
import * as FakeServer from "./FakeServer.js"
import { assertNothingLeaks, clientOf, modelError } from "./helpers.js"
import * as Replay from "./Replay.js"

const apiKey = "sk-context-DO-NOT-LEAK"

const weather = Tool.make({
  name: "getWeather",
  description: "The weather of a location",
  parameters: Schema.Struct({ location: Schema.String }),
  replayPolicy: "Always",
  handler: ({ location }) => Effect.succeed(`${location}: ${"clear skies, 21°C. ".repeat(40)}`)
})
const registry = ToolRegistry.make(weather)

const request: ModelRequest = {
  messages: [{ _tag: "User", text: "What is the weather in Tokyo?" }],
  tools: registry.modelView(),
  settings: {}
}

const chat = (baseUrl: string) => OpenAiCompatible.layer({ model: "recorded", baseUrl, apiKey: Redacted.make(apiKey) })
// The fake server's base URL ends in /v1; Anthropic's root does not.
const anthropic = (baseUrl: string) =>
  Anthropic.layer({ model: "claude-sonnet-4-5", baseUrl: baseUrl.replace(/\/v1$/, ""), apiKey: Redacted.make(apiKey) })

type ClientLayer = (baseUrl: string) => Layer.Layer<ModelClient, never, import("@effect/platform/HttpClient").HttpClient>

const failed = (file: string, layer: ClientLayer) =>
  Effect.gen(function*() {
    const server = yield* FakeServer.make
    yield* server.reply(Replay.reply(file))
    const client = yield* clientOf(layer(server.baseUrl).pipe(Layer.provide(NodeHttpClient.layerUndici)))
    return yield* modelError(client.generate(request))
  })

describe("the providers' refusals of a request too long", () => {
  it.scopedLive("OpenAI: 400 context_length_exceeded keeps its code and param, not retryable", () =>
    Effect.gen(function*() {
      const error = yield* failed("openai-context-length-exceeded.400.json", chat)
      assert.isFalse(error.retryable)
      assert.strictEqual(error.status, 400)
      assert.strictEqual(error.code, "context_length_exceeded")
      assert.strictEqual(error.type, "invalid_request_error")
      assert.strictEqual(error.param, "messages")
      // The model's window, read from the refusal (design 0361): the number only, never the text.
      assert.strictEqual(error.contextWindow, 4097)
      assertNothingLeaks(error, [apiKey, "maximum context length is 4097"])
    }))

  it.scopedLive("Anthropic: 'prompt is too long' (no code) reads as context_length_exceeded; the message itself is not kept", () =>
    Effect.gen(function*() {
      const error = yield* failed("anthropic-prompt-too-long.400.json", anthropic)
      assert.isFalse(error.retryable)
      assert.strictEqual(error.code, "context_length_exceeded")
      assert.strictEqual(error.type, "invalid_request_error")
      assert.strictEqual(error.requestId, "req_011CWdepJvA2D819tdYYq4h7")
      assert.strictEqual(error.contextWindow, 200000)
      assertNothingLeaks(error, [apiKey, "200251 tokens"])
    }))
})

const agent = AgentDefinition.make({
  name: "forecaster",
  systemPrompt: "Answer with the weather tool.",
  budget: { maxSteps: 8 },
  history: HistoryPolicy.maskObservations({ keepLast: 4 })
})

const runThrough = (layer: ClientLayer, replies: ReadonlyArray<FakeServer.Reply>) =>
  Effect.gen(function*() {
    const server = yield* FakeServer.make
    yield* server.reply(...replies)
    const store = yield* RunLogStore.makeMemory
    const id = runId("too-long")
    const result = yield* Agent.run({ runId: id, agent, task: "What is the weather in Tokyo?", tools: registry }).pipe(
      Effect.provide(Layer.mergeAll(
        layer(server.baseUrl).pipe(Layer.provide(NodeHttpClient.layerUndici)),
        NativeToolCallParser.layer(),
        Layer.orDie(ToolRegistry.layerExecutor(registry)),
        EventSink.layerNoop,
        Layer.succeed(RunLogStore.RunLogStore, store)
      ))
    )
    return { result, log: yield* store.readLog(id), received: yield* server.all }
  })

/** A written Chat Completions reply calling getWeather (the shape of the recorded tool-call fixtures). */
const chatToolCall = (id: string) =>
  FakeServer.json({
    id: `chatcmpl-${id}`,
    object: "chat.completion",
    choices: [{
      index: 0,
      message: { role: "assistant", content: null, tool_calls: [{ id, type: "function", function: { name: "getWeather", arguments: "{\"location\":\"Tokyo\"}" } }] },
      finish_reason: "tool_calls"
    }],
    usage: { prompt_tokens: 100, completion_tokens: 10, total_tokens: 110 }
  })

const wireText = (body: unknown): string => JSON.stringify(body)

describe("the emergency step end to end", () => {
  it.scopedLive("OpenAiCompatible: the recorded refusal shrinks the history (recorded), the request is sent again once, the run completes", () =>
    Effect.gen(function*() {
      const { log, received, result } = yield* runThrough(chat, [
        chatToolCall("call_a"),
        chatToolCall("call_b"),
        Replay.reply("openai-context-length-exceeded.400.json"),
        Replay.reply("openai-chat-text.json")
      ])
      assert.strictEqual(result.stopReason._tag, "Completed")
      assert.lengthOf(received, 4)
      assert.deepStrictEqual(log.compactions.map((c) => [c.reason, c.step, c.toStep]), [["ContextExceeded", 2, 1]])
      const refused = wireText(received[2]!.body)
      const retried = wireText(received[3]!.body)
      assert.include(refused, "call_a")
      assert.notInclude(retried, "call_a", "step 0 is dropped")
      assert.include(retried, "call_b", "the last step is kept, call and answer")
      assert.include(retried, "[steps 0–0 omitted: 1 steps]")
      assert.isBelow(retried.length, refused.length)
    }))

  it.scopedLive("Anthropic: the recorded 'prompt is too long' drives the same recovery", () =>
    Effect.gen(function*() {
      const { log, received, result } = yield* runThrough(anthropic, [
        Replay.reply("anthropic-tool-use-weather.json"),
        Replay.reply("anthropic-tool-use-weather.json"),
        Replay.reply("anthropic-prompt-too-long.400.json"),
        Replay.reply("anthropic-cache-read.json")
      ])
      assert.strictEqual(result.stopReason._tag, "Completed")
      assert.lengthOf(received, 4)
      assert.deepStrictEqual(log.compactions.map((c) => [c.reason, c.step, c.toStep]), [["ContextExceeded", 2, 1]])
      const retried = received[3]!.body as { readonly messages: ReadonlyArray<unknown> }
      assert.include(wireText(retried), "[steps 0–0 omitted: 1 steps]")
      // One tool_use and its tool_result are left (the recorded reply's id), paired.
      assert.strictEqual(wireText(retried).split("\"tool_use\"").length - 1, 1)
      assert.strictEqual(wireText(retried).split("\"tool_result\"").length - 1, 1)
      assert.isBelow(wireText(retried).length, wireText(received[2]!.body).length)
    }))
})

describe("Tokenizers (js-tiktoken)", () => {
  it("counts like tiktoken, linear on pathological text, special tokens as text", () => {
    const counter = Tokenizers.make()
    const o200 = counter.encoding("o200k_base")!
    const exact = new Tiktoken(o200k)
    for (const text of ["hello world", "The quick brown fox jumps over the lazy dog.", "def f(x):\n    return x * 2\n", "東京の天気は晴れです"]) {
      assert.strictEqual(o200(text), exact.encode(text).length, text)
    }
    assert.strictEqual(o200("<|endoftext|>"), exact.encode("<|endoftext|>", [], []).length)
    assert.isDefined(counter.encoding("cl100k_base"))
    assert.isDefined(counter.encoding("approximate"))
    assert.isUndefined(counter.encoding("p50k_base"))
    // A long run without whitespace is counted in slices: close to the exact count, the same every time.
    const run = "ab".repeat(400)
    assert.strictEqual(o200(run), o200(run))
    assert.isAtMost(Math.abs(o200(run) - exact.encode(run).length), run.length / 32 + 1)
  })

  it.effect("a 500-step run with 2 MB of observations, fitted to a 32k window with o200k_base: no request exceeds it by the tokenizer's count", () =>
    Effect.gen(function*() {
      const lines = 100
      const read = Tool.make({
        name: "read_file",
        description: "Reads a file.",
        parameters: Schema.Struct({ path: Schema.String }),
        replayPolicy: "Always",
        handler: ({ path }) => Effect.succeed(Array.from({ length: lines }, (_, i) => `${path}:${String(i).padStart(4, "0")} ${"lorem ipsum dolor sit amet".slice(0, 29)}`).join("\n"))
      })
      const tools = ToolRegistry.make(read)
      const steps = 500
      const model = yield* ScriptedModel.make((_, call) =>
        call.step < steps
          ? ModelReply.make({ text: "", toolCalls: [{ id: "", name: "read_file", argumentsText: JSON.stringify({ path: `src/file${call.step}.ts` }) }] })
          : ModelReply.make({ text: "done" }))
      const store = yield* RunLogStore.makeMemory
      const history = HistoryPolicy.compose(
        HistoryPolicy.maskObservations({ keepLast: 5, every: 5 }),
        HistoryPolicy.fitTokens({ window: 32_000, headroom: 4_000, tokenizer: "o200k_base" })
      )
      const id = runId("long-o200k")
      const result = yield* Agent.run({
        runId: id,
        agent: AgentDefinition.make({ name: "reader", systemPrompt: "Read files.", budget: { maxSteps: steps + 5 }, history }),
        task: "Read everything.",
        tools
      }).pipe(Effect.provide(Layer.mergeAll(
        model.layer,
        NativeToolCallParser.layer(),
        Layer.orDie(ToolRegistry.layerExecutor(tools)),
        EventSink.layerNoop,
        Tokenizers.layer,
        Layer.succeed(RunLogStore.RunLogStore, store)
      )))
      assert.strictEqual(result.stopReason._tag, "Completed")
      const log = yield* store.readLog(id)
      assert.isAbove(log.results.reduce((n, r) => n + r.outcome.observation.length, 0), 2_000_000)
      // Counted again here with tiktoken itself (no slicing): each message's texts, a call's name
      // and arguments, 4 tokens of framing per message, and the tool definitions' JSON.
      const exact = new Tiktoken(o200k)
      const encode = (text: string) => exact.encode(text, [], []).length
      const count = (messages: ReadonlyArray<Message.Message>) => {
        let n = encode(JSON.stringify(tools.modelView()))
        for (const m of messages) {
          n += 4 + encode(m.text)
          if (m._tag === "Tool") n += encode(m.name)
          if (m._tag === "Assistant") for (const c of m.toolCalls) n += encode(c.name) + encode(c.argumentsText)
        }
        return n
      }
      assert.isAbove(log.compactions.length, 0)
      // The largest requests are the last ones before each drop; and every seventh for the rest.
      const requests = (yield* model.requests).map((seen) => seen.request.messages)
      const checked = new Set([...log.compactions.map((c) => c.step - 1), ...requests.map((_, s) => s).filter((s) => s % 7 === 0), requests.length - 1])
      let largest = 0
      for (const s of checked) largest = Math.max(largest, count(requests[s]!))
      assert.isAtMost(largest, 32_000 - 4_000)
      assert.isAbove(largest, 20_000, "the window is used, not left empty")
    }), { timeout: 180_000 })
})
