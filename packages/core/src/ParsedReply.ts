/**
 * The decision a `DecisionParser` reads out of a model reply.
 *
 * @since 0.1.0
 */
import type * as Arr from "effect/Array"
import * as Schema from "effect/Schema"
import { Action } from "./Action.js"

/**
 * The reply asks for one or more actions, in call order (design 0150). Logs written before
 * version 2 recorded `{ action }`; the log reader reads them as `{ actions: [action] }`.
 */
export const Act = Schema.TaggedStruct("Act", { actions: Schema.NonEmptyArray(Action) })
/** @since 0.1.0 */
export interface Act extends Schema.Schema.Type<typeof Act> {}

/** The reply ends the run with an answer. */
export const Finish = Schema.TaggedStruct("Finish", { answer: Schema.String })
/** @since 0.1.0 */
export interface Finish extends Schema.Schema.Type<typeof Finish> {}

/** The reply takes no action; the step has no result and the model is nudged. */
export const NoAction = Schema.TaggedStruct("NoAction", {})
/** @since 0.1.0 */
export interface NoAction extends Schema.Schema.Type<typeof NoAction> {}

/**
 * The reply could not be interpreted; `explanation` is fed back to the model. `invalidOutput`
 * (design 0400): the reply was a final answer that did not decode against the agent's output
 * schema, and this is the parse error (the step counts towards `outputAttempts`); absent
 * otherwise, and in every log written before it.
 */
export const InvalidDecision = Schema.TaggedStruct("InvalidDecision", {
  explanation: Schema.String,
  invalidOutput: Schema.optional(Schema.String)
})
/** @since 0.1.0 */
export interface InvalidDecision extends Schema.Schema.Type<typeof InvalidDecision> {}

/** Any decision. */
export const ParsedReply = Schema.Union(Act, Finish, NoAction, InvalidDecision)
/** @since 0.1.0 */
export type ParsedReply = Act | Finish | NoAction | InvalidDecision

/** The kind of a decision, as recorded in `StepCompleted`. */
export const DecisionKind = Schema.Literal("Act", "Finish", "NoAction", "InvalidDecision")
/** @since 0.1.0 */
export type DecisionKind = typeof DecisionKind.Type

/**
 * Constructors. They build the plain values the schemas describe without running the schemas'
 * validation: the arguments are already typed, and a parser builds one decision per step.
 */
export const act = (action: Action): ParsedReply => ({ _tag: "Act", actions: [action] })
/** A decision to run several actions, in this order. */
export const actAll = (actions: Arr.NonEmptyReadonlyArray<Action>): ParsedReply => ({ _tag: "Act", actions })
/** @since 0.1.0 */
export const finish = (answer: string): ParsedReply => ({ _tag: "Finish", answer })
/** @since 0.1.0 */
export const noAction: ParsedReply = NoAction.make({})
/** @since 0.1.0 */
export const invalid = (explanation: string): ParsedReply => ({ _tag: "InvalidDecision", explanation })

/** The name an action goes by in explanations: the tool's name or the code's language. */
const nameOf = (action: Action): string => (action._tag === "ToolCall" ? action.name : action.language)

/**
 * The explanation fed back when a reply asks for several actions and the agent takes one per
 * step (`AgentDefinition.parallelToolCalls: false`): the text `NativeToolCallParser` gave before
 * design 0150, so a run started then resumes with the same history.
 */
export const oneActionPerStep = (actions: ReadonlyArray<Action>): ParsedReply =>
  invalid(
    `You called ${actions.length} tools at once (${actions.map((a) => JSON.stringify(nameOf(a))).join(", ")}); this agent takes one action per step. Call exactly one tool.`
  )
