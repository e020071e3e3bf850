/**
 * The four budget items (the seeds: "budget is four items, not two counters").
 *
 * @since 0.1.0
 */
import * as Schema from "effect/Schema"

/**
 * `maxSteps` is required: it bounds a model retrying a bad tool forever. Invalid decisions,
 * `NotExecuted` actions and no-action replies count toward `maxSteps` only.
 */
export const Budget = Schema.Struct({
  maxSteps: Schema.Int.pipe(Schema.positive()),
  maxEffectiveSteps: Schema.optional(Schema.Int.pipe(Schema.positive())),
  maxTokens: Schema.optional(Schema.Int.pipe(Schema.positive())),
  /** Encoded as milliseconds; time spent crashed does not count. */
  maxDuration: Schema.optional(Schema.DurationFromMillis)
})
/** @since 0.1.0 */
export interface Budget extends Schema.Schema.Type<typeof Budget> {}

/** Which budget item ran out. */
export const BudgetItem = Schema.Literal("Steps", "EffectiveSteps", "Tokens", "Duration")
/** @since 0.1.0 */
export type BudgetItem = typeof BudgetItem.Type
