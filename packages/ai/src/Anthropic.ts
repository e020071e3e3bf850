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
 * verbatim, last. The API has no `seed`: a request setting it is refused.
 *
 * Typed answers (design 0400, decision 6 amended): a request with an answer's schema
 * (`ModelRequest.output`, an agent with an output schema and `constrainOutput`) sends
 * `output_config: { format: { type: "json_schema", schema } }` — Anthropic's generally
 * available structured outputs (Claude Sonnet 4.5, Opus 4.5, Haiku 4.5 and later; an older
 * model refuses the request: set `constrainOutput: false`). The schema is rewritten to
 * Anthropic's subset (`toAnthropicSchema`); one it cannot express sends nothing. An
 * `output_config` in `extra` replaces it whole. The answer is decoded by polyloop either way.
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
import type { ModelClient, ModelRequest } from "@polyloop/core/ModelClient"
import type { Json } from "@polyloop/core/ModelSettings"
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

// -----------------------------------------------------------------------------
// Structured outputs (design 0400, decision 6 amended)
// -----------------------------------------------------------------------------

type JsonObject = { readonly [key: string]: Json }

const isJsonObject = (value: unknown): value is JsonObject =>
  typeof value === "object" && value !== null && !Array.isArray(value)

/** The string formats Anthropic's structured outputs accept (its documentation's list). */
const anthropicFormats: ReadonlySet<string> = new Set([
  "date-time",
  "time",
  "date",
  "duration",
  "email",
  "hostname",
  "uri",
  "ipv4",
  "ipv6",
  "uuid"
])

/** Keywords Anthropic cannot take and that cannot be dropped without changing what is allowed. */
const inexpressible: ReadonlySet<string> = new Set(["patternProperties", "propertyNames", "prefixItems", "unevaluatedProperties"])

/** Each member's schema rewritten, or undefined when one of them cannot be. */
const rewriteMembers = (value: Json): JsonObject | undefined => {
  if (!isJsonObject(value)) return undefined
  const out: Record<string, Json> = {}
  for (const [name, member] of Object.entries(value)) {
    const rewritten = rewriteNode(member)
    if (rewritten === undefined) return undefined
    out[name] = rewritten
  }
  return out
}

/** Each schema of a list rewritten, or undefined when one of them cannot be. */
const rewriteList = (value: Json): ReadonlyArray<Json> | undefined => {
  if (!Array.isArray(value)) return undefined
  const out: Array<Json> = []
  for (const item of value as ReadonlyArray<Json>) {
    const rewritten = rewriteNode(item)
    if (rewritten === undefined) return undefined
    out.push(rewritten)
  }
  return out
}

/** One schema node in Anthropic's subset, or undefined when it cannot be expressed there. */
const rewriteNode = (node: Json): Json | undefined => {
  if (!isJsonObject(node)) return undefined
  const kept: Record<string, Json> = {}
  const moved: Array<readonly [string, Json]> = []
  for (const [key, value] of Object.entries(node)) {
    if (inexpressible.has(key)) return undefined
    switch (key) {
      case "$ref":
      case "type":
      case "title":
      case "description":
      case "const":
      case "enum":
      case "required":
        kept[key] = value
        break
      case "$defs":
      case "definitions":
      case "properties": {
        const members = rewriteMembers(value)
        if (members === undefined) return undefined
        kept[key] = members
        break
      }
      case "items": {
        const items = rewriteNode(value)
        if (items === undefined) return undefined
        kept[key] = items
        break
      }
      case "anyOf":
      case "oneOf":
      case "allOf": {
        const list = rewriteList(value)
        if (list === undefined) return undefined
        kept[key === "oneOf" ? "anyOf" : key] = list
        break
      }
      case "additionalProperties":
        // Anthropic takes only `false`; a schema here (a record) cannot be said otherwise.
        if (value !== false) return undefined
        break
      case "format":
        if (typeof value === "string" && anthropicFormats.has(value)) kept[key] = value
        else moved.push([key, value])
        break
      case "minItems":
        if (value === 0 || value === 1) kept[key] = value
        else moved.push([key, value])
        break
      default:
        moved.push([key, value])
    }
  }
  const typed = ["type", "$ref", "anyOf", "allOf", "enum", "const"].some((key) => key in kept)
  if (!typed) return undefined
  const type = kept["type"]
  if (type === "object" || (Array.isArray(type) && type.includes("object"))) {
    // Any object (`Schema.Object`, `{ type: "object" }`): with `additionalProperties: false` it
    // could only be `{}`, which would make a wrong answer look right.
    if (!("properties" in kept) && node["additionalProperties"] !== false) return undefined
    kept["additionalProperties"] = false
  }
  if (moved.length > 0) {
    const description = kept["description"]
    const said = `{${moved.map(([key, value]) => `${key}: ${JSON.stringify(value)}`).join(", ")}}`
    kept["description"] = typeof description === "string" && description !== "" ? `${description}\n\n${said}` : said
  }
  return kept
}

