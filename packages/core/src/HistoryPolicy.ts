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

/** A history policy. */
export const HistoryPolicy = Schema.Union(KeepAll, MaskObservations)
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
