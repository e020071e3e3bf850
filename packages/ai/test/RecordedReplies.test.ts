/**
 * The clients against real recorded payloads (`fixtures/recorded/`, sources in `SOURCES.md`),
 * served byte for byte from the loopback replay server: what each provider's reply becomes
 * (finish reason normalised with the raw word kept, reasoning, refusal, content parts, usage as
 * billed, tool-call ids) and what each provider's error becomes (code, type, param, request id,
 * retry hint, quota not retryable) — design 0140.
 */
import * as NodeHttpClient from "@effect/platform-node/NodeHttpClient"
import { assert, describe, it } from "@effect/vitest"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Redacted from "effect/Redacted"
import type { ModelRequest } from "@polyloop/core/ModelClient"
import * as Anthropic from "@polyloop/ai/Anthropic"
import * as OpenAiCompatible from "@polyloop/ai/OpenAiCompatible"
import * as OpenAiResponses from "@polyloop/ai/OpenAiResponses"
import * as FakeServer from "./FakeServer.js"
import { assertNothingLeaks, clientOf, modelError } from "./helpers.js"
import * as Replay from "./Replay.js"

const apiKey = "sk-recorded-DO-NOT-LEAK"

const request: ModelRequest = {
  messages: [{ _tag: "User", text: "What is the weather in San Francisco?" }],
  tools: [{
    name: "weather",
    description: "The weather of a location",
    parameters: { type: "object", properties: { location: { type: "string" } } }
  }],
  settings: {}
}

/** Serves one recorded file to a client built by `layer` on the server's base URL. */
const replay = <A>(
  file: string,
  layer: (baseUrl: string) => Layer.Layer<import("@polyloop/core/ModelClient").ModelClient, never, import("@effect/platform/HttpClient").HttpClient>,
  use: (client: import("@polyloop/core/ModelClient").ModelClient.Service, server: FakeServer.FakeServer) => Effect.Effect<A, never, never>
) =>
  Effect.gen(function*() {
    const server = yield* FakeServer.make
    yield* server.reply(Replay.reply(file))
    const client = yield* clientOf(layer(server.baseUrl).pipe(Layer.provide(NodeHttpClient.layerUndici)))
    return yield* use(client, server)
  })

const chat = (baseUrl: string) => OpenAiCompatible.layer({ model: "recorded", baseUrl, apiKey: Redacted.make(apiKey) })
const generated = (file: string) => replay(file, chat, (client) => Effect.orDie(client.generate(request)))
const failed = (file: string, layer = chat) => replay(file, layer, (client) => modelError(client.generate(request)))