/**
 * An answer's JSON Schema in the subset Anthropic's structured outputs accept, rewritten as
 * Anthropic's own SDKs do: the top-level `$schema` left out; `additionalProperties: false` on
 * every object; `oneOf` as `anyOf`; every other keyword outside the subset (`minimum`,
 * `maximum`, `exclusiveMinimum`, `multipleOf`, `minLength`, `maxLength`, `pattern`, `minItems`
 * other than 0 or 1, `maxItems`, a string format Anthropic does not know, `default`, …) moved
 * into the node's `description` as `{key: value, …}`. Undefined when the schema cannot be
 * expressed there at all: an object whose `additionalProperties` is not `false` (a record), an
 * object with no `properties` (`Schema.Object`), a node with no type (`Schema.Unknown`), pattern
 * properties, tuples. Polyloop decodes the answer
 * with the full schema, so what the rewritten schema no longer says is still checked.
 */
export const toAnthropicSchema = (schema: unknown): Json | undefined => {
  if (!isJsonObject(schema)) return undefined
  const { $schema: _ignored, ...rest } = schema
  return rewriteNode(rest)
}

/**
 * The request's `output_config` for an answer's schema (design 0400): `{ format: { type:
 * "json_schema", schema } }`, Anthropic's generally available structured outputs; undefined
 * when the schema cannot be expressed (`toAnthropicSchema`). Anthropic's format has no name and
 * no strict flag: both are left out.
 */
export const toOutputConfig = (output: NonNullable<ModelRequest["output"]>): JsonObject | undefined => {
  // Every model call of a run sends its agent's one schema object: rewritten once, not per call.
  const key = output.schema
  if (typeof key === "object" && key !== null && outputConfigs.has(key)) return outputConfigs.get(key)!.config
  const schema = toAnthropicSchema(key)
  const config: JsonObject | undefined = schema === undefined ? undefined : { format: { type: "json_schema", schema } }
  if (typeof key === "object" && key !== null) outputConfigs.set(key, { config })
  return config
}

/** `toOutputConfig`'s results by the schema object they were made from. */
const outputConfigs = new WeakMap<object, { readonly config: JsonObject | undefined }>()

/**
 * Applies `ModelSettings` to `AnthropicLanguageModel` for one call; refuses `seed`. A request
 * with an answer's schema (`ModelRequest.output`) sends `output_config` (`toOutputConfig`);
 * `settings.extra` is merged last, so an `output_config` there replaces it whole.
 */
export const applySettings = (maxTokens: number): AiModelClient.ApplySettings => (effect, settings, request) => {
  if (settings.seed !== undefined) {
    return new ModelError({ retryable: false, message: "Anthropic: the Messages API has no seed setting" })
  }
  const outputConfig = request?.output === undefined ? undefined : toOutputConfig(request.output)
  return AnthropicLanguageModel.withConfigOverride(effect, {
    ...(settings.model === undefined ? {} : { model: settings.model }),
    ...(settings.temperature === undefined ? {} : { temperature: settings.temperature }),
    ...(settings.topP === undefined ? {} : { top_p: settings.topP }),
    max_tokens: settings.maxOutputTokens ?? maxTokens,
    ...(settings.stop === undefined ? {} : { stop_sequences: settings.stop }),
    ...(outputConfig === undefined ? {} : { output_config: outputConfig }),
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
