/**
 * A `ModelClient` for any server that speaks OpenAI's Chat Completions API — OpenAI itself, vLLM,
 * Ollama, LM Studio, OpenRouter, llama.cpp — on `@effect/platform`'s `HttpClient`, configured
 * in code (`layer`) or from `Config` (`layerConfig`: `POLYLOOP_MODEL`, `POLYLOOP_BASE_URL`,
 * `POLYLOOP_API_KEY`, `POLYLOOP_TIMEOUT`, and for Azure and organisations
 * `POLYLOOP_API_KEY_HEADER`, `POLYLOOP_API_VERSION`, `POLYLOOP_ORGANIZATION`, `POLYLOOP_PROJECT`,
 * `POLYLOOP_MAX_TOKENS_PARAMETER`).
 *
 * Why not through `@effect/ai-openai` and `AiModelClient`: its `OpenAiLanguageModel` (0.41)
 * speaks only OpenAI's newer Responses API (`POST /responses`), which most compatible servers do
 * not serve; and `@effect/ai` decodes tool calls against the declared tools, so a call to an
 * unknown tool or with arguments that are not JSON fails the whole reply, where polyloop's
 * parser would have turned it into an observation the model can correct. This client posts to
 * `<baseUrl>/chat/completions` and returns tool calls exactly as the model wrote them.
 *
 * Replies (design 0140): the finish reason normalised (raw word kept); a refusal kept (and the
 * text when there is no other); `content` given as an array of parts (Mistral) read; reasoning
 * (`reasoning_content`, `reasoning`, Mistral's thinking parts) and usage details (cached input,
 * reasoning tokens) kept; a missing or empty tool-call id becomes `call_<index>`.
 *
 * Errors (`ModelError`): connection failures, the timeout, 429 and 5xx are `retryable`; any other
 * status, a quota error (`insufficient_quota`) and a body that is not a chat completion are not.
 * An error carries the provider's `code`, `type`, `param`, request id and retry hint
 * (`retry-after`, `retry-after-ms`, `x-ratelimit-reset-*`). Messages name the endpoint, the status
 * and the code, never the API key, a header or any free text of a body.
 *
 * Streaming (design 0180): `stream` posts with `stream: true` and
 * `stream_options.include_usage`, reads the Server-Sent Events (`@effect/experimental`'s `Sse`
 * decoder) and gives `ModelDelta`s that fold into exactly what `generate` returns; a stream cut
 * before `data: [DONE]` is a retryable `ModelError`; interrupting the consumer closes the
 * connection. `generate` also folds an event stream a server sends because `ModelSettings.extra`
 * asked for `stream: true`. The wire format lives in `internal/chatWire.ts`.
 *
 * @since 0.1.0
 */
import * as HttpClient from "@effect/platform/HttpClient"
import type * as HttpClientError from "@effect/platform/HttpClientError"
import * as HttpClientRequest from "@effect/platform/HttpClientRequest"
import type * as HttpClientResponse from "@effect/platform/HttpClientResponse"
import * as Sse from "@effect/experimental/Sse"
import * as Clock from "effect/Clock"
import * as Config from "effect/Config"
import type * as ConfigError from "effect/ConfigError"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Redacted from "effect/Redacted"
import * as Schema from "effect/Schema"
import * as Stream from "effect/Stream"
import { ModelError } from "@polyloop/core/Errors"
import type * as Message from "@polyloop/core/Message"
import { ModelClient, type ModelRequest, type ToolDefinition } from "@polyloop/core/ModelClient"
import * as ModelDelta from "@polyloop/core/ModelDelta"
import type * as ModelReply from "@polyloop/core/ModelReply"
import type { Json, ModelSettings } from "@polyloop/core/ModelSettings"
import * as Telemetry from "@polyloop/core/Telemetry"
import * as ChatWire from "./internal/chatWire.js"
import * as Errors from "./internal/errors.js"

const source = "OpenAiCompatible"

/** OpenAI's API, the default base URL. */
export const defaultBaseUrl = "https://api.openai.com/v1"

