/**
 * Full runs and client options against recorded payloads (design 0140): an `Agent.run` that
 * meets a 429 with `retry-after` waits for it on `TestClock` (or fails at once when the hint is
 * beyond `modelRetry.maxDelay`); a multi-turn run on the SQLite store whose every request is
 * valid against the Chat Completions request shape; the Responses client's
 * `function_call_output`; Azure deployment URLs, the `api-key` header, organisation and project
 * headers from `Config`; `max_tokens` vs `max_completion_tokens`; empty tool-call ids.
 */
import * as NodeHttpClient from "@effect/platform-node/NodeHttpClient"
import { assert, describe, it } from "@effect/vitest"
import * as ConfigProvider from "effect/ConfigProvider"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Fiber from "effect/Fiber"
import * as Layer from "effect/Layer"
import * as Redacted from "effect/Redacted"
import * as Schema from "effect/Schema"
import * as TestClock from "effect/TestClock"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import * as Agent from "@polyloop/core/Agent"
import * as AgentDefinition from "@polyloop/core/AgentDefinition"
import { ModelError } from "@polyloop/core/Errors"
import * as EventSink from "@polyloop/core/EventSink"
import { runId } from "@polyloop/core/Ids"
import * as NativeToolCallParser from "@polyloop/core/NativeToolCallParser"
import * as RunLogStore from "@polyloop/core/RunLogStore"
import * as Tool from "@polyloop/core/Tool"
import * as ToolRegistry from "@polyloop/core/ToolRegistry"
import * as SqlRunLogStore from "@polyloop/sql/SqlRunLogStore"
import * as OpenAiCompatible from "@polyloop/ai/OpenAiCompatible"
import * as OpenAiResponses from "@polyloop/ai/OpenAiResponses"
import * as FakeServer from "./FakeServer.js"
import { clientOf } from "./helpers.js"
import * as Replay from "./Replay.js"

const weather = Tool.make({
  name: "weather",
  description: "The weather of a location",
  parameters: Schema.Struct({ location: Schema.String }),
  handler: ({ location }) => Effect.succeed(`"sunny" in ${location}, 18°C`)
})
const registry = ToolRegistry.make(weather)

const agent = AgentDefinition.make({
  name: "forecaster",
  systemPrompt: "Answer with the weather tool.",
  budget: { maxSteps: 5 }
})

const services = (baseUrl: string, options: Partial<OpenAiCompatible.Options> = {}) =>
  Layer.mergeAll(
    OpenAiCompatible.layer({ model: "deepseek-v4-flash", baseUrl, apiKey: Redacted.make("sk-test"), ...options }).pipe(
      Layer.provide(NodeHttpClient.layerUndici)
    ),
    NativeToolCallParser.layer(),
    ToolRegistry.layerExecutor(registry),
    EventSink.layerNoop
  )

/** Lets the loopback server and the client exchange bytes (real I/O) while the clock stands still. */
const settle = Effect.promise(() => new Promise<void>((resolve) => setTimeout(resolve, 20)))

/** Waits (in real time) until some fiber sleeps on the TestClock. */
const untilSleeping = Effect.gen(function*() {
  for (let i = 0; i < 500; i++) {
    if ((yield* TestClock.sleeps()).length > 0) return
    yield* settle
  }
  return yield* Effect.dieMessage("nobody slept on the TestClock")
})

const rateLimited = (retryAfter: string) =>
  FakeServer.raw(429, Replay.text("openai-rate-limit.429.json"), "application/json", {
    "retry-after": retryAfter,
    "x-request-id": "req_rate_1"
  })

