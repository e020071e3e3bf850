/**
 * History policies (design 0300): what the model is sent of a run's history, as a pure function
 * of the log. The log keeps every reply and observation in full; a policy changes only the
 * requests. A policy is part of the agent definition and of the snapshot, so changing it is
 * drift (refused on resume, recorded on fork).
 *
 * - `keepAll` (the default): every reply and observation, as before — byte for byte.
 * - `maskObservations({ keepLast, every })`: the answers of the steps before a boundary are
 *   replaced by a deterministic placeholder naming what was omitted
 *   (`[output of read_file omitted: 412 lines, 18304 characters]`). The boundary is
 *   `max(0, ⌊(step − keepLast) / every⌋ · every)`: it moves every `every` steps, so between two
 *   moves each request extends the previous one (provider prompt caches keep working). The
 *   system prompt, the task, each `Assistant` message and its call ids are never changed, so a
 *   call is never separated from its answer; an answer no longer than its placeholder is kept.
 * - `fitTokens({ window, headroom, tokenizer, trimTo })`: when a request would count more than
 *   `window − headroom` tokens, whole steps are dropped, oldest first, down to
 *   `trimTo · (window − headroom)`, and replaced by one note (`[steps 0–39 omitted: 40 steps]`);
 *   the system prompt, the task and the last step are never dropped. Each drop is a
 *   `HistoryCompacted` record in the log, written before the request that uses it.
 * - `compose(mask, fit)`: masking first, the budget counted over the masked requests.
 *
 * Every policy but `keepAll` can shrink a request a provider refuses as too long
 * (`context_length_exceeded`): the emergency step drops every step but the last, recorded, and
 * the model call is made again once (design 0300, decision 4).
 *
 * @since 0.2.0
 */
import * as Schema from "effect/Schema"

/** Every reply and observation, as logged. */
export const KeepAll = Schema.TaggedStruct("KeepAll", {})
/** @since 0.2.0 */
export interface KeepAll extends Schema.Schema.Type<typeof KeepAll> {}

/** Old observations masked in blocks (see the module header). */
export const MaskObservations = Schema.TaggedStruct("MaskObservations", {
  /** Steps whose observations are always sent verbatim (the last ones). */
  keepLast: Schema.Int.pipe(Schema.nonNegative()),
  /** The boundary moves in blocks of this many steps. */
  every: Schema.Int.pipe(Schema.positive()),
  /**
   * The placeholder: `{tool}` (the tool's name, or `observation` for a text action's), `{lines}`
   * and `{characters}` (of the observation as logged) are filled.
   */
  placeholder: Schema.String
})
/** @since 0.2.0 */
export interface MaskObservations extends Schema.Schema.Type<typeof MaskObservations> {}

/** Whole steps dropped, oldest first, to keep each request inside a token budget (see the module header). */
export const FitTokens = Schema.TaggedStruct("FitTokens", {
  /** The model's context window, in tokens. */
  window: Schema.Int.pipe(Schema.positive()),
  /** Tokens kept free for the reply (and the count's error): the budget is `window − headroom`. */
  headroom: Schema.Int.pipe(Schema.nonNegative()),
  /** The `TokenCounter` encoding counted with (`"approximate"`, `"o200k_base"`, …). */
  tokenizer: Schema.String,
  /** A drop goes down to this fraction of the budget, so the next request extends this one. */
  trimTo: Schema.Number.pipe(Schema.greaterThan(0), Schema.lessThanOrEqualTo(1)),
  /** The note standing for dropped steps: `{from}`, `{to}` (step numbers) and `{count}` are filled. */
  note: Schema.String
}).pipe(Schema.filter((fit) => fit.headroom < fit.window || `headroom (${fit.headroom}) must be below the window (${fit.window})`))
/** @since 0.2.0 */
export interface FitTokens extends Schema.Schema.Type<typeof FitTokens> {}

/** Policies applied in order: masking, then the token budget over the masked requests. */
export const Compose = Schema.TaggedStruct("Compose", {
  policies: Schema.Array(Schema.Union(MaskObservations, FitTokens))
}).pipe(Schema.filter((compose) => {
  const tags = compose.policies.map((policy) => policy._tag)
  return new Set(tags).size === tags.length || `compose takes at most one policy of each kind (got ${tags.join(", ")})`
}))
/** @since 0.2.0 */
export interface Compose extends Schema.Schema.Type<typeof Compose> {}