/** One minute, the default cut of one request. */
export const defaultTimeout: Duration.Duration = Duration.seconds(60)

/** The name of the output-token limit in the request body. */
export type MaxTokensParameter = "max_tokens" | "max_completion_tokens"

/** How to reach the server. */
export interface Options {
  /** The model, unless the request's `ModelSettings.model` names one (the agent's setting wins). */
  readonly model: string
  /**
   * The API root, without `/chat/completions` (default `https://api.openai.com/v1`). A query it
   * carries (Azure's `?api-version=…`) is sent after `/chat/completions`.
   */
  readonly baseUrl?: string | undefined
  /** Sent as `Authorization: Bearer …` (or in `apiKeyHeader`); omit it for local servers that need none. */
  readonly apiKey?: Redacted.Redacted | undefined
  /** Send the key as the value of this header instead of as a bearer token (Azure: `api-key`). */
  readonly apiKeyHeader?: string | undefined
  /** Query parameters of every request (Azure: `{ "api-version": "2024-10-21" }`). */
  readonly query?: Readonly<Record<string, string>> | undefined
  /** Sent as `OpenAI-Organization`. */
  readonly organization?: string | undefined
  /** Sent as `OpenAI-Project`. */
  readonly project?: string | undefined
  /**
   * The body field `ModelSettings.maxOutputTokens` is sent as. Default: `max_completion_tokens`
   * for OpenAI's and Azure's endpoints (their reasoning models refuse `max_tokens`),
   * `max_tokens` for every other server (most compatible servers know only that one).
   */
  readonly maxTokensParameter?: MaxTokensParameter | undefined
  /** Cut of one request, answer body included (default 60 seconds); a cut is a retryable `ModelError`. */
  readonly timeout?: Duration.DurationInput | undefined
  /** Extra headers sent with every request (e.g. OpenRouter's `HTTP-Referer`, `X-Title`). */
  readonly headers?: Readonly<Record<string, string>> | undefined
}

/** `max_completion_tokens` for OpenAI's own and Azure OpenAI's hosts, `max_tokens` for the rest. */
export const defaultMaxTokensParameter = (baseUrl: string): MaxTokensParameter => {
  try {
    const host = new URL(baseUrl).hostname
    return host === "api.openai.com" || host.endsWith(".openai.azure.com") ? "max_completion_tokens" : "max_tokens"
  } catch {
    return "max_tokens"
  }
}

const optionalString = (name: string) => Config.option(Config.nonEmptyString(name)).pipe(Config.map(Option.getOrUndefined))

/**
 * `Options` read from the environment: `POLYLOOP_MODEL` (required), `POLYLOOP_BASE_URL` (default
 * OpenAI), `POLYLOOP_API_KEY` (optional, redacted), `POLYLOOP_TIMEOUT` (an Effect duration
 * such as `30 seconds` or `90000 millis`; default 60 seconds), and optionally
 * `POLYLOOP_API_KEY_HEADER` (e.g. `api-key` for Azure), `POLYLOOP_API_VERSION` (sent as the
 * `api-version` query parameter), `POLYLOOP_ORGANIZATION`, `POLYLOOP_PROJECT` and
 * `POLYLOOP_MAX_TOKENS_PARAMETER` (`max_tokens` or `max_completion_tokens`).
 */
export const config: Config.Config<Options> = Config.all({
  model: Config.nonEmptyString("POLYLOOP_MODEL"),
  baseUrl: Config.nonEmptyString("POLYLOOP_BASE_URL").pipe(Config.withDefault(defaultBaseUrl)),
  apiKey: Config.option(Config.redacted("POLYLOOP_API_KEY")).pipe(Config.map(Option.getOrUndefined)),
  apiKeyHeader: optionalString("POLYLOOP_API_KEY_HEADER"),
  query: optionalString("POLYLOOP_API_VERSION").pipe(
    Config.map((version) => (version === undefined ? undefined : { "api-version": version }))
  ),
  organization: optionalString("POLYLOOP_ORGANIZATION"),
  project: optionalString("POLYLOOP_PROJECT"),
  maxTokensParameter: Config.option(Config.literal("max_tokens", "max_completion_tokens")("POLYLOOP_MAX_TOKENS_PARAMETER")).pipe(
    Config.map(Option.getOrUndefined)
  ),
  timeout: Config.duration("POLYLOOP_TIMEOUT").pipe(Config.withDefault(defaultTimeout))
})

