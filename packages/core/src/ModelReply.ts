/**
 * What the model returned, exactly as logged.
 *
 * @since 0.1.0
 */
import * as Schema from "effect/Schema"

/** Token usage of one model reply. */
export const Usage = Schema.Struct({
  inputTokens: Schema.NonNegativeInt,
  outputTokens: Schema.NonNegativeInt
})
/** @since 0.1.0 */
export interface Usage extends Schema.Schema.Type<typeof Usage> {}

/** No tokens. */
export const emptyUsage: Usage = { inputTokens: 0, outputTokens: 0 }

/** Sums two usages. */
export const addUsage = (a: Usage, b: Usage): Usage => ({
  inputTokens: a.inputTokens + b.inputTokens,
  outputTokens: a.outputTokens + b.outputTokens
})

/** Total tokens of a usage. */
export const totalTokens = (usage: Usage): number => usage.inputTokens + usage.outputTokens

/** A native tool call as the model returned it: the arguments are raw text, not yet parsed. */
export const ModelToolCall = Schema.Struct({
  id: Schema.String,
  name: Schema.String,
  argumentsText: Schema.String
})
/** @since 0.1.0 */
export interface ModelToolCall extends Schema.Schema.Type<typeof ModelToolCall> {}

/** A model reply: text, native tool calls, usage and the provider's finish reason. */
export const ModelReply = Schema.Struct({
  text: Schema.String,
  toolCalls: Schema.Array(ModelToolCall),
  usage: Usage,
  finishReason: Schema.optional(Schema.String)
})
/** @since 0.1.0 */
export interface ModelReply extends Schema.Schema.Type<typeof ModelReply> {}

/** Makes a reply; omitted fields default to no tool calls and no usage. */
export const make = (fields: {
  readonly text?: string
  readonly toolCalls?: ReadonlyArray<ModelToolCall>
  readonly usage?: Usage
  readonly finishReason?: string
}): ModelReply => ({
  text: fields.text ?? "",
  toolCalls: fields.toolCalls ?? [],
  usage: fields.usage ?? emptyUsage,
  ...(fields.finishReason === undefined ? {} : { finishReason: fields.finishReason })
})
