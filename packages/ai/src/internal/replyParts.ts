/**
 * Reading what `@effect/ai` response parts carry beyond text and tool calls (design 0140): the
 * usage as billed (Anthropic's cache reads and writes folded into the input), a refusal (an
 * empty text part with `metadata.openai.refusal`) and reasoning text.
 *
 * @internal
 */
import type * as ModelReply from "@polyloop/core/ModelReply"

const tokens = (value: number | undefined): number =>
  value === undefined || !Number.isFinite(value) || value < 0 ? 0 : Math.round(value)

const optionalTokens = (value: unknown): number | undefined =>
  typeof value === "number" && Number.isFinite(value) && value >= 0 ? Math.round(value) : undefined

const isRecord = (value: unknown): value is Readonly<Record<string, unknown>> =>
  typeof value === "object" && value !== null && !Array.isArray(value)

/** `metadata[provider][key]` of a part, when the provider put it there. */
/** @internal */
export const metadataOf = (part: unknown, provider: string, key: string): unknown => {
  if (!isRecord(part) || !isRecord(part.metadata)) return undefined
  const byProvider = part.metadata[provider]
  return isRecord(byProvider) ? byProvider[key] : undefined
}

/**
 * The usage as billed, from the finish part's counts and, for Anthropic, its raw usage (which
 * counts cache reads and cache writes outside `input_tokens`): cache tokens folded into
 * `inputTokens`, reasoning and cache counts kept as details (design 0140).
 */
/** @internal */
export const billedUsage = (
  usage: { readonly inputTokens?: number | undefined; readonly outputTokens?: number | undefined; readonly reasoningTokens?: number | undefined; readonly cachedInputTokens?: number | undefined },
  anthropicUsage: unknown
): ModelReply.Usage => {
  const raw = isRecord(anthropicUsage) ? anthropicUsage : undefined
  const cacheRead = raw === undefined ? undefined : optionalTokens(raw.cache_read_input_tokens)
  const cacheWrite = raw === undefined ? undefined : optionalTokens(raw.cache_creation_input_tokens)
  const cached = cacheRead ?? optionalTokens(usage.cachedInputTokens)
  const reasoning = optionalTokens(usage.reasoningTokens)
  return {
    inputTokens: tokens(usage.inputTokens) + (raw === undefined ? 0 : (cacheRead ?? 0) + (cacheWrite ?? 0)),
    outputTokens: tokens(usage.outputTokens),
    ...(cached === undefined ? {} : { cachedInputTokens: cached }),
    ...(cacheWrite === undefined || cacheWrite === 0 ? {} : { cacheWriteInputTokens: cacheWrite }),
    ...(reasoning === undefined ? {} : { reasoningTokens: reasoning })
  }
}

/** Text, refusal and reasoning of a response's parts (the refusal is an empty text part with `metadata.openai.refusal`). */
/** @internal */
export const textsOf = (parts: ReadonlyArray<unknown>) => {
  const refusals: Array<string> = []
  const reasoning: Array<string> = []
  let anthropicUsage: unknown
  for (const part of parts) {
    if (!isRecord(part)) continue
    const refusal = metadataOf(part, "openai", "refusal")
    if (part.type === "text" && typeof refusal === "string" && refusal !== "") refusals.push(refusal)
    if (part.type === "reasoning" && typeof part.text === "string" && part.text !== "") reasoning.push(part.text)
    if (part.type === "finish") anthropicUsage = metadataOf(part, "anthropic", "usage")
  }
  return {
    refusal: refusals.length === 0 ? undefined : refusals.join("\n"),
    reasoning: reasoning.length === 0 ? undefined : reasoning.join("\n"),
    anthropicUsage
  }
}