describe("Chat Completions replies recorded from real providers", () => {
  it.scopedLive("DeepSeek: reasoning_content, reasoning tokens, cache-hit tokens", () =>
    Effect.gen(function*() {
      const reply = yield* generated("deepseek-reasoning.json")
      assert.strictEqual(reply.text, "There are **3** “r”s in **“strawberry”**.")
      assert.match(reply.reasoning ?? "", /^We need answer simple\. Count r in strawberry/)
      assert.deepStrictEqual(reply.usage, { inputTokens: 97, outputTokens: 131, cachedInputTokens: 0, reasoningTokens: 113 })
      assert.strictEqual(reply.finishReason, "stop")
      assert.strictEqual(reply.rawFinishReason, undefined)
    }))

  it.scopedLive("DeepSeek: a tool call with reasoning; finish reason tool_calls normalised, raw kept", () =>
    Effect.gen(function*() {
      const reply = yield* generated("deepseek-tool-call.json")
      assert.deepStrictEqual(reply.toolCalls, [{
        id: "call_00_lCIkdHRa7AKmCG3TlxXz1061",
        name: "weather",
        argumentsText: "{\"location\": \"San Francisco\"}"
      }])
      assert.strictEqual(reply.finishReason, "tool-calls")
      assert.strictEqual(reply.rawFinishReason, "tool_calls")
      assert.strictEqual(reply.reasoning, "The user asks about weather in San Francisco. I'll call the weather tool.")
    }))

  it.scopedLive("Mistral (magistral): content as an array of parts — text and thinking", () =>
    Effect.gen(function*() {
      const reply = yield* generated("mistral-magistral-content-parts.json")
      assert.strictEqual(reply.text, "2 + 2 = 4")
      assert.strictEqual(reply.reasoning, "The user is asking for 2+2. This is basic arithmetic. 2+2=4.")
      assert.deepStrictEqual(reply.usage, { inputTokens: 10, outputTokens: 46 })
    }))

  it.scopedLive("Mistral: a tool call without a type field", () =>
    Effect.gen(function*() {
      const reply = yield* generated("mistral-tool-call.json")
      assert.deepStrictEqual(reply.toolCalls, [{ id: "gSIMJiOkT", name: "weather", argumentsText: "{\"location\": \"San Francisco\"}" }])
      assert.strictEqual(reply.finishReason, "tool-calls")
    }))

  it.scopedLive("Groq: a tool call whose message has no content key", () =>
    Effect.gen(function*() {
      const reply = yield* generated("groq-tool-call.json")
      assert.deepStrictEqual(reply.toolCalls, [{ id: "ax9fskhev", name: "weather", argumentsText: "{}" }])
      assert.strictEqual(reply.text, "")
      assert.deepStrictEqual(reply.usage, { inputTokens: 218, outputTokens: 15 })
    }))

  it.scopedLive("Groq (qwen3): the reasoning field", () =>
    Effect.gen(function*() {
      const reply = yield* generated("groq-qwen3-reasoning.json")
      assert.match(reply.reasoning ?? "", /^Okay, so the user is asking how many times the letter "r" appears/)
      assert.deepStrictEqual(reply.usage, { inputTokens: 17, outputTokens: 649, reasoningTokens: 570 })
    }))

  it.scopedLive("xAI: reasoning tokens billed outside completion_tokens are counted as output (total 506 = 291 + 26 + 189)", () =>
    Effect.gen(function*() {
      const reply = yield* generated("xai-tool-call-reasoning.json")
      assert.deepStrictEqual(reply.usage, { inputTokens: 291, outputTokens: 215, cachedInputTokens: 244, reasoningTokens: 189 })
      assert.strictEqual(reply.usage.inputTokens + reply.usage.outputTokens, 506)
      assert.deepStrictEqual(reply.toolCalls, [{ id: "call_93562515", name: "weather", argumentsText: "{\"location\":\"San Francisco\"}" }])
      assert.strictEqual(reply.refusal, undefined)
    }))

  it.scopedLive("Gemini (OpenAI endpoint): thinking tokens in total_tokens only are counted as reasoning output (109 = 35 + 12 + 62)", () =>
    Effect.gen(function*() {
      const reply = yield* generated("gemini-openai-thinking-usage.json")
      assert.deepStrictEqual(reply.usage, { inputTokens: 35, outputTokens: 74, reasoningTokens: 62 })
      assert.strictEqual(reply.usage.inputTokens + reply.usage.outputTokens, 109)
    }))
})

