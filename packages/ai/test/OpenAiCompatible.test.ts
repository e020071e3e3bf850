import type * as HttpClient from "@effect/platform/HttpClient"
import * as NodeHttpClient from "@effect/platform-node/NodeHttpClient"
import { assert, describe, it } from "@effect/vitest"
import * as ConfigProvider from "effect/ConfigProvider"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Fiber from "effect/Fiber"
import * as Layer from "effect/Layer"
import * as Redacted from "effect/Redacted"
import * as TestClock from "effect/TestClock"
import * as Message from "@polyloop/core/Message"
import type { ModelRequest, ToolDefinition } from "@polyloop/core/ModelClient"
import * as OpenAiCompatible from "@polyloop/ai/OpenAiCompatible"
import * as FakeServer from "./FakeServer.js"
import { assertNothingLeaks, clientOf, modelError } from "./helpers.js"

const apiKey = "sk-test-5f3c9a1e-DO-NOT-LEAK"
const bodyMarker = "BODY-CONTENT-MARKER"
/** A number in a body, long enough that it cannot appear by chance in a message (a port has 5 digits). */
const numberMarker = 918_273_645_546_372

const readFile: ToolDefinition = {
  name: "read_file",
  description: "Reads a file",
  parameters: {
    type: "object",
    properties: { path: { type: "string" } },
    required: ["path"],
    additionalProperties: false
  }
}

const request = (messages: ModelRequest["messages"], extra: Partial<ModelRequest> = {}): ModelRequest => ({
  messages,
  tools: [],
  settings: {},
  ...extra
})

const task = [Message.System.make({ text: "You are terse." }), Message.User.make({ text: "Read a.txt" })]

const completion = (message: Record<string, unknown>, finishReason: string, usage?: { prompt: number; completion: number }) => ({
  id: "chatcmpl-1",
  object: "chat.completion",
  created: 1_700_000_000,
  model: "fake-model",
  choices: [{ index: 0, message: { role: "assistant", ...message }, finish_reason: finishReason }],
  ...(usage === undefined
    ? {}
    : { usage: { prompt_tokens: usage.prompt, completion_tokens: usage.completion, total_tokens: usage.prompt + usage.completion } })
})

const clientFor = (
  server: { readonly baseUrl: string },
  options: Partial<OpenAiCompatible.Options> = {},
  http: Layer.Layer<HttpClient.HttpClient> = NodeHttpClient.layerUndici
) =>
  clientOf(
    OpenAiCompatible.layer({ model: "fake-model", baseUrl: server.baseUrl, apiKey: Redacted.make(apiKey), ...options }).pipe(
      Layer.provide(http)
    )
  )

