import * as AiError from "@effect/ai/AiError"
import * as LanguageModel from "@effect/ai/LanguageModel"
import * as Prompt from "@effect/ai/Prompt"
import type * as Response from "@effect/ai/Response"
import type * as HttpClient from "@effect/platform/HttpClient"
import * as NodeHttpClient from "@effect/platform-node/NodeHttpClient"
import { assert, describe, it } from "@effect/vitest"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Fiber from "effect/Fiber"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Redacted from "effect/Redacted"
import * as Schema from "effect/Schema"
import * as TestClock from "effect/TestClock"
import * as Agent from "@polyloop/core/Agent"
import * as AgentDefinition from "@polyloop/core/AgentDefinition"
import * as EventSink from "@polyloop/core/EventSink"
import { runId } from "@polyloop/core/Ids"
import * as Message from "@polyloop/core/Message"
import * as NativeToolCallParser from "@polyloop/core/NativeToolCallParser"
import * as RunLogStore from "@polyloop/core/RunLogStore"
import * as Tool from "@polyloop/core/Tool"
import * as ToolRegistry from "@polyloop/core/ToolRegistry"
import type { ModelRequest, ToolDefinition } from "@polyloop/core/ModelClient"
import * as AiModelClient from "@polyloop/ai/AiModelClient"
import * as OpenAiResponses from "@polyloop/ai/OpenAiResponses"
import * as FakeServer from "./FakeServer.js"
import { assertNothingLeaks, clientOf, modelError } from "./helpers.js"

const apiKey = "sk-test-7b2d-DO-NOT-LEAK"
const bodyMarker = "BODY-CONTENT-MARKER"

const readFile: ToolDefinition = {
  name: "read_file",
  description: "Reads a file",
  parameters: {
    type: "object",
    properties: { path: { type: "string" }, maxBytes: { type: "integer" } },
    required: ["path"]
  }
}

const task = [Message.System.make({ text: "You are terse." }), Message.User.make({ text: "Read a.txt" })]

const request = (messages: ModelRequest["messages"], extra: Partial<ModelRequest> = {}): ModelRequest => ({
  messages,
  tools: [],
  settings: {},
  ...extra
})

/** A minimal OpenAI Responses API answer. */
const responsesAnswer = (output: ReadonlyArray<unknown>, usage = { input: 30, output: 9 }) => ({
  id: "resp_1",
  object: "response",
  created_at: 1_700_000_000,
  status: "completed",
  error: null,
  incomplete_details: null,
  instructions: null,
  model: "fake-model",
  output,
  parallel_tool_calls: true,
  tools: [],
  tool_choice: "auto",
  metadata: null,
  temperature: null,
  top_p: null,
  usage: {
    input_tokens: usage.input,
    input_tokens_details: { cached_tokens: 0 },
    output_tokens: usage.output,
    output_tokens_details: { reasoning_tokens: 0 },
    total_tokens: usage.input + usage.output
  }
})

const textOutput = (text: string) => ({
  type: "message",
  id: "msg_1",
  role: "assistant",
  status: "completed",
  content: [{ type: "output_text", text, annotations: [] }]
})

const functionCall = (callId: string, name: string, args: string) => ({
  type: "function_call",
  id: `fc_${callId}`,
  call_id: callId,
  name,
  arguments: args,
  status: "completed"
})

const openAiClient = (
  server: { readonly baseUrl: string },
  options: Partial<OpenAiResponses.Options> = {},
  http: Layer.Layer<HttpClient.HttpClient> = NodeHttpClient.layerUndici
) =>
  clientOf(
    OpenAiResponses.layer({ model: "fake-model", baseUrl: server.baseUrl, apiKey: Redacted.make(apiKey), ...options }).pipe(
      Layer.provide(http)
    )
  )

/** A field of a JSON body received by the fake server. */
const field = (body: unknown, key: string): unknown =>
  typeof body === "object" && body !== null && key in body ? (body as Record<string, unknown>)[key] : undefined

