/**
 * Carrying out a step's decision (SPEC §9, design 0150): its actions run in call order —
 * one after the other by default, up to `actionConcurrency` at once when set — and each one's
 * `ActionResulted` is durable as soon as it finished (before the next starts, or as each
 * concurrent one completes). The step's last results and its `StepCompleted` are written
 * together, atomically; then the step is rendered into history and its events are emitted.
 *
 * On resume of a step whose reply is logged but which did not complete, the calls with a logged
 * result are not run again; in a sequential step a call after an `EnvError` is not started (it
 * provably never was); any other call — in a concurrent step, every call without a result — is
 * settled by its replay policy (`"Always"` runs, `"Never"` is `NotExecuted` with the
 * `interrupted` text).
 *
 * The code is a chain of `flatMap`s rather than `Effect.gen`: it runs once per step (and per
 * action), and a generator costs more than the work. A one-action step takes a path of its own
 * that writes and allocates what a step wrote before design 0150. A sub-agent's call runs its
 * child run here (`child.ts`, design 0392); its `RunError` fails the step after its siblings.
 *
 * Why one file: the three ways to carry out a step (one action, sequential, concurrent) share
 * the pending/written bookkeeping and the order of writes that makes a resumed step equal to an
 * uninterrupted one; apart, each would restate that order (design 0391).
 *
 * @internal
 */
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import type { Action } from "../Action.js"
import type { ActionOutcome } from "../ActionOutcome.js"
import type { LoopError } from "./gate.js"
import type { ResultId } from "../Ids.js"
import type { LoopEvent } from "../LoopEvent.js"
import type { ModelReply } from "../ModelReply.js"
import * as ParsedReply from "../ParsedReply.js"
import type * as RunLog from "../RunLog.js"
import * as ToolContext from "../ToolContext.js"
import * as Child from "./child.js"
import * as Gate from "./gate.js"
import * as History from "./history.js"
import * as Tracing from "./tracing.js"
import { andThen, asStep, emit, type Run, span } from "./run.js"
import * as State from "./state.js"

const resultIdOf = (step: number, index: number): ResultId =>
  (index === 0 ? `result_${step}` : `result_${step}_${index}`) as ResultId

/** The `{issues}` of the `notExecuted` text for a call not started after an `EnvError` in its step. @internal */
export const notStartedIssues = "it was not started: an earlier call of this step failed in the environment"

/** The outcome as it enters history (SPEC §5.2): synthetic texts for NotExecuted / EnvError, the limit for Executed. */
const intoHistory = (run: Run, action: Action, outcome: ActionOutcome): ActionOutcome => {
  const texts = run.texts
  switch (outcome.status) {
    case "Executed": {
      const [observation, cut] = History.truncate(outcome.observation, texts.observationLimit)
      return {
        status: "Executed",
        observation,
        observationIsSynthetic: false,
        envReportedCompletion: outcome.envReportedCompletion,
        observationTruncatedChars: outcome.observationTruncatedChars + cut
      }
    }
    case "NotExecuted":
      return synthetic(History.fillFor(texts.synthetic.notExecuted, action, History.notExecutedIssues(action, run.request.tools), texts))
    case "EnvError":
      return {
        status: "EnvError",
        observation: History.fillFor(texts.synthetic.envError, action, "the environment reported a failure", texts),
        observationIsSynthetic: true,
        envReportedCompletion: false,
        observationTruncatedChars: 0
      }
  }
}

const synthetic = (observation: string): ActionOutcome => ({
  status: "NotExecuted",
  observation,
  observationIsSynthetic: true,
  envReportedCompletion: false,
  observationTruncatedChars: 0
})

/** The outcome recorded for an action interrupted in flight whose replay policy is `"Never"`. */
const interruptedOutcome = (run: Run, action: Action): ActionOutcome =>
  synthetic(History.fillFor(run.texts.synthetic.interrupted, action, "the run stopped while the action was in flight", run.texts))

/** The outcome recorded for an action not started because an earlier one of its step was `EnvError`. */
const notStartedOutcome = (run: Run, action: Action): ActionOutcome =>
  synthetic(History.fillFor(run.texts.synthetic.notExecuted, action, notStartedIssues, run.texts))

/**
 * Runs an action under its `ToolContext`; the derived executor also reports whether the handler
 * failed. A sub-agent's call runs its child run instead (design 0392), whose `RunError` fails the step.
 */
