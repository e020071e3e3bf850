/**
 * A run's start and resume (SPEC §7): the snapshot check against the recorded one, `RunStarted`
 * for a fresh run, `RunResumed` and the interrupted step finished for a resumed one.
 *
 * @internal
 */
import * as Clock from "effect/Clock"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import { SnapshotMismatch } from "../Errors.js"
import { RunId } from "../Ids.js"
import { asStep, emit, type Run, span } from "./run.js"
import * as Step from "./step.js"
import type { ParsedReply } from "../ParsedReply.js"
import * as RunLog from "../RunLog.js"
import * as Snapshot from "../Snapshot.js"
import type { SentMessage } from "./inbox.js"

/**
 * The recorded snapshot against the current one (`Snapshot.matches`: equal, or recorded by an
 * earlier version and the same configuration as it reads today).
 */
export const checkSnapshot = (
  runId: RunId,
  started: { readonly snapshot: unknown; readonly snapshotHash: string },
  current: Snapshot.Encoded
): Effect.Effect<void, SnapshotMismatch> => {
  if (Snapshot.matches(started.snapshotHash, current)) return Effect.void
  // Differences against the recorded snapshot as it reads today (a run from before design 0150 took one action per step).
  const recorded = Snapshot.upgrade(started.snapshot)
  const differences = Snapshot.diff(recorded, current.value)
  const tools = Snapshot.changedTools(recorded, current.value)
  return Effect.fail(
    new SnapshotMismatch({
      runId,
      differences: differences.length > 0 ? differences : [["snapshotHash", started.snapshotHash, current.hash]],
      ...(tools.length > 0 ? { tools } : {})
    })
  )
}

/** A fresh run: `RunStarted` with the snapshot. */
export const start = (run: Run, snapshot: Snapshot.Encoded, message?: SentMessage) =>
  Effect.gen(function*() {
    const startedAt = yield* Clock.currentTimeMillis
    yield* run.store.start({
      _tag: "RunStarted",
      seq: 0,
      runId: run.runId,
      task: run.request.task,
      snapshot: snapshot.value,
      snapshotHash: snapshot.hash,
      startedAt,
      logVersion: RunLog.logVersion,
      ...(message === undefined ? {} : { conversation: { messageId: message.messageId } })
    })
    yield* emit(run, { _tag: "RunStarted", runId: run.runId, task: run.request.task, snapshotHash: snapshot.hash, at: startedAt })
  })

/**
 * A resumed run: `RunResumed`, then the interrupted step (if its reply was logged) is finished;
 * `prior` are its results logged before the interruption.
 */
export const resume = (
  run: Run,
  interrupted: Option.Option<{ readonly replied: RunLog.ModelReplied; readonly decision: ParsedReply }>,
  prior: ReadonlyArray<RunLog.ActionResulted>
) =>
  Effect.gen(function*() {
    const at = yield* Clock.currentTimeMillis
    const fromStep = run.state.steps
    yield* run.store.appendResume(run.runId, {
      _tag: "RunResumed",
      seq: run.state.seq,
      fromStep: asStep(fromStep),
      at,
      logVersion: RunLog.logVersion
    })
    run.state.seq += 1
    run.state.resumedCount += 1
    yield* emit(run, { _tag: "RunResumed", runId: run.runId, fromStep, at })
    if (Option.isSome(interrupted)) {
      const reply = interrupted.value.replied.reply
      // The model call's elapsed as recorded with its reply: the step records it as an uninterrupted one does.
      run.state.modelElapsed = interrupted.value.replied.modelElapsed
      yield* Step.settle(run, fromStep, reply, interrupted.value.decision, at, true, prior).pipe(
        span(run, "Agent.step", () => ({ "polyloop.run_id": run.runId, "polyloop.step": fromStep, "polyloop.resumed": true }))
      )
    }
  })
