/**
 * The run log's schema (SPEC §7): the version this code writes, every record kind, the union of
 * them, and where a forked run comes from. The public module `RunLog.ts` re-exports all of it
 * (design 0390); the log as read back is in `logView.ts`.
 *
 * @internal
 */
import * as Schema from "effect/Schema"
import { Action } from "../Action.js"
import { ActionOutcome } from "../ActionOutcome.js"
import { ResultId, RunId, Seq, StepIndex } from "../Ids.js"
import { ModelReply, Usage } from "../ModelReply.js"
import { ParsedReply } from "../ParsedReply.js"
import { StopReason } from "../StopReason.js"
import { JsonValue } from "./jsonValue.js"

/**
 * The version of the log's schema this code writes (design 0150). Version 1: one action per
 * step (`StepCompleted.resultId`, `Act.action`); version 2: several (`StepCompleted.resultIds`,
 * `ActionResulted.callIndex`, `Act.actions`); version 3: `HistoryCompacted` (design 0300);
 * version 4: sub-agents (design 0392: `ActionResulted.child`, `RunCounters.children`) and typed
 * answers (design 0400: the `InvalidOutput` stop reason, `RunFinished.output`,
 * `TurnFinished.output`); a version-3 log is a version-4 log without them. Logs
 * of version 1 are read as version 3 (the store's reader upgrades each record by its shape); a
 * version-2 log is a version-3 log without compactions; a log that names a newer version is
 * refused with `StoreError { reason: "SchemaVersion" }`.
 */
export const logVersion = 4

/** A log schema version. Absent (`RunStarted` and `RunResumed` of version 1) means 1. */
export const LogVersion = Schema.Int.pipe(Schema.between(1, logVersion))

/** One difference between a fork's snapshot and its parent's: the path, and each side's value (absent: no such member). */
export const ForkDifference = Schema.Struct({
  path: Schema.String,
  parent: Schema.optional(JsonValue),
  fork: Schema.optional(JsonValue)
})
/** @since 0.1.0 */
export interface ForkDifference extends Schema.Schema.Type<typeof ForkDifference> {}

/**
 * Where a forked run comes from (design 0170): the parent run, the step the fork starts at
 * (the parent's steps before it were copied), the parent's snapshot hash, and how the fork's
 * snapshot differs from the parent's (empty: the same configuration).
 */
export const ForkedFrom = Schema.Struct({
  runId: RunId,
  step: StepIndex,
  snapshotHash: Schema.String,
  differences: Schema.Array(ForkDifference)
})
/** @since 0.1.0 */
export interface ForkedFrom extends Schema.Schema.Type<typeof ForkedFrom> {}

/** The run began: the task, the snapshot of everything the model can see, and its hash. */
export const RunStarted = Schema.TaggedStruct("RunStarted", {
  seq: Seq,
  runId: RunId,
  task: Schema.String,
  /** Canonical JSON value of the snapshot (SPEC §8). */
  snapshot: JsonValue,
  snapshotHash: Schema.String,
  /** Epoch milliseconds, from `Clock` (finite: it must survive the JSON a store writes). */
  startedAt: Schema.Finite,
  /** The log schema version of the code that started the run (absent: 1). */
  logVersion: Schema.optional(LogVersion),
  /** Set on a fork (`Agent.fork`); absent on a run started fresh (and on every log written before forks). */
  forkedFrom: Schema.optional(ForkedFrom),
  /**
   * Set on a conversation (`Agent.send`, design 0300 decision 6): the caller's id of its first
   * message, which is the task (turn 0). Absent on a single-task run (`Agent.run`).
   */
  conversation: Schema.optional(Schema.Struct({ messageId: Schema.String }))
})
/** @since 0.1.0 */
export interface RunStarted extends Schema.Schema.Type<typeof RunStarted> {}