const execute = (
  run: Run,
  step: number,
  index: number,
  action: Action
): Effect.Effect<Child.Report, LoopError> => {
  const callId = History.callIdOf(action, step, index)
  if (action._tag === "ToolCall") {
    const child = Child.call(run, step, action, callId)
    if (child !== undefined) return child
  }
  const toolContext = ToolContext.make({ runId: run.runId, step, callId })
  // The derived executor provides the ToolContext to the handler itself, together with the
  // services it captured (one provide per call, and none for a refused action).
  const effect =
    run.derived !== undefined
      ? run.derived.executeReport(action, toolContext)
      : Effect.provideService(
        Effect.map(run.executor.execute(action), (outcome) => ({ outcome, handlerFailed: false })),
        ToolContext.ToolContext,
        toolContext
      )
  return effect.pipe(
    span(run, "Agent.action", () => Tracing.actionAttributes(run.runId, step, index, action, callId))
  )
}

/** A result not written yet (its sequence number is given when it is). */
interface Pending {
  readonly index: number
  readonly action: Action
  readonly outcome: ActionOutcome
  readonly executorObservation: string
  readonly handlerFailed: boolean
  /** A sub-agent's child (design 0392). */
  readonly child?: RunLog.ChildRun | undefined
}

const record = (seq: number, step: number, p: Pending): RunLog.ActionResulted => ({
  _tag: "ActionResulted",
  seq,
  resultId: resultIdOf(step, p.index),
  step: asStep(step),
  callIndex: p.index,
  action: p.action,
  outcome: p.outcome,
  executorObservation: p.executorObservation,
  handlerFailed: p.handlerFailed,
  ...(p.child === undefined ? {} : { child: p.child })
})

/** The result of running an action (its outcome as it enters history). */
const ran = (run: Run, step: number, index: number, action: Action): Effect.Effect<Pending, LoopError> =>
  Effect.map(execute(run, step, index, action), (report) => ({
    index,
    action,
    outcome: intoHistory(run, action, report.outcome),
    executorObservation: report.outcome.observation,
    handlerFailed: report.handlerFailed,
    ...(report.child === undefined ? {} : { child: report.child })
  }))

/** The result of an action settled without running it (interrupted, or not started). */
const settledWithout = (index: number, action: Action, outcome: ActionOutcome): Pending => ({
  index,
  action,
  outcome,
  executorObservation: "",
  handlerFailed: false
})

/**
 * How an action is settled without running it, if it is (design 0160 on top of SPEC §9): a call
 * a person rejected is `NotExecuted` with the `rejected` text; in a resumed step the approvals
 * say nothing has started (`fresh`) the action runs; otherwise, on resume, a `"Never"` action is
 * recorded as interrupted.
 */
const withoutRunning = (run: Run, step: number, index: number, action: Action, resumed: boolean): Pending | undefined => {
  const gate = run.gate
  if (gate !== undefined && gate.step === step) {
    const decision = gate.decisions.get(History.callIdOf(action, step, index))
    if (decision !== undefined && decision._tag === "Reject") {
      return settledWithout(index, action, Gate.rejectedOutcome(run, action, decision.reason))
    }
    if (gate.fresh) return undefined
  }
  return resumed && run.executor.replayPolicy(action) === "Never" ? settledWithout(index, action, interruptedOutcome(run, action)) : undefined
}

const actionExecuted = (run: Run, result: RunLog.ActionResulted, replayed: boolean): LoopEvent => ({
  _tag: "ActionExecuted",
  runId: run.runId,
  step: result.step,
  callIndex: result.callIndex,
  action: result.action,
  outcome: result.outcome,
  executorObservation: result.executorObservation,
  replayed
})

/** Emits `ActionExecuted` for results just made durable, in order. */
const emitResults = (run: Run, results: ReadonlyArray<RunLog.ActionResulted>, replayed: boolean): Effect.Effect<void> => {
  if (run.silent || results.length === 0) return Effect.void
  let chain: Effect.Effect<void> = Effect.void
  for (const result of results) chain = andThen(chain, () => emit(run, actionExecuted(run, result, replayed)))
  return chain
}

/** Writes results of an unfinished step (durable on return) and emits their events. */
const writeResults = (run: Run, step: number, pending: ReadonlyArray<Pending>, replayed: boolean): Effect.Effect<ReadonlyArray<RunLog.ActionResulted>, LoopError> => {
  const seq = run.state.seq
  const records = pending.map((p, k) => record(seq + k, step, p))
  const [first, ...rest] = records
  if (first === undefined) return Effect.succeed(records)
  return Effect.flatMap(run.store.appendResults(run.runId, [first, ...rest]), () => {
    run.state.seq = seq + records.length
    return Effect.as(emitResults(run, records, replayed), records)
  })
}

/**
 * Writes the step's last results and its completion atomically, then renders the step into
 * history and emits its events. `written` are the step's results already durable, by call
 * index; `pending` the rest.
 */