describe("errors recorded from real providers", () => {
  it.scopedLive("OpenAI: 429 insufficient_quota is not retryable and names its code", () =>
    Effect.gen(function*() {
      const error = yield* failed("openai-insufficient-quota.429.json")
      assert.isFalse(error.retryable)
      assert.strictEqual(error.status, 429)
      assert.strictEqual(error.code, "insufficient_quota")
      assert.strictEqual(error.type, "insufficient_quota")
      assert.match(error.message, /429 Too Many Requests \(insufficient_quota\): the quota or billing limit is reached, not retried/)
      assertNothingLeaks(error, [apiKey, "You exceeded your current quota"])
    }))

  it.scopedLive("OpenAI: max_tokens refused by a reasoning model: code, type and param", () =>
    Effect.gen(function*() {
      const error = yield* failed("openai-chat-max-tokens-unsupported.400.json")
      assert.isFalse(error.retryable)
      assert.deepStrictEqual([error.code, error.type, error.param], ["unsupported_parameter", "invalid_request_error", "max_tokens"])
      assertNothingLeaks(error, [apiKey, "Use 'max_completion_tokens' instead"])
    }))

  it.scopedLive("Groq: an error with type and param and no code", () =>
    Effect.gen(function*() {
      const error = yield* failed("groq-json-mode-with-tools.400.json")
      assert.deepStrictEqual([error.code, error.type, error.param], [undefined, "invalid_request_error", "response_format"])
      assert.match(error.message, /400 Bad Request \(invalid_request_error\)$/)
    }))

  it.scopedLive("OpenAI Responses: 400 with param temperature and code null", () =>
    Effect.gen(function*() {
      const responses = (baseUrl: string) => OpenAiResponses.layer({ model: "recorded", baseUrl, apiKey: Redacted.make(apiKey) })
      const error = yield* failed("openai-responses-temperature-unsupported.400.json", responses)
      assert.isFalse(error.retryable)
      assert.deepStrictEqual([error.code, error.type, error.param], [undefined, "invalid_request_error", "temperature"])
      assertNothingLeaks(error, [apiKey, "is not supported with this model"])
    }))

  it.scopedLive("Anthropic: a tool_result without its tool_use: type and the body's request_id", () =>
    Effect.gen(function*() {
      const anthropic = (baseUrl: string) => Anthropic.layer({ model: "claude-sonnet-4-5", baseUrl, apiKey: Redacted.make(apiKey) })
      const error = yield* failed("anthropic-unpaired-tool-result.400.json", anthropic)
      assert.isFalse(error.retryable)
      assert.strictEqual(error.type, "invalid_request_error")
      assert.strictEqual(error.requestId, "req_011Cd65WVh8Zrvno3NunpJ73")
      assertNothingLeaks(error, [apiKey, "unexpected `tool_use_id`"])
    }))
})

describe("OpenAI Responses and Anthropic replies recorded from real providers", () => {
  it.scopedLive("OpenAI Responses (o3): a function_call after a reasoning item", () =>
    Effect.gen(function*() {
      const responses = (baseUrl: string) => OpenAiResponses.layer({ model: "o3", baseUrl, apiKey: Redacted.make(apiKey) })
      const tools = [{ name: "semantic_scholar_search", description: "Search", parameters: { type: "object" } }]
      const reply = yield* replay("openai-responses-function-call.json", responses, (client) =>
        Effect.orDie(client.generate({ ...request, tools })))
      assert.deepStrictEqual(reply.toolCalls.map((call) => [call.id, call.name, JSON.parse(call.argumentsText)]), [[
        "call_2mhz5FtwkZnzXQkTOMtYZpZH",
        "semantic_scholar_search",
        { query: "machine learning", limit: 10, offset: 0, year: 0 }
      ]])
      assert.strictEqual(reply.finishReason, "tool-calls")
      assert.deepStrictEqual(reply.usage, { inputTokens: 114, outputTokens: 88, cachedInputTokens: 0, reasoningTokens: 0 })
    }))

  // The fake server's base URL ends in /v1; Anthropic's root does not.
  const anthropic = (baseUrl: string) =>
    Anthropic.layer({ model: "claude-3-opus-20240229", baseUrl: baseUrl.replace(/\/v1$/, ""), apiKey: Redacted.make(apiKey) })

  it.scopedLive("Anthropic: text and a tool_use; stop_reason tool_use → tool-calls; x-api-key sent, never leaked", () =>
    Effect.gen(function*() {
      const tools = [{ name: "updateIssueList", description: "Updates the issue list", parameters: { type: "object" } }]
      const [reply, received] = yield* replay("anthropic-tool-use-no-args.json", anthropic, (client, server) =>
        Effect.zip(Effect.orDie(client.generate({ ...request, tools })), server.next))
      assert.match(reply.text, /Okay, I will update the current issue list:$/)
      assert.deepStrictEqual(reply.toolCalls, [{ id: "toolu_01LRmxn9vGM1d2DZSDBowdZ1", name: "updateIssueList", argumentsText: "{}" }])
      assert.strictEqual(reply.finishReason, "tool-calls")
      assert.deepStrictEqual(reply.usage, { inputTokens: 602, outputTokens: 93, cachedInputTokens: 0 })
      assert.match(received.path, /^\/v1\/messages(\?|$)/)
      assert.strictEqual(received.headers["x-api-key"], apiKey)
    }))

  it.scopedLive("Anthropic: a thinking block is the reply's reasoning", () =>
    Effect.gen(function*() {
      const tools = [{ name: "checkSandboxErrors", description: "Checks", parameters: { type: "object" } }]
      const reply = yield* replay("anthropic-thinking-tool-use.json", anthropic, (client) =>
        Effect.orDie(client.generate({ ...request, tools })))
      assert.strictEqual(reply.reasoning, "The user wants me to call checkSandboxErrors immediately.")
      assert.deepStrictEqual(reply.toolCalls.map((call) => call.name), ["checkSandboxErrors"])
    }))
})

