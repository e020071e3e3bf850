/**
 * The four budget items (the seeds: "budget is four items, not two counters").
 *
 * @since 0.1.0
 */
import * as Duration from "effect/Duration"
import * as Schema from "effect/Schema"

/**
 * A finite duration, encoded as milliseconds (so kept to millisecond precision; its arbitrary
 * generates whole milliseconds). An infinite duration would be encoded as `Infinity`, which
 * JSON writes as `null` and cannot read back: it is refused at encoding (to leave a budget item
 * unbounded, omit it).
 */
export const FiniteDurationFromMillis = Schema.DurationFromMillis.pipe(
  Schema.filter((duration) => Duration.isFinite(duration), { message: () => "expected a finite duration" })
).annotations({
  arbitrary: () => (fc) => fc.integer({ min: 0, max: 2 ** 40 }).map((millis) => Duration.millis(millis))
})

/**
 * `maxSteps` is required: it bounds a model retrying a bad tool forever. Invalid decisions,
 * `NotExecuted` actions and no-action replies count toward `maxSteps` only.
 */
export const Budget = Schema.Struct({
  maxSteps: Schema.Int.pipe(Schema.positive()),
  maxEffectiveSteps: Schema.optional(Schema.Int.pipe(Schema.positive())),
  maxTokens: Schema.optional(Schema.Int.pipe(Schema.positive())),
  /** Encoded as milliseconds; time spent crashed does not count. */
  maxDuration: Schema.optional(FiniteDurationFromMillis)
})
/** @since 0.1.0 */
export interface Budget extends Schema.Schema.Type<typeof Budget> {}

/**
 * A conversation's budget (design 0300, decision 6): the same items as `Budget`, counted over
 * every turn of the conversation (`Budget` counts from the turn's start). Every item is
 * optional: a turn's `budget` already bounds its steps.
 */
export const ConversationBudget = Schema.Struct({
  maxSteps: Schema.optional(Schema.Int.pipe(Schema.positive())),
  maxEffectiveSteps: Schema.optional(Schema.Int.pipe(Schema.positive())),
  maxTokens: Schema.optional(Schema.Int.pipe(Schema.positive())),
  /** Encoded as milliseconds; time spent crashed, or waiting for the next message, does not count. */
  maxDuration: Schema.optional(FiniteDurationFromMillis)
})
/** @since 0.1.0 */
export interface ConversationBudget extends Schema.Schema.Type<typeof ConversationBudget> {}

/** Which budget item ran out. */
export const BudgetItem = Schema.Literal("Steps", "EffectiveSteps", "Tokens", "Duration")
/** @since 0.1.0 */
export type BudgetItem = typeof BudgetItem.Type