const completeStep = (
  run: Run,
  step: number,
  reply: ModelReply,
  decision: ParsedReply.ParsedReply,
  written: ReadonlyArray<RunLog.ActionResulted | undefined>,
  pending: ReadonlyArray<Pending>,
  startedAt: number,
  resumed: boolean
): Effect.Effect<void, LoopError> => {
  const elapsed = Math.max(0, run.clock.unsafeCurrentTimeMillis() - startedAt)
  // A resumed step's call was made before the resume (its elapsed recorded with its reply): not clipped to `elapsed`.
  const modelElapsed = run.state.modelElapsed === undefined || resumed ? run.state.modelElapsed : Math.min(run.state.modelElapsed, elapsed)
  run.state.modelElapsed = undefined
  const seq = run.state.seq
  const records = pending.map((p, k) => record(seq + k, step, p))
  const all: Array<RunLog.ActionResulted> = written.slice() as Array<RunLog.ActionResulted>
  for (const r of records) all[r.callIndex] = r
  const completed: RunLog.StepCompleted = {
    _tag: "StepCompleted",
    seq: seq + records.length,
    step: asStep(step),
    decision,
    resultIds: all.map((r) => r.resultId),
    effective: State.isEffective(all),
    usage: reply.usage,
    elapsed,
    ...(modelElapsed === undefined ? {} : { modelElapsed })
  }
  return Effect.flatMap(run.store.completeStep(run.runId, records, completed), () => {
    run.state.seq = completed.seq + 1
    State.applyStep(run.state, reply, completed, all, run.texts)
    const stepCompleted: LoopEvent = { _tag: "StepCompleted", runId: run.runId, step, decision: decision._tag, usage: reply.usage, elapsed }
    return andThen(emitResults(run, records, resumed), () => emit(run, stepCompleted))
  })
}

/** One action, not resumed from a partial batch: what every step did before design 0150, at the same cost. */
const one = (
  run: Run,
  step: number,
  reply: ModelReply,
  decision: ParsedReply.Act,
  startedAt: number,
  resumed: boolean
): Effect.Effect<void, LoopError> => {
  const action = decision.actions[0]
  const without = withoutRunning(run, step, 0, action, resumed)
  const settled = without !== undefined ? Effect.succeed(without) : ran(run, step, 0, action)
  return Effect.flatMap(settled, (p) => completeStep(run, step, reply, decision, [], [p], startedAt, resumed))
}

/** Several actions (or a resumed partial batch), one after the other. */
const sequential = (
  run: Run,
  step: number,
  reply: ModelReply,
  decision: ParsedReply.Act,
  prior: ReadonlyArray<RunLog.ActionResulted | undefined>,
  startedAt: number,
  resumed: boolean
): Effect.Effect<void, LoopError> => {
  const actions = decision.actions
  const n = actions.length
  const written: Array<RunLog.ActionResulted | undefined> = new Array(n)
  let pending: Array<Pending> = []
  let envFailed = false
  const next = (i: number): Effect.Effect<void, LoopError> => {
    if (i === n) return completeStep(run, step, reply, decision, written, pending, startedAt, resumed)
    const logged = prior[i]
    if (logged !== undefined) {
      written[i] = logged
      if (logged.outcome.status === "EnvError") envFailed = true
      return next(i + 1)
    }
    const action = actions[i]!
    if (envFailed) {
      pending.push(settledWithout(i, action, notStartedOutcome(run, action)))
      return next(i + 1)
    }
    const without = withoutRunning(run, step, i, action, resumed)
    if (without !== undefined) {
      pending.push(without)
      return next(i + 1)
    }
    return Effect.flatMap(ran(run, step, i, action), (p) => {
      pending.push(p)
      if (p.outcome.status === "EnvError") envFailed = true
      // The step's last result(s) are written with its completion; any other is durable now,
      // before the next action starts.
      if (i === n - 1 || envFailed) return next(i + 1)
      const flushing = pending
      pending = []
      return Effect.flatMap(writeResults(run, step, flushing, resumed), (records) => {
        for (const r of records) written[r.callIndex] = r
        return next(i + 1)
      })
    })
  }
  return next(0)
}

