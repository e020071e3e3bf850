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

/** What the stop judgment needs of the last completed step: its decision and results, in call order. @internal */
export interface LastStep {
  readonly decision: ParsedReply
  readonly results: ReadonlyArray<RunLog.ActionResulted>
}

/** Counters and history of a run in progress. Owned by the run's fiber only. @internal */
export interface State {
  readonly messages: History.Messages
  /** Where each completed step's messages start in `messages` (its `Assistant` message). */
  readonly stepStarts: Array<number>
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
  /** Milliseconds the live step's model call took (read by its `StepCompleted`); undefined for a resumed step. */
  modelElapsed: number | undefined
  last: LastStep | undefined
  /** The history compactions recorded so far (design 0300), in order. */
  readonly compactions: Array<RunLog.HistoryCompacted>
  /** The provider's input tokens of the last completed step's reply. */
  lastInputTokens: number
  /** The turn in progress (design 0300; 0 for a single-task run, and for a conversation's task). */
  turn: number
  /** Whether the current turn has its `TurnFinished` (a conversation waiting for a message). */
  turnFinished: boolean
  /** The counters when the current turn started: a turn's budget counts from there. */
  turnStart: TurnStart
  /** The indices in `messages` of the conversation's user messages after the task (never masked, never dropped). */
  readonly turnMessages: Array<number>
  /** What the run's sub-agents cost so far, over all descendants (design 0392): completed steps only. */
  readonly children: Children
  /** The turn's answers that did not decode against the output schema (design 0400). */
  invalidOutputs: number
}

/** What a run's children cost (design 0392), mutable. @internal */
export interface Children {
  runs: number
  steps: number
  inputTokens: number
  outputTokens: number
}

/** Counters at the start of a turn. @internal */
export interface TurnStart {
  readonly steps: number
  readonly effectiveSteps: number
  readonly inputTokens: number
  readonly outputTokens: number
  readonly elapsed: number
  /** The children's totals then (design 0392). */
  readonly children: Readonly<Children>
}

/** The state of a fresh run, whose `RunStarted` has sequence number 0. @internal */
export const fresh = (messages: History.Messages): State => ({
  messages,
  stepStarts: [],
  steps: 0,
  effectiveSteps: 0,
  inputTokens: 0,
  outputTokens: 0,
  elapsed: 0,
  resumedCount: 0,
  eventDeliveryFailures: 0,
  seq: 1,
  modelElapsed: undefined,
  last: undefined,
  compactions: [],
  lastInputTokens: 0,
  turn: 0,
  turnFinished: false,
  turnStart: { steps: 0, effectiveSteps: 0, inputTokens: 0, outputTokens: 0, elapsed: 0, children: { runs: 0, steps: 0, inputTokens: 0, outputTokens: 0 } },
  turnMessages: [],
  children: { runs: 0, steps: 0, inputTokens: 0, outputTokens: 0 },
  invalidOutputs: 0
})

/** The children's tokens, input and output (design 0392). @internal */
export const childTokens = (state: State): number => state.children.inputTokens + state.children.outputTokens

/**
 * The children's totals as a record holds them — since `from` (a turn's start) when given — or
 * undefined when there were none. @internal
 */
export const childTotals = (children: Readonly<Children>, from?: Readonly<Children>): RunLog.ChildTotals | undefined => {
  const runs = children.runs - (from?.runs ?? 0)
  return runs === 0 ? undefined : {
    runs,
    steps: children.steps - (from?.steps ?? 0),
    usage: { inputTokens: children.inputTokens - (from?.inputTokens ?? 0), outputTokens: children.outputTokens - (from?.outputTokens ?? 0) }
  }
}

/**
 * Starts turn `message.turn` of a conversation: its message enters the history, the stop
 * judgment forgets the last turn's last step, and the turn's budget counts from here. @internal
 */
export const startTurn = (state: State, message: RunLog.UserMessaged): void => {
  state.turnMessages.push(state.messages.length)
  state.messages.push({ _tag: "User", text: message.text })
  state.turn = message.turn
  state.turnFinished = false
  state.last = undefined
  state.invalidOutputs = 0
  state.turnStart = {
    steps: state.steps,
    effectiveSteps: state.effectiveSteps,
    inputTokens: state.inputTokens,
    outputTokens: state.outputTokens,
    elapsed: state.elapsed,
    children: { ...state.children }
  }
}

/** Is one of the results `Executed` (the step is effective)? @internal */
export const isEffective = (results: ReadonlyArray<RunLog.ActionResulted>): boolean => {
  for (let i = 0; i < results.length; i++) if (results[i]!.outcome.status === "Executed") return true
  return false
}

