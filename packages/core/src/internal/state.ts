/**
 * The loop's mutable state and its rebuild from a run log. History is never stored: a resume
 * renders it again from the records, with the same `appendStep` the live loop uses.
 *
 * @internal
 */
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import { StoreError } from "../Errors.js"
import type { RunId } from "../Ids.js"
import type { ParsedReply } from "../ParsedReply.js"
import type * as RunLog from "../RunLog.js"
import * as History from "./history.js"

/** What the stop judgment needs of the last completed step. @internal */
export interface LastStep {
  readonly decision: ParsedReply
  readonly result: RunLog.ActionResulted | null
}

/** Counters and history of a run in progress. Owned by the run's fiber only. @internal */
export interface State {
  readonly messages: History.Messages
  /** Completed steps; also the index of the next step. */
  steps: number
  effectiveSteps: number
  inputTokens: number
  outputTokens: number
  /** Milliseconds: the sum of `StepCompleted.elapsed`. */
  elapsed: number
  resumedCount: number
  eventDeliveryFailures: number
  /** The sequence number of the next record. */
  seq: number
  last: LastStep | undefined
}

/** The state of a fresh run, whose `RunStarted` has sequence number 0. @internal */
export const fresh = (messages: History.Messages): State => ({
  messages,
  steps: 0,
  effectiveSteps: 0,
  inputTokens: 0,
  outputTokens: 0,
  elapsed: 0,
  resumedCount: 0,
  eventDeliveryFailures: 0,
  seq: 1,
  last: undefined
})

/** Adds a completed step to the counters and the history. @internal */
export const applyStep = (
  state: State,
  reply: RunLog.ModelReplied["reply"],
  step: RunLog.StepCompleted,
  result: RunLog.ActionResulted | null,
  texts: History.Texts
): void => {
  state.steps += 1
  if (result !== null && result.outcome.status === "Executed") state.effectiveSteps += 1
  state.inputTokens += step.usage.inputTokens
  state.outputTokens += step.usage.outputTokens
  state.elapsed += step.elapsed
  state.last = { decision: step.decision, result }
  History.appendStep(state.messages, reply, step.decision, result === null ? undefined : result.outcome.observation, texts)
}

/** A started run's state rebuilt from its log, and the reply of an interrupted step if any. @internal */
export interface Rebuilt {
  readonly state: State
  /** The logged reply of the step that was interrupted before it completed. */
  readonly interrupted: Option.Option<RunLog.ModelReplied>
}

const corrupt = (runId: RunId, message: string) =>
  Effect.fail(new StoreError({ reason: "Corrupt", runId, message: `run ${runId}: ${message}` }))

/**
 * Rebuilds the state of a started, unfinished run: every completed step is rendered into
 * history and counted, in order. A log whose records do not fit together (a step without its
 * reply, a result that belongs to another step) is a corrupt store.
 * @internal
 */
export const rebuild = (
  runId: RunId,
  log: RunLog.RunLog,
  messages: History.Messages,
  texts: History.Texts
): Effect.Effect<Rebuilt, StoreError> =>
  Effect.suspend(() => {
    const state = fresh(messages)
    let resultIndex = 0
    for (let i = 0; i < log.steps.length; i++) {
      const step = log.steps[i]!
      const reply = log.replies[i]
      if (step.step !== i) return corrupt(runId, `step record ${i} is for step ${step.step}`)
      if (reply === undefined || reply.step !== i) return corrupt(runId, `step ${i} completed without its model reply`)
      let result: RunLog.ActionResulted | null = null
      if (step.resultId !== null) {
        const candidate = log.results[resultIndex]
        if (candidate === undefined || candidate.resultId !== step.resultId || candidate.step !== i) {
          return corrupt(runId, `step ${i} names result ${step.resultId}, which is not the next result in the log`)
        }
        result = candidate
        resultIndex += 1
      }
      applyStep(state, reply.reply, step, result, texts)
    }
    if (resultIndex !== log.results.length) return corrupt(runId, "a result does not belong to a completed step")
    if (log.replies.length > log.steps.length + 1) return corrupt(runId, "more than one model reply without a completed step")
    const pending = log.replies[log.steps.length]
    if (pending !== undefined && pending.step !== log.steps.length) {
      return corrupt(runId, `the pending reply is for step ${pending.step}, expected ${log.steps.length}`)
    }
    state.resumedCount = log.resumes.length
    state.seq =
      (Option.isSome(log.started) ? 1 : 0) + log.replies.length + log.results.length + log.steps.length + log.resumes.length +
      log.approvals.length
    return Effect.succeed({ state, interrupted: Option.fromNullable(pending) })
  })
