/**
 * The run log: the record kinds and the `RunLog` a store reads back (SPEC §7). History is
 * rebuilt from the log, never stored separately. `ApprovalRequested` / `ApprovalDecided`
 * (design 0160) are absent from logs written before approvals existed; such logs read back
 * with `approvals` empty.
 *
 * @since 0.1.0
 */
import * as Option from "effect/Option"
import * as Schema from "effect/Schema"
import { Action } from "./Action.js"
import { ActionOutcome } from "./ActionOutcome.js"
import { ResultId, RunId, Seq, StepIndex } from "./Ids.js"
import { JsonValue } from "./internal/jsonValue.js"
import { ModelReply, Usage } from "./ModelReply.js"
import { ParsedReply } from "./ParsedReply.js"
import { StopReason } from "./StopReason.js"

/**
 * The version of the log's schema this code writes (design 0150). Version 1: one action per
 * step (`StepCompleted.resultId`, `Act.action`); version 2: several (`StepCompleted.resultIds`,
 * `ActionResulted.callIndex`, `Act.actions`); version 3: `HistoryCompacted` (design 0300);
 * version 4: the `InvalidOutput` stop reason and the recorded `output` of a typed answer
 * (design 0400; a version-3 log is a version-4 log without them). Logs
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
  handlerFailed: Schema.Boolean
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
  resumedCount: Schema.NonNegativeInt
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

/**
 * A run's log as read back, each sequence in write order — except `results`, which are in step
 * order and, within a step, in call order (the results of a step whose actions ran concurrently
 * are written as each finishes; `fromRecords` puts them in call order and gives them their
 * sequence numbers in call order too, so every reader — exports, replay's comparison, `verify`,
 * `polyloop show` — sees the same log whatever order the calls finished in).
 */
export const RunLog = Schema.Struct({
  started: Schema.OptionFromSelf(RunStarted),
  replies: Schema.Array(ModelReplied),
  results: Schema.Array(ActionResulted),
  steps: Schema.Array(StepCompleted),
  resumes: Schema.Array(RunResumed),
  /** Approval requests and decisions (design 0160), in write order. */
  approvals: Schema.Array(Schema.Union(ApprovalRequested, ApprovalDecided)),
  /** History compactions (design 0300), in write order; empty in logs of version 1 and 2. */
  compactions: Schema.Array(HistoryCompacted),
  /** A conversation's messages after its task (design 0300), in write order; empty for a single-task run. */
  userMessages: Schema.Array(UserMessaged),
  /** A conversation's finished turns, in order; empty for a single-task run. */
  turns: Schema.Array(TurnFinished),
  finished: Schema.OptionFromSelf(RunFinished)
})
/** @since 0.1.0 */
export interface RunLog extends Schema.Schema.Type<typeof RunLog> {}

/** Is the log a conversation's (design 0300: `RunStarted.conversation`, started by `Agent.send`)? */
export const isConversation = (log: RunLog): boolean => log.started._tag === "Some" && log.started.value.conversation !== undefined

/**
 * Does the log's conversation wait for the next message (design 0300)? Every message has had its
 * turn: the last turn finished and nothing is held. Never true of a single-task run.
 */
export const awaitsMessage = (log: RunLog): boolean =>
  isConversation(log) && log.finished._tag === "None" && log.turns.length > 0 && log.turns.length === log.userMessages.length + 1

/** The empty log: what `readLog` returns for a run that does not exist. */
export const empty: RunLog = {
  started: Option.none(),
  replies: [],
  results: [],
  steps: [],
  resumes: [],
  approvals: [],
  compactions: [],
  userMessages: [],
  turns: [],
  finished: Option.none()
}

/** Is this the empty log? */
export const isEmpty = (log: RunLog): boolean =>
  Option.isNone(log.started) &&
  Option.isNone(log.finished) &&
  log.replies.length === 0 &&
  log.results.length === 0 &&
  log.steps.length === 0 &&
  log.resumes.length === 0 &&
  log.approvals.length === 0 &&
  log.compactions.length === 0 &&
  log.userMessages.length === 0 &&
  log.turns.length === 0

/** The number of records in the log: also the sequence number of the next record. */
export const size = (log: RunLog): number =>
  (Option.isSome(log.started) ? 1 : 0) +
  log.replies.length +
  log.results.length +
  log.steps.length +
  log.resumes.length +
  log.approvals.length +
  log.compactions.length +
  log.userMessages.length +
  log.turns.length +
  (Option.isSome(log.finished) ? 1 : 0)

/** The sequence number the next record must carry. */
export const nextSeq = size