/** The model replied at `step`: the write-ahead intent of the step, durable before parsing. */
export const ModelReplied = Schema.TaggedStruct("ModelReplied", {
  seq: Seq,
  step: StepIndex,
  reply: ModelReply,
  /**
   * The hex SHA-256 of the canonical JSON of the `ModelRequest` this reply answered (design
   * 0170): what replay checks. Absent in logs written before fingerprints.
   */
  requestHash: Schema.optional(Schema.String),
  /**
   * Milliseconds the model call took, retries included, measured with `Clock` when the reply was
   * logged (issue 44): what the step's `StepCompleted.modelElapsed` records, also when the step
   * is finished after a resume. Absent in logs written before it was recorded.
   */
  modelElapsed: Schema.optional(Schema.NonNegative.pipe(Schema.finite()))
})
/** @since 0.1.0 */
export interface ModelReplied extends Schema.Schema.Type<typeof ModelReplied> {}

/** What a parent's children cost, over every descendant (design 0392). */
export const ChildTotals = Schema.Struct({
  /** Child runs, grandchildren included. */
  runs: Schema.NonNegativeInt,
  steps: Schema.NonNegativeInt,
  usage: Usage
})
/** @since 0.1.0 */
export interface ChildTotals extends Schema.Schema.Type<typeof ChildTotals> {}

/** A sub-agent call's child run, as its parent records it with the call's result (design 0392). */
export const ChildRun = Schema.Struct({
  runId: RunId,
  stopReason: StopReason,
  /** The child's own counters. */
  steps: Schema.NonNegativeInt,
  effectiveSteps: Schema.NonNegativeInt,
  usage: Usage,
  /** The child's own children, and theirs. */
  children: Schema.optional(ChildTotals)
})
/** @since 0.1.0 */
export interface ChildRun extends Schema.Schema.Type<typeof ChildRun> {}

/**
 * The action at `callIndex` of `step`'s decision produced `outcome` (as it entered history);
 * written as soon as that action finished (design 0150). `executorObservation` is the
 * executor's own text, kept for audit; `handlerFailed` is true when a tool handler failed,
 * died or timed out (a failing completing tool does not complete the run).
 */
export const ActionResulted = Schema.TaggedStruct("ActionResulted", {
  seq: Seq,
  resultId: ResultId,
  step: StepIndex,
  /** The action's position in the decision's `actions` (0 for a one-action step). */
  callIndex: Schema.NonNegativeInt,
  action: Action,
  outcome: ActionOutcome,
  executorObservation: Schema.String,
  handlerFailed: Schema.Boolean,
  /** A sub-agent's call (design 0392): the child run and what it cost. Absent before log version 4. */
  child: Schema.optional(ChildRun)
})
/** @since 0.1.0 */
export interface ActionResulted extends Schema.Schema.Type<typeof ActionResulted> {}

/**
 * The step ended. `decision` is the parsed decision (its kind is `decision._tag`); `resultIds`
 * are the step's results in call order (empty for a step with no action); `effective` is true
 * when at least one of them is `Executed` (recorded so a reader of single records, such as a
 * store's summary, need not look back); `elapsed` is milliseconds measured with `Clock`.
 */
export const StepCompleted = Schema.TaggedStruct("StepCompleted", {
  seq: Seq,
  step: StepIndex,
  decision: ParsedReply,
  resultIds: Schema.Array(ResultId),
  effective: Schema.Boolean,
  usage: Usage,
  elapsed: Schema.NonNegative.pipe(Schema.finite()),
  /**
   * Milliseconds spent in the model call, retries included (of `elapsed`, the rest being the
   * actions'). A step finished after a resume records its reply's `ModelReplied.modelElapsed`
   * (the call was made before the resume, so it may exceed `elapsed`, which counts from the
   * resume); absent when that reply has none (logs written before it was recorded).
   */
  modelElapsed: Schema.optional(Schema.NonNegative.pipe(Schema.finite()))
})
/** @since 0.1.0 */
export interface StepCompleted extends Schema.Schema.Type<typeof StepCompleted> {}

