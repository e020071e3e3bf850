/**
 * What executing an action produced: exactly five fields (design 0007).
 *
 * @since 0.1.0
 */
import * as Schema from "effect/Schema"

/**
 * `Executed`: the action really ran, whatever its result. `NotExecuted`: it never entered
 * execution (unknown tool, bad arguments, refused, wrong action language). `EnvError`: the
 * environment itself is broken; the run ends.
 */
export const ActionStatus = Schema.Literal("Executed", "NotExecuted", "EnvError")
/** @since 0.1.0 */
export type ActionStatus = typeof ActionStatus.Type

/** The outcome of one action. */
export const ActionOutcome = Schema.Struct({
  status: ActionStatus,
  observation: Schema.String,
  observationIsSynthetic: Schema.Boolean,
  envReportedCompletion: Schema.Boolean,
  observationTruncatedChars: Schema.NonNegativeInt
})
/** @since 0.1.0 */
export interface ActionOutcome extends Schema.Schema.Type<typeof ActionOutcome> {}

/** An action that ran; its observation is the environment's own. */
export const executed = (observation: string, options?: { readonly envReportedCompletion?: boolean; readonly truncatedChars?: number }): ActionOutcome => ({
  status: "Executed",
  observation,
  observationIsSynthetic: false,
  envReportedCompletion: options?.envReportedCompletion ?? false,
  observationTruncatedChars: options?.truncatedChars ?? 0
})

/** An action that never entered execution; the observation is the executor's sentence. */
export const notExecuted = (observation: string): ActionOutcome => ({
  status: "NotExecuted",
  observation,
  observationIsSynthetic: true,
  envReportedCompletion: false,
  observationTruncatedChars: 0
})

/** The environment is broken. */
export const envError = (observation: string): ActionOutcome => ({
  status: "EnvError",
  observation,
  observationIsSynthetic: false,
  envReportedCompletion: false,
  observationTruncatedChars: 0
})
