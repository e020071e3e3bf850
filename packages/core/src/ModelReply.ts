/**
 * What the model returned, exactly as logged (design 0140): text, native tool calls, usage, the
 * finish reason in one vocabulary across providers with the provider's own word kept, and what
 * else a provider returns that the run must not lose (a refusal, reasoning text).
 *
 * Logs written before design 0140 held the provider's raw finish reason (`"tool_calls"`,
 * `"max_tokens"`, …) in `finishReason`: the schema still reads them (normalising the word and
 * keeping the raw one in `rawFinishReason`) and always writes the new shape.
 *
 * @since 0.1.0
 */
import * as Schema from "effect/Schema"
import { encodesAsItself } from "./internal/recordJson.js"

/**
 * Token usage of one model reply. `inputTokens` and `outputTokens` are what the provider bills
 * (cache reads and writes included in the input, reasoning included in the output); the
 * optional members are details *of* those two, never added to them.
 */
export const Usage = Schema.Struct({
  inputTokens: Schema.NonNegativeInt,
  outputTokens: Schema.NonNegativeInt,
  /** Input tokens read from the provider's prompt cache (part of `inputTokens`). */
  cachedInputTokens: Schema.optional(Schema.NonNegativeInt),
  /** Input tokens written to the provider's prompt cache (part of `inputTokens`; Anthropic bills them apart). */
  cacheWriteInputTokens: Schema.optional(Schema.NonNegativeInt),
  /** Output tokens spent on reasoning (part of `outputTokens`). */
  reasoningTokens: Schema.optional(Schema.NonNegativeInt)
})
/** @since 0.1.0 */
export interface Usage extends Schema.Schema.Type<typeof Usage> {}

/** No tokens. */
export const emptyUsage: Usage = { inputTokens: 0, outputTokens: 0 }

const addDetail = (a: number | undefined, b: number | undefined): number | undefined =>
  a === undefined ? b : b === undefined ? a : a + b

/** Sums two usages (a detail is kept when either side has it). */
export const addUsage = (a: Usage, b: Usage): Usage => {
  const cached = addDetail(a.cachedInputTokens, b.cachedInputTokens)
  const cacheWrite = addDetail(a.cacheWriteInputTokens, b.cacheWriteInputTokens)
  const reasoning = addDetail(a.reasoningTokens, b.reasoningTokens)
  return {
    inputTokens: a.inputTokens + b.inputTokens,
    outputTokens: a.outputTokens + b.outputTokens,
    ...(cached === undefined ? {} : { cachedInputTokens: cached }),
    ...(cacheWrite === undefined ? {} : { cacheWriteInputTokens: cacheWrite }),
    ...(reasoning === undefined ? {} : { reasoningTokens: reasoning })
  }
}

/** Total tokens of a usage: what the provider bills, reasoning and cache included. */
export const totalTokens = (usage: Usage): number => usage.inputTokens + usage.outputTokens

/**
 * Why the reply ended, in one vocabulary for every provider: `stop` (a natural end or a stop
 * sequence), `length` (the output token limit: the reply is cut off), `tool-calls`,
 * `content-filter` (the provider's filter or a refusal), `other`.
 */
export const FinishReason = Schema.Literal("stop", "length", "tool-calls", "content-filter", "other")
/** @since 0.1.0 */
export type FinishReason = typeof FinishReason.Type

const finishReasons: Readonly<Record<string, FinishReason>> = {
  stop: "stop",
  end_turn: "stop",
  stop_sequence: "stop",
  eos: "stop",
  eos_token: "stop",
  length: "length",
  max_tokens: "length",
  max_output_tokens: "length",
  model_length: "length",
  model_context_window_exceeded: "length",
  tool_calls: "tool-calls",
  "tool-calls": "tool-calls",
  tool_use: "tool-calls",
  function_call: "tool-calls",
  content_filter: "content-filter",
  "content-filter": "content-filter",
  refusal: "content-filter",
  safety: "content-filter",
  recitation: "content-filter",
  blocklist: "content-filter",
  prohibited_content: "content-filter",
  spii: "content-filter",
  image_safety: "content-filter"
}

/** The normalised word for a provider's finish reason (case-insensitive; unknown words are `other`). */
export const normaliseFinishReason = (raw: string): FinishReason => {
  // An own key only: a provider's word such as "constructor" is not the table's prototype.
  const key = raw.toLowerCase()
  return Object.hasOwn(finishReasons, key) ? finishReasons[key]! : "other"
}