describe("AiModelClient over @effect/ai-openai (Responses API) against a fake server", () => {
  it.scoped("text, usage and finish reason; settings applied per call; Bearer key sent", () =>
    Effect.gen(function*() {
      const server = yield* FakeServer.make
      const client = yield* openAiClient(server)
      yield* server.reply(FakeServer.json(responsesAnswer([textOutput("Hello.")], { input: 30, output: 9 })))

      const reply = yield* client.generate(request(task, {
        settings: { model: "agent-model", temperature: 0.25, maxOutputTokens: 99, extra: { store: false } }
      }))
      assert.deepStrictEqual(reply, {
        text: "Hello.",
        toolCalls: [],
        usage: { inputTokens: 30, outputTokens: 9, cachedInputTokens: 0, reasoningTokens: 0 },
        finishReason: "stop"
      })

      const received = yield* server.next
      assert.strictEqual(received.path, "/v1/responses")
      assert.strictEqual(received.headers.authorization, `Bearer ${apiKey}`)
      assert.strictEqual(field(received.body, "model"), "agent-model")
      assert.strictEqual(field(received.body, "temperature"), 0.25)
      assert.strictEqual(field(received.body, "max_output_tokens"), 99)
      assert.strictEqual(field(received.body, "store"), false)
      assert.deepStrictEqual(field(received.body, "input"), [
        { role: "system", content: "You are terse." },
        { role: "user", content: [{ type: "input_text", text: "Read a.txt" }] }
      ])
    }))

  it.scoped("round-trips native tool calls: JSON Schema sent verbatim, ids and arguments out, results back by call id", () =>
    Effect.gen(function*() {
      const server = yield* FakeServer.make
      const client = yield* openAiClient(server)
      yield* server.reply(
        FakeServer.json(responsesAnswer([functionCall("call_abc", "read_file", "{\"path\":\"a.txt\",\"maxBytes\":10}")])),
        FakeServer.json(responsesAnswer([textOutput("It says hi.")], { input: 50, output: 4 }))
      )

      const first = yield* client.generate(request(task, { tools: [readFile] }))
      assert.deepStrictEqual(first.toolCalls, [
        { id: "call_abc", name: "read_file", argumentsText: "{\"path\":\"a.txt\",\"maxBytes\":10}" }
      ])
      assert.strictEqual(first.text, "")
      assert.deepStrictEqual(first.usage, { inputTokens: 30, outputTokens: 9, cachedInputTokens: 0, reasoningTokens: 0 })
      assert.strictEqual(first.finishReason, "tool-calls")

      const history = [
        ...task,
        Message.Assistant.make({ text: "", toolCalls: first.toolCalls }),
        Message.Tool.make({ callId: "call_abc", name: "read_file", text: "hi" })
      ]
      const second = yield* client.generate(request(history, { tools: [readFile] }))
      assert.strictEqual(second.text, "It says hi.")
      assert.deepStrictEqual(second.usage, { inputTokens: 50, outputTokens: 4, cachedInputTokens: 0, reasoningTokens: 0 })

      const [r1, r2] = yield* server.all
      assert.deepStrictEqual(field(r1?.body, "tools"), [
        { type: "function", name: "read_file", description: "Reads a file", parameters: readFile.parameters, strict: false }
      ])
      assert.deepStrictEqual(field(r2?.body, "input"), [
        { role: "system", content: "You are terse." },
        { role: "user", content: [{ type: "input_text", text: "Read a.txt" }] },
        { type: "function_call", call_id: "call_abc", name: "read_file", arguments: "{\"path\":\"a.txt\",\"maxBytes\":10}" },
        // The observation text as it is (design 0140), not JSON-encoded a second time.
        { type: "function_call_output", call_id: "call_abc", output: "hi" }
      ])
    }))

  describe("errors", () => {
    const statusCases: ReadonlyArray<readonly [number, boolean]> = [[429, true], [500, true], [503, true], [400, false], [401, false], [404, false]]
    for (const [status, retryable] of statusCases) {
      it.scoped(`${status} → ModelError{retryable: ${retryable}, status: ${status}}, no key or body in it`, () =>
        Effect.gen(function*() {
          const server = yield* FakeServer.make
          const client = yield* openAiClient(server)
          yield* server.reply(FakeServer.json({ error: { message: `${bodyMarker} key ${apiKey}` } }, status))
          const error = yield* modelError(client.generate(request(task)))
          assert.strictEqual(error.retryable, retryable)
          assert.strictEqual(error.status, status)
          assertNothingLeaks(error, [apiKey, bodyMarker])
        }))
    }

    it.scoped("connection refused → retryable", () =>
      Effect.gen(function*() {
        const port = yield* FakeServer.refusedPort
        const client = yield* openAiClient({ baseUrl: `http://127.0.0.1:${port}/v1` })
        const error = yield* modelError(client.generate(request(task)))
        assert.isTrue(error.retryable)
        assert.include(error.message, "ECONNREFUSED")
        assertNothingLeaks(error, [apiKey])
      }))

    it.scoped("a 200 body that is not JSON → not retryable; one that is not a response → not retryable", () =>
      Effect.gen(function*() {
        const server = yield* FakeServer.make
        const client = yield* openAiClient(server)
        yield* server.reply(FakeServer.raw(200, `{"output": [${bodyMarker}`), FakeServer.json({ output: bodyMarker }))
        const notJson = yield* modelError(client.generate(request(task)))
        assert.isFalse(notJson.retryable)
        assertNothingLeaks(notJson, [apiKey, bodyMarker])
        const notResponse = yield* modelError(client.generate(request(task)))
        assert.isFalse(notResponse.retryable)
        assertNothingLeaks(notResponse, [apiKey, bodyMarker])
      }))

    it.scoped("a call to an undeclared tool, or arguments that are JSON but not an object, reach polyloop in the reply (which @effect/ai refuses to decode)", () =>
      Effect.gen(function*() {
        const server = yield* FakeServer.make
        const client = yield* openAiClient(server)
        yield* server.reply(
          FakeServer.json(responsesAnswer([
            textOutput("Cleaning up."),
            functionCall("call_x", "delete_all", "{\"why\":\"tidy\"}"),
            functionCall("call_y", "read_file", "[1,2]")
          ], { input: 12, output: 7 }))
        )
        const reply = yield* client.generate(request(task, { tools: [readFile] }))
        assert.deepStrictEqual(reply, {
          text: "Cleaning up.",
          toolCalls: [
            { id: "call_x", name: "delete_all", argumentsText: "{\"why\":\"tidy\"}" },
            { id: "call_y", name: "read_file", argumentsText: "[1,2]" }
          ],
          usage: { inputTokens: 12, outputTokens: 7, cachedInputTokens: 0, reasoningTokens: 0 },
          finishReason: "tool-calls"
        })
      }))

    it.scoped("arguments that are not JSON at all, which @effect/ai-openai refuses itself, fail the reply, not retryable, without the arguments", () =>
      Effect.gen(function*() {
        const server = yield* FakeServer.make
        const client = yield* openAiClient(server)
        yield* server.reply(FakeServer.json(responsesAnswer([functionCall("call_x", "read_file", `{path: ${bodyMarker}`)])))
        const error = yield* modelError(client.generate(request(task, { tools: [readFile] })))
        assert.isFalse(error.retryable)
        assert.include(error.message, "declared tools")
        assertNothingLeaks(error, [bodyMarker])
      }))

    it.scoped("Agent.run through OpenAiResponses: a call to an undeclared tool is NotExecuted and fed back; the run goes on to its answer", () =>
      Effect.gen(function*() {
        const server = yield* FakeServer.make
        yield* server.reply(
          FakeServer.json(responsesAnswer([functionCall("call_1", "delete_all", "{}")])),
          FakeServer.json(responsesAnswer([textOutput("Nothing to delete.")]))
        )
        const registry = ToolRegistry.make(Tool.make({
          name: "read_file",
          description: "Reads a file",
          parameters: Schema.Struct({ path: Schema.String }),
          handler: () => Effect.succeed("")
        }))
        const store = yield* RunLogStore.makeMemory
        const id = runId("undeclared")
        const result = yield* Agent.run({
          runId: id,
          agent: AgentDefinition.make({ name: "cleaner", systemPrompt: "Tidy up.", budget: { maxSteps: 4 } }),
          task: "Delete everything.",
          tools: registry
        }).pipe(
          Effect.provide(Layer.mergeAll(
            OpenAiResponses.layer({ model: "fake-model", baseUrl: server.baseUrl, apiKey: Redacted.make(apiKey) }).pipe(
              Layer.provide(NodeHttpClient.layerUndici)
            ),
            NativeToolCallParser.layer(),
            ToolRegistry.layerExecutor(registry),
            EventSink.layerNoop,
            Layer.succeed(RunLogStore.RunLogStore, store)
          ))
        )
        assert.deepStrictEqual(result.stopReason, { _tag: "Completed", by: "Answer", answer: "Nothing to delete." })
        assert.strictEqual(result.steps, 2)
        const log = yield* store.readLog(id)
        const first = log.results[0]!
        assert.strictEqual(first.outcome.status, "NotExecuted")
        assert.isTrue(first.outcome.observationIsSynthetic)
        // The model is told, in the next request, answering its call by id (the provider sends a
        // tool result as the observation text itself, design 0140).
        yield* server.next
        const second = yield* server.next
        const outputs = (field(second.body, "input") as ReadonlyArray<unknown>).filter((item) => field(item, "type") === "function_call_output")
        assert.deepStrictEqual(outputs.map((item) => [field(item, "call_id"), field(item, "output")]), [["call_1", first.outcome.observation]])
      }))

    it("replyFromRefusedOutput takes nothing from other errors, nor from a refusal without raw parts", () => {
      assert.isTrue(Option.isNone(AiModelClient.replyFromRefusedOutput(new AiError.MalformedOutput({ module: "M", method: "m" }))))
      assert.isTrue(Option.isNone(AiModelClient.replyFromRefusedOutput(new AiError.UnknownError({ module: "M", method: "m" }))))
    })

    it.scoped("seed and stop, which the Responses API lacks, are refused rather than ignored", () =>
      Effect.gen(function*() {
        const server = yield* FakeServer.make
        const client = yield* openAiClient(server)
        const error = yield* modelError(client.generate(request(task, { settings: { seed: 1, stop: ["x"] } })))
        assert.isFalse(error.retryable)
        assert.include(error.message, "seed or stop")
        assert.lengthOf(yield* server.all, 0)
      }))

    it.scoped("a server that never answers is cut by the timeout (retryable) and the request is aborted", () =>
      Effect.gen(function*() {
        const server = yield* FakeServer.make
        const client = yield* openAiClient(server, { timeout: "20 seconds" })
        yield* server.reply(FakeServer.hang)
        const fiber = yield* Effect.fork(modelError(client.generate(request(task))))
        const received = yield* server.next
        yield* TestClock.adjust("20 seconds")
        const error = yield* Fiber.join(fiber)
        assert.isTrue(error.retryable)
        assert.include(error.message, "within 20s")
        yield* received.abortedByClient
      }))
  })

  it.scoped("interrupting generate aborts the HTTP request in flight (the server sees the connection close)", () =>
    Effect.gen(function*() {
      const server = yield* FakeServer.make
      const client = yield* openAiClient(server)
      yield* server.reply(FakeServer.hang)
      const fiber = yield* Effect.fork(client.generate(request(task)))
      const received = yield* server.next
      assert.isFalse(yield* Deferred.isDone(received.abortedByClient))
      const exit = yield* Fiber.interrupt(fiber)
      assert.isTrue(Exit.isInterrupted(exit))
      yield* received.abortedByClient
    }))
})

