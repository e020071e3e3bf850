/**
 * The model port. A `ModelClient` turns a request (history, tool definitions, settings) into a
 * reply. It never sees the run log.
 *
 * Contract: `generate` fails only with `ModelError`; `retryable` is true for transport
 * failures, rate limits (429) and server errors (5xx), false for every other rejection.
 * Interrupting `generate` aborts the call in flight.
 *
 * A client may also `stream` the reply (design 0180): a `Stream` of `ModelDelta`s whose fold
 * (`ModelDelta.fold`) is exactly the reply `generate` returns for the same content. A stream cut
 * before its end is a retryable `ModelError`; interrupting its consumption aborts the call.
 *
 * @since 0.1.0
 */
import * as Context from "effect/Context"
import type * as Effect from "effect/Effect"
import * as FiberRef from "effect/FiberRef"
import { globalValue } from "effect/GlobalValue"
import * as Layer from "effect/Layer"
import * as Schema from "effect/Schema"
import * as Stream from "effect/Stream"
import type { ModelError } from "./Errors.js"
import { JsonValue } from "./internal/jsonValue.js"
import { Message } from "./Message.js"
import * as ModelDelta from "./ModelDelta.js"
import type { ModelReply } from "./ModelReply.js"
import { ModelSettings } from "./ModelSettings.js"

/** A tool as the model sees it: name, description and the JSON Schema of its parameters. */
export const ToolDefinition = Schema.Struct({
  name: Schema.String,
  description: Schema.String,
  parameters: JsonValue
})
/** @since 0.1.0 */
export interface ToolDefinition extends Schema.Schema.Type<typeof ToolDefinition> {}

/**
 * What the loop sends to the model each step. A value: the loop never changes a request after
 * handing it to a client (its `messages` are a read-only array: copy them to change them).
 */
export const ModelRequest = Schema.Struct({
  messages: Schema.Array(Message),
  tools: Schema.Array(ToolDefinition),
  settings: ModelSettings,
  /**
   * False when the agent takes one action per step (`AgentDefinition.parallelToolCalls`): a
   * client asks the provider for at most one tool call per reply where the provider has such a
   * setting (`parallel_tool_calls: false`). Absent or true: the provider's default.
   */
  parallelToolCalls: Schema.optional(Schema.Boolean),
  /**
   * The answer's schema when the agent has one and asks the provider to constrain its text
   * (design 0400): a client sends it where the provider has such a setting (Chat Completions'
   * `response_format` json_schema, the Responses API's `text.format`, Anthropic's
   * `output_config.format`); absent: nothing asked.
   */
  output: Schema.optional(Schema.Struct({ name: Schema.String, schema: JsonValue, strict: Schema.Boolean }))
})
/** @since 0.1.0 */
export interface ModelRequest extends Schema.Schema.Type<typeof ModelRequest> {}

/** The model port. */
export class ModelClient extends Context.Tag("@polyloop/core/ModelClient")<ModelClient, ModelClient.Service>() {}

/** @since 0.1.0 */
export declare namespace ModelClient {
  /** @since 0.1.0 */
  export interface Service {
    readonly generate: (request: ModelRequest) => Effect.Effect<ModelReply, ModelError>
    /** The reply as it arrives (optional): its deltas fold into what `generate` returns. */
    readonly stream?: (request: ModelRequest) => Stream.Stream<ModelDelta.ModelDelta, ModelError>
  }
}

/** Makes a `ModelClient` service from its `generate` function (and its `stream`, if it streams). */
export const make = (
  generate: ModelClient.Service["generate"],
  stream?: ModelClient.Service["stream"]
): ModelClient.Service => (stream === undefined ? { generate } : { generate, stream })

/** A layer from a `generate` function (and a `stream` function, if the client streams). */
export const layer = (
  generate: ModelClient.Service["generate"],
  stream?: ModelClient.Service["stream"]
): Layer.Layer<ModelClient> => Layer.succeed(ModelClient, make(generate, stream))

/**
 * Which call of a run the loop is making (design 0300): the step, and whether it is the step's
 * request (`"Step"`) or a history summary's (`"Summary"`). Set by the loop around each model call
 * of a run whose history policy can compact (the step is then not the number of `Assistant`
 * messages of the request, which is the step otherwise); `Replay.model` and the scripted model
 * read it. Unset (`undefined`) otherwise: keep-everything and mask-only runs pay nothing for it.
 */
export interface ModelCall {
  readonly runId: string
  readonly step: number
  readonly purpose: "Step" | "Summary"
}

/** The model call in progress (see `ModelCall`). */
export const currentCall: FiberRef.FiberRef<ModelCall | undefined> = globalValue(
  Symbol.for("@polyloop/core/ModelClient/currentCall"),
  () => FiberRef.unsafeMake<ModelCall | undefined>(undefined)
)

/** Whether the client streams its replies itself. */
export const streams = (client: ModelClient.Service): boolean => client.stream !== undefined

/**
 * The reply of a request as a stream of deltas: the client's own `stream`, or, for a client
 * that does not stream, the whole reply of `generate` as one burst of deltas.
 */
export const streamOf = (client: ModelClient.Service) => (request: ModelRequest): Stream.Stream<ModelDelta.ModelDelta, ModelError> =>
  client.stream !== undefined
    ? client.stream(request)
    : Stream.flatMap(Stream.fromEffect(client.generate(request)), (reply) => Stream.fromIterable(ModelDelta.fromReply(reply)))