describe("Agent.run and the provider's Retry-After", () => {
  it.scoped("a 429 with retry-after: 2 waits at least 2 s (TestClock), then the run succeeds", () =>
    Effect.gen(function*() {
      const server = yield* FakeServer.make
      yield* server.reply(rateLimited("2"), Replay.reply("deepseek-reasoning.json"))
      const store = yield* RunLogStore.makeMemory
      const fiber = yield* Agent.run({ runId: runId("retry-2"), agent, task: "Count the r's", tools: registry }).pipe(
        Effect.provide(Layer.merge(services(server.baseUrl), Layer.succeed(RunLogStore.RunLogStore, store))),
        Effect.fork
      )
      yield* untilSleeping
      const now = yield* TestClock.currentTimeMillis
      const [wakeAt] = yield* TestClock.sleeps()
      assert.isAtLeast(Number(wakeAt) - now, 2000, "the retry waits at least the provider's 2 s")
      yield* TestClock.adjust("1999 millis")
      yield* settle
      assert.strictEqual((yield* server.all).length, 1, "no retry before the hint")
      yield* TestClock.adjust(Duration.millis(Number(wakeAt) - now))
      const result = yield* Fiber.join(fiber)
      assert.strictEqual((yield* server.all).length, 2)
      assert.deepStrictEqual(result.stopReason, { _tag: "Completed", by: "Answer", answer: "There are **3** “r”s in **“strawberry”**." })
    }))

  it.scoped("a 429 with retry-after: 3600 fails at once, typed, saying why", () =>
    Effect.gen(function*() {
      const server = yield* FakeServer.make
      yield* server.reply(rateLimited("3600"), Replay.reply("deepseek-reasoning.json"))
      const store = yield* RunLogStore.makeMemory
      const error = yield* Agent.run({ runId: runId("retry-3600"), agent, task: "Count", tools: registry }).pipe(
        Effect.provide(Layer.merge(services(server.baseUrl), Layer.succeed(RunLogStore.RunLogStore, store))),
        Effect.flip
      )
      assert.instanceOf(error, ModelError)
      if (!(error instanceof ModelError)) return
      assert.strictEqual((yield* server.all).length, 1)
      assert.strictEqual(yield* TestClock.currentTimeMillis, 0, "no time waited")
      assert.deepStrictEqual(error.retryAfter, Duration.hours(1))
      assert.strictEqual(error.requestId, "req_rate_1")
      assert.strictEqual(error.code, "rate_limit_exceeded")
      assert.match(error.message, /asked to retry after 1h, longer than modelRetry\.maxDelay \(10s\): not retried/)
    }))
})

// --- The Chat Completions request shape (OpenAI's API reference), checked on every request -------

const WireToolCall = Schema.Struct({
  id: Schema.String.pipe(Schema.minLength(1)),
  type: Schema.Literal("function"),
  function: Schema.Struct({ name: Schema.String, arguments: Schema.String })
})
const ChatRequest = Schema.Struct({
  model: Schema.String,
  messages: Schema.NonEmptyArray(Schema.Union(
    Schema.Struct({ role: Schema.Literal("system", "user"), content: Schema.String }),
    Schema.Struct({
      role: Schema.Literal("assistant"),
      content: Schema.NullOr(Schema.String),
      tool_calls: Schema.optional(Schema.NonEmptyArray(WireToolCall))
    }),
    Schema.Struct({ role: Schema.Literal("tool"), tool_call_id: Schema.String, content: Schema.String })
  )),
  tools: Schema.optional(Schema.Array(Schema.Struct({
    type: Schema.Literal("function"),
    function: Schema.Struct({
      name: Schema.String.pipe(Schema.pattern(/^[a-zA-Z0-9_-]{1,64}$/)),
      description: Schema.String,
      parameters: Schema.Struct({ type: Schema.Literal("object") }, Schema.Record({ key: Schema.String, value: Schema.Unknown }))
    })
  }))),
  max_tokens: Schema.optional(Schema.Int),
  max_completion_tokens: Schema.optional(Schema.Int)
})
const decodeChatRequest = Schema.decodeUnknownEither(ChatRequest, { onExcessProperty: "error" })

/** Problems of a request beyond its shape: every tool message answers a call of the assistant message before it. */
const pairingProblems = (request: typeof ChatRequest.Type): ReadonlyArray<string> => {
  const problems: Array<string> = []
  let open = new Set<string>()
  for (const message of request.messages) {
    if (message.role === "assistant") open = new Set((message.tool_calls ?? []).map((call) => call.id))
    else if (message.role === "tool") {
      if (!open.delete(message.tool_call_id)) problems.push(`tool message for unknown call ${message.tool_call_id}`)
    } else if (open.size > 0) problems.push(`calls left unanswered: ${[...open].join(", ")}`)
  }
  return problems
}

