/**
 * Checks of a run's log beyond decoding: the rules the loop and the store keep, which a log
 * damaged outside them (a record deleted or edited by hand, a file restored from a partial
 * copy, a store with a bug) breaks. Used by `polyloop verify` and `polyloop runs`, and by the
 * crash suites to check every log they leave.
 *
 * `logProblems` checks the structure of a decoded log (sequence numbers and record kinds are
 * checked by `RunLogStore.verifyLog` when the log is read):
 * - atomicity: every `ActionResulted` has its `StepCompleted` (same step, naming its result id),
 *   and every result a `StepCompleted` names is there — a step's last result and its completion
 *   are written in one append, so one without the other is a torn write. Results of the step
 *   that was interrupted (its reply logged, no completion) are not torn: each action's result is
 *   durable before the next action starts (design 0150);
 * - steps: each `StepCompleted` follows a `ModelReplied` of its step, no step completes twice,
 *   replies go step by step (a reply for step n + 1 only after step n completed);
 * - the end: nothing but approvals after `RunFinished`; `RunFinished`'s counters agree with
 *   the steps;
 * - approvals (design 0160): a request follows its step's reply; a decision follows the request
 *   of its call, bound to the same action hash, and no call is decided twice; a call that was
 *   requested ran (`Executed`) only after a decision approving it.
 *
 * `summaryProblems` compares a store's summary of a run (`listRuns`) with the one the log gives
 * (`RunLogStore.summarize`).
 *
 * Every problem is one line of text, naming the record (`record 7`) or field it is about.
 *
 * @since 0.1.0
 */
import * as Option from "effect/Option"
import * as RunLog from "./RunLog.js"
import * as RunLogStore from "./RunLogStore.js"