/**
 * What the model is sent changed (design 0300, decisions 4–5): from the request of `step` on,
 * the steps before `toStep` are replaced by one note — `summary` when a summariser wrote one,
 * the omitted-steps note otherwise. Written before the request that first uses it; each record
 * supersedes the previous one. `reason`: the token budget of `fitTokens` (`Budget`), the
 * threshold of `summarise` (`Threshold`), or a provider's `context_length_exceeded`
 * (`ContextExceeded`, the emergency step). `requestTokens`: the counted size of the request that
 * made it necessary. `requestHash` and `usage`: the summariser's request fingerprint and usage.
 * The log keeps every step in full either way.
 */
export const HistoryCompacted = Schema.TaggedStruct("HistoryCompacted", {
  seq: Seq,
  step: StepIndex,
  reason: Schema.Literal("Budget", "Threshold", "ContextExceeded"),
  toStep: StepIndex,
  requestTokens: Schema.NonNegativeInt,
  summary: Schema.optional(Schema.String),
  requestHash: Schema.optional(Schema.String),
  usage: Schema.optional(Usage)
})
/** @since 0.2.0 */
export interface HistoryCompacted extends Schema.Schema.Type<typeof HistoryCompacted> {}

/** The run was resumed at `fromStep` (epoch milliseconds `at`). */
export const RunResumed = Schema.TaggedStruct("RunResumed", {
  seq: Seq,
  fromStep: StepIndex,
  at: Schema.Finite,
  /** The log schema version of the code that resumed the run, which wrote the records after this one (absent: 1). */
  logVersion: Schema.optional(LogVersion)
})
/** @since 0.1.0 */
export interface RunResumed extends Schema.Schema.Type<typeof RunResumed> {}

/**
 * A person wrote to a conversation (design 0300, decisions 6–9): turn `turn` (from 1; turn 0 is
 * the task), the caller's `messageId` (a retried send finds it and appends nothing), the text.
 * Written before anything acts on it. Its turn starts when the turn before it has finished (a
 * message written while a turn runs or waits for a decision is held until then). When the
 * configuration changed since the turn before (a redeploy), `snapshotHash` is the new one's and
 * `differences` what changed — drift between turns is allowed and recorded.
 */
export const UserMessaged = Schema.TaggedStruct("UserMessaged", {
  seq: Seq,
  turn: Schema.Int.pipe(Schema.positive()),
  messageId: Schema.String,
  text: Schema.String,
  at: Schema.Finite,
  snapshot: Schema.optional(JsonValue),
  snapshotHash: Schema.optional(Schema.String),
  differences: Schema.optional(Schema.Array(ForkDifference))
})
/** @since 0.2.0 */
export interface UserMessaged extends Schema.Schema.Type<typeof UserMessaged> {}

/** Counters at the end of a run. */
export const RunCounters = Schema.Struct({
  steps: Schema.NonNegativeInt,
  effectiveSteps: Schema.NonNegativeInt,
  usage: Usage,
  /** Milliseconds: the sum of `StepCompleted.elapsed`. */
  elapsed: Schema.NonNegative.pipe(Schema.finite()),
  resumedCount: Schema.NonNegativeInt,
  /** What the run's sub-agents cost, over all descendants (design 0392); absent when it had none. */
  children: Schema.optional(ChildTotals)
})
/** @since 0.1.0 */
export interface RunCounters extends Schema.Schema.Type<typeof RunCounters> {}

/** The run finished. */
export const RunFinished = Schema.TaggedStruct("RunFinished", {
  seq: Seq,
  stopReason: StopReason,
  /** Epoch milliseconds, from `Clock`. */
  finishedAt: Schema.Finite,
  counters: RunCounters,
  eventDeliveryFailures: Schema.NonNegativeInt,
  /**
   * The run's answer decoded against the agent's output schema and encoded back (a JSON value,
   * design 0400): what a finished run's typed `RunResult.output` is decoded from. Absent when
   * the agent has no output schema or the run did not complete with an answer.
   */
  output: Schema.optional(JsonValue)
})
/** @since 0.1.0 */
export interface RunFinished extends Schema.Schema.Type<typeof RunFinished> {}