describe("a multi-turn run on the SQLite store over recorded replies", () => {
  it.scopedLive("tool call → observation → answer; every request has the Chat Completions shape; the log keeps reasoning", () =>
    Effect.gen(function*() {
      const server = yield* FakeServer.make
      yield* server.reply(Replay.reply("deepseek-tool-call.json"), Replay.reply("deepseek-reasoning.json"))
      const directory = fs.mkdtempSync(path.join(os.tmpdir(), "polyloop-recorded-"))
      yield* Effect.addFinalizer(() => Effect.sync(() => fs.rmSync(directory, { recursive: true, force: true })))
      const filename = path.join(directory, "runs.db")
      const store = SqlRunLogStore.layerSqlite({ filename })
      const id = runId("recorded-multi-turn")
      const result = yield* Agent.run({ runId: id, agent: { ...agent, modelSettings: { maxOutputTokens: 256 } }, task: "Weather in SF?", tools: registry }).pipe(
        Effect.provide(Layer.merge(services(server.baseUrl), store))
      )
      assert.deepStrictEqual(result.stopReason, { _tag: "Completed", by: "Answer", answer: "There are **3** “r”s in **“strawberry”**." })
      assert.deepStrictEqual(result.usage, { inputTokens: 374 + 97, outputTokens: 60 + 131 })

      const requests = yield* server.all
      assert.strictEqual(requests.length, 2)
      for (const received of requests) {
        const decoded = decodeChatRequest(received.body)
        assert.isTrue(Either.isRight(decoded), Either.isLeft(decoded) ? String(decoded.left) : "")
        if (Either.isRight(decoded)) assert.deepStrictEqual(pairingProblems(decoded.right), [])
        assert.deepStrictEqual((received.body as { max_tokens?: number }).max_tokens, 256, "not the official endpoint: max_tokens")
      }
      const second = requests[1]!.body as { messages: ReadonlyArray<Record<string, unknown>> }
      assert.deepStrictEqual(second.messages.slice(2), [
        {
          role: "assistant",
          content: null,
          tool_calls: [{
            id: "call_00_lCIkdHRa7AKmCG3TlxXz1061",
            type: "function",
            function: { name: "weather", arguments: "{\"location\": \"San Francisco\"}" }
          }]
        },
        { role: "tool", tool_call_id: "call_00_lCIkdHRa7AKmCG3TlxXz1061", content: "\"sunny\" in San Francisco, 18°C" }
      ])

      const log = yield* Effect.flatMap(RunLogStore.RunLogStore, (s) => s.readLog(id)).pipe(Effect.provide(store))
      assert.deepStrictEqual(log.replies.map((r) => [r.reply.finishReason, r.reply.rawFinishReason, r.reply.usage.reasoningTokens]), [
        ["tool-calls", "tool_calls", 16],
        ["stop", undefined, 113]
      ])
      assert.strictEqual(log.replies[0]!.reply.reasoning, "The user asks about weather in San Francisco. I'll call the weather tool.")
    }))
})

