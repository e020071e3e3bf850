/**
 * The run log as read back (SPEC §7): the `RunLog` struct a store returns, built from records in
 * sequence order by `fromRecords` (a step's results put in call order), and the questions asked
 * of it — its size, its records, the records before a step, whether a conversation waits. The
 * public module `RunLog.ts` re-exports all of it (design 0390); the records are in
 * `logRecords.ts`.
 *
 * @internal
 */
import * as Option from "effect/Option"
import * as Schema from "effect/Schema"
import {
  ActionResulted,
  ApprovalDecided,
  type ApprovalRecord,
  ApprovalRequested,
  HistoryCompacted,
  ModelReplied,
  RunFinished,
  RunRecord,
  RunResumed,
  RunStarted,
  StepCompleted,
  TurnFinished,
  UserMessaged
} from "./logRecords.js"

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
  // One push per record: a spread of every record into one call overflows the stack past
  // ~120,000 arguments (a long run's replies alone).
  for (const group of [log.replies, log.results, log.steps, log.resumes, log.approvals, log.compactions, log.userMessages, log.turns]) {
    for (const record of group) all.push(record)
  }
  if (Option.isSome(log.finished)) all.push(log.finished.value)
  return all.sort((a, b) => a.seq - b.seq)
}