describe("OpenAiCompatible", () => {
  it.scoped("sends the history, settings and Bearer key to /chat/completions and reads text, usage and finish reason", () =>
    Effect.gen(function*() {
      const server = yield* FakeServer.make
      const client = yield* clientFor(server)
      yield* server.reply(FakeServer.json(completion({ content: "Hello." }, "stop", { prompt: 21, completion: 3 })))

      const reply = yield* client.generate(request(task, {
        settings: { temperature: 0, topP: 0.5, maxOutputTokens: 64, seed: 7, stop: ["END"], extra: { parallel_tool_calls: false } }
      }))

      assert.deepStrictEqual(reply, {
        text: "Hello.",
        toolCalls: [],
        usage: { inputTokens: 21, outputTokens: 3 },
        finishReason: "stop"
      })
      const received = yield* server.next
      assert.strictEqual(received.method, "POST")
      assert.strictEqual(received.path, "/v1/chat/completions")
      assert.strictEqual(received.headers.authorization, `Bearer ${apiKey}`)
      assert.include(String(received.headers.accept), "application/json")
      assert.deepStrictEqual(received.body, {
        model: "fake-model",
        messages: [{ role: "system", content: "You are terse." }, { role: "user", content: "Read a.txt" }],
        temperature: 0,
        top_p: 0.5,
        max_tokens: 64,
        seed: 7,
        stop: ["END"],
        parallel_tool_calls: false
      })
    }))

  it.scoped("round-trips native tool calls: ids and raw arguments out, results back under their tool_call_id", () =>
    Effect.gen(function*() {
      const server = yield* FakeServer.make
      const client = yield* clientFor(server)
      const args1 = "{\"path\":\"a.txt\"}"
      const args2 = "{\"path\": \"b.txt\" }"
      yield* server.reply(
        FakeServer.json(completion({
          content: null,
          tool_calls: [
            { id: "call_abc", type: "function", function: { name: "read_file", arguments: args1 } },
            { id: "call_def", type: "function", function: { name: "read_file", arguments: args2 } }
          ]
        }, "tool_calls", { prompt: 40, completion: 12 })),
        FakeServer.json(completion({ content: "a says hi, b says bye" }, "stop", { prompt: 70, completion: 8 }))
      )

      const first = yield* client.generate(request(task, { tools: [readFile] }))
      assert.deepStrictEqual(first, {
        text: "",
        toolCalls: [
          { id: "call_abc", name: "read_file", argumentsText: args1 },
          { id: "call_def", name: "read_file", argumentsText: args2 }
        ],
        usage: { inputTokens: 40, outputTokens: 12 },
        finishReason: "tool-calls",
        rawFinishReason: "tool_calls"
      })

      const history = [
        ...task,
        Message.Assistant.make({ text: first.text, toolCalls: first.toolCalls }),
        Message.Tool.make({ callId: "call_abc", name: "read_file", text: "hi" }),
        Message.Tool.make({ callId: "call_def", name: "read_file", text: "bye" })
      ]
      const second = yield* client.generate(request(history, { tools: [readFile] }))
      assert.strictEqual(second.text, "a says hi, b says bye")
      assert.deepStrictEqual(second.usage, { inputTokens: 70, outputTokens: 8 })

      const [r1, r2] = yield* server.all
      const wireTools = [{ type: "function", function: { name: "read_file", description: "Reads a file", parameters: readFile.parameters } }]
      assert.deepStrictEqual(r1?.body, {
        model: "fake-model",
        messages: [{ role: "system", content: "You are terse." }, { role: "user", content: "Read a.txt" }],
        tools: wireTools
      })
      assert.deepStrictEqual(r2?.body, {
        model: "fake-model",
        messages: [
          { role: "system", content: "You are terse." },
          { role: "user", content: "Read a.txt" },
          {
            role: "assistant",
            content: null,
            tool_calls: [
              { id: "call_abc", type: "function", function: { name: "read_file", arguments: args1 } },
              { id: "call_def", type: "function", function: { name: "read_file", arguments: args2 } }
            ]
          },
          { role: "tool", tool_call_id: "call_abc", content: "hi" },
          { role: "tool", tool_call_id: "call_def", content: "bye" }
        ],
        tools: wireTools
      })
    }))

  it.scoped("keeps arguments that are not JSON verbatim, so the parser can explain them to the model", () =>
    Effect.gen(function*() {
      const server = yield* FakeServer.make
      const client = yield* clientFor(server)
      yield* server.reply(FakeServer.json(completion({
        content: "let me look",
        tool_calls: [{ id: "call_1", type: "function", function: { name: "nope", arguments: "{path: a.txt" } }]
      }, "tool_calls", { prompt: 1, completion: 1 })))
      const reply = yield* client.generate(request(task, { tools: [readFile] }))
      assert.deepStrictEqual(reply.toolCalls, [{ id: "call_1", name: "nope", argumentsText: "{path: a.txt" }])
      assert.strictEqual(reply.text, "let me look")
    }))

  it.scoped("tolerates servers that omit the call id, send arguments as an object, or report no usage", () =>
    Effect.gen(function*() {
      const server = yield* FakeServer.make
      const client = yield* clientFor(server)
      yield* server.reply(FakeServer.json({
        choices: [{
          message: {
            role: "assistant",
            content: "",
            tool_calls: [
              { function: { name: "read_file", arguments: { path: "a.txt" } } },
              { function: { name: "list" } }
            ]
          }
        }]
      }))
      const reply = yield* client.generate(request(task, { tools: [readFile] }))
      assert.deepStrictEqual(reply, {
        text: "",
        toolCalls: [
          // An id-less call gets `call_<index>`, as its documentation says (issue 44, design 0362).
          { id: "call_0", name: "read_file", argumentsText: "{\"path\":\"a.txt\"}" },
          { id: "call_1", name: "list", argumentsText: "{}" }
        ],
        usage: { inputTokens: 0, outputTokens: 0 }
      })
    }))

  it.scoped("the request's model setting wins over the layer's model; no key means no Authorization header", () =>
    Effect.gen(function*() {
      const server = yield* FakeServer.make
      const client = yield* clientOf(
        OpenAiCompatible.layer({ model: "layer-model", baseUrl: `${server.baseUrl}/` }).pipe(Layer.provide(NodeHttpClient.layerUndici))
      )
      yield* server.reply(FakeServer.json(completion({ content: "ok" }, "stop")))
      yield* client.generate(request(task, { settings: { model: "agent-model" } }))
      const received = yield* server.next
      assert.strictEqual(received.path, "/v1/chat/completions")
      assert.strictEqual(received.headers.authorization, undefined)
      assert.deepInclude(received.body, { model: "agent-model" })
    }))

  describe("errors", () => {
    const statusCases: ReadonlyArray<readonly [number, boolean]> = [
      [429, true],
      [500, true],
      [502, true],
      [503, true],
      [400, false],
      [401, false],
      [403, false],
      [404, false],
      [422, false]
    ]
    for (const [status, retryable] of statusCases) {
      it.scoped(`${status} → ModelError{retryable: ${retryable}, status: ${status}}, no key or body in it`, () =>
        Effect.gen(function*() {
          const server = yield* FakeServer.make
          const client = yield* clientFor(server)
          // A hostile body: echoes the key and carries a marker; neither may reach the error.
          yield* server.reply(FakeServer.json({ error: { message: `${bodyMarker} bad key ${apiKey}`, code: "x" } }, status))
          const error = yield* modelError(client.generate(request(task)))
          assert.strictEqual(error.retryable, retryable)
          assert.strictEqual(error.status, status)
          assert.include(error.message, String(status))
          assert.include(error.message, "/v1/chat/completions")
          assertNothingLeaks(error, [apiKey, bodyMarker])
        }))
    }

    it.scoped("connection refused → retryable, naming the endpoint and the code", () =>
      Effect.gen(function*() {
        const port = yield* FakeServer.refusedPort
        const client = yield* clientFor({ baseUrl: `http://127.0.0.1:${port}/v1` })
        const error = yield* modelError(client.generate(request(task)))
        assert.isTrue(error.retryable)
        assert.strictEqual(error.status, undefined)
        assert.include(error.message, `127.0.0.1:${port}`)
        assert.include(error.message, "ECONNREFUSED")
        assertNothingLeaks(error, [apiKey])
      }))

    it.scoped("a 200 body that is not JSON → not retryable, and its content stays out of the message", () =>
      Effect.gen(function*() {
        const server = yield* FakeServer.make
        const client = yield* clientFor(server)
        yield* server.reply(FakeServer.raw(200, `{"choices": [ ${bodyMarker} ${apiKey}`))
        const error = yield* modelError(client.generate(request(task)))
        assert.isFalse(error.retryable)
        assert.include(error.message, "not JSON")
        assertNothingLeaks(error, [apiKey, bodyMarker])
      }))

    it.scoped("a 200 JSON body that is not a chat completion → not retryable, naming where it differs", () =>
      Effect.gen(function*() {
        const server = yield* FakeServer.make
        const client = yield* clientFor(server)
        // The misplaced value is a number with more digits than any port, so finding it in the
        // message can only mean the body leaked (a short one like 42 matches the server's random
        // port in the endpoint the message names, e.g. 127.0.0.1:42017, about one run in 15).
        yield* server.reply(FakeServer.json({ choices: [{ message: { content: numberMarker, note: bodyMarker } }] }))
        const error = yield* modelError(client.generate(request(task)))
        assert.isFalse(error.retryable)
        assert.include(error.message, "not a chat completion")
        assert.include(error.message, "choices.0.message.content")
        assertNothingLeaks(error, [apiKey, bodyMarker, String(numberMarker)])
      }))

    it.scoped("an upstream error reported inside a 200 body is classified by its code (OpenRouter)", () =>
      Effect.gen(function*() {
        const server = yield* FakeServer.make
        const client = yield* clientFor(server)
        yield* server.reply(
          FakeServer.json({ error: { code: 502, message: bodyMarker } }),
          FakeServer.json({ error: { code: 400, message: bodyMarker } })
        )
        const upstream = yield* modelError(client.generate(request(task)))
        assert.isTrue(upstream.retryable)
        assert.strictEqual(upstream.status, 502)
        const rejected = yield* modelError(client.generate(request(task)))
        assert.isFalse(rejected.retryable)
        assert.strictEqual(rejected.status, 400)
        assertNothingLeaks(upstream, [bodyMarker])
      }))

    it.scoped("a body that breaks off mid-answer → retryable, with the status", () =>
      Effect.gen(function*() {
        const server = yield* FakeServer.make
        const client = yield* clientFor(server)
        yield* server.reply(FakeServer.breakBody)
        const error = yield* modelError(client.generate(request(task)))
        assert.isTrue(error.retryable)
        assert.strictEqual(error.status, 200)
        assert.include(error.message, "broke off")
        assertNothingLeaks(error, [apiKey])
      }))

    it.scoped("a server that never answers is cut by the timeout (retryable) and the request is aborted", () =>
      Effect.gen(function*() {
        const server = yield* FakeServer.make
        const client = yield* clientFor(server, { timeout: "30 seconds" })
        yield* server.reply(FakeServer.hang)
        const fiber = yield* Effect.fork(modelError(client.generate(request(task))))
        const received = yield* server.next
        yield* TestClock.adjust("30 seconds")
        const error = yield* Fiber.join(fiber)
        assert.isTrue(error.retryable)
        assert.include(error.message, "within 30s")
        yield* received.abortedByClient
      }))

    it.scoped("a server that stalls in the middle of its body is cut by the timeout too", () =>
      Effect.gen(function*() {
        const server = yield* FakeServer.make
        const client = yield* clientFor(server, { timeout: "10 seconds" })
        yield* server.reply(FakeServer.stallBody)
        const fiber = yield* Effect.fork(modelError(client.generate(request(task))))
        const received = yield* server.next
        yield* TestClock.adjust("10 seconds")
        const error = yield* Fiber.join(fiber)
        assert.isTrue(error.retryable)
        assert.include(error.message, "within 10s")
        yield* received.abortedByClient
      }))
  })

  describe("interruption aborts the HTTP request in flight (the server sees the connection close)", () => {
    const clients = [["undici", NodeHttpClient.layerUndici], ["node:http", NodeHttpClient.layer]] as const
    for (const [name, http] of clients) {
      it.scoped(`while waiting for the answer (${name})`, () =>
        Effect.gen(function*() {
          const server = yield* FakeServer.make
          const client = yield* clientFor(server, {}, http)
          yield* server.reply(FakeServer.hang)
          const fiber = yield* Effect.fork(client.generate(request(task)))
          const received = yield* server.next
          assert.isFalse(yield* Deferred.isDone(received.abortedByClient))
          const exit = yield* Fiber.interrupt(fiber)
          assert.isTrue(Exit.isInterrupted(exit))
          yield* received.abortedByClient
        }))

      it.scoped(`while reading the body (${name})`, () =>
        Effect.gen(function*() {
          const server = yield* FakeServer.make
          const client = yield* clientFor(server, {}, http)
          yield* server.reply(FakeServer.stallBody)
          const fiber = yield* Effect.fork(client.generate(request(task)))
          const received = yield* server.next
          assert.isFalse(yield* Deferred.isDone(received.abortedByClient))
          const exit = yield* Fiber.interrupt(fiber)
          assert.isTrue(Exit.isInterrupted(exit))
          yield* received.abortedByClient
        }))
    }
  })

  describe("layerConfig", () => {
    it.scoped("reads POLYLOOP_MODEL, POLYLOOP_BASE_URL, POLYLOOP_API_KEY and POLYLOOP_TIMEOUT", () =>
      Effect.gen(function*() {
        const server = yield* FakeServer.make
        const provider = ConfigProvider.fromMap(new Map([
          ["POLYLOOP_MODEL", "config-model"],
          ["POLYLOOP_BASE_URL", server.baseUrl],
          ["POLYLOOP_API_KEY", apiKey],
          ["POLYLOOP_TIMEOUT", "5 seconds"]
        ]))
        const client = yield* clientOf(
          OpenAiCompatible.layerConfig().pipe(Layer.provide(NodeHttpClient.layerUndici), Layer.provide(Layer.setConfigProvider(provider)))
        )
        yield* server.reply(FakeServer.json(completion({ content: "ok" }, "stop")), FakeServer.hang)
        yield* client.generate(request(task))
        const first = yield* server.next
        assert.strictEqual(first.headers.authorization, `Bearer ${apiKey}`)
        assert.deepInclude(first.body, { model: "config-model" })

        const fiber = yield* Effect.fork(modelError(client.generate(request(task))))
        yield* server.next
        yield* TestClock.adjust("5 seconds")
        const error = yield* Fiber.join(fiber)
        assert.isTrue(error.retryable)
        assert.include(error.message, "within 5s")
      }))

    it.scoped("defaults to OpenAI's URL and fails with a ConfigError naming POLYLOOP_MODEL when it is missing", () =>
      Effect.gen(function*() {
        const defaults = yield* OpenAiCompatible.config.pipe(
          Effect.withConfigProvider(ConfigProvider.fromMap(new Map([["POLYLOOP_MODEL", "m"]])))
        )
        assert.deepStrictEqual(defaults, {
          model: "m",
          baseUrl: "https://api.openai.com/v1",
          apiKey: undefined,
          apiKeyHeader: undefined,
          query: undefined,
          organization: undefined,
          project: undefined,
          maxTokensParameter: undefined,
          timeout: OpenAiCompatible.defaultTimeout
        })
        const missing = yield* Effect.flip(
          clientOf(
            OpenAiCompatible.layerConfig().pipe(
              Layer.provide(NodeHttpClient.layerUndici),
              Layer.provide(Layer.setConfigProvider(ConfigProvider.fromMap(new Map([["POLYLOOP_API_KEY", apiKey]]))))
            )
          )
        )
        assert.include(String(missing), "POLYLOOP_MODEL")
        assert.notInclude(String(missing), apiKey)
      }))

    it.scoped("the API key is redacted wherever the options are shown", () =>
      Effect.gen(function*() {
        const options = yield* OpenAiCompatible.config.pipe(
          Effect.withConfigProvider(ConfigProvider.fromMap(new Map([["POLYLOOP_MODEL", "m"], ["POLYLOOP_API_KEY", apiKey]])))
        )
        assert.notInclude(String(options.apiKey), apiKey)
        assert.notInclude(JSON.stringify(options), apiKey)
        assert.strictEqual(options.apiKey === undefined ? undefined : Redacted.value(options.apiKey), apiKey)
      }))
  })
})

describe("parallelToolCalls: false (design 0150) over Chat Completions", () => {
  it.scoped("sends parallel_tool_calls: false with tools; nothing without tools, or when parallel calls are taken", () =>
    Effect.gen(function*() {
      const server = yield* FakeServer.make
      const client = yield* clientFor(server)
      yield* server.reply(
        FakeServer.json(completion({ content: "one" }, "stop")),
        FakeServer.json(completion({ content: "two" }, "stop")),
        FakeServer.json(completion({ content: "three" }, "stop"))
      )
      yield* client.generate(request(task, { tools: [readFile], parallelToolCalls: false }))
      yield* client.generate(request(task, { parallelToolCalls: false }))
      yield* client.generate(request(task, { tools: [readFile], parallelToolCalls: true }))
      const [one, two, three] = yield* server.all
      const flag = (body: unknown) => (body as Record<string, unknown> | undefined)?.["parallel_tool_calls"]
      assert.strictEqual(flag(one?.body), false)
      assert.isUndefined(flag(two?.body), "the API refuses parallel_tool_calls without tools")
      assert.isUndefined(flag(three?.body), "the provider's default when parallel calls are taken")
    }))
})