/** Builds a log from records in sequence order. */
export const fromRecords = (records: Iterable<RunRecord>): RunLog => {
  let started: Option.Option<RunStarted> = Option.none()
  let finished: Option.Option<RunFinished> = Option.none()
  const replies: Array<ModelReplied> = []
  const results: Array<ActionResulted> = []
  const steps: Array<StepCompleted> = []
  const resumes: Array<RunResumed> = []
  const approvals: Array<ApprovalRecord> = []
  const compactions: Array<HistoryCompacted> = []
  const userMessages: Array<UserMessaged> = []
  const turns: Array<TurnFinished> = []
  for (const record of records) {
    switch (record._tag) {
      case "RunStarted":
        started = Option.some(record)
        break
      case "ModelReplied":
        replies.push(record)
        break
      case "ActionResulted":
        results.push(record)
        break
      case "StepCompleted":
        steps.push(record)
        break
      case "RunResumed":
        resumes.push(record)
        break
      case "RunFinished":
        finished = Option.some(record)
        break
      case "ApprovalRequested":
      case "ApprovalDecided":
        approvals.push(record)
        break
      case "HistoryCompacted":
        compactions.push(record)
        break
      case "UserMessaged":
        userMessages.push(record)
        break
      case "TurnFinished":
        turns.push(record)
        break
    }
  }
  return { started, replies, results: inCallOrder(results), steps, resumes, approvals, compactions, userMessages, turns, finished }
}

/**
 * Results in step order and, within a step, in call order (sorted only when some are not).
 *
 * The results of a concurrent step are written as each call completes (design 0150), so their
 * sequence numbers follow completion order. As read, they follow call order (issue 29, design
 * 0150 as amended): the numbers a step's results hold within one attempt — a run of consecutive
 * numbers, nothing else is written between them — are given back to those results in call
 * order. Every record keeps its place relative to every other record (a result written after a
 * `RunResumed` still reads after it), the numbers stay 0, 1, 2, … with no gap, and two runs of
 * one configuration read the same whatever order their calls finished in.
 */
const inCallOrder = (results: Array<ActionResulted>): Array<ActionResulted> => {
  for (let i = 1; i < results.length; i++) {
    const a = results[i - 1]!
    const b = results[i]!
    if (a.step > b.step || (a.step === b.step && a.callIndex > b.callIndex)) return canonical(results)
  }
  return results
}

/** `inCallOrder`'s slow path: sorts, and renumbers each attempt's results of a step in call order. */
const canonical = (results: Array<ActionResulted>): Array<ActionResulted> => {
  // In write order, a segment is a run of results of one step with consecutive numbers.
  const bySeq = results.slice().sort((x, y) => x.seq - y.seq)
  const segmentOf = new Map<ActionResulted, number>()
  let segment = 0
  for (let i = 0; i < bySeq.length; i++) {
    const r = bySeq[i]!
    const previous = bySeq[i - 1]
    if (previous !== undefined && (previous.step !== r.step || previous.seq + 1 !== r.seq)) segment++
    segmentOf.set(r, segment)
  }
  // Each segment's numbers, ascending, go to its results in call order.
  const numbers = new Map<number, Array<number>>()
  for (const r of bySeq) {
    const s = segmentOf.get(r)!
    const list = numbers.get(s)
    if (list === undefined) numbers.set(s, [r.seq])
    else list.push(r.seq)
  }
  const sorted = results.sort((x, y) => x.step - y.step || x.callIndex - y.callIndex)
  const taken = new Map<number, number>()
  for (let i = 0; i < sorted.length; i++) {
    const r = sorted[i]!
    const s = segmentOf.get(r)!
    const k = taken.get(s) ?? 0
    taken.set(s, k + 1)
    const seq = numbers.get(s)![k]!
    if (seq !== r.seq) sorted[i] = { ...r, seq }
  }
  return sorted
}

/** The results of each step that has some, in call order. */
export const resultsByStep = (log: RunLog): ReadonlyMap<number, ReadonlyArray<ActionResulted>> => {
  const byStep = new Map<number, Array<ActionResulted>>()
  for (const result of log.results) {
    const found = byStep.get(result.step)
    if (found === undefined) byStep.set(result.step, [result])
    else found.push(result)
  }
  return byStep
}

/**
 * The records of the steps before `step`, in sequence order: every record that carries a
 * `step` field lower than `step` (replies, results, step completions, and any record kind that
 * belongs to a step), and a conversation's turns that ended by then with the messages that
 * follow them. The run's `RunStarted`, `RunResumed` and `RunFinished` are not included.
 */
export const recordsBeforeStep = (log: RunLog, step: number): ReadonlyArray<RunRecord> => {
  // A conversation's turns (design 0300): a turn that ended by then, and the message of the
  // turn after it, which enters the history there.
  const endedBy = new Set(log.turns.filter((t) => t.atStep <= step).map((t) => t.turn))
  return records(log).filter((record) => {
    switch (record._tag) {
      case "TurnFinished":
        return endedBy.has(record.turn)
      case "UserMessaged":
        return endedBy.has(record.turn - 1)
      default:
        return "step" in record && typeof record.step === "number" && record.step < step
    }
  })
}

/** All records of the log in sequence order. */
export const records = (log: RunLog): ReadonlyArray<RunRecord> => {
  const all: Array<RunRecord> = []
  if (Option.isSome(log.started)) all.push(log.started.value)
  all.push(...log.replies, ...log.results, ...log.steps, ...log.resumes, ...log.approvals, ...log.compactions, ...log.userMessages, ...log.turns)
  if (Option.isSome(log.finished)) all.push(log.finished.value)
  return all.sort((a, b) => a.seq - b.seq)
}
