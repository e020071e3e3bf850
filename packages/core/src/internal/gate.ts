/**
 * The approval gate of the loop (design 0160). A live step whose actions include calls that need
 * a person's decision records one `ApprovalRequested` per such call (one append) and the run
 * stops with `Suspended`; no action of the step runs. On resume, `inspect` reads the pending
 * step's requests and decisions before anything is written: a call still undecided stops the
 * run again with nothing written; decisions that do not bind to the action parsed again from the
 * logged reply are a corrupt log; otherwise the step goes on with each call's decision, and
 * `fresh` says whether any attempt ran after the decisions (if none did, nothing of the step has
 * started, so its actions run — an approved `"Never"` action once; if one did, the interrupted
 * rule of SPEC §9 applies as to any action in flight).
 *
 * @internal
 */
import * as Clock from "effect/Clock"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import type { Action } from "../Action.js"
import type { ActionOutcome } from "../ActionOutcome.js"
import { StoreError, Suspended, type Waiting } from "../Errors.js"
import type * as ParsedReply from "../ParsedReply.js"
import type * as RunLog from "../RunLog.js"
import { defaultRejected, fillRejected } from "../SyntheticObservations.js"
import * as Approvals from "./approvals.js"
import * as History from "./history.js"
import { asStep, emit, type Gate, type LoopError, type Run } from "./run.js"

/** The loop's error and the gate's state live with the attempt's `Run` (no import circle). @internal */
export type { Gate, LoopError } from "./run.js"

const corrupt = (run: Run, message: string) =>
  Effect.fail(new StoreError({ reason: "Corrupt", runId: run.runId, message: `run ${run.runId}: ${message}` }))

/** The calls of a step that need a decision, with their call ids and hashes. */
const gatedCalls = (run: Run, step: number, actions: ReadonlyArray<Action>) => {
  const out: Array<{ readonly callId: string; readonly action: Action; readonly actionHash: string }> = []
  for (let i = 0; i < actions.length; i++) {
    const action = actions[i]!
    if (!Approvals.required(run.request.tools, action)) continue
    const callId = History.callIdOf(action, step, i)
    out.push({ callId, action, actionHash: Approvals.actionHash(run.runId, step, callId, action) })
  }
  return out
}

const waitingOf = (run: Run, request: RunLog.ApprovalRequested): Waiting => ({
  runId: run.runId,
  step: request.step,
  callId: request.callId,
  tool: History.actionName(request.action),
  action: request.action,
  actionHash: request.actionHash,
  requestedAt: request.at
})

/**
 * Before a resume writes anything: the approval state of the pending step whose logged reply
 * parsed to `decision` (call ids assigned). Fails with `Suspended` while a call waits, with a
 * `Corrupt` `StoreError` when a request or decision does not bind to the step's action.
 * @internal
 */
export const inspect = (
  run: Run,
  log: RunLog.RunLog,
  step: number,
  decision: ParsedReply.ParsedReply
): Effect.Effect<Gate | undefined, Suspended | StoreError> => {
  if (decision._tag !== "Act") return Effect.succeed(undefined)
  const requests = Approvals.requestsOfStep(log, step)
  if (requests.length === 0) {
    return Effect.succeed(
      gatedCalls(run, step, decision.actions).length === 0 ? undefined : { step, decisions: new Map(), fresh: true, requestNow: true }
    )
  }
  const undecided = requests.filter((request) => Option.isNone(Approvals.decisionOf(log, request)))
  if (undecided.length > 0) return Effect.fail(new Suspended({ runId: run.runId, waiting: undecided.map((r) => waitingOf(run, r)) }))
  const decisions = new Map<string, RunLog.Decision>()
  let lastRequest = 0
  for (const request of requests) {
    const index = decision.actions.findIndex((action, i) => History.callIdOf(action, step, i) === request.callId)
    const action = decision.actions[index]
    if (action === undefined || Approvals.actionHash(run.runId, step, request.callId, action) !== request.actionHash) {
      return corrupt(run, `the approval request of call ${request.callId} (step ${step}) does not match the step's action`)
    }
    const decided = Option.getOrThrow(Approvals.decisionOf(log, request))
    if (decided.actionHash !== request.actionHash) {
      return corrupt(run, `the decision on call ${request.callId} (step ${step}) names another action than the one requested; refused`)
    }
    decisions.set(request.callId, decided.decision)
    lastRequest = Math.max(lastRequest, request.seq)
  }
  const fresh = !log.resumes.some((resume) => resume.seq > lastRequest)
  return Effect.succeed({ step, decisions, fresh, requestNow: false })
}

/**
 * Records the requests of the step's gated calls and stops the run with `Suspended`, or does
 * nothing (`undefined`) when no call of the step needs a decision. @internal
 */
export const requestIfNeeded = (
  run: Run,
  step: number,
  actions: ReadonlyArray<Action>
): Effect.Effect<void, LoopError> | undefined => {
  const gated = gatedCalls(run, step, actions)
  if (gated.length === 0) return undefined
  return Effect.gen(function*() {
    const at = yield* Clock.currentTimeMillis
    const seq = run.state.seq
    const records = gated.map((call, k): RunLog.ApprovalRequested => ({
      _tag: "ApprovalRequested",
      seq: seq + k,
      step: asStep(step),
      callId: call.callId,
      action: call.action,
      actionHash: call.actionHash,
      at
    }))
    yield* run.store.appendApprovals(run.runId, [records[0]!, ...records.slice(1)])
    run.state.seq = seq + records.length
    for (const r of records) {
      yield* emit(run, { _tag: "ApprovalRequested", runId: run.runId, step, callId: r.callId, action: r.action, actionHash: r.actionHash })
    }
    return yield* new Suspended({ runId: run.runId, waiting: records.map((r) => waitingOf(run, r)) })
  })
}

/** The outcome of a call a person rejected: `NotExecuted`, the `rejected` text with the reason. @internal */
export const rejectedOutcome = (run: Run, action: Action, reason: string): ActionOutcome => ({
  status: "NotExecuted",
  observation: fillRejected(run.request.agent.syntheticObservations.rejected ?? defaultRejected, { tool: History.actionName(action), reason }),
  observationIsSynthetic: true,
  envReportedCompletion: false,
  observationTruncatedChars: 0
})