describe("AiModelClient over any LanguageModel", () => {
  /** A provider that records what it was asked and answers with canned parts. */
  const fakeModel = (parts: Array<Response.PartEncoded>) =>
    Effect.gen(function*() {
      const seen: Array<LanguageModel.ProviderOptions> = []
      const model = yield* LanguageModel.make({
        generateText: (options) => Effect.sync(() => (seen.push(options), parts)),
        streamText: () => Effect.dieMessage("not used")
      })
      return { seen, layer: Layer.succeed(LanguageModel.LanguageModel, model) }
    })

  it.effect("tool definitions a provider cannot take are refused before any call, not retryable", () =>
    Effect.gen(function*() {
      const { seen, layer } = yield* fakeModel([])
      const client = yield* Effect.provide(AiModelClient.make(), layer)
      const object = { type: "object", properties: {} }
      const bad: ReadonlyArray<ReadonlyArray<ToolDefinition>> = [
        [{ name: "", description: "", parameters: object }],
        [{ name: "__proto__ x", description: "", parameters: object }],
        [{ name: "a".repeat(65), description: "", parameters: object }],
        [{ name: "read", description: "", parameters: object }, { name: "read", description: "", parameters: object }],
        [{ name: "read", description: "", parameters: 0 }]
      ]
      for (const tools of bad) {
        const error = yield* Effect.flip(client.generate({ messages: [Message.User.make({ text: "hi" })], tools, settings: {} }))
        assert.strictEqual(error.retryable, false)
        assert.include(error.message, "tool definitions the provider cannot take")
      }
      assert.strictEqual(seen.length, 0)
      assert.deepStrictEqual(AiModelClient.invalidTools([{ name: "read_file-2", description: "", parameters: object }]), [])
    }))

  const finish = (inputTokens: number | undefined, outputTokens: number | undefined): Response.PartEncoded => ({
    type: "finish",
    reason: "stop",
    usage: { inputTokens, outputTokens, totalTokens: undefined }
  })

  it.scoped("converts the history to a Prompt with tool calls and results paired by id, and tools without handlers", () =>
    Effect.gen(function*() {
      const { layer, seen } = yield* fakeModel([{ type: "text", text: "done" }, finish(3, 2)])
      const client = yield* clientOf(AiModelClient.layer().pipe(Layer.provide(layer)))
      const history = [
        ...task,
        Message.Assistant.make({
          text: "checking",
          toolCalls: [{ id: "c1", name: "read_file", argumentsText: "{\"path\":\"a\"}" }, { id: "c2", name: "read_file", argumentsText: "{oops" }]
        }),
        Message.Tool.make({ callId: "c1", name: "read_file", text: "A" }),
        Message.Tool.make({ callId: "c2", name: "read_file", text: "invalid arguments" })
      ]
      const reply = yield* client.generate(request(history, { tools: [readFile] }))
      assert.deepStrictEqual(reply, { text: "done", toolCalls: [], usage: { inputTokens: 3, outputTokens: 2 }, finishReason: "stop" })

      const options = seen[0]
      assert.isDefined(options)
      if (options === undefined) return
      assert.deepStrictEqual(
        options.tools.map((tool) => tool.name),
        ["read_file"]
      )
      const roles = options.prompt.content.map((message) => message.role)
      assert.deepStrictEqual(roles, ["system", "user", "assistant", "tool", "tool"])
      const assistant = options.prompt.content[2]
      assert.deepStrictEqual(
        assistant?.role === "assistant"
          ? assistant.content.map((part) =>
            part.type === "tool-call" ? [part.id, part.params] : part.type === "text" ? part.text : part.type
          )
          : [],
        ["checking", ["c1", { path: "a" }], ["c2", "{oops"]]
      )
      const results = options.prompt.content.slice(3).flatMap((message) =>
        message.role === "tool" ? message.content.map((part) => [part.id, part.result]) : []
      )
      assert.deepStrictEqual(results, [["c1", "A"], ["c2", "invalid arguments"]])
      assert.isTrue(Prompt.isPrompt(options.prompt))
    }))

  it.scoped("tool calls come back unresolved (no handler runs) with their params as JSON text; missing usage is 0", () =>
    Effect.gen(function*() {
      const { layer } = yield* fakeModel([
        { type: "tool-call", id: "c9", name: "read_file", params: { path: "x", nested: { n: [1, 2] } } },
        finish(undefined, undefined)
      ])
      const client = yield* clientOf(AiModelClient.layer().pipe(Layer.provide(layer)))
      const reply = yield* client.generate(request(task, { tools: [readFile] }))
      assert.deepStrictEqual(reply.toolCalls, [
        { id: "c9", name: "read_file", argumentsText: "{\"path\":\"x\",\"nested\":{\"n\":[1,2]}}" }
      ])
      assert.deepStrictEqual(reply.usage, { inputTokens: 0, outputTokens: 0 })
    }))

  it.scoped("without applySettings, a request that sets settings fails (non-retryable) instead of ignoring them", () =>
    Effect.gen(function*() {
      const { layer, seen } = yield* fakeModel([{ type: "text", text: "ok" }, finish(1, 1)])
      const client = yield* clientOf(AiModelClient.layer().pipe(Layer.provide(layer)))
      const error = yield* modelError(client.generate(request(task, { settings: { temperature: 0, seed: 3 } })))
      assert.isFalse(error.retryable)
      assert.include(error.message, "temperature, seed")
      assert.lengthOf(seen, 0)
      const reply = yield* client.generate(request(task))
      assert.strictEqual(reply.text, "ok")
    }))

  it.scoped("applySettings wraps each call with the request's settings", () =>
    Effect.gen(function*() {
      const { layer } = yield* fakeModel([{ type: "text", text: "ok" }, finish(1, 1)])
      const applied: Array<unknown> = []
      const client = yield* clientOf(
        AiModelClient.layer({
          applySettings: (effect, settings) => Effect.zipRight(Effect.sync(() => applied.push(settings)), effect)
        }).pipe(Layer.provide(layer))
      )
      yield* client.generate(request(task, { settings: { temperature: 0.5 } }))
      assert.deepStrictEqual(applied, [{ temperature: 0.5 }])
    }))

  it("maps every AiError kind, never quoting its message", () => {
    const requestDetails = {
      method: "POST" as const,
      url: "https://user:pw@api.example.com/v1/responses?key=abc",
      urlParams: [],
      hash: Option.none(),
      headers: {}
    }
    const cases: ReadonlyArray<readonly [AiError.AiError, boolean]> = [
      [new AiError.HttpRequestError({ module: "M", method: "m", reason: "Transport", request: requestDetails }), true],
      [new AiError.HttpRequestError({ module: "M", method: "m", reason: "InvalidUrl", request: requestDetails }), false],
      [new AiError.HttpResponseError({
        module: "M",
        method: "m",
        reason: "StatusCode",
        request: requestDetails,
        response: { status: 502, headers: {} },
        body: bodyMarker
      }), true],
      [new AiError.HttpResponseError({
        module: "M",
        method: "m",
        reason: "EmptyBody",
        request: requestDetails,
        response: { status: 200, headers: {} }
      }), false],
      [new AiError.MalformedOutput({ module: "M", method: "m", description: bodyMarker }), false],
      [new AiError.MalformedInput({ module: "M", method: "m", description: bodyMarker }), false],
      [new AiError.UnknownError({ module: "M", method: "m", description: bodyMarker }), false]
    ]
    for (const [error, retryable] of cases) {
      const mapped = AiModelClient.toModelError(error, 0)
      assert.strictEqual(mapped.retryable, retryable, error._tag)
      assertNothingLeaks(mapped, [bodyMarker, "pw@", "key=abc"])
    }
  })
})

describe("parallelToolCalls: false (design 0150) over the Responses API", () => {
  it.scoped("sends parallel_tool_calls: false with tools; nothing without tools, or when parallel calls are taken", () =>
    Effect.gen(function*() {
      const server = yield* FakeServer.make
      const client = yield* openAiClient(server)
      yield* server.reply(
        FakeServer.json(responsesAnswer([textOutput("one")])),
        FakeServer.json(responsesAnswer([textOutput("two")])),
        FakeServer.json(responsesAnswer([textOutput("three")]))
      )
      yield* client.generate(request(task, { tools: [readFile], parallelToolCalls: false }))
      yield* client.generate(request(task, { parallelToolCalls: false }))
      yield* client.generate(request(task, { tools: [readFile] }))
      const [one, two, three] = yield* server.all
      assert.strictEqual(field(one?.body, "parallel_tool_calls"), false)
      assert.isUndefined(field(two?.body, "parallel_tool_calls"), "OpenAI refuses parallel_tool_calls without tools")
      assert.isUndefined(field(three?.body, "parallel_tool_calls"), "the provider's default when parallel calls are taken")
    }))
})
