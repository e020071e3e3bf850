/**
 * Both `ModelClient` layers this package ships run the `ModelClientContract` suite of
 * `@polyloop/testing`, each against a fake server on loopback (`FakeServer`: a real socket, real
 * HTTP) that plays every generated condition in its own wire format:
 *
 * - `Reply` → a 200 answer carrying the reply (a chat completion for `OpenAiCompatible`, a
 *   Responses API object for `OpenAiResponses`);
 * - `TransportFailure` → the connection is reset once the request has arrived (the whole suite)
 *   or refused outright (the `retryable` property again);
 * - `HttpStatus` → that status with an OpenAI-style error body;
 * - `Hang` → the request is accepted and never answered; `started` completes when it arrives,
 *   `aborted` when the server sees the client close the connection.
 *
 * `OpenAiCompatible` returns the provider's reply exactly (`exactReplies`). `OpenAiResponses`
 * cannot: `@effect/ai` derives the finish reason, re-serializes tool-call arguments, and decodes
 * tool calls against the declared tools, so its fake server answers as the Responses API does —
 * text and usage as given, the tool calls addressed to the tools the request declared, with
 * JSON-object arguments — and the suite checks that the reply is valid. It also declares the
 * requests `OpenAiResponses` refuses: those setting `seed` or `stop`, which the Responses API
 * lacks.
 */
import * as NodeHttpClient from "@effect/platform-node/NodeHttpClient"
import type * as HttpClient from "@effect/platform/HttpClient"
import { it } from "@effect/vitest"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Predicate from "effect/Predicate"
import * as Schema from "effect/Schema"
import type * as Scope from "effect/Scope"
import type { ModelClient, ModelRequest } from "@polyloop/core/ModelClient"
import type { ModelReply } from "@polyloop/core/ModelReply"
import * as ModelReplyModule from "@polyloop/core/ModelReply"
import * as AiModelClient from "@polyloop/ai/AiModelClient"
import * as OpenAiCompatible from "@polyloop/ai/OpenAiCompatible"
import * as OpenAiResponses from "@polyloop/ai/OpenAiResponses"
import * as ModelClientContract from "@polyloop/testing/ModelClientContract"
import * as FakeServer from "./FakeServer.js"
import { clientOf } from "./helpers.js"

// --- Wire formats ------------------------------------------------------------------------------

/**
 * The replies a Chat Completions answer can express exactly: no cache-write count (the API has
 * none), a refusal or reasoning
 * not empty, a refusal only beside text (a lone refusal is also the reply's text), and a raw
 * finish reason that is a provider's word for the normalised one.
 */
const chatExpressible = (reply: ModelReply): boolean =>
  reply.usage.cacheWriteInputTokens === undefined &&
  // An empty call id is not expressible: the client names an id-less call `call_<index>` (design 0362).
  reply.toolCalls.every((call) => call.id !== "") &&
  reply.reasoning !== "" &&
  (reply.refusal === undefined || (reply.refusal !== "" && reply.text !== "")) &&
  (reply.rawFinishReason === undefined ||
    (reply.rawFinishReason !== reply.finishReason && ModelReplyModule.normaliseFinishReason(reply.rawFinishReason) === reply.finishReason))

/** A reply as a Chat Completions server serves it: every expressible field of `ModelReply` has a place. */
const chatCompletion = (reply: ModelReply): unknown => ({
  id: "chatcmpl-contract",
  object: "chat.completion",
  created: 1_700_000_000,
  model: "fake-model",
  choices: [{
    index: 0,
    message: {
      role: "assistant",
      content: reply.text === "" && reply.toolCalls.length > 0 ? null : reply.text,
      ...(reply.refusal === undefined ? {} : { refusal: reply.refusal }),
      ...(reply.reasoning === undefined ? {} : { reasoning_content: reply.reasoning }),
      ...(reply.toolCalls.length === 0 ? {} : {
        tool_calls: reply.toolCalls.map((call) => ({
          id: call.id,
          type: "function",
          function: { name: call.name, arguments: call.argumentsText }
        }))
      })
    },
    finish_reason: reply.rawFinishReason ?? reply.finishReason ?? null
  }],
  usage: {
    prompt_tokens: reply.usage.inputTokens,
    completion_tokens: reply.usage.outputTokens,
    total_tokens: reply.usage.inputTokens + reply.usage.outputTokens,
    ...(reply.usage.cachedInputTokens === undefined ? {} : { prompt_tokens_details: { cached_tokens: reply.usage.cachedInputTokens } }),
    ...(reply.usage.reasoningTokens === undefined ? {} : { completion_tokens_details: { reasoning_tokens: reply.usage.reasoningTokens } })
  }
})

