/**
 * The decision a `DecisionParser` reads out of a model reply.
 *
 * @since 0.1.0
 */
import * as Schema from "effect/Schema"
import { Action } from "./Action.js"

/** The reply asks for one action. */
export const Act = Schema.TaggedStruct("Act", { action: Action })
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

/** The reply could not be interpreted; `explanation` is fed back to the model. */
export const InvalidDecision = Schema.TaggedStruct("InvalidDecision", { explanation: Schema.String })
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
export const act = (action: Action): ParsedReply => ({ _tag: "Act", action })
/** @since 0.1.0 */
export const finish = (answer: string): ParsedReply => ({ _tag: "Finish", answer })
/** @since 0.1.0 */
export const noAction: ParsedReply = NoAction.make({})
/** @since 0.1.0 */
export const invalid = (explanation: string): ParsedReply => ({ _tag: "InvalidDecision", explanation })