/** A person's decision on a call: run it, or not (with the reason, which the model is told). */
export const Decision = Schema.Union(
  Schema.TaggedStruct("Approve", {}),
  Schema.TaggedStruct("Reject", { reason: Schema.String })
)
/** @since 0.1.0 */
export type Decision = typeof Decision.Type

/**
 * The call `callId` of `step` needs a person's decision before it runs (design 0160). The run
 * suspends once every such call of the step is requested. `actionHash` binds the decision to
 * exactly this action of this step of this run (`Approval.actionHash`); `at` is epoch ms.
 */
export const ApprovalRequested = Schema.TaggedStruct("ApprovalRequested", {
  seq: Seq,
  step: StepIndex,
  callId: Schema.String,
  action: Action,
  actionHash: Schema.String,
  at: Schema.Finite
})
/** @since 0.1.0 */
export interface ApprovalRequested extends Schema.Schema.Type<typeof ApprovalRequested> {}

/** A person (`by`) decided on a requested call; `actionHash` is the request's. The first decision stands. */
export const ApprovalDecided = Schema.TaggedStruct("ApprovalDecided", {
  seq: Seq,
  step: StepIndex,
  callId: Schema.String,
  actionHash: Schema.String,
  decision: Decision,
  by: Schema.String,
  at: Schema.Finite
})
/** @since 0.1.0 */
export interface ApprovalDecided extends Schema.Schema.Type<typeof ApprovalDecided> {}

/** An approval record. */
export type ApprovalRecord = ApprovalRequested | ApprovalDecided

/**
 * A turn of a conversation ended (design 0300, decision 6): its stop reason, and its own
 * counters (the steps, tokens and time of this turn). `atStep`: the run's completed steps when
 * it ended — where the next turn's message enters the history.
 */
export const TurnFinished = Schema.TaggedStruct("TurnFinished", {
  seq: Seq,
  turn: Schema.NonNegativeInt,
  stopReason: StopReason,
  finishedAt: Schema.Finite,
  atStep: Schema.NonNegativeInt,
  counters: RunCounters,
  /** The turn's answer, encoded by the agent's output schema (design 0400), as in `RunFinished`. */
  output: Schema.optional(JsonValue)
})
/** @since 0.2.0 */
export interface TurnFinished extends Schema.Schema.Type<typeof TurnFinished> {}

/** A conversation's record. */
export type TurnRecord = UserMessaged | TurnFinished

/** Any record. */
export const RunRecord = Schema.Union(
  RunStarted,
  ModelReplied,
  ActionResulted,
  StepCompleted,
  RunResumed,
  RunFinished,
  ApprovalRequested,
  ApprovalDecided,
  HistoryCompacted,
  UserMessaged,
  TurnFinished
)
/** @since 0.1.0 */
export type RunRecord =
  | RunStarted
  | ModelReplied
  | ActionResulted
  | StepCompleted
  | RunResumed
  | RunFinished
  | ApprovalRequested
  | ApprovalDecided
  | HistoryCompacted
  | UserMessaged
  | TurnFinished

/** The kind of a record. */
export type RecordKind = RunRecord["_tag"]

/** The record kinds, in no particular order. */
export const recordKinds: ReadonlyArray<RecordKind> = [
  "RunStarted",
  "ModelReplied",
  "ActionResulted",
  "StepCompleted",
  "RunResumed",
  "RunFinished",
  "ApprovalRequested",
  "ApprovalDecided",
  "HistoryCompacted",
  "UserMessaged",
  "TurnFinished"
]
