/**
 * The loop of an attempt (SPEC §8): judge, then step (model call → durable reply → parse →
 * `Step.settle`) or finish (`RunFinished`, or a conversation's `TurnFinished`). Each step's
 * continuation calls `next`, so a step costs no extra suspension (design 0350).
 *
 * @internal
 */
import * as Clock from "effect/Clock"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Inbox from "./inbox.js"
import * as History from "./history.js"
import * as Rendering from "./rendering.js"
import { andThen, asStep, emit, type LoopError, type Run, span } from "./run.js"
import * as State from "./state.js"
import * as Step from "./step.js"
import { type ModelReply } from "../ModelReply.js"
import * as RunLog from "../RunLog.js"
import { StopReason } from "../StopReason.js"
import { judge } from "./judge.js"
import { decideReply } from "./modelCall.js"
import { generateThen, prepare } from "./window.js"
import { drain } from "./messages.js"
import { type RunResult, resultOf } from "./request.js"

/** One live step: model call, durable reply, parse, then `settle`. */
export const runStep = (run: Run): Effect.Effect<void, LoopError> => {
  const step = run.state.steps
  const startedAt = run.clock.unsafeCurrentTimeMillis()
  const afterReply = (generated: ModelReply, sent: Rendering.Sent | undefined) => {
    const modelElapsed = Math.max(0, run.clock.unsafeCurrentTimeMillis() - startedAt)
    run.state.modelElapsed = modelElapsed
    const reply = History.assignReplyCallIds(generated, step)
    const replied: RunLog.ModelReplied = {
      _tag: "ModelReplied",
      seq: run.state.seq,
      step: asStep(step),
      reply,
      requestHash: sent !== undefined ? sent.hash : run.fingerprint.hash(run.state.messages),
      modelElapsed
    }
    return Effect.flatMap(run.store.appendReply(run.runId, replied), () => {
      run.state.seq += 1
      return andThen(emit(run, { _tag: "ModelReplied", runId: run.runId, step, reply }), () =>
        Effect.flatMap(decideReply(run, reply), (decision) => Step.settle(run, step, reply, decision, startedAt, false)))
    })
  }
  const body = andThen(emit(run, { _tag: "StepStarted", runId: run.runId, step }), () =>
    run.renderer === undefined
      ? generateThen(run, step, undefined, afterReply)
      : Effect.flatMap(prepare(run, step), (prepared) => generateThen(run, step, prepared, afterReply)))
  return span(run, "Agent.step", () => ({ "polyloop.run_id": run.runId, "polyloop.step": step }))(body)
}

const childrenOf = (children: RunLog.ChildTotals | undefined) => children === undefined ? {} : { children }

/** Appends `RunFinished` and emits its event. */
export const finish = (run: Run, stopReason: StopReason) =>
  Effect.gen(function*() {
    const state = run.state
    const finishedAt = yield* Clock.currentTimeMillis
    const output = encodedOutput(run, stopReason)
    const record: RunLog.RunFinished = {
      _tag: "RunFinished",
      seq: state.seq,
      stopReason,
      finishedAt,
      counters: {
        steps: state.steps,
        effectiveSteps: state.effectiveSteps,
        usage: { inputTokens: state.inputTokens, outputTokens: state.outputTokens },
        elapsed: state.elapsed,
        resumedCount: state.resumedCount,
        ...childrenOf(State.childTotals(state.children))
      },
      eventDeliveryFailures: state.eventDeliveryFailures,
      ...(output === undefined ? {} : { output })
    }
    if (run.conversation) {
      // A conversation's turn ends; the conversation does not (design 0300, decision 6).
      const from = state.turnStart
      const ended: RunLog.TurnFinished = {
        _tag: "TurnFinished",
        seq: state.seq,
        turn: state.turn,
        stopReason,
        finishedAt,
        atStep: state.steps,
        counters: {
          steps: state.steps - from.steps,
          effectiveSteps: state.effectiveSteps - from.effectiveSteps,
          usage: { inputTokens: state.inputTokens - from.inputTokens, outputTokens: state.outputTokens - from.outputTokens },
          elapsed: state.elapsed - from.elapsed,
          resumedCount: state.resumedCount,
          ...childrenOf(State.childTotals(state.children, from.children))
        },
        ...(output === undefined ? {} : { output })
      }
      yield* run.store.appendTurn(run.runId, ended)
      state.seq += 1
      state.turnFinished = true
      yield* emit(run, { _tag: "TurnFinished", runId: run.runId, turn: state.turn, stopReason, counters: ended.counters })
      const result = resultOf(run.runId, { ...record, counters: ended.counters })
      // The callers waiting for this turn in this process (a retried send of its message, design 0360).
      if (run.inbox !== undefined) yield* Inbox.turnEnded(run.inbox, state.turn, { ...result, turn: state.turn })
      return result
    }
    yield* run.store.finish(run.runId, record)
    state.seq += 1
    yield* emit(run, { _tag: "RunFinished", runId: run.runId, stopReason, counters: record.counters })
    return resultOf(run.runId, record)
  })

/**
 * The run's answer decoded by the agent's output schema and encoded back (design 0400), for
 * `RunFinished.output`; undefined without an output schema or an answer. (The stop judgment has
 * already refused an answer that does not decode.)
 */
const encodedOutput = (run: Run, stopReason: StopReason): unknown => {
  const output = run.request.agent.output
  if (output === undefined || stopReason._tag !== "Completed" || stopReason.answer === undefined) return undefined
  const decoded = output.decodeAnswer(stopReason.answer)
  return Either.isRight(decoded) ? decoded.right.encoded : undefined
}

/**
 * Judges, then steps or finishes. Called when the previous step has completed (the state is
 * current): from `loop`, and from the continuation of each step — so a step costs no extra
 * suspension.
 */
export const next = (run: Run): Effect.Effect<RunResult, LoopError> => {
  if (run.inbox !== undefined && run.inbox.queue.length > 0) return Effect.flatMap(drain(run), () => next(run))
  const stop = judge(run)
  return stop !== undefined ? finish(run, stop) : Effect.flatMap(runStep(run), () => next(run))
}

/** Steps until the stop judgment says stop, then finishes the run. */
export const loop = (run: Run): Effect.Effect<RunResult, LoopError> => Effect.suspend(() => next(run))