const decodeJsonObject = Schema.decodeUnknownOption(
  Schema.parseJson(Schema.Record({ key: Schema.String, value: Schema.Unknown }))
)

/** The names of the function tools a Responses API request declares. */
const declaredTools = (body: unknown): ReadonlyArray<string> =>
  Predicate.hasProperty(body, "tools") && Array.isArray(body.tools)
    ? body.tools.flatMap((tool: unknown) =>
      Predicate.hasProperty(tool, "type") && tool.type === "function" && Predicate.hasProperty(tool, "name") &&
        Predicate.isString(tool.name)
        ? [tool.name]
        : []
    )
    : []

/**
 * A reply as OpenAI's Responses API serves it to the request received: the text as one output
 * message, the usage as given, and each tool call as a `function_call` of a tool the request
 * declared (the `i`-th call addresses the `i`-th declared tool, cyclically; none without tools),
 * its arguments the reply's when they are a JSON object, `{ "text": <the reply's> }` otherwise —
 * the API calls only declared tools, with an object of arguments.
 */
const responsesAnswer = (reply: ModelReply, request: FakeServer.Received): unknown => {
  const tools = declaredTools(request.body)
  const calls = tools.length === 0 ? [] : reply.toolCalls.map((call, i) => ({
    type: "function_call",
    id: `fc_${i}`,
    call_id: call.id,
    name: tools[i % tools.length],
    arguments: Option.match(decodeJsonObject(call.argumentsText), {
      onNone: () => JSON.stringify({ text: call.argumentsText }),
      onSome: () => call.argumentsText
    }),
    status: "completed"
  }))
  return {
    id: "resp_contract",
    object: "response",
    created_at: 1_700_000_000,
    status: "completed",
    error: null,
    incomplete_details: null,
    instructions: null,
    model: "fake-model",
    output: [
      {
        type: "message",
        id: "msg_contract",
        role: "assistant",
        status: "completed",
        content: [{ type: "output_text", text: reply.text, annotations: [] }]
      },
      ...calls
    ],
    parallel_tool_calls: true,
    tools: [],
    tool_choice: "auto",
    metadata: null,
    temperature: null,
    top_p: null,
    usage: {
      input_tokens: reply.usage.inputTokens,
      input_tokens_details: { cached_tokens: 0 },
      output_tokens: reply.usage.outputTokens,
      output_tokens_details: { reasoning_tokens: 0 },
      total_tokens: reply.usage.inputTokens + reply.usage.outputTokens
    }
  }
}

/** An OpenAI-style error body for a status. */
const errorBody = (status: number) => ({
  error: { message: `fake server: status ${status}`, type: "fake_error", param: null, code: null }
})

// --- Conditions onto the fake server -------------------------------------------------------------

/** How a transport failure is played: a reset once the request arrived, or a refused connection. */
type TransportFailure = "reset" | "refused"

/**
 * Plays `condition` on a fresh fake server for the case's scope and returns the base URL the
 * client must use.
 */
const play = (
  condition: ModelClientContract.Condition,
  answer: (reply: ModelReply) => FakeServer.Reply,
  transportFailure: TransportFailure
): Effect.Effect<string, never, Scope.Scope> =>
  Effect.gen(function*() {
    if (condition._tag === "TransportFailure" && transportFailure === "refused") {
      return `http://127.0.0.1:${yield* FakeServer.refusedPort}/v1`
    }
    const server = yield* FakeServer.make
    switch (condition._tag) {
      case "Reply":
        yield* server.reply(answer(condition.reply))
        break
      case "TransportFailure":
        yield* server.reply(FakeServer.reset)
        break
      case "HttpStatus":
        yield* server.reply(FakeServer.json(errorBody(condition.status), condition.status))
        break
      case "Hang": {
        yield* server.reply(FakeServer.hang)
        yield* Effect.forkScoped(Effect.gen(function*() {
          const received = yield* server.next
          yield* Deferred.succeed(condition.started, undefined)
          yield* Deferred.await(received.abortedByClient)
          yield* Deferred.succeed(condition.aborted, undefined)
        }))
        break
      }
    }
    return server.baseUrl
  })