/** A history policy. */
export const HistoryPolicy = Schema.Union(KeepAll, MaskObservations, FitTokens, Compose)
/** @since 0.2.0 */
export type HistoryPolicy = typeof HistoryPolicy.Type

/** The default placeholder of `maskObservations`. */
export const defaultPlaceholder = "[output of {tool} omitted: {lines} lines, {characters} characters]"

/** Every reply and observation (the default). */
export const keepAll: KeepAll = { _tag: "KeepAll" }

/**
 * Masks the observations of the steps before the last `keepLast`, moving the boundary every
 * `every` steps (default 1). Checked when a run starts (`InvalidRunRequest` for a negative
 * `keepLast` or an `every` below 1), as every part of the definition is.
 */
export const maskObservations = (options: {
  readonly keepLast: number
  readonly every?: number
  readonly placeholder?: string
}): MaskObservations => ({
  _tag: "MaskObservations",
  keepLast: options.keepLast,
  every: options.every ?? 1,
  placeholder: options.placeholder ?? defaultPlaceholder
})

/** The default note of `fitTokens`. */
export const defaultNote = "[steps {from}–{to} omitted: {count} steps]"

/**
 * Drops the oldest steps to keep each request under `window − headroom` tokens (headroom by
 * default an eighth of the window), counted with `tokenizer` (default `"approximate"`; provide
 * `@polyloop/ai`'s `Tokenizers.layer` for real encodings). Checked when a run starts.
 */
export const fitTokens = (options: {
  readonly window: number
  readonly headroom?: number
  readonly tokenizer?: string
  readonly trimTo?: number
  readonly note?: string
}): FitTokens => ({
  _tag: "FitTokens",
  window: options.window,
  headroom: options.headroom ?? Math.floor(options.window / 8),
  tokenizer: options.tokenizer ?? "approximate",
  trimTo: options.trimTo ?? 0.75,
  note: options.note ?? defaultNote
})

/** Masking, then a token budget (at most one of each; order does not matter). */
export const compose = (...policies: ReadonlyArray<MaskObservations | FitTokens>): Compose => ({ _tag: "Compose", policies })

/** The parts of a policy, by kind. */
export interface Parts {
  readonly mask: MaskObservations | undefined
  readonly fit: FitTokens | undefined
}

/** The parts of a policy (`undefined` for `keepAll`: today's rendering). */
export const partsOf = (policy: HistoryPolicy | undefined): Parts | undefined => {
  if (policy === undefined) return undefined
  switch (policy._tag) {
    case "KeepAll":
      return undefined
    case "MaskObservations":
      return { mask: policy, fit: undefined }
    case "FitTokens":
      return { mask: undefined, fit: policy }
    case "Compose": {
      let mask: MaskObservations | undefined
      let fit: FitTokens | undefined
      for (const part of policy.policies) {
        if (part._tag === "MaskObservations") mask = part
        else fit = part
      }
      return mask === undefined && fit === undefined ? undefined : { mask, fit }
    }
  }
}

/** The note standing for steps `[0, toStep)`. */
export const noteFor = (template: string, toStep: number): string =>
  template.replaceAll("{from}", "0").replaceAll("{to}", String(toStep - 1)).replaceAll("{count}", String(toStep))

/** The first step whose observations are sent verbatim in the request of `step`. */
export const boundary = (policy: MaskObservations, step: number): number =>
  step <= policy.keepLast ? 0 : Math.floor((step - policy.keepLast) / policy.every) * policy.every

/** The number of lines of a text (an empty text has none; a last line without a newline counts). */
const lineCount = (text: string): number => {
  if (text.length === 0) return 0
  let lines = 1
  for (let i = text.indexOf("\n"); i !== -1; i = text.indexOf("\n", i + 1)) if (i < text.length - 1) lines++
  return lines
}

/** The placeholder for an observation of `tool`. */
export const placeholderFor = (policy: MaskObservations, tool: string, observation: string): string =>
  policy.placeholder
    .replaceAll("{tool}", tool)
    .replaceAll("{lines}", String(lineCount(observation)))
    .replaceAll("{characters}", String(observation.length))