/**
 * The URL of the chat completions endpoint: `<baseUrl path>/chat/completions`, then the base
 * URL's own query and `query` (Azure: `…/deployments/<name>/chat/completions?api-version=…`).
 */
export const endpointUrl = (baseUrl: string, query: Readonly<Record<string, string>> = {}): string => {
  const [root = "", ...rest] = baseUrl.split("?")
  const params = new URLSearchParams(rest.join("?"))
  for (const [key, value] of Object.entries(query)) params.set(key, value)
  const search = params.toString()
  return `${root.replace(/\/+$/, "")}/chat/completions${search === "" ? "" : `?${search}`}`
}

/**
 * The usage as billed: the prompt tokens, and the completion tokens plus what `total_tokens`
 * counts beyond prompt + completion (reasoning counted outside the completion, named by its
 * detail or not: Gemini's thinking tokens are in the total only), recorded as `reasoningTokens`.
 * Cached and reasoning counts are kept as details.
 */
export const readUsage = ChatWire.readUsage

/**
 * Reads a 2xx body into a reply. A body that is not JSON or not a chat completion is a
 * non-retryable `ModelError`; an error object in the body is classified by its numeric code.
 */
export const parseCompletion = ChatWire.parseCompletion

const decodeJson = Schema.decodeUnknownEither(Schema.parseJson())

/** A Chat Completions message as sent. */
export type WireMessage =
  | { readonly role: "system" | "user"; readonly content: string }
  | {
    readonly role: "assistant"
    readonly content: string | null
    // Not readonly: the `openai` package's `ChatCompletionMessageParam` takes a mutable array, and
    // the conversation tests check that every message polyloop sends is one.
    readonly tool_calls?: Array<{
      readonly id: string
      readonly type: "function"
      readonly function: { readonly name: string; readonly arguments: string }
    }>
  }
  | { readonly role: "tool"; readonly tool_call_id: string; readonly content: string }

/** A polyloop message in Chat Completions form; a `Tool` message answers its call by `tool_call_id`. */
export const toWireMessage = (message: Message.Message): WireMessage => {
  switch (message._tag) {
    case "System":
      return { role: "system", content: message.text }
    case "User":
      return { role: "user", content: message.text }
    case "Assistant":
      return message.toolCalls.length === 0
        ? { role: "assistant", content: message.text }
        : {
          role: "assistant",
          content: message.text === "" ? null : message.text,
          tool_calls: message.toolCalls.map((call) => ({
            id: call.id,
            type: "function",
            function: { name: call.name, arguments: call.argumentsText }
          }))
        }
    case "Tool":
      return { role: "tool", tool_call_id: message.callId, content: message.text }
  }
}

/** An answer's schema as Chat Completions' `response_format` (design 0400). */
export const toResponseFormat = (output: NonNullable<ModelRequest["output"]>) => {
  const schema = output.schema
  const wire = typeof schema === "object" && schema !== null && !Array.isArray(schema) && "$schema" in schema
    ? Object.fromEntries(Object.entries(schema).filter(([key]) => key !== "$schema"))
    : schema
  return { type: "json_schema" as const, json_schema: { name: output.name, schema: wire, strict: output.strict } }
}

/** A tool definition in Chat Completions form. */
export const toWireTool = (tool: ToolDefinition) => ({
  type: "function" as const,
  function: { name: tool.name, description: tool.description, parameters: tool.parameters }
})

/**
 * The request body: model, messages, tools and settings (`maxOutputTokens` as
 * `maxTokensParameter`, default `max_tokens`); `parallel_tool_calls: false` when the agent takes
 * one action per step and tools are sent (the API refuses it without tools; design 0150);
 * `stream: true` with `stream_options.include_usage` when `streaming` (design 0180);
 * `response_format: { type: "json_schema", json_schema: { name, schema, strict } }` when the
 * request asks for the answer's schema (design 0400; the schema's top-level `$schema` left out,
 * as OpenAI's own examples send it); `settings.extra` is merged last, verbatim, so it can add or
 * override any field.
 */