/** Several actions, up to `run.concurrency` at once, started in call order; each result is written as it completes. */
const concurrent = (
  run: Run,
  step: number,
  reply: ModelReply,
  decision: ParsedReply.Act,
  prior: ReadonlyArray<RunLog.ActionResulted | undefined>,
  startedAt: number,
  resumed: boolean
): Effect.Effect<void, LoopError> => {
  const actions = decision.actions
  const n = actions.length
  const written: Array<RunLog.ActionResulted | undefined> = new Array(n)
  const settled: Array<Pending | undefined> = new Array(n)
  // Appends are serialised: each takes the next sequence numbers.
  const lock = Effect.unsafeMakeSemaphore(1)
  // Only an `EnvError` of this attempt stops new calls. On resume, an `EnvError` logged before
  // says nothing about the calls without a result: up to `concurrency` of them ran beside it, in
  // any order, so each is settled by its replay policy (issue 29), never "not started".
  let envFailed = false
  // By call index: the step raises its first call's error, whichever failed first in time, so a
  // run (and a replay) ends the same way however its calls interleave.
  const failures: Array<LoopError | undefined> = new Array(n)
  for (let i = 0; i < n; i++) {
    const logged = prior[i]
    if (logged !== undefined) written[i] = logged
  }
  const each = (i: number): Effect.Effect<void, LoopError> =>
    Effect.suspend(() => {
      if (written[i] !== undefined) return Effect.void
      const action = actions[i]!
      if (envFailed) {
        settled[i] = settledWithout(i, action, notStartedOutcome(run, action))
        return Effect.void
      }
      const without = withoutRunning(run, step, i, action, resumed)
      if (without !== undefined) {
        settled[i] = without
        return Effect.void
      }
      return Effect.matchEffect(ran(run, step, i, action), {
        // A call that fails the step (a sub-agent's child failing with a `RunError`, design
        // 0392) lets its siblings finish and write their results: the error is raised after
        // them, the lowest call index's. Typed errors only: an interruption or a defect ends the
        // step at once.
        onFailure: (error) => {
          failures[i] = error
          return Effect.void
        },
        onSuccess: (p) => {
          if (p.outcome.status === "EnvError") envFailed = true
          // Suspended: the sequence number is taken once the lock is held.
          return lock.withPermits(1)(
            Effect.suspend(() =>
              Effect.map(writeResults(run, step, [p], resumed), (records) => {
                written[i] = records[0]
              })
            )
          )
        }
      })
    })
  const indices = Array.from({ length: n }, (_, i) => i)
  const all = Effect.forEach(indices, each, { concurrency: run.concurrency, discard: true })
  return Effect.flatMap(all, () => {
    const failure = failures.find((e) => e !== undefined)
    if (failure !== undefined) return Effect.fail(failure)
    const pending: Array<Pending> = []
    for (const p of settled) if (p !== undefined) pending.push(p)
    return completeStep(run, step, reply, decision, written, pending, startedAt, resumed)
  })
}

/**
 * The decision a step carries out: tool calls without an id get the deterministic one; several
 * actions when the agent takes one per step become `ParsedReply.oneActionPerStep`. @internal
 */
export const decisionOf = (run: Run, parsed: ParsedReply.ParsedReply, step: number): ParsedReply.ParsedReply => {
  const assigned = History.assignCallId(parsed, step)
  return assigned._tag === "Act" && assigned.actions.length > 1 && !run.parallel
    ? ParsedReply.oneActionPerStep(assigned.actions)
    : assigned
}

/**
 * Completes a step whose reply is logged: the decision (tool calls without an id get the
 * deterministic one; several actions when the agent takes one per step become the
 * `InvalidDecision` of `ParsedReply.oneActionPerStep`) is announced, its actions are carried
 * out, and the step is written, rendered and announced. `prior` are the results of this step
 * logged before a resume, in call order (empty for a live step).
 * @internal
 */
export const settle = (
  run: Run,
  step: number,
  reply: ModelReply,
  parsed: ParsedReply.ParsedReply,
  startedAt: number,
  resumed: boolean,
  prior: ReadonlyArray<RunLog.ActionResulted> = []
): Effect.Effect<void, LoopError> => {
  const decision = decisionOf(run, parsed, step)
  return andThen(emit(run, { _tag: "DecisionParsed", runId: run.runId, step, decision }), () => {
    if (decision._tag !== "Act") return completeStep(run, step, reply, decision, [], [], startedAt, resumed)
    // Calls that need a person's decision: requested, and the run suspends (design 0160). A
    // resumed step whose requests are recorded goes on with their decisions instead.
    if (!resumed || (run.gate !== undefined && run.gate.step === step && run.gate.requestNow)) {
      const suspend = Gate.requestIfNeeded(run, step, decision.actions)
      if (suspend !== undefined) return suspend
    }
    if (decision.actions.length === 1 && prior.length === 0) return one(run, step, reply, decision, startedAt, resumed)
    const byIndex: Array<RunLog.ActionResulted | undefined> = new Array(decision.actions.length)
    for (const r of prior) if (r.callIndex < byIndex.length) byIndex[r.callIndex] = r
    return run.concurrency > 1
      ? concurrent(run, step, reply, decision, byIndex, startedAt, resumed)
      : sequential(run, step, reply, decision, byIndex, startedAt, resumed)
  })
}

/** The first result of the step that is an `EnvError`, if any. @internal */
export const envErrorOf = (results: ReadonlyArray<RunLog.ActionResulted>): Option.Option<RunLog.ActionResulted> =>
  Option.fromNullable(results.find((r) => r.outcome.status === "EnvError"))