/** A client under test: the layer built on the base URL of the fake server playing each condition. */
const facing = (
  layer: (baseUrl: string) => Layer.Layer<ModelClient, never, HttpClient.HttpClient>,
  answer: (reply: ModelReply) => FakeServer.Reply,
  transportFailure: TransportFailure
): ModelClientContract.ClientUnderTest =>
(condition) =>
  Effect.flatMap(
    play(condition, answer, transportFailure),
    (baseUrl) => clientOf(layer(baseUrl).pipe(Layer.provide(NodeHttpClient.layerUndici)))
  )

/**
 * Registers the refused-connection variant of the `retryable` property (the suite itself plays
 * transport failures as resets).
 */
const retryableWhenRefused = (
  name: string,
  client: ModelClientContract.ClientUnderTest,
  options: ModelClientContract.Options = {}
): void => {
  const property = ModelClientContract.properties(client, options).retryable
  if (property === undefined) throw new Error("ModelClientContract has no retryable property")
  it.live.prop(`ModelClient contract: ${name} (connection refused) — ${property.name}`, [property.cases], ([c]) => c.check, {
    timeout: 30_000,
    fastCheck: { numRuns: property.numRuns }
  })
}

// --- OpenAiCompatible --------------------------------------------------------------------------

const compatible = (transportFailure: TransportFailure) =>
  facing(
    (baseUrl) => OpenAiCompatible.layer({ model: "fake-model", baseUrl }),
    (reply) => FakeServer.json(chatCompletion(reply)),
    transportFailure
  )

ModelClientContract.suite("OpenAiCompatible", compatible("reset"), { exactReplies: true, hang: true, expressible: chatExpressible })
retryableWhenRefused("OpenAiCompatible", compatible("refused"))

// --- OpenAiResponses ---------------------------------------------------------------------------

const responses = (transportFailure: TransportFailure) =>
  facing(
    (baseUrl) => OpenAiResponses.layer({ model: "fake-model", baseUrl }),
    (reply) =>
      FakeServer.respond((request) =>
        isRecord(request.body) && request.body.stream === true
          ? FakeServer.events(responsesEvents(responsesAnswer(reply, request)))
          : FakeServer.json(responsesAnswer(reply, request))
      ),
    transportFailure
  )

const isRecord = (value: unknown): value is Record<string, unknown> => typeof value === "object" && value !== null && !Array.isArray(value)

/**
 * A Responses answer as the API streams it (design 0180): each output item added, its text (a
 * message) or its arguments (a function call) as one delta, the item done, then
 * `response.completed` with the whole response.
 */
const responsesEvents = (answer: unknown): ReadonlyArray<string> => {
  const response = isRecord(answer) ? answer : {}
  const output = Array.isArray(response.output) ? response.output : []
  const events: Array<string> = []
  const event = (type: string, data: Record<string, unknown>) =>
    `event: ${type}\ndata: ${JSON.stringify({ type, sequence_number: events.length, ...data })}\n\n`
  events.push(event("response.created", { response: { ...response, status: "in_progress", output: [] } }))
  output.forEach((item: unknown, index: number) => {
    if (!isRecord(item)) return
    if (item.type === "message") {
      events.push(event("response.output_item.added", { output_index: index, item: { ...item, status: "in_progress", content: [] } }))
      const content = Array.isArray(item.content) ? item.content : []
      content.forEach((part: unknown, contentIndex: number) => {
        const text = isRecord(part) && typeof part.text === "string" ? part.text : ""
        events.push(event("response.output_text.delta", { item_id: item.id, output_index: index, content_index: contentIndex, delta: text }))
      })
    } else {
      events.push(event("response.output_item.added", { output_index: index, item: { ...item, status: "in_progress", arguments: "" } }))
      events.push(event("response.function_call_arguments.delta", { item_id: item.id, output_index: index, delta: item.arguments }))
    }
    events.push(event("response.output_item.done", { output_index: index, item }))
  })
  events.push(event("response.completed", { response: { ...response, output: [] } }))
  return events
}

/** The Responses API has no `seed` and no `stop`: a request setting either is refused, never sent without it. */
const refuses = (request: ModelRequest): boolean =>
  request.settings.seed !== undefined || request.settings.stop !== undefined || AiModelClient.invalidTools(request.tools).length > 0

ModelClientContract.suite("OpenAiResponses", responses("reset"), { hang: true, refuses })
retryableWhenRefused("OpenAiResponses", responses("refused"), { refuses })
