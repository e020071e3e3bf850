/**
 * The model port. A `ModelClient` turns a request (history, tool definitions, settings) into a
 * reply. It never sees the run log.
 *
 * Contract: `generate` fails only with `ModelError`; `retryable` is true for transport
 * failures, rate limits (429) and server errors (5xx), false for every other rejection.
 * Interrupting `generate` aborts the call in flight.
 *
 * @since 0.1.0
 */
import * as Context from "effect/Context"
import type * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Schema from "effect/Schema"
import type { ModelError } from "./Errors.js"
import { JsonValue } from "./internal/jsonValue.js"
import { Message } from "./Message.js"
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
  parallelToolCalls: Schema.optional(Schema.Boolean)
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
  }
}

/** Makes a `ModelClient` service from its `generate` function. */
export const make = (generate: ModelClient.Service["generate"]): ModelClient.Service => ({ generate })

/** A layer from a `generate` function. */
export const layer = (generate: ModelClient.Service["generate"]): Layer.Layer<ModelClient> =>
  Layer.succeed(ModelClient, make(generate))
