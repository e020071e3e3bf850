/**
 * A `ModelClient` for OpenAI's Responses API (`POST <baseUrl>/responses`) through
 * `@effect/ai-openai` (`OpenAiClient` + `OpenAiLanguageModel`) and `AiModelClient`: the
 * `@effect/ai` provider route, with the request's `ModelSettings` applied per call
 * (`model`, `temperature`, `topP`, `maxOutputTokens`; `extra` merged verbatim into the
 * Responses request). `seed` and `stop` do not exist in the Responses API: a request that sets
 * them fails with a non-retryable `ModelError` rather than running with them ignored.
 *
 * Typed answers (design 0400, decision 6 amended): a request with an answer's schema
 * (`ModelRequest.output`) sends `text: { format: { type: "json_schema", name, schema, strict } }`.
 * `@effect/ai-openai` writes `text.format` itself, so the format is written into the body by
 * the client's transform, from a `FiberRef` `applySettings` sets for the call (a stream's fiber
 * inherits it). A `text.format` in `extra` is sent instead (`extra`'s `text.verbosity` too).
 *
 * A tool's result is sent in `function_call_output` as the observation text itself:
 * `@effect/ai-openai` JSON-encodes every result, so the client's requests are corrected before
 * they leave (`unwrapToolOutputs`), or the model would read `"\"sunny\""` for `sunny`.
 *
 * For servers that speak only Chat Completions (vLLM, Ollama, LM Studio, most gateways), use
 * `OpenAiCompatible`.
 *
 * @since 0.1.0
 */
import * as OpenAiClient from "@effect/ai-openai/OpenAiClient"
import * as OpenAiLanguageModel from "@effect/ai-openai/OpenAiLanguageModel"
import * as HttpClient from "@effect/platform/HttpClient"
import * as Config from "effect/Config"
import type * as ConfigError from "effect/ConfigError"
import type * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as FiberRef from "effect/FiberRef"
import { globalValue } from "effect/GlobalValue"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import type * as Redacted from "effect/Redacted"
import { ModelError } from "@polyloop/core/Errors"
import type { ModelClient, ModelRequest } from "@polyloop/core/ModelClient"
import type { ModelSettings } from "@polyloop/core/ModelSettings"
import * as AiModelClient from "./AiModelClient.js"
import * as ToolResults from "./internal/toolResults.js"
import * as OpenAiCompatible from "./OpenAiCompatible.js"

/** How to reach OpenAI (or a server that serves its Responses API). */
export interface Options {
  /** The model, unless the request's `ModelSettings.model` names one (the agent's setting wins). */
  readonly model: string
  /** The API root, without `/responses` (default `https://api.openai.com/v1`). */
  readonly baseUrl?: string | undefined
  /** Sent as `Authorization: Bearer …`. */
  readonly apiKey?: Redacted.Redacted | undefined
  /** Cut of one call (default 60 seconds); a cut is a retryable `ModelError`. */
  readonly timeout?: Duration.DurationInput | undefined
  /**
   * Send tool schemas with OpenAI's `strict: true` (default false: strict mode rejects schemas
   * with optional properties, which tool registries commonly derive).
   */
  readonly strict?: boolean | undefined
}

/** The same `POLYLOOP_*` variables as `OpenAiCompatible.config`. */
export const config: Config.Config<Options> = Config.all({
  model: Config.nonEmptyString("POLYLOOP_MODEL"),
  baseUrl: Config.nonEmptyString("POLYLOOP_BASE_URL").pipe(Config.withDefault(OpenAiCompatible.defaultBaseUrl)),
  apiKey: Config.option(Config.redacted("POLYLOOP_API_KEY")).pipe(Config.map(Option.getOrUndefined)),
  timeout: Config.duration("POLYLOOP_TIMEOUT").pipe(Config.withDefault(OpenAiCompatible.defaultTimeout))
})

// -----------------------------------------------------------------------------
// Structured outputs (design 0400, decision 6 amended)
// -----------------------------------------------------------------------------

const isRecord = (value: unknown): value is Readonly<Record<string, unknown>> =>
  typeof value === "object" && value !== null && !Array.isArray(value)

/**
 * The `text.format` of the call under way, if it sets one: set by `applySettings` for the call
 * (`Effect.locally`), read by the client's transform when the request is made. A `FiberRef`,
 * because `@effect/ai-openai` writes `text.format` itself from `@effect/ai`'s response format
 * (text, for `generateText`) and its config cannot set it; a stream's fiber, forked inside the
 * call, inherits it.
 */
const currentTextFormat: FiberRef.FiberRef<Option.Option<unknown>> = globalValue(
  Symbol.for("@polyloop/ai/OpenAiResponses/currentTextFormat"),
  () => FiberRef.unsafeMake<Option.Option<unknown>>(Option.none())
)