export const toRequestBody = (
  request: ModelRequest,
  defaultModel: string,
  maxTokensParameter: MaxTokensParameter = "max_tokens",
  streaming: boolean = false
): Record<string, unknown> => {
  const settings: ModelSettings = request.settings
  const extra: Readonly<Record<string, Json>> = settings.extra ?? {}
  return {
    model: settings.model ?? defaultModel,
    messages: request.messages.map(toWireMessage),
    ...(request.tools.length === 0 ? {} : { tools: request.tools.map(toWireTool) }),
    ...(request.parallelToolCalls === false && request.tools.length > 0 ? { parallel_tool_calls: false } : {}),
    ...(settings.temperature === undefined ? {} : { temperature: settings.temperature }),
    ...(settings.topP === undefined ? {} : { top_p: settings.topP }),
    ...(settings.maxOutputTokens === undefined ? {} : { [maxTokensParameter]: settings.maxOutputTokens }),
    ...(settings.seed === undefined ? {} : { seed: settings.seed }),
    ...(settings.stop === undefined ? {} : { stop: settings.stop }),
    ...(streaming ? { stream: true, stream_options: { include_usage: true } } : {}),
    ...(request.output === undefined ? {} : { response_format: toResponseFormat(request.output) }),
    ...extra
  }
}



const fromHttpError = (endpoint: string) => (error: HttpClientError.HttpClientError): ModelError => {
  if (error._tag === "RequestError") {
    return error.reason === "Transport"
      ? Errors.transportError(source, endpoint, error.cause)
      : new ModelError({ retryable: false, message: `${source}: cannot send the request to ${endpoint} (${error.reason})` })
  }
  // The status was fine but the body could not be read: the connection broke mid-answer.
  return error.reason === "StatusCode"
    ? Errors.statusError(source, endpoint, error.response.status)
    : Errors.brokenBodyError(source, endpoint, error.response.status, error.cause)
}

// -----------------------------------------------------------------------------
// Service
// -----------------------------------------------------------------------------

