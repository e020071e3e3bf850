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
 * - `summarise({ triggerTokens, keepLast })` (opt-in): when a request would count more than
 *   `triggerTokens`, a model call (the `Summariser` service, or the run's `ModelClient`) writes
 *   a summary of the steps before the last `keepLast`, which replaces them; the summary is a
 *   `HistoryCompacted` record, written before the request, so a resume or a replay reads it and
 *   never calls the summariser again.
 * - `compose(mask, summary, fit)`: masking first, then the summary and the budget, counted over
 *   the masked requests.
 *
 * Every policy but `keepAll` can shrink a request a provider refuses as too long
 * (`context_length_exceeded`): the emergency step drops every step but the last, recorded, and
 * the model call is made again once (design 0300, decision 4).
 *
 * @since 0.2.0
 */
import * as Context from "effect/Context"
import * as Schema from "effect/Schema"
import type { ModelClient } from "./ModelClient.js"

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

/**
 * A summary replaces the oldest steps when a request would count more than `triggerTokens`
 * (see the module header). Opt-in: it costs a model call per summary, and a summary is the
 * model's text, not a function of the log — so it is recorded, and never made twice.
 */
export const Summarise = Schema.TaggedStruct("Summarise", {
  /** A request counted above this many tokens asks for a summary first. */
  triggerTokens: Schema.Int.pipe(Schema.positive()),
  /** Steps kept verbatim after the summary (the last step always is). */
  keepLast: Schema.Int.pipe(Schema.nonNegative()),
  /** The `TokenCounter` encoding counted with. */
  tokenizer: Schema.String,
  /** The summariser's instructions (its system prompt). */
  prompt: Schema.String,
  /** The message standing for the summarised steps: `{from}`, `{to}`, `{count}` and `{summary}` are filled. */
  note: Schema.String
})
/** @since 0.2.0 */
export interface Summarise extends Schema.Schema.Type<typeof Summarise> {}

/** Policies applied in order: masking, a summary, then the token budget over what is left. */
export const Compose = Schema.TaggedStruct("Compose", {
  policies: Schema.Array(Schema.Union(MaskObservations, FitTokens, Summarise))
}).pipe(Schema.filter((compose) => {
  const tags = compose.policies.map((policy) => policy._tag)
  if (new Set(tags).size !== tags.length) return `compose takes at most one policy of each kind (got ${tags.join(", ")})`
  const encodings = new Set(compose.policies.flatMap((policy) => (policy._tag === "MaskObservations" ? [] : [policy.tokenizer])))
  return encodings.size <= 1 || `the budget and the summary must count with one encoding (got ${[...encodings].join(", ")})`
}))
/** @since 0.2.0 */
export interface Compose extends Schema.Schema.Type<typeof Compose> {}

/** A history policy. */
export const HistoryPolicy = Schema.Union(KeepAll, MaskObservations, FitTokens, Summarise, Compose)
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

/** The default instructions of `summarise`. */
export const defaultSummaryPrompt =
  "You compress an agent's working history. Summarise the transcript below for the agent itself: what it has done, what it found (names, paths, numbers, errors, exact values it will need), what it decided and what remains. Keep facts, drop narration. Write only the summary."

/** The default note of `summarise`. */
export const defaultSummaryNote = "[summary of steps {from}–{to}]\n{summary}"

/**
 * Summarises the oldest steps when a request would count more than `triggerTokens`, keeping the
 * last `keepLast` steps (default 2) verbatim. The summariser is the `Summariser` service when one
 * is provided, the run's `ModelClient` otherwise; each summary is a `HistoryCompacted` record, so
 * a resume, a replay or a fork never asks for it again.
 */
export const summarise = (options: {
  readonly triggerTokens: number
  readonly keepLast?: number
  readonly tokenizer?: string
  readonly prompt?: string
  readonly note?: string
}): Summarise => ({
  _tag: "Summarise",
  triggerTokens: options.triggerTokens,
  keepLast: options.keepLast ?? 2,
  tokenizer: options.tokenizer ?? "approximate",
  prompt: options.prompt ?? defaultSummaryPrompt,
  note: options.note ?? defaultSummaryNote
})

/** Masking, a summary and a token budget (at most one of each; order does not matter). */
export const compose = (...policies: ReadonlyArray<MaskObservations | FitTokens | Summarise>): Compose => ({ _tag: "Compose", policies })

/**
 * The model that writes summaries (`summarise`): provide it to summarise with another model than
 * the run's (a cheaper one); without it, the run's `ModelClient` writes them.
 */
export class Summariser extends Context.Tag("@polyloop/core/HistoryPolicy/Summariser")<Summariser, ModelClient.Service>() {}

/** The parts of a policy, by kind. */
export interface Parts {
  readonly mask: MaskObservations | undefined
  readonly fit: FitTokens | undefined
  readonly summary: Summarise | undefined
}

/** The parts of a policy (`undefined` for `keepAll`: today's rendering). */
export const partsOf = (policy: HistoryPolicy | undefined): Parts | undefined => {
  if (policy === undefined) return undefined
  switch (policy._tag) {
    case "KeepAll":
      return undefined
    case "MaskObservations":
      return { mask: policy, fit: undefined, summary: undefined }
    case "FitTokens":
      return { mask: undefined, fit: policy, summary: undefined }
    case "Summarise":
      return { mask: undefined, fit: undefined, summary: policy }
    case "Compose": {
      let mask: MaskObservations | undefined
      let fit: FitTokens | undefined
      let summary: Summarise | undefined
      for (const part of policy.policies) {
        if (part._tag === "MaskObservations") mask = part
        else if (part._tag === "FitTokens") fit = part
        else summary = part
      }
      return mask === undefined && fit === undefined && summary === undefined ? undefined : { mask, fit, summary }
    }
  }
}

/** The note standing for steps `[0, toStep)` summarised as `summary`. */
export const summaryNoteFor = (template: string, toStep: number, summary: string): string =>
  template.replaceAll("{from}", "0").replaceAll("{to}", String(toStep - 1)).replaceAll("{count}", String(toStep)).replaceAll("{summary}", summary)

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

/** What the request of a step held of the history under a policy (for `polyloop show` and the viewer). */
export interface SentView {
  /** Steps before this were replaced by the compaction's note (0: none). */
  readonly replacedBefore: number
  /** The compaction in force (its reason, and whether a summary stood in). */
  readonly compaction: { readonly reason: string; readonly summarised: boolean; readonly seq: number } | undefined
  /** Steps from `replacedBefore` up to this had their answers masked. */
  readonly maskedBefore: number
}

/**
 * What the request of `step` held, from the policy and the log's compactions (`RunLog.compactions`):
 * the same boundaries the loop rendered with.
 */
export const sentView = (
  policy: HistoryPolicy | undefined,
  compactions: ReadonlyArray<{ readonly step: number; readonly toStep: number; readonly reason: string; readonly summary?: string | undefined; readonly seq: number }>,
  step: number
): SentView => {
  let record: (typeof compactions)[number] | undefined
  for (const c of compactions) if (c.step <= step) record = c
  const replacedBefore = Math.min(record?.toStep ?? 0, step)
  const mask = partsOf(policy)?.mask
  const maskedBefore = Math.max(replacedBefore, mask === undefined ? 0 : Math.min(boundary(mask, step), step))
  return {
    replacedBefore,
    compaction: record === undefined ? undefined : { reason: record.reason, summarised: record.summary !== undefined, seq: record.seq },
    maskedBefore
  }
}

/** A policy in one line: `maskObservations(keepLast 4, every 5) + fitTokens(window 32000, headroom 4000, o200k_base)`. */
export const describe = (policy: HistoryPolicy | undefined): string => {
  const one = (p: MaskObservations | FitTokens | Summarise): string => {
    switch (p._tag) {
      case "MaskObservations":
        return `maskObservations(keepLast ${p.keepLast}, every ${p.every})`
      case "FitTokens":
        return `fitTokens(window ${p.window}, headroom ${p.headroom}, ${p.tokenizer}, trimTo ${p.trimTo})`
      case "Summarise":
        return `summarise(triggerTokens ${p.triggerTokens}, keepLast ${p.keepLast}, ${p.tokenizer})`
    }
  }
  if (policy === undefined || policy._tag === "KeepAll") return "keepAll"
  return policy._tag === "Compose" ? policy.policies.map(one).join(" + ") : one(policy)
}
