/**
 * Why a run stopped. A run that broke never looks like a run that ran out of budget.
 *
 * @since 0.1.0
 */
import * as Schema from "effect/Schema"
import { BudgetItem } from "./Budget.js"

/** The run completed: by a completing tool, by the environment's report, or by an answer. */
export const Completed = Schema.TaggedStruct("Completed", {
  by: Schema.Literal("Tool", "Environment", "Answer"),
  answer: Schema.optional(Schema.String)
})
/** @since 0.1.0 */
export interface Completed extends Schema.Schema.Type<typeof Completed> {}

/**
 * A budget item ran out: the turn's (or the run's) `budget`, or, with `scope: "Conversation"`,
 * the conversation's `conversationBudget` (design 0300) — which every later message of the
 * conversation is answered with too. `scope` is absent in every stop reason recorded before it.
 */
export const BudgetExhausted = Schema.TaggedStruct("BudgetExhausted", {
  budget: BudgetItem,
  scope: Schema.optional(Schema.Literal("Conversation"))
})
/** @since 0.1.0 */
export interface BudgetExhausted extends Schema.Schema.Type<typeof BudgetExhausted> {}

/** The environment is broken (an action ended with status `EnvError`). */
export const EnvError = Schema.TaggedStruct("EnvError", { message: Schema.String })
/** @since 0.1.0 */
export interface EnvError extends Schema.Schema.Type<typeof EnvError> {}

/**
 * The run's answer did not decode against the agent's output schema (design 0400): the model's
 * answers, `attempts` times (`outputAttempts`), or a completing tool's answer (`by: "Tool"`,
 * which stops at once: the tool's text is not the model's to correct). `issues`: the last parse
 * error. Absent from logs of version 3 and before.
 */
export const InvalidOutput = Schema.TaggedStruct("InvalidOutput", {
  by: Schema.Literal("Answer", "Tool"),
  attempts: Schema.NonNegativeInt,
  issues: Schema.String
})
/** @since 0.3.0 */
export interface InvalidOutput extends Schema.Schema.Type<typeof InvalidOutput> {}

/** Any stop reason. */
export const StopReason = Schema.Union(Completed, BudgetExhausted, EnvError, InvalidOutput)
/** @since 0.1.0 */
export type StopReason = Completed | BudgetExhausted | EnvError | InvalidOutput

/** A one-line rendering, e.g. `Completed(Tool)`, `BudgetExhausted(Steps)` or `BudgetExhausted(Conversation:Tokens)`. */
export const format = (reason: StopReason): string => {
  switch (reason._tag) {
    case "Completed":
      return `Completed(${reason.by})`
    case "BudgetExhausted":
      return reason.scope === undefined ? `BudgetExhausted(${reason.budget})` : `BudgetExhausted(${reason.scope}:${reason.budget})`
    case "EnvError":
      return "EnvError"
    case "InvalidOutput":
      return `InvalidOutput(${reason.by})`
  }
}