describe("retry hints", () => {
  it("retry-after seconds and HTTP date, retry-after-ms, x-ratelimit-reset-* durations", async () => {
    const Errors = await import("../src/internal/errors.js")
    const now = Date.parse("Tue, 01 Dec 2026 13:00:00 GMT")
    assert.strictEqual(Errors.retryAfterMillis({ "retry-after": "2" }, now), 2000)
    assert.strictEqual(Errors.retryAfterMillis({ "retry-after": "Tue, 01 Dec 2026 13:01:00 GMT" }, now), 60_000)
    assert.strictEqual(Errors.retryAfterMillis({ "retry-after-ms": "1500", "retry-after": "2" }, now), 1500)
    assert.strictEqual(Errors.retryAfterMillis({ "x-ratelimit-reset-requests": "6m0s", "x-ratelimit-reset-tokens": "20ms" }, now), 360_000)
    assert.strictEqual(
      Errors.retryAfterMillis({
        "x-ratelimit-reset-requests": "2m59.56s",
        "x-ratelimit-remaining-requests": "14",
        "x-ratelimit-reset-tokens": "7.66s",
        "x-ratelimit-remaining-tokens": "0"
      }, now),
      7660
    )
    assert.strictEqual(Errors.retryAfterMillis({}, now), undefined)
    assert.strictEqual(Errors.retryAfterMillis({ "retry-after": "soon" }, now), undefined)
    assert.strictEqual(Errors.parseResetDuration("1h2m3.5s"), 3_723_500)
  })

  it.scopedLive("a 429's retry-after and x-request-id reach the ModelError", () =>
    Effect.gen(function*() {
      const server = yield* FakeServer.make
      yield* server.reply(
        FakeServer.raw(429, Replay.text("openai-rate-limit.429.json"), "application/json", {
          "retry-after": "2",
          "x-request-id": "req_abc123"
        })
      )
      const client = yield* clientOf(chat(server.baseUrl).pipe(Layer.provide(NodeHttpClient.layerUndici)))
      const error = yield* modelError(client.generate(request))
      assert.isTrue(error.retryable)
      assert.deepStrictEqual(error.retryAfter, Duration.seconds(2))
      assert.strictEqual(error.requestId, "req_abc123")
      assert.strictEqual(error.code, "rate_limit_exceeded")
    }))
})