describe("client options", () => {
  it.scopedLive("OpenAiResponses sends a tool's result in function_call_output as the text itself, not JSON-encoded again", () =>
    Effect.gen(function*() {
      const server = yield* FakeServer.make
      yield* server.reply(Replay.reply("openai-responses-function-call.json"))
      const client = yield* clientOf(
        OpenAiResponses.layer({ model: "o3", baseUrl: server.baseUrl, apiKey: Redacted.make("sk-test") }).pipe(
          Layer.provide(NodeHttpClient.layerUndici)
        )
      )
      yield* Effect.ignore(client.generate({
        messages: [
          { _tag: "User", text: "find papers" },
          { _tag: "Assistant", text: "", toolCalls: [{ id: "call_1", name: "search", argumentsText: "{\"q\":\"ml\"}" }] },
          { _tag: "Tool", callId: "call_1", name: "search", text: "sunny" }
        ],
        tools: [{ name: "search", description: "Search", parameters: { type: "object" } }],
        settings: {}
      }))
      const received = yield* server.next
      const input = (received.body as { input: ReadonlyArray<{ type?: string; output?: unknown }> }).input
      assert.deepStrictEqual(input.filter((item) => item.type === "function_call_output").map((item) => item.output), ["sunny"])
      assert.deepStrictEqual(OpenAiResponses.unwrapToolOutputs({ input: [{ type: "function_call_output", output: "\"\\\"quoted\\\"\"" }] }), {
        input: [{ type: "function_call_output", output: "\"quoted\"" }]
      })
    }))

  it.scopedLive("Azure from Config: deployment URL with api-version after /chat/completions, api-key header, organisation and project", () =>
    Effect.gen(function*() {
      const server = yield* FakeServer.make
      yield* server.reply(Replay.reply("mistral-tool-call.json"))
      const provider = ConfigProvider.fromMap(new Map([
        ["POLYLOOP_MODEL", "gpt-4o"],
        ["POLYLOOP_BASE_URL", `${server.baseUrl}/openai/deployments/gpt-4o`],
        ["POLYLOOP_API_KEY", "azure-key-DO-NOT-LEAK"],
        ["POLYLOOP_API_KEY_HEADER", "api-key"],
        ["POLYLOOP_API_VERSION", "2024-10-21"],
        ["POLYLOOP_ORGANIZATION", "org-123"],
        ["POLYLOOP_PROJECT", "proj_456"]
      ]))
      const client = yield* clientOf(
        OpenAiCompatible.layerConfig().pipe(Layer.provide(NodeHttpClient.layerUndici), Layer.provide(Layer.setConfigProvider(provider)))
      )
      yield* Effect.orDie(client.generate({ messages: [{ _tag: "User", text: "hi" }], tools: [], settings: { maxOutputTokens: 50 } }))
      const received = yield* server.next
      assert.strictEqual(received.path, "/v1/openai/deployments/gpt-4o/chat/completions?api-version=2024-10-21")
      assert.strictEqual(received.headers["api-key"], "azure-key-DO-NOT-LEAK")
      assert.strictEqual(received.headers.authorization, undefined)
      assert.strictEqual(received.headers["openai-organization"], "org-123")
      assert.strictEqual(received.headers["openai-project"], "proj_456")
      assert.strictEqual((received.body as { max_tokens?: number }).max_tokens, 50)
    }))

  it("a base URL that already carries ?api-version keeps it after /chat/completions", () => {
    assert.strictEqual(
      OpenAiCompatible.endpointUrl("https://res.openai.azure.com/openai/deployments/d?api-version=2024-02-01"),
      "https://res.openai.azure.com/openai/deployments/d/chat/completions?api-version=2024-02-01"
    )
    assert.strictEqual(OpenAiCompatible.endpointUrl("http://localhost:11434/v1/"), "http://localhost:11434/v1/chat/completions")
  })

  it("max_completion_tokens is the default for OpenAI's and Azure's endpoints, max_tokens elsewhere; an option overrides", () => {
    const request = { messages: [], tools: [], settings: { maxOutputTokens: 100 } }
    assert.strictEqual(OpenAiCompatible.defaultMaxTokensParameter("https://api.openai.com/v1"), "max_completion_tokens")
    assert.strictEqual(OpenAiCompatible.defaultMaxTokensParameter("https://x.openai.azure.com/openai/deployments/d"), "max_completion_tokens")
    assert.strictEqual(OpenAiCompatible.defaultMaxTokensParameter("https://api.groq.com/openai/v1"), "max_tokens")
    assert.deepStrictEqual(OpenAiCompatible.toRequestBody(request, "m", "max_completion_tokens").max_completion_tokens, 100)
    assert.isUndefined(OpenAiCompatible.toRequestBody(request, "m", "max_completion_tokens").max_tokens)
  })

  it("an empty tool-call id reads as a missing one: both get call_<index>, so the call pairs with its result (Gemini's OpenAI endpoint sends \"\"; issue 44, design 0362)", () => {
    // The recorded Groq tool call, its id emptied as Gemini's endpoint sends it (no recorded
    // Gemini reply with an empty id was found; see design 0362), then missing, then null.
    const recorded = Replay.json("groq-tool-call.json") as { choices: Array<{ message: { tool_calls: Array<Record<string, unknown>> } }> }
    const call = recorded.choices[0]!.message.tool_calls[0]!
    const second = { ...call, id: "" }
    for (const id of ["", undefined, null]) {
      const { id: _, ...rest } = call
      recorded.choices[0]!.message.tool_calls = [id === undefined ? rest : { ...rest, id }, second]
      const parsed = OpenAiCompatible.parseCompletion(JSON.stringify(recorded), "endpoint")
      assert.deepStrictEqual(Either.getOrThrow(parsed).toolCalls.map((c) => c.id), ["call_0", "call_1"], String(id))
    }
  })
})

describe("a reply truncated at the output limit (recorded, Groq qwen3)", () => {
  it.scopedLive("is not the run's answer: InvalidDecision with the truncated text, then the model answers again", () =>
    Effect.gen(function*() {
      const server = yield* FakeServer.make
      yield* server.reply(Replay.reply("groq-qwen-truncated-length.json"), Replay.reply("deepseek-reasoning.json"))
      const store = yield* RunLogStore.makeMemory
      const id = runId("truncated")
      const result = yield* Agent.run({ runId: id, agent, task: "What is 17 times 19?", tools: registry }).pipe(
        Effect.provide(Layer.merge(services(server.baseUrl), Layer.succeed(RunLogStore.RunLogStore, store)))
      )
      assert.deepStrictEqual(result.stopReason, { _tag: "Completed", by: "Answer", answer: "There are **3** “r”s in **“strawberry”**." })
      assert.strictEqual(result.steps, 2)
      const log = yield* store.readLog(id)
      assert.strictEqual(log.steps[0]!.decision._tag, "InvalidDecision")
      const second = (yield* server.all)[1]!.body as { messages: ReadonlyArray<{ role: string; content: string | null }> }
      assert.match(second.messages.at(-1)?.content ?? "", /cut off at the output token limit/)
    }))
})