/** The structural problems of a decoded log, one line each; empty when there are none. */
export const logProblems = (log: RunLog.RunLog): ReadonlyArray<string> => {
  const problems: Array<string> = []
  const records = RunLog.records(log)
  const stepOf = new Map<string, RunLog.StepCompleted>()
  for (const step of log.steps) for (const id of step.resultIds) stepOf.set(id, step)
  const resultOf = new Map<string, RunLog.ActionResulted>()
  for (const result of log.results) resultOf.set(result.resultId, result)
  // The step interrupted with its reply logged: its results so far stand without a completion.
  const pending = log.replies.length > log.steps.length && Option.isNone(log.finished) ? log.replies[log.replies.length - 1]!.step : undefined

  for (const result of log.results) {
    const step = stepOf.get(result.resultId)
    if (step === undefined) {
      if (result.step !== pending) {
        problems.push(`record ${result.seq}: ActionResulted ${result.resultId} of step ${result.step} has no StepCompleted (a torn step)`)
      }
    } else if (step.step !== result.step) {
      problems.push(`record ${result.seq}: ActionResulted ${result.resultId} is of step ${result.step} but completes step ${step.step}`)
    }
  }
  for (const step of log.steps) {
    let effective = false
    for (const id of step.resultIds) {
      const result = resultOf.get(id)
      if (result === undefined) {
        problems.push(`record ${step.seq}: StepCompleted of step ${step.step} names result ${id}, which is not in the log (a torn step)`)
      } else if (result.outcome.status === "Executed") effective = true
    }
    if (step.effective !== effective) {
      problems.push(`record ${step.seq}: StepCompleted of step ${step.step} is recorded ${step.effective ? "effective" : "not effective"}; its results say otherwise`)
    }
  }

  // Replies and completions in order: step n's reply, then (after any resume) its completion.
  let expected = 0 // the step the next reply is for
  let replied: number | undefined // the step replied to and not yet completed
  let finishedAt: number | undefined
  let compactedTo = 0 // the toStep of the last HistoryCompacted
  let messagesSeen = 0 // a conversation's UserMessaged records so far
  let turnsSeen = 0 // its TurnFinished records so far
  for (const record of records) {
    if (finishedAt !== undefined && record._tag !== "ApprovalRequested" && record._tag !== "ApprovalDecided") {
      problems.push(`record ${record.seq}: ${record._tag} after RunFinished (record ${finishedAt})`)
      continue
    }
    switch (record._tag) {
      case "ModelReplied":
        if (replied !== undefined) {
          problems.push(`record ${record.seq}: a reply for step ${record.step} while step ${replied} has a reply and no StepCompleted`)
        } else if (record.step !== expected) {
          problems.push(`record ${record.seq}: a reply for step ${record.step} where step ${expected} was next`)
        }
        replied = record.step
        expected = record.step + 1
        break
      case "StepCompleted":
        if (replied !== record.step) {
          problems.push(`record ${record.seq}: StepCompleted of step ${record.step} without a reply of that step before it`)
        }
        replied = undefined
        break
      case "HistoryCompacted":
        // Written before the request that uses it (design 0300): the next step's, before its reply.
        if (replied !== undefined || record.step !== expected) {
          problems.push(`record ${record.seq}: HistoryCompacted for step ${record.step} where the next request was step ${replied === undefined ? expected : `${replied}'s completion`}`)
        }
        if (record.toStep > record.step) problems.push(`record ${record.seq}: HistoryCompacted replaces steps up to ${record.toStep}, beyond its own step ${record.step}`)
        if (record.toStep < compactedTo) problems.push(`record ${record.seq}: HistoryCompacted replaces fewer steps (${record.toStep}) than the one before it (${compactedTo})`)
        compactedTo = Math.max(compactedTo, record.toStep)
        break
      case "UserMessaged":
        // A conversation's messages are numbered 1, 2, … in write order (design 0300).
        if (record.turn !== ++messagesSeen) problems.push(`record ${record.seq}: UserMessaged for turn ${record.turn} where turn ${messagesSeen} was next`)
        if (Option.isNone(log.started) || log.started.value.conversation === undefined) problems.push(`record ${record.seq}: UserMessaged in a run that is not a conversation`)
        break
      case "TurnFinished":
        if (record.turn !== turnsSeen) problems.push(`record ${record.seq}: TurnFinished of turn ${record.turn} where turn ${turnsSeen} was to finish`)
        else if (record.turn > messagesSeen) problems.push(`record ${record.seq}: TurnFinished of turn ${record.turn} before its message`)
        if (replied !== undefined) problems.push(`record ${record.seq}: TurnFinished while step ${replied} has a reply and no StepCompleted`)
        turnsSeen++
        break
      case "RunFinished":
        if (Option.isSome(log.started) && log.started.value.conversation !== undefined) problems.push(`record ${record.seq}: RunFinished in a conversation (its turns end with TurnFinished)`)
        finishedAt = record.seq
        if (replied !== undefined) problems.push(`record ${record.seq}: RunFinished while step ${replied} has a reply and no StepCompleted`)
        if (record.counters.steps !== log.steps.length) {
          problems.push(`record ${record.seq}: RunFinished counts ${record.counters.steps} steps; the log has ${log.steps.length}`)
        }
        break
      default:
        break
    }
  }
  problems.push(...approvalProblems(records))
  return problems
}

/** The approval rules of `logProblems` (design 0160). */
const approvalProblems = (records: ReadonlyArray<RunLog.RunRecord>): ReadonlyArray<string> => {
  const problems: Array<string> = []
  const replied = new Set<number>()
  const requested = new Map<string, RunLog.ApprovalRequested>()
  const decided = new Map<string, RunLog.ApprovalDecided>()
  const key = (step: number, callId: string) => `${step}/${callId}`
  for (const record of records) {
    switch (record._tag) {
      case "ModelReplied":
        replied.add(record.step)
        break
      case "ApprovalRequested":
        if (!replied.has(record.step)) problems.push(`record ${record.seq}: ApprovalRequested for call ${record.callId} of step ${record.step} before the step's reply`)
        requested.set(key(record.step, record.callId), record)
        break
      case "ApprovalDecided": {
        const request = requested.get(key(record.step, record.callId))
        const earlier = decided.get(key(record.step, record.callId))
        if (request === undefined) {
          problems.push(`record ${record.seq}: ApprovalDecided for call ${record.callId} of step ${record.step}, which was not requested before it`)
        } else if (request.actionHash !== record.actionHash) {
          problems.push(`record ${record.seq}: ApprovalDecided for call ${record.callId} of step ${record.step} is bound to another action than its request (record ${request.seq})`)
        }
        if (earlier !== undefined) problems.push(`record ${record.seq}: call ${record.callId} of step ${record.step} decided again (first at record ${earlier.seq})`)
        else decided.set(key(record.step, record.callId), record)
        break
      }
      case "ActionResulted": {
        if (record.outcome.status !== "Executed" || record.action._tag !== "ToolCall") break
        const k = key(record.step, record.action.id)
        if (!requested.has(k)) break
        const decision = decided.get(k)
        if (decision === undefined || decision.decision._tag !== "Approve") {
          problems.push(`record ${record.seq}: call ${record.action.id} of step ${record.step} ran without an approval (it was requested at record ${requested.get(k)!.seq})`)
        }
        break
      }
      default:
        break
    }
  }
  // A request without a decision is not a problem: the run waits for it, or ended while a call
  // waited (an error, its budget).
  return problems
}

const stopTag = (summary: RunLogStore.RunSummary): string => Option.match(summary.stopReason, { onNone: () => "none", onSome: (r) => r._tag })

/**
 * Where a store's summary of a run disagrees with the summary of its log, one line per field;
 * empty when they agree. Elapsed time is compared to the millisecond (a store may round it).
 */
export const summaryProblems = (summary: RunLogStore.RunSummary, log: RunLog.RunLog): ReadonlyArray<string> => {
  const fromLog = RunLogStore.summarize(log)
  if (Option.isNone(fromLog)) return [`the summary lists the run, but its log is empty`]
  const expected = fromLog.value
  const problems: Array<string> = []
  const compare = (field: string, stored: unknown, actual: unknown) => {
    if (stored !== actual) problems.push(`the summary's ${field} is ${String(stored)}; the log says ${String(actual)}`)
  }
  compare("status", summary.status, expected.status)
  compare("stop reason", stopTag(summary), stopTag(expected))
  compare("steps", summary.steps, expected.steps)
  compare("effective steps", summary.effectiveSteps, expected.effectiveSteps)
  compare("tokens", summary.tokens, expected.tokens)
  compare("start time", summary.startedAt, expected.startedAt)
  if (Math.abs(summary.elapsed - expected.elapsed) >= 1) compare("elapsed time", summary.elapsed, expected.elapsed)
  return problems
}