describe("every recorded Chat Completions payload", () => {
  /** What each recorded reply must become: [text or its start, finish reason, raw word, usage]. */
  const replies: ReadonlyArray<readonly [string, RegExp, string, string | undefined, { readonly inputTokens: number; readonly outputTokens: number }]> = [
    ["openai-chat-text.json", /^\*\*Holiday Name:\*\* Galaxy Day/, "stop", undefined, { inputTokens: 16, outputTokens: 363 }],
    ["deepseek-text.json", /^Introducing "Lumina Tide,"/, "stop", undefined, { inputTokens: 22, outputTokens: 93 }],
    ["deepseek-length.json", /^sanitized$/, "length", undefined, { inputTokens: 88, outputTokens: 4 }],
    ["groq-qwen-truncated-length.json", /Let's treat 19 as \$20$/, "length", undefined, { inputTokens: 29, outputTokens: 64 }],
    ["groq-qwen-reasoning-truncated.json", /^$/, "length", undefined, { inputTokens: 27, outputTokens: 64 }],
    ["mistral-small-thinking-parts.json", /^391$/, "stop", undefined, { inputTokens: 28, outputTokens: 94 }],
    ["mistral-large-4-thinking-parts.json", /^3$/, "stop", undefined, { inputTokens: 26, outputTokens: 112 }],
    ["moonshot-kimi-k3-usage.json", /^OK$/, "stop", undefined, { inputTokens: 90, outputTokens: 34 }],
    ["moonshot-kimi-k3-reasoning.json", /^323$/, "stop", undefined, { inputTokens: 101, outputTokens: 32 }],
    ["cerebras-glm-reasoning-tool-call.json", /^$/, "tool-calls", "tool_calls", { inputTokens: 322, outputTokens: 65 }],
    ["xai-grok-text-reasoning.json", /^Grok$/, "stop", undefined, { inputTokens: 12, outputTokens: 322 }]
  ]
  for (const [file, text, finishReason, rawFinishReason, usage] of replies) {
    it.scopedLive(`${file}: text, finish reason, billed usage`, () =>
      Effect.gen(function*() {
        const reply = yield* generated(file)
        assert.match(reply.text, text)
        assert.strictEqual(reply.finishReason, finishReason)
        assert.strictEqual(reply.rawFinishReason, rawFinishReason)
        assert.deepStrictEqual({ inputTokens: reply.usage.inputTokens, outputTokens: reply.usage.outputTokens }, usage)
      }))
  }

  it.scopedLive("reasoning from reasoning_content, reasoning and thinking parts; cached tokens from either place", () =>
    Effect.gen(function*() {
      assert.match((yield* generated("mistral-small-thinking-parts.json")).reasoning ?? "", /^Okay, the user is asking for the product of 17 and 23/)
      assert.strictEqual((yield* generated("moonshot-kimi-k3-reasoning.json")).reasoning, "17*19=323. Need final only number. Ensure no extra text.")
      assert.match((yield* generated("cerebras-glm-reasoning-tool-call.json")).reasoning ?? "", /^The user is asking about a "magic number"/)
      assert.match((yield* generated("groq-qwen-reasoning-truncated.json")).reasoning ?? "", /explain the method\/calculation process$/)
      assert.strictEqual((yield* generated("moonshot-kimi-k3-usage.json")).usage.cachedInputTokens, 90)
      assert.strictEqual((yield* generated("cerebras-glm-reasoning-tool-call.json")).usage.cachedInputTokens, 256)
      assert.strictEqual((yield* generated("openai-chat-text.json")).refusal, undefined, "refusal: null is no refusal")
    }))

  it.scopedLive("Moonshot: model not found (404) with a type and no code; Alibaba: invalid_parameter_error with the body's request_id", () =>
    Effect.gen(function*() {
      const notFound = yield* failed("moonshot-model-not-found.404.json")
      assert.isFalse(notFound.retryable)
      assert.deepStrictEqual([notFound.status, notFound.code, notFound.type], [404, undefined, "resource_not_found_error"])
      assertNothingLeaks(notFound, ["issue-19552-invalid-model"])
      const qwen = yield* failed("alibaba-qwen-invalid-tool-arguments.400.json")
      assert.deepStrictEqual([qwen.code, qwen.type, qwen.requestId], ["invalid_parameter_error", "invalid_request_error", "52a2b14b-5d4d-9063-bd5e-9286da4efbab"])
      assertNothingLeaks(qwen, ["function.arguments"])
    }))
})
