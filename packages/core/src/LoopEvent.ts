/**
 * Events the loop emits through the `EventSink` while a run goes on. `ActionExecuted` carries
 * the executor's own observation for audit (it never enters history when synthetic).
 *
 * Every event reports a record once it is durable, except `ModelDelta` (design 0180): a piece of
 * a reply still arriving, when the run streams; the `ModelReplied` that follows carries the
 * durable reply, and a new `attempt` starts the reply again.
 *
 * @since 0.1.0
 */
import * as Schema from "effect/Schema"
import { Action } from "./Action.js"
import { ActionOutcome } from "./ActionOutcome.js"
import { RunId } from "./Ids.js"
import { ModelDelta as Delta } from "./ModelDelta.js"
import { ModelReply, Usage } from "./ModelReply.js"
import { ParsedReply } from "./ParsedReply.js"
import { Decision, RunCounters } from "./RunLog.js"
import { StopReason } from "./StopReason.js"

/** A fresh run began. */
export const RunStarted = Schema.TaggedStruct("RunStarted", { runId: RunId, task: Schema.String, snapshotHash: Schema.String, at: Schema.Finite })
/** An unfinished run was taken up again. */
export const RunResumed = Schema.TaggedStruct("RunResumed", { runId: RunId, fromStep: Schema.Int, at: Schema.Finite })
/** A step began (the model is about to be called). */
export const StepStarted = Schema.TaggedStruct("StepStarted", { runId: RunId, step: Schema.Int })
/**
 * A piece of the reply of `step` as it arrives (only when the run streams; never logged).
 * `attempt` counts the model calls of the step from 0: a retry starts the reply again.
 */
export const ModelDelta = Schema.TaggedStruct("ModelDelta", { runId: RunId, step: Schema.Int, attempt: Schema.Int, delta: Delta })
/** The model replied and the reply is durable. */
export const ModelReplied = Schema.TaggedStruct("ModelReplied", { runId: RunId, step: Schema.Int, reply: ModelReply })
/** The parser read a decision. */
export const DecisionParsed = Schema.TaggedStruct("DecisionParsed", { runId: RunId, step: Schema.Int, decision: ParsedReply })
/**
 * An action produced an outcome and its result is durable; `executorObservation` is the
 * executor's own text; `callIndex` is its position in the step's actions (design 0150).
 */
export const ActionExecuted = Schema.TaggedStruct("ActionExecuted", {
  runId: RunId,
  step: Schema.Int,
  callIndex: Schema.Int,
  action: Action,
  outcome: ActionOutcome,
  executorObservation: Schema.String,
  replayed: Schema.Boolean
})
/** A step was completed and is durable. */
export const StepCompleted = Schema.TaggedStruct("StepCompleted", {
  runId: RunId,
  step: Schema.Int,
  decision: Schema.Literal("Act", "Finish", "NoAction", "InvalidDecision"),
  usage: Usage,
  elapsed: Schema.Finite
})
/** The run finished. */
export const RunFinished = Schema.TaggedStruct("RunFinished", { runId: RunId, stopReason: StopReason, counters: RunCounters })

/** A person's message started a turn of a conversation (design 0300); it is durable. */
export const TurnStarted = Schema.TaggedStruct("TurnStarted", { runId: RunId, turn: Schema.Int, messageId: Schema.String, text: Schema.String })
/** A turn of a conversation ended (its `TurnFinished` is durable); the conversation waits for the next message. */
export const TurnFinished = Schema.TaggedStruct("TurnFinished", { runId: RunId, turn: Schema.Int, stopReason: StopReason, counters: RunCounters })

/** A call needs a person's decision; the run suspends once its step's requests are durable (design 0160). */
export const ApprovalRequested = Schema.TaggedStruct("ApprovalRequested", {
  runId: RunId,
  step: Schema.Int,
  callId: Schema.String,
  action: Action,
  actionHash: Schema.String
})
/** A person decided on a requested call (emitted by `Agent.decide`); the decision is durable. */
export const ApprovalDecided = Schema.TaggedStruct("ApprovalDecided", {
  runId: RunId,
  step: Schema.Int,
  callId: Schema.String,
  actionHash: Schema.String,
  decision: Decision,
  by: Schema.String
})

/** Any loop event. */
export const LoopEvent = Schema.Union(
  RunStarted,
  RunResumed,
  StepStarted,
  ModelDelta,
  ModelReplied,
  DecisionParsed,
  ActionExecuted,
  StepCompleted,
  RunFinished,
  ApprovalRequested,
  ApprovalDecided,
  TurnStarted,
  TurnFinished
)
/** @since 0.1.0 */
export type LoopEvent = typeof LoopEvent.Type
