/**
 * Texts the library writes into history instead of the executor's own (design 0007,
 * decision 2). Templates may use `{tool}`, `{issues}` and `{tools}`; the library fills them
 * from the validation result, a pure function of the snapshot and the reply. The optional
 * `rejected` text (design 0160) may use `{tool}` and `{reason}`: a call a person rejected.
 *
 * @since 0.1.0
 */
import * as Schema from "effect/Schema"

/**
 * The synthetic texts. `truncated` (design 0140) is optional so that definitions and snapshots
 * written before it still read; when absent the loop uses `defaults.truncated`.
 */
export const SyntheticObservations = Schema.Struct({
  /** Unknown tool, invalid arguments, refused by the executor, wrong action language. */
  notExecuted: Schema.String,
  /** The environment is broken. */
  envError: Schema.String,
  /** Resume of a step whose action may or may not have run. */
  interrupted: Schema.String,
  /** The nudge after a reply that takes no action. */
  noAction: Schema.String,
  /**
   * The explanation after a reply cut off at the output token limit (never executed, never an
   * answer); `{tool}` names the calls that were cut ("(none)" for none).
   */
  truncated: Schema.optional(Schema.String),
  /**
   * A call a person rejected (design 0160); `{reason}` is theirs. Optional: when absent and a
   * tool declares approval, `defaultRejected` is used (and recorded in the snapshot).
   */
  rejected: Schema.optional(Schema.String)
})
/** @since 0.1.0 */
export interface SyntheticObservations extends Schema.Schema.Type<typeof SyntheticObservations> {}

/** Defaults in plain English. */
export const defaults: SyntheticObservations = {
  notExecuted: "The action was not executed: {issues}. Available tools: {tools}.",
  envError: "The environment failed while running {tool}; the run cannot continue.",
  interrupted:
    "The previous action ({tool}) was interrupted and may or may not have taken effect. Check the current state before repeating it.",
  noAction: "Your reply contained no action. Reply with exactly one action, or give your final answer.",
  truncated:
    "Your previous reply was cut off at the output token limit, so it was not used: no tool was run and it was not taken as your final answer. Reply again, more briefly."
}

/** The `truncated` text of a set of texts (the default when absent). */
export const truncatedOf = (texts: SyntheticObservations): string => texts.truncated ?? defaultTruncated

const defaultTruncated: string = defaults.truncated ?? ""

/** The `rejected` text used when a definition sets none (design 0160). */
export const defaultRejected = "The call to {tool} was rejected by a person and was not executed. Reason: {reason}"

/** Fills the `rejected` template: `{tool}` and `{reason}` (unknown braces are left as written). Pure. */
export const fillRejected = (template: string, values: { readonly tool: string; readonly reason: string }): string =>
  template.replace(/\{(tool|reason)\}/g, (_, key: "tool" | "reason") => values[key])

/** The values a template may use. */
export interface TemplateValues {
  readonly tool: string
  readonly issues: string
  readonly tools: string
}

const placeholder = /\{(tool|issues|tools)\}/g

/** Fills a template's placeholders; unknown braces are left as written. Pure. */
export const fill = (template: string, values: TemplateValues): string =>
  template.replace(placeholder, (_, key: keyof TemplateValues) => values[key])
