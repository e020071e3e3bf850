/**
 * A `ModelClient` for Anthropic's Messages API (`POST <baseUrl>/v1/messages`) through
 * `@effect/ai-anthropic` (`AnthropicClient` + `AnthropicLanguageModel`) and `AiModelClient`,
 * configured in code (`layer`) or from `Config` (`layerConfig`: `POLYLOOP_MODEL`,
 * `POLYLOOP_API_KEY`, `POLYLOOP_BASE_URL`, `POLYLOOP_TIMEOUT`).
 *
 * What the Messages API needs is done by the adapter and the provider: polyloop's tool calls
 * become `tool_use` blocks and each `Tool` message a `tool_result` block answering its
 * `tool_use_id`, its content the observation text as it is (`@effect/ai-anthropic` JSON-encodes
 * it; the request is corrected before it leaves); `stop_reason` is normalised (`end_turn` → `stop`, `max_tokens` → `length`,
 * `tool_use` → `tool-calls`, `refusal` → `content-filter`); thinking blocks are kept as the
 * reply's reasoning; the usage counts cache reads and writes as input (Anthropic reports them
 * outside `input_tokens`). `overloaded_error` (529) and 429 are retryable, with the
 * `retry-after` hint honoured; `request-id` is kept.
 *
 * Settings: `model`, `temperature`, `topP`, `maxOutputTokens` (as `max_tokens`, which the API
 * requires: default `defaultMaxTokens`), `stop` (as `stop_sequences`); `extra` is merged
 * verbatim. The API has no `seed`: a request setting it is refused.
 *
 * @since 0.1.0
 */
import * as AnthropicClient from "@effect/ai-anthropic/AnthropicClient"
import * as AnthropicLanguageModel from "@effect/ai-anthropic/AnthropicLanguageModel"
import type * as HttpClient from "@effect/platform/HttpClient"
import * as Config from "effect/Config"
import type * as ConfigError from "effect/ConfigError"
import type * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import type * as Redacted from "effect/Redacted"
import { ModelError } from "@polyloop/core/Errors"
import type { ModelClient } from "@polyloop/core/ModelClient"
import * as AiModelClient from "./AiModelClient.js"
import * as ToolResults from "./internal/toolResults.js"
import * as OpenAiCompatible from "./OpenAiCompatible.js"

/** Anthropic's API root. */
export const defaultBaseUrl = "https://api.anthropic.com"

/** The output limit sent when the request sets none (the API requires one). */
export const defaultMaxTokens = 4096

/** How to reach Anthropic. */
export interface Options {
  /** The model, unless the request's `ModelSettings.model` names one. */
  readonly model: string
  /** Sent as `x-api-key`. */
  readonly apiKey?: Redacted.Redacted | undefined
  /** The API root, without `/v1/messages` (default `https://api.anthropic.com`). */
  readonly baseUrl?: string | undefined
  /** Cut of one call (default 60 seconds); a cut is a retryable `ModelError`. */
  readonly timeout?: Duration.DurationInput | undefined
  /** `max_tokens` when the request sets no `maxOutputTokens` (default 4096). */
  readonly maxTokens?: number | undefined
}

/** `Options` from the `POLYLOOP_*` variables (`POLYLOOP_BASE_URL` defaults to Anthropic's). */
export const config: Config.Config<Options> = Config.all({
  model: Config.nonEmptyString("POLYLOOP_MODEL"),
  baseUrl: Config.nonEmptyString("POLYLOOP_BASE_URL").pipe(Config.withDefault(defaultBaseUrl)),
  apiKey: Config.option(Config.redacted("POLYLOOP_API_KEY")).pipe(Config.map(Option.getOrUndefined)),
  timeout: Config.duration("POLYLOOP_TIMEOUT").pipe(Config.withDefault(OpenAiCompatible.defaultTimeout))
})

/** Applies `ModelSettings` to `AnthropicLanguageModel` for one call; refuses `seed`. */
export const applySettings = (maxTokens: number): AiModelClient.ApplySettings => (effect, settings) => {
  if (settings.seed !== undefined) {
    return new ModelError({ retryable: false, message: "Anthropic: the Messages API has no seed setting" })
  }
  return AnthropicLanguageModel.withConfigOverride(effect, {
    ...(settings.model === undefined ? {} : { model: settings.model }),
    ...(settings.temperature === undefined ? {} : { temperature: settings.temperature }),
    ...(settings.topP === undefined ? {} : { top_p: settings.topP }),
    max_tokens: settings.maxOutputTokens ?? maxTokens,
    ...(settings.stop === undefined ? {} : { stop_sequences: settings.stop }),
    ...settings.extra
  })
}

/** The `ModelClient` layer; needs an `HttpClient` (e.g. `NodeHttpClient.layerUndici`). */
export const layer = (options: Options): Layer.Layer<ModelClient, never, HttpClient.HttpClient> =>
  AiModelClient.layer({
    applySettings: applySettings(options.maxTokens ?? defaultMaxTokens),
    timeout: options.timeout ?? OpenAiCompatible.defaultTimeout
  }).pipe(
    Layer.provide(AnthropicLanguageModel.layer({ model: options.model })),
    Layer.provide(AnthropicClient.layer({
      apiKey: options.apiKey,
      apiUrl: options.baseUrl ?? defaultBaseUrl,
      transformClient: ToolResults.fixingBodies(ToolResults.unwrapMessagesBody)
    }))
  )

/** The `ModelClient` layer configured from `Config` (by default the `POLYLOOP_*` variables). */
export const layerConfig = (
  options: Config.Config.Wrap<Options> = config
): Layer.Layer<ModelClient, ConfigError.ConfigError, HttpClient.HttpClient> =>
  Layer.unwrapEffect(Effect.map(Config.unwrap(options), layer))