/**
 * An answer's schema as the Responses API's `text.format`: `{ type: "json_schema", name,
 * schema, strict }`, the schema's top-level `$schema` left out (as `OpenAiCompatible`'s
 * `response_format`).
 */
export const toTextFormat = (output: NonNullable<ModelRequest["output"]>) => ({
  type: "json_schema" as const,
  ...OpenAiCompatible.toResponseFormat(output).json_schema
})

/** The `text.format` set in `settings.extra`, if any. */
const extraTextFormat = (extra: ModelSettings["extra"]): Option.Option<unknown> => {
  const text: unknown = extra?.["text"]
  return isRecord(text) && "format" in text ? Option.some(text["format"]) : Option.none()
}

/** A Responses request body with `text.format` set to `format` (`text`'s other members kept). */
export const withTextFormat = (body: unknown, format: unknown): unknown =>
  isRecord(body) ? { ...body, text: { ...(isRecord(body["text"]) ? body["text"] : {}), format } } : body

/**
 * The client's transform: tool results corrected (`unwrapToolOutputs`), then the call's
 * `text.format`, if it sets one, written into the body.
 */
const transformClient = (client: HttpClient.HttpClient): HttpClient.HttpClient =>
  HttpClient.mapRequestEffect(ToolResults.fixingBodies(ToolResults.unwrapResponsesBody)(client), (request) =>
    Effect.map(FiberRef.get(currentTextFormat), (format) =>
      Option.isNone(format) ? request : ToolResults.mapJsonBody(request, (body) => withTextFormat(body, format.value))))

/**
 * Applies `ModelSettings` to `OpenAiLanguageModel` for one call; refuses `seed` and `stop`. An
 * agent that takes one action per step (`parallelToolCalls: false`) sends
 * `parallel_tool_calls: false` when the request has tools (design 0150). A request with an
 * answer's schema (`ModelRequest.output`) sends `text.format` (`toTextFormat`, design 0400);
 * a `text.format` in `settings.extra` is sent instead (with or without an answer's schema).
 */
export const applySettings: AiModelClient.ApplySettings = (effect, settings, request) => {
  const unsupported = [
    ...(settings.seed === undefined ? [] : ["seed"]),
    ...(settings.stop === undefined ? [] : ["stop"])
  ]
  if (unsupported.length > 0) {
    return new ModelError({
      retryable: false,
      message: `OpenAiResponses: the Responses API has no ${unsupported.join(" or ")} setting`
    })
  }
  const configured = OpenAiLanguageModel.withConfigOverride(effect, {
    ...(settings.model === undefined ? {} : { model: settings.model }),
    ...(settings.temperature === undefined ? {} : { temperature: settings.temperature }),
    ...(settings.topP === undefined ? {} : { top_p: settings.topP }),
    ...(settings.maxOutputTokens === undefined ? {} : { max_output_tokens: settings.maxOutputTokens }),
    ...(request?.parallelToolCalls === false && request.tools.length > 0 ? { parallel_tool_calls: false } : {}),
    ...settings.extra
  })
  const format = Option.orElse(
    extraTextFormat(settings.extra),
    (): Option.Option<unknown> => (request?.output === undefined ? Option.none() : Option.some(toTextFormat(request.output)))
  )
  return Option.isNone(format) ? configured : Effect.locally(configured, currentTextFormat, format)
}

/**
 * A Responses request body with each `function_call_output`'s `output` decoded once when it is a
 * JSON-encoded string (what `@effect/ai-openai` sends for a string result): the observation text
 * as it is; and each past assistant message of text only sent as an `EasyInputMessage` (its
 * text as `content`, design 0300). Anything else is left as it is.
 */
export const unwrapToolOutputs: (body: unknown) => unknown = ToolResults.unwrapResponsesBody

/** The `ModelClient` layer; needs an `HttpClient` (e.g. `NodeHttpClient.layerUndici`). */
export const layer = (options: Options): Layer.Layer<ModelClient, never, HttpClient.HttpClient> =>
  AiModelClient.layer({ applySettings, timeout: options.timeout ?? OpenAiCompatible.defaultTimeout }).pipe(
    Layer.provide(OpenAiLanguageModel.layer({ model: options.model, config: { strict: options.strict ?? false } })),
    Layer.provide(OpenAiClient.layer({
      apiKey: options.apiKey,
      apiUrl: options.baseUrl ?? OpenAiCompatible.defaultBaseUrl,
      transformClient
    }))
  )

/** The `ModelClient` layer configured from `Config` (by default the `POLYLOOP_*` variables). */
export const layerConfig = (
  options: Config.Config.Wrap<Options> = config
): Layer.Layer<ModelClient, ConfigError.ConfigError, HttpClient.HttpClient> =>
  Layer.unwrapEffect(Effect.map(Config.unwrap(options), layer))
