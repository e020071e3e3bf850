/**
 * A `ModelClient` for any server that speaks OpenAI's Chat Completions API — OpenAI itself, vLLM,
 * Ollama, LM Studio, OpenRouter, llama.cpp — on `@effect/platform`'s `HttpClient`, configured
 * in code (`layer`) or from `Config` (`layerConfig`: `POLYLOOP_MODEL`, `POLYLOOP_BASE_URL`,
 * `POLYLOOP_API_KEY`, `POLYLOOP_TIMEOUT`).
 *
 * Why not through `@effect/ai-openai` and `AiModelClient`: its `OpenAiLanguageModel` (0.41)
 * speaks only OpenAI's newer Responses API (`POST /responses`), which most compatible servers do
 * not serve; and `@effect/ai` decodes tool calls against the declared tools, so a call to an
 * unknown tool or with arguments that are not JSON fails the whole reply, where polyloop's
 * parser would have turned it into an observation the model can correct. This client posts to
 * `<baseUrl>/chat/completions` and returns tool calls exactly as the model wrote them.
 *
 * Errors (`ModelError`): connection failures, the timeout, 429 and 5xx are `retryable`; any other
 * status and a body that is not a chat completion are not. Messages name the endpoint and the
 * status, never the API key, a header or any body content.
 *
 * @since 0.1.0
 */
import * as HttpClient from "@effect/platform/HttpClient"
import type * as HttpClientError from "@effect/platform/HttpClientError"
import * as HttpClientRequest from "@effect/platform/HttpClientRequest"
import * as Config from "effect/Config"
import type * as ConfigError from "effect/ConfigError"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as ParseResult from "effect/ParseResult"
import type * as Redacted from "effect/Redacted"
import * as Schema from "effect/Schema"
import { ModelError } from "@polyloop/core/Errors"
import type * as Message from "@polyloop/core/Message"
import { ModelClient, type ModelRequest, type ToolDefinition } from "@polyloop/core/ModelClient"
import * as ModelReply from "@polyloop/core/ModelReply"
import type { Json, ModelSettings } from "@polyloop/core/ModelSettings"
import * as Errors from "./internal/errors.js"

const source = "OpenAiCompatible"

/** OpenAI's API, the default base URL. */
export const defaultBaseUrl = "https://api.openai.com/v1"

/** One minute, the default cut of one request. */
export const defaultTimeout: Duration.Duration = Duration.seconds(60)

/** How to reach the server. */
export interface Options {
  /** The model, unless the request's `ModelSettings.model` names one (the agent's setting wins). */
  readonly model: string
  /** The API root, without `/chat/completions` (default `https://api.openai.com/v1`). */
  readonly baseUrl?: string | undefined
  /** Sent as `Authorization: Bearer …`; omit it for local servers that need none. */
  readonly apiKey?: Redacted.Redacted | undefined
  /** Cut of one request, answer body included (default 60 seconds); a cut is a retryable `ModelError`. */
  readonly timeout?: Duration.DurationInput | undefined
  /** Extra headers sent with every request (e.g. OpenRouter's `HTTP-Referer`, `X-Title`). */
  readonly headers?: Readonly<Record<string, string>> | undefined
}

/**
 * `Options` read from the environment: `POLYLOOP_MODEL` (required), `POLYLOOP_BASE_URL` (default
 * OpenAI), `POLYLOOP_API_KEY` (optional, redacted) and `POLYLOOP_TIMEOUT` (an Effect duration
 * such as `30 seconds` or `90000 millis`; default 60 seconds).
 */
export const config: Config.Config<Options> = Config.all({
  model: Config.nonEmptyString("POLYLOOP_MODEL"),
  baseUrl: Config.nonEmptyString("POLYLOOP_BASE_URL").pipe(Config.withDefault(defaultBaseUrl)),
  apiKey: Config.option(Config.redacted("POLYLOOP_API_KEY")).pipe(Config.map(Option.getOrUndefined)),
  timeout: Config.duration("POLYLOOP_TIMEOUT").pipe(Config.withDefault(defaultTimeout))
})

// -----------------------------------------------------------------------------
// Wire format (Chat Completions)
// -----------------------------------------------------------------------------

/** A tool call as the server returns it. Servers differ: `id` may be missing, `arguments` may be an object. */
const WireToolCall = Schema.Struct({
  id: Schema.optional(Schema.NullOr(Schema.String)),
  function: Schema.Struct({
    name: Schema.String,
    arguments: Schema.optional(Schema.Unknown)
  })
})

const WireUsage = Schema.Struct({
  prompt_tokens: Schema.optionalWith(Schema.NonNegativeInt, { default: () => 0 }),
  completion_tokens: Schema.optionalWith(Schema.NonNegativeInt, { default: () => 0 })
})

/** The part of a chat completion polyloop reads. */
const WireCompletion = Schema.Struct({
  choices: Schema.NonEmptyArray(
    Schema.Struct({
      message: Schema.Struct({
        content: Schema.optional(Schema.NullOr(Schema.String)),
        tool_calls: Schema.optional(Schema.NullOr(Schema.Array(WireToolCall)))
      }),
      finish_reason: Schema.optional(Schema.NullOr(Schema.String))
    })
  ),
  usage: Schema.optional(Schema.NullOr(WireUsage))
})

/** An error reported in a 2xx body (OpenRouter does this for upstream failures). */
const WireErrorBody = Schema.Struct({
  error: Schema.Struct({ code: Schema.optional(Schema.Unknown) })
})

const decodeJson = Schema.decodeUnknownEither(Schema.parseJson())
const decodeCompletion = Schema.decodeUnknownEither(WireCompletion)
const decodeErrorBody = Schema.decodeUnknownEither(WireErrorBody)