/** Makes the client on the `HttpClient` in context. */
export const make = (options: Options): Effect.Effect<ModelClient.Service, never, HttpClient.HttpClient> =>
  Effect.gen(function*() {
    const baseUrl = options.baseUrl ?? defaultBaseUrl
    const url = endpointUrl(baseUrl, options.query)
    const endpoint = Errors.describeEndpoint(url)
    const timeout = Duration.decode(options.timeout ?? defaultTimeout)
    const maxTokensParameter = options.maxTokensParameter ?? defaultMaxTokensParameter(baseUrl)
    const apiKey = options.apiKey
    const apiKeyHeader = options.apiKeyHeader
    const headers: Record<string, string> = {
      ...(options.organization === undefined ? {} : { "OpenAI-Organization": options.organization }),
      ...(options.project === undefined ? {} : { "OpenAI-Project": options.project }),
      ...options.headers
    }
    const client = (yield* HttpClient.HttpClient).pipe(
      HttpClient.mapRequest((request) => {
        const withHeaders = HttpClientRequest.setHeaders(request, headers)
        const withKey = apiKey === undefined
          ? withHeaders
          : apiKeyHeader === undefined
          ? HttpClientRequest.bearerToken(withHeaders, apiKey)
          : HttpClientRequest.setHeader(withHeaders, apiKeyHeader, Redacted.value(apiKey))
        return HttpClientRequest.acceptJson(withKey)
      })
    )
    const toError = fromHttpError(endpoint)

    /** Posts a body; a non-2xx answer is the provider's error (only its code, type and param are read). */
    const send = (body: Record<string, unknown>) =>
      Effect.flatMap(
        client.execute(HttpClientRequest.bodyUnsafeJson(HttpClientRequest.post(url), body)).pipe(Effect.mapError(toError)),
        (response) =>
          response.status >= 200 && response.status < 300
            ? Effect.succeed(response)
            : Effect.gen(function*() {
              const errorBody = yield* response.text.pipe(Effect.orElseSucceed(() => ""))
              const nowMillis = yield* Clock.currentTimeMillis
              return yield* Errors.providerStatusError(source, endpoint, response.status, {
                headers: response.headers,
                body: Either.getOrUndefined(decodeJson(errorBody)),
                nowMillis
              })
            })
      )

    /** The deltas of a response whose body is Server-Sent Events (design 0180). */
    const eventDeltas = (response: HttpClientResponse.HttpClientResponse): Stream.Stream<ModelDelta.ModelDelta, ModelError> =>
      ChatWire.streamDeltas(
        response.stream.pipe(
          Stream.mapError(toError),
          Stream.decodeText(),
          Stream.pipeThroughChannel(Sse.makeChannel())
        ),
        endpoint,
        response.status
      )

    const isEventStream = (response: HttpClientResponse.HttpClientResponse): boolean =>
      (response.headers["content-type"] ?? "").toLowerCase().startsWith("text/event-stream")

    const attributes = (request: ModelRequest, body: Record<string, unknown>) => ({
      endpoint,
      model: String(body.model),
      messages: request.messages.length,
      tools: request.tools.length
    })

    // The model this call asks for, on the caller's span (the loop's `Agent.model`; design 0212).
    const annotate = (body: Record<string, unknown>) => Telemetry.annotateModel({ model: String(body.model) })

    const generate = (request: ModelRequest): Effect.Effect<ModelReply.ModelReply, ModelError> => {
      const body = toRequestBody(request, options.model, maxTokensParameter)
      return Effect.zipRight(annotate(body), Effect.flatMap(send(body), (response) =>
        // `stream: true` set through `ModelSettings.extra`: the events are folded into the reply.
        isEventStream(response)
          ? ModelDelta.collect(eventDeltas(response))
          : Effect.flatMap(response.text.pipe(Effect.mapError(toError)), (text) => ChatWire.parseCompletion(text, endpoint))).pipe(
          Effect.timeoutFail({ duration: timeout, onTimeout: () => Errors.timeoutError(source, endpoint, timeout) }),
          Effect.withSpan("OpenAiCompatible.generate", { attributes: attributes(request, body) })
        ))
    }

    // The timeout of a stream is the longest wait for its next piece (a long reply may take
    // longer than it in all); a cut is a retryable `ModelError`.
    const stream = (request: ModelRequest): Stream.Stream<ModelDelta.ModelDelta, ModelError> => {
      const body = toRequestBody(request, options.model, maxTokensParameter, true)
      return Stream.unwrap(Effect.as(annotate(body), Stream.unwrap(Effect.map(send(body), (response) =>
        isEventStream(response)
          ? eventDeltas(response)
          : Stream.fromIterableEffect(
            Effect.map(
              Effect.flatMap(response.text.pipe(Effect.mapError(toError)), (text) => ChatWire.parseCompletion(text, endpoint)),
              ModelDelta.fromReply
            )
          ))).pipe(
          Stream.timeoutFail(() => Errors.timeoutError(source, endpoint, timeout), timeout),
          Stream.withSpan("OpenAiCompatible.stream", { attributes: attributes(request, body) })
        )))
    }

    return ModelClient.of({ generate, stream })
  })

/** The `ModelClient` layer; needs an `HttpClient` (e.g. `NodeHttpClient.layerUndici`). */
export const layer = (options: Options): Layer.Layer<ModelClient, never, HttpClient.HttpClient> =>
  Layer.effect(ModelClient, make(options))

/**
 * The `ModelClient` layer configured from `Config` — by default `config` (the `POLYLOOP_*`
 * environment variables); fails with a `ConfigError` naming what is missing.
 */
export const layerConfig = (
  options: Config.Config.Wrap<Options> = config
): Layer.Layer<ModelClient, ConfigError.ConfigError, HttpClient.HttpClient> =>
  Layer.effect(ModelClient, Effect.flatMap(Config.unwrap(options), make))