/** Adds a completed step (its results in call order) to the counters and the history. @internal */
export const applyStep = (
  state: State,
  reply: RunLog.ModelReplied["reply"],
  step: RunLog.StepCompleted,
  results: ReadonlyArray<RunLog.ActionResulted>,
  texts: History.Texts
): void => {
  state.steps += 1
  if (isEffective(results)) state.effectiveSteps += 1
  state.inputTokens += step.usage.inputTokens
  state.outputTokens += step.usage.outputTokens
  state.elapsed += step.elapsed
  state.last = { decision: step.decision, results }
  for (let i = 0; i < results.length; i++) {
    const child = results[i]!.child
    if (child === undefined) continue
    const c = state.children
    c.runs += 1 + (child.children?.runs ?? 0)
    c.steps += child.steps + (child.children?.steps ?? 0)
    c.inputTokens += child.usage.inputTokens + (child.children?.usage.inputTokens ?? 0)
    c.outputTokens += child.usage.outputTokens + (child.children?.usage.outputTokens ?? 0)
  }
  if (step.decision._tag === "InvalidDecision" && step.decision.invalidOutput !== undefined) state.invalidOutputs += 1
  state.lastInputTokens = reply.usage.inputTokens
  state.stepStarts.push(state.messages.length)
  History.appendStep(state.messages, reply, step.decision, results, texts)
}

/** A started run's state rebuilt from its log, and the reply of an interrupted step if any. @internal */
export interface Rebuilt {
  readonly state: State
  /** The logged reply of the step that was interrupted before it completed. */
  readonly interrupted: Option.Option<RunLog.ModelReplied>
  /** The results of that step written before the interruption, in call order. */
  readonly interruptedResults: ReadonlyArray<RunLog.ActionResulted>
}

/**
 * Finishes and starts turns while the log says so at the current step: turn t's end is its
 * `TurnFinished` (at `atStep` completed steps); turn t+1's message enters the history there. A
 * message whose turn before has not finished is held (not applied). @internal
 */
const startTurns = (state: State, log: RunLog.RunLog): void => {
  for (;;) {
    const ended = log.turns[state.turn]
    if (ended === undefined || ended.turn !== state.turn || ended.atStep !== state.steps) return
    state.turnFinished = true
    const message = log.userMessages[state.turn]
    if (message === undefined || message.turn !== state.turn + 1) return
    startTurn(state, message)
  }
}

const corrupt = (runId: RunId, message: string) =>
  Effect.fail(new StoreError({ reason: "Corrupt", runId, message: `run ${runId}: ${message}` }))

/**
 * Rebuilds the state of a started, unfinished run: every completed step is rendered into
 * history and counted, in order. A log whose records do not fit together (a step without its
 * reply, a result that belongs to another step, a step naming results that are not its own) is
 * a corrupt store. Results after the last completed step belong to the interrupted step.
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
    startTurns(state, log)
    const results = log.results
    let resultIndex = 0
    for (let i = 0; i < log.steps.length; i++) {
      const step = log.steps[i]!
      const reply = log.replies[i]
      if (step.step !== i) return corrupt(runId, `step record ${i} is for step ${step.step}`)
      if (reply === undefined || reply.step !== i) return corrupt(runId, `step ${i} completed without its model reply`)
      // The step's results are the next ones in the log (in call order), as many as it names.
      const ids = step.resultIds
      const own = results.slice(resultIndex, resultIndex + ids.length)
      for (let k = 0; k < ids.length; k++) {
        const candidate = own[k]
        if (candidate === undefined || candidate.resultId !== ids[k] || candidate.step !== i) {
          return corrupt(runId, `step ${i} names result ${ids[k]}, which is not the next result in the log`)
        }
      }
      resultIndex += ids.length
      applyStep(state, reply.reply, step, own, texts)
      startTurns(state, log)
    }
    if (log.replies.length > log.steps.length + 1) return corrupt(runId, "more than one model reply without a completed step")
    const pending = log.replies[log.steps.length]
    if (pending !== undefined && pending.step !== log.steps.length) {
      return corrupt(runId, `the pending reply is for step ${pending.step}, expected ${log.steps.length}`)
    }
    const interruptedResults = results.slice(resultIndex)
    for (const result of interruptedResults) {
      if (pending === undefined || result.step !== pending.step) {
        return corrupt(runId, "a result does not belong to a completed step")
      }
    }
    for (const compaction of log.compactions) {
      if (compaction.step > log.steps.length || compaction.toStep > compaction.step) {
        return corrupt(runId, `the history compaction at record ${compaction.seq} (step ${compaction.step}, steps before ${compaction.toStep}) does not fit the log`)
      }
      state.compactions.push(compaction)
      // A summary's model call counts in the run's tokens.
      if (compaction.usage !== undefined) {
        state.inputTokens += compaction.usage.inputTokens
        state.outputTokens += compaction.usage.outputTokens
      }
    }
    state.resumedCount = log.resumes.length
    state.seq =
      (Option.isSome(log.started) ? 1 : 0) + log.replies.length + log.results.length + log.steps.length + log.resumes.length +
      log.approvals.length + log.compactions.length + log.userMessages.length + log.turns.length
    return Effect.succeed({ state, interrupted: Option.fromNullable(pending), interruptedResults })
  })