/** A Chat Completions message as sent. */
export type WireMessage =
  | { readonly role: "system" | "user"; readonly content: string }
  | {
    readonly role: "assistant"
    readonly content: string | null
    readonly tool_calls?: ReadonlyArray<{
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

/** A tool definition in Chat Completions form. */
export const toWireTool = (tool: ToolDefinition) => ({
  type: "function" as const,
  function: { name: tool.name, description: tool.description, parameters: tool.parameters }
})

/**
 * The request body: model, messages, tools and settings (`maxOutputTokens` as `max_tokens`);
 * `settings.extra` is merged last, verbatim, so it can add or override any field.
 */
export const toRequestBody = (request: ModelRequest, defaultModel: string): Record<string, unknown> => {
  const settings: ModelSettings = request.settings
  const extra: Readonly<Record<string, Json>> = settings.extra ?? {}
  return {
    model: settings.model ?? defaultModel,
    messages: request.messages.map(toWireMessage),
    ...(request.tools.length === 0 ? {} : { tools: request.tools.map(toWireTool) }),
    ...(settings.temperature === undefined ? {} : { temperature: settings.temperature }),
    ...(settings.topP === undefined ? {} : { top_p: settings.topP }),
    ...(settings.maxOutputTokens === undefined ? {} : { max_tokens: settings.maxOutputTokens }),
    ...(settings.seed === undefined ? {} : { seed: settings.seed }),
    ...(settings.stop === undefined ? {} : { stop: settings.stop }),
    ...extra
  }
}

const argumentsText = (value: unknown): string =>
  typeof value === "string" ? value : value === undefined || value === null ? "{}" : JSON.stringify(value)

/** Paths of the problems in a parse error, without the values found there (they are body content). */
const issuePaths = (error: ParseResult.ParseError): string => {
  const paths = ParseResult.ArrayFormatter.formatErrorSync(error).map((issue) =>
    issue.path.length === 0 ? "(root)" : issue.path.map(String).join(".")
  )
  return [...new Set(paths)].slice(0, 3).join(", ")
}

/**
 * Reads a 2xx body into a reply. A body that is not JSON or not a chat completion is a
 * non-retryable `ModelError`; an error object in the body is classified by its numeric code.
 */
export const parseCompletion = (body: string, endpoint: string): Either.Either<ModelReply.ModelReply, ModelError> => {
  const json = decodeJson(body)
  if (Either.isLeft(json)) {
    return Either.left(new ModelError({ retryable: false, message: `${source}: the answer of ${endpoint} is not JSON` }))
  }
  const completion = decodeCompletion(json.right)
  if (Either.isLeft(completion)) {
    const reported = decodeErrorBody(json.right)
    if (Either.isRight(reported)) {
      const code = reported.right.error.code
      return Either.left(
        typeof code === "number" && Number.isInteger(code) && code >= 400 && code <= 599
          ? Errors.statusError(source, endpoint, code)
          : new ModelError({ retryable: false, message: `${source}: ${endpoint} reported an error in its answer` })
      )
    }
    return Either.left(
      new ModelError({
        retryable: false,
        message: `${source}: the answer of ${endpoint} is not a chat completion (at ${issuePaths(completion.left)})`
      })
    )
  }
  const choice = completion.right.choices[0]
  const usage = completion.right.usage
  return Either.right(ModelReply.make({
    text: choice.message.content ?? "",
    toolCalls: (choice.message.tool_calls ?? []).map((call, index) => ({
      id: call.id ?? `call_${index}`,
      name: call.function.name,
      argumentsText: argumentsText(call.function.arguments)
    })),
    usage: usage === undefined || usage === null
      ? ModelReply.emptyUsage
      : { inputTokens: usage.prompt_tokens, outputTokens: usage.completion_tokens },
    ...(choice.finish_reason === undefined || choice.finish_reason === null ? {} : { finishReason: choice.finish_reason })
  }))
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
    const url = `${(options.baseUrl ?? defaultBaseUrl).replace(/\/+$/, "")}/chat/completions`
    const endpoint = Errors.describeEndpoint(url)
    const timeout = Duration.decode(options.timeout ?? defaultTimeout)
    const apiKey = options.apiKey
    const headers = options.headers
    const client = (yield* HttpClient.HttpClient).pipe(
      HttpClient.mapRequest((request) => {
        const withHeaders = headers === undefined ? request : HttpClientRequest.setHeaders(request, headers)
        const withKey = apiKey === undefined ? withHeaders : HttpClientRequest.bearerToken(withHeaders, apiKey)
        return HttpClientRequest.acceptJson(withKey)
      })
    )
    const toError = fromHttpError(endpoint)

    const generate = (request: ModelRequest): Effect.Effect<ModelReply.ModelReply, ModelError> => {
      const body = toRequestBody(request, options.model)
      return Effect.gen(function*() {
        const response = yield* client.execute(
          HttpClientRequest.bodyUnsafeJson(HttpClientRequest.post(url), body)
        ).pipe(Effect.mapError(toError))
        if (response.status < 200 || response.status >= 300) {
          // Drain the body so the connection is released; its content is never used.
          yield* Effect.ignore(response.text)
          return yield* Errors.statusError(source, endpoint, response.status)
        }
        const text = yield* response.text.pipe(Effect.mapError(toError))
        return yield* parseCompletion(text, endpoint)
      }).pipe(
        Effect.timeoutFail({ duration: timeout, onTimeout: () => Errors.timeoutError(source, endpoint, timeout) }),
        Effect.withSpan("OpenAiCompatible.generate", {
          attributes: { endpoint, model: String(body.model), messages: request.messages.length, tools: request.tools.length }
        })
      )
    }

    return ModelClient.of({ generate })
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
