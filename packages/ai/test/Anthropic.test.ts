/**
 * The Anthropic `ModelClient` (`@effect/ai-anthropic` through `AiModelClient`) against recorded
 * Messages API payloads on the loopback replay server: a full `Agent.run` whose second request
 * pairs the `tool_use` with its `tool_result` (the observation text as it is), cache reads
 * counted as billed input, `overloaded_error` (529) and 429 retryable with their `retry-after`,
 * settings mapped to the Messages API.
 */
import * as NodeHttpClient from "@effect/platform-node/NodeHttpClient"
import { assert, describe, it } from "@effect/vitest"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Redacted from "effect/Redacted"
import * as Schema from "effect/Schema"
import * as Agent from "@polyloop/core/Agent"
import * as AgentDefinition from "@polyloop/core/AgentDefinition"
import * as EventSink from "@polyloop/core/EventSink"
import { runId } from "@polyloop/core/Ids"
import * as NativeToolCallParser from "@polyloop/core/NativeToolCallParser"
import * as RunLogStore from "@polyloop/core/RunLogStore"
import * as Tool from "@polyloop/core/Tool"
import * as ToolRegistry from "@polyloop/core/ToolRegistry"
import * as Anthropic from "@polyloop/ai/Anthropic"
import * as FakeServer from "./FakeServer.js"
import { clientOf, modelError } from "./helpers.js"
import * as Replay from "./Replay.js"

const apiKey = "sk-ant-DO-NOT-LEAK"
const getWeather = Tool.make({
  name: "getWeather",
  description: "The weather of a location",
  parameters: Schema.Struct({ location: Schema.String }),
  handler: ({ location }) => Effect.succeed(`"rainy" in ${location}`)
})
const registry = ToolRegistry.make(getWeather)
const agent = AgentDefinition.make({ name: "forecaster", systemPrompt: "Use getWeather.", budget: { maxSteps: 4 } })

/** The fake server's base URL ends in /v1; Anthropic's root does not. */
const anthropic = (baseUrl: string) =>
  Anthropic.layer({ model: "claude-sonnet-4-5", baseUrl: baseUrl.replace(/\/v1$/, ""), apiKey: Redacted.make(apiKey) }).pipe(
    Layer.provide(NodeHttpClient.layerUndici)
  )

describe("Anthropic over recorded Messages API payloads", () => {
  it.scopedLive("a full run: tool_use, then the tool_result answering it by tool_use_id, then the answer; cache reads billed as input", () =>
    Effect.gen(function*() {
      const server = yield* FakeServer.make
      yield* server.reply(Replay.reply("anthropic-tool-use-weather.json"), Replay.reply("anthropic-cache-read.json"))
      const store = yield* RunLogStore.makeMemory
      const result = yield* Agent.run({ runId: runId("anthropic"), agent, task: "Weather in Tokyo?", tools: registry }).pipe(
        Effect.provide(Layer.mergeAll(
          anthropic(server.baseUrl),
          NativeToolCallParser.layer(),
          ToolRegistry.layerExecutor(registry),
          EventSink.layerNoop,
          Layer.succeed(RunLogStore.RunLogStore, store)
        ))
      )
      assert.strictEqual(result.stopReason._tag, "Completed")
      assert.deepStrictEqual(result.usage, { inputTokens: 822 + 3 + 1111, outputTokens: 33 + 406 })
      const [first, second] = yield* server.all
      assert.strictEqual(first!.headers["x-api-key"], apiKey)
      const messages = (second!.body as { messages: ReadonlyArray<{ role: string; content: ReadonlyArray<Record<string, unknown>> }> }).messages
      assert.deepStrictEqual(messages.slice(1).map((message) => [message.role, message.content.map((block) => block.type)]), [
        ["assistant", ["tool_use"]],
        ["user", ["tool_result"]]
      ])
      const toolUse = messages[1]!.content[0]!
      const toolResult = messages[2]!.content[0]!
      assert.deepStrictEqual([toolUse.id, toolUse.name, toolUse.input], ["toolu_01MhUGx2K4rTe9D6nZxtGURs", "getWeather", { location: "Tokyo" }])
      assert.strictEqual(toolResult.tool_use_id, toolUse.id)
      assert.strictEqual(toolResult.content, "\"rainy\" in Tokyo", "the observation text as it is, not JSON-encoded again")
      const log = yield* store.readLog(runId("anthropic"))
      assert.deepStrictEqual(log.replies.map((r) => [r.reply.finishReason, r.reply.usage.cachedInputTokens]), [
        ["tool-calls", 0],
        ["stop", 1111]
      ])
    }))

  it.scopedLive("overloaded_error (529) and rate_limit_error (429) are retryable, with the retry-after hint and the request id", () =>
    Effect.gen(function*() {
      // Written in the documented shape (docs.anthropic.com, "Errors"): no recorded 529 was found.
      const overloaded = JSON.stringify({ type: "error", error: { type: "overloaded_error", message: "Overloaded" } })
      const rateLimited = JSON.stringify({ type: "error", error: { type: "rate_limit_error", message: "Number of request tokens has exceeded your per-minute rate limit" } })
      const server = yield* FakeServer.make
      yield* server.reply(
        FakeServer.raw(529, overloaded, "application/json", { "request-id": "req_011CSHoEeqs5C35K2UUqR7Fy" }),
        FakeServer.raw(429, rateLimited, "application/json", { "retry-after": "17", "request-id": "req_011CSHoEeqs5C35K2UUqR7Fz" })
      )
      const client = yield* clientOf(anthropic(server.baseUrl))
      const request = { messages: [{ _tag: "User" as const, text: "hi" }], tools: [], settings: {} }
      const first = yield* modelError(client.generate(request))
      assert.isTrue(first.retryable)
      assert.deepStrictEqual([first.status, first.type, first.requestId], [529, "overloaded_error", "req_011CSHoEeqs5C35K2UUqR7Fy"])
      const second = yield* modelError(client.generate(request))
      assert.isTrue(second.retryable)
      assert.deepStrictEqual(second.retryAfter, Duration.seconds(17))
      assert.strictEqual(second.type, "rate_limit_error")
    }))

  it.scopedLive("settings: max_tokens (default 4096 or maxOutputTokens), stop_sequences, temperature; seed refused", () =>
    Effect.gen(function*() {
      const server = yield* FakeServer.make
      yield* server.reply(Replay.reply("anthropic-cache-read.json"), Replay.reply("anthropic-cache-read.json"))
      const client = yield* clientOf(anthropic(server.baseUrl))
      const messages = [{ _tag: "User" as const, text: "hi" }]
      yield* Effect.orDie(client.generate({ messages, tools: [], settings: {} }))
      yield* Effect.orDie(client.generate({ messages, tools: [], settings: { maxOutputTokens: 100, stop: ["END"], temperature: 0 } }))
      const [plain, set] = yield* server.all
      assert.strictEqual((plain!.body as { max_tokens: number }).max_tokens, 4096)
      assert.deepStrictEqual(
        [(set!.body as { max_tokens: number }).max_tokens, (set!.body as { stop_sequences: unknown }).stop_sequences, (set!.body as { temperature: number }).temperature],
        [100, ["END"], 0]
      )
      const refused = yield* modelError(client.generate({ messages, tools: [], settings: { seed: 1 } }))
      assert.isFalse(refused.retryable)
      assert.match(refused.message, /no seed setting/)
    }))
})