/** A native tool call as the model returned it: the arguments are raw text, not yet parsed. */
export const ModelToolCall = Schema.Struct({
  id: Schema.String,
  name: Schema.String,
  argumentsText: Schema.String
})
/** @since 0.1.0 */
export interface ModelToolCall extends Schema.Schema.Type<typeof ModelToolCall> {}

const replyFields = {
  text: Schema.String,
  toolCalls: Schema.Array(ModelToolCall),
  usage: Usage,
  /** The provider's refusal, when it refused (also the `text` when the reply has no other text). */
  refusal: Schema.optional(Schema.String),
  /** The model's reasoning text, when the provider returns it (`reasoning_content`, `reasoning`, thinking). */
  reasoning: Schema.optional(Schema.String),
  /** The provider's own finish reason, when it is not the normalised word itself. */
  rawFinishReason: Schema.optional(Schema.String)
}

/** The reply as it is now: `finishReason` normalised. */
const ReplyType = Schema.Struct({ ...replyFields, finishReason: Schema.optional(FinishReason) })

/** The reply as logs hold it: any finish-reason word (logs before design 0140 hold the provider's). */
const ReplyEncoded = Schema.Struct({ ...replyFields, finishReason: Schema.optional(Schema.String) })

/**
 * A model reply: text, native tool calls, usage, the normalised finish reason and the raw one,
 * refusal and reasoning. Decodes the pre-0140 shape too (see the module header).
 */
export const ModelReply = Schema.transform(ReplyEncoded, ReplyType, {
  strict: true,
  decode: (encoded) => {
    const { finishReason, ...rest } = encoded
    // An absent reason stays absent, an explicit `undefined` stays explicit.
    if (finishReason === undefined) return "finishReason" in encoded ? { ...rest, finishReason } : rest
    const normalised = normaliseFinishReason(finishReason)
    if (normalised === finishReason || encoded.rawFinishReason !== undefined) return { ...rest, finishReason: normalised }
    return { ...rest, finishReason: normalised, rawFinishReason: finishReason }
  },
  encode: (reply) => reply
  // Its encode is the identity and a reply in today's shape decodes as itself: the run log's
  // writer may write it without Schema (`internal/recordJson.ts`; tested in RunLogStore.test.ts).
}).annotations({ [encodesAsItself]: true })
/** @since 0.1.0 */
export interface ModelReply extends Schema.Schema.Type<typeof ModelReply> {}

/** Makes a reply; omitted fields default to no tool calls and no usage. A raw finish reason is normalised, the raw word kept. */
export const make = (fields: {
  readonly text?: string
  readonly toolCalls?: ReadonlyArray<ModelToolCall>
  readonly usage?: Usage
  /** The provider's finish reason, raw or already normalised. */
  readonly finishReason?: string | undefined
  readonly refusal?: string | undefined
  readonly reasoning?: string | undefined
}): ModelReply => {
  const normalised = fields.finishReason === undefined ? undefined : normaliseFinishReason(fields.finishReason)
  return {
    text: fields.text ?? "",
    toolCalls: fields.toolCalls ?? [],
    usage: fields.usage ?? emptyUsage,
    ...(fields.refusal === undefined ? {} : { refusal: fields.refusal }),
    ...(fields.reasoning === undefined ? {} : { reasoning: fields.reasoning }),
    // In the schema's order (`rawFinishReason` before `finishReason`): the log's writer then
    // writes the reply without Schema (`internal/recordJson.ts`).
    ...(normalised === undefined || normalised === fields.finishReason ? {} : { rawFinishReason: fields.finishReason }),
    ...(normalised === undefined ? {} : { finishReason: normalised })
  }
}

/** Whether the reply was cut off by the output token limit. */
export const isTruncated = (reply: ModelReply): boolean => reply.finishReason === "length"

const vocabulary: ReadonlySet<unknown> = new Set<unknown>(FinishReason.literals)

/**
 * A reply as stored, read without running the schema (the store's trusted read path): a
 * pre-0140 raw finish reason is normalised with the raw word moved to `rawFinishReason`, as the
 * schema's decoding does; a reply in today's shape is returned as it is (one lookup).
 */
export const fromStored = <A extends { readonly finishReason?: unknown; readonly rawFinishReason?: unknown }>(reply: A): A => {
  const finishReason = reply.finishReason
  if (finishReason === undefined || typeof finishReason !== "string" || vocabulary.has(finishReason)) return reply
  return {
    ...reply,
    finishReason: normaliseFinishReason(finishReason),
    ...(reply.rawFinishReason === undefined ? { rawFinishReason: finishReason } : {})
  }
}