describe("refusals are kept and surfaced, not an empty reply", () => {
  const refusalText = "I'm sorry, but I can't help with that request."

  it("Chat Completions message.refusal: the reply's refusal, and its text when there is no other", () => {
    // The recorded OpenAI reply, its content replaced by a refusal as the API sends one.
    const recorded = Replay.json("openai-chat-text.json") as { choices: Array<{ message: Record<string, unknown> }> }
    recorded.choices[0]!.message = { role: "assistant", content: null, refusal: refusalText, annotations: [] }
    const reply = Either.getOrThrow(OpenAiCompatible.parseCompletion(JSON.stringify(recorded), "endpoint"))
    assert.strictEqual(reply.refusal, refusalText)
    assert.strictEqual(reply.text, refusalText)
  })

  it.scopedLive("Responses API refusal part: the reply's refusal and text (a run ends with it, not with a no-action nudge)", () =>
    Effect.gen(function*() {
      // The recorded Responses reply, its output replaced by a message whose content is a refusal part.
      const recorded = Replay.json("openai-responses-function-call.json") as Record<string, unknown>
      const body = {
        ...recorded,
        tool_choice: "auto",
        output: [{ id: "msg_1", type: "message", role: "assistant", status: "completed", content: [{ type: "refusal", refusal: refusalText }] }]
      }
      const server = yield* FakeServer.make
      yield* server.reply(FakeServer.json(body))
      const client = yield* clientOf(
        OpenAiResponses.layer({ model: "o3", baseUrl: server.baseUrl, apiKey: Redacted.make("sk-test") }).pipe(Layer.provide(NodeHttpClient.layerUndici))
      )
      const reply = yield* Effect.orDie(client.generate({ messages: [{ _tag: "User", text: "do the bad thing" }], tools: [], settings: {} }))
      assert.strictEqual(reply.refusal, refusalText)
      assert.strictEqual(reply.text, refusalText)
    }))
})

describe("the maxTokens budget counts what the provider bills", () => {
  it.scopedLive("xAI's reasoning tokens (billed outside completion_tokens) exhaust a 500-token budget after one step (506 billed)", () =>
    Effect.gen(function*() {
      const server = yield* FakeServer.make
      yield* server.reply(Replay.reply("xai-tool-call-reasoning.json"), Replay.reply("deepseek-reasoning.json"))
      const store = yield* RunLogStore.makeMemory
      const budgeted = AgentDefinition.make({ name: "forecaster", systemPrompt: "Use the weather tool.", budget: { maxSteps: 5, maxTokens: 500 } })
      const result = yield* Agent.run({ runId: runId("billed"), agent: budgeted, task: "Weather in SF?", tools: registry }).pipe(
        Effect.provide(Layer.merge(services(server.baseUrl), Layer.succeed(RunLogStore.RunLogStore, store)))
      )
      assert.deepStrictEqual(result.stopReason, { _tag: "BudgetExhausted", budget: "Tokens" })
      assert.strictEqual(result.steps, 1)
      assert.deepStrictEqual(result.usage, { inputTokens: 291, outputTokens: 215 })
      assert.strictEqual((yield* server.all).length, 1)
    }))

  it.scopedLive("Gemini's thinking tokens (in total_tokens only) count in the run's usage and the logged reply: 109 billed", () =>
    Effect.gen(function*() {
      const server = yield* FakeServer.make
      yield* server.reply(Replay.reply("gemini-openai-thinking-usage.json"), Replay.reply("deepseek-reasoning.json"))
      const store = yield* RunLogStore.makeMemory
      const budgeted = AgentDefinition.make({ name: "forecaster", systemPrompt: "Use the weather tool.", budget: { maxSteps: 5, maxTokens: 1000 } })
      const result = yield* Agent.run({ runId: runId("billed-gemini"), agent: budgeted, task: "15% of 240?", tools: registry }).pipe(
        Effect.provide(Layer.merge(services(server.baseUrl), Layer.succeed(RunLogStore.RunLogStore, store)))
      )
      assert.deepStrictEqual(result.usage, { inputTokens: 35, outputTokens: 74 })
      const log = yield* store.readLog(runId("billed-gemini"))
      assert.deepStrictEqual(log.replies[0]?.reply.usage, { inputTokens: 35, outputTokens: 74, reasoningTokens: 62 })
    }))
})
