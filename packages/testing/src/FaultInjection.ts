/**
 * Fault injection for stores and executors: a `FaultPlan` a store under test consults before
 * each physical record write (armed faults fail that write with `StoreError`, once), wrappers
 * that route a `RunLogStore.Backend` or a whole store through a plan, and an executor wrapper
 * that turns chosen actions into environment failures or makes them hang until interrupted.
 *
 * The store contract suite uses a plan to check that `completeStep` is atomic: it arms a fault
 * on one of the step's two records and requires that the failed call leaves neither record
 * visible. A store whose writes reach storage one record at a time leaves the first one behind
 * and fails; a store that writes the pair in one transaction (or one atomic backend call) passes.
 *
 * @since 0.1.0
 */
import type * as Arr from "effect/Array"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Ref from "effect/Ref"
import * as ActionExecutor from "@polyloop/core/ActionExecutor"
import type { Action } from "@polyloop/core/Action"
import * as ActionOutcome from "@polyloop/core/ActionOutcome"
import { StoreError, type StoreErrorReason } from "@polyloop/core/Errors"
import type { RunId } from "@polyloop/core/Ids"
import * as RunLog from "@polyloop/core/RunLog"
import * as RunLogStore from "@polyloop/core/RunLogStore"

/** One fault: the write of the record with sequence number `seq` of run `runId` fails, once. */
export interface Fault {
  readonly runId: string
  readonly seq: number
  /** The `StoreError` reason reported (default `"Unavailable"`). */
  readonly reason?: StoreErrorReason
}

/**
 * Faults shared by a test and the store under test. The store calls `beforeWrite` before it
 * physically writes each record (inside its transaction, if it has one); the test arms faults.
 */
export interface FaultPlan {
  /** Fails with `StoreError` if a fault is armed for this record, disarming it. */
  readonly beforeWrite: (runId: RunId, seq: number) => Effect.Effect<void, StoreError>
  /** Arms a fault. */
  readonly arm: (fault: Fault) => Effect.Effect<void>
  /** Removes every armed fault. */
  readonly disarm: Effect.Effect<void>
  /** The faults that fired, in order. */
  readonly fired: Effect.Effect<ReadonlyArray<Fault>>
}

/** A plan with no fault armed. */
export const makePlan: Effect.Effect<FaultPlan> = Effect.map(
  Ref.make<{ readonly armed: ReadonlyArray<Fault>; readonly fired: ReadonlyArray<Fault> }>({ armed: [], fired: [] }),
  (state): FaultPlan => ({
    beforeWrite: (runId, seq) =>
      Ref.modify(state, (s) => {
        const hit = s.armed.find((f) => f.runId === runId && f.seq === seq)
        if (hit === undefined) return [undefined, s] as const
        return [hit, { armed: s.armed.filter((f) => f !== hit), fired: [...s.fired, hit] }] as const
      }).pipe(
        Effect.flatMap((hit) =>
          hit === undefined
            ? Effect.void
            : Effect.fail(
                new StoreError({
                  reason: hit.reason ?? "Unavailable",
                  runId,
                  message: `injected fault: the write of record ${seq} of run ${runId} failed`
                })
              )
        )
      ),
    arm: (fault) => Ref.update(state, (s) => ({ ...s, armed: [...s.armed, fault] })),
    disarm: Ref.update(state, (s) => ({ ...s, armed: [] })),
    fired: Effect.map(Ref.get(state), (s) => s.fired)
  })
)

const checkAll = (plan: FaultPlan, runId: RunId, seqs: ReadonlyArray<number>): Effect.Effect<void, StoreError> =>
  Effect.forEach(seqs, (seq) => plan.beforeWrite(runId, seq), { discard: true })

/**
 * Routes a backend's writes through a plan. `inner.append` is atomic per call (the `Backend`
 * contract), so a call carrying an armed record fails as a whole, before it reaches `inner`.
 */
export const backend = (inner: RunLogStore.Backend, plan: FaultPlan): RunLogStore.Backend => ({
  ...inner,
  append: (runId, records: Arr.NonEmptyReadonlyArray<RunLogStore.StoredRecord>) =>
    checkAll(plan, runId, records.map((r) => r.seq)).pipe(Effect.zipRight(inner.append(runId, records)))
})

/**
 * Routes a whole store's writes through a plan: a call carrying an armed record fails before
 * it reaches `inner` (for tests of code that uses a store, e.g. a loop under store failures).
 */
export const store = (inner: RunLogStore.RunLogStore.Service, plan: FaultPlan): RunLogStore.RunLogStore.Service => {
  const guard = (runId: RunId, records: ReadonlyArray<RunLog.RunRecord>) => checkAll(plan, runId, records.map((r) => r.seq))
  const appendRecords = inner.appendRecords
  return {
    ...inner,
    start: (record) => guard(record.runId, [record]).pipe(Effect.zipRight(inner.start(record))),
    appendReply: (runId, record) => guard(runId, [record]).pipe(Effect.zipRight(inner.appendReply(runId, record))),
    appendResults: (runId, results) => guard(runId, results).pipe(Effect.zipRight(inner.appendResults(runId, results))),
    completeStep: (runId, results, step) =>
      guard(runId, [...results, step]).pipe(Effect.zipRight(inner.completeStep(runId, results, step))),
    appendResume: (runId, record) => guard(runId, [record]).pipe(Effect.zipRight(inner.appendResume(runId, record))),
    finish: (runId, record) => guard(runId, [record]).pipe(Effect.zipRight(inner.finish(runId, record))),
    ...(appendRecords === undefined
      ? {}
      : { appendRecords: (runId, records) => guard(runId, records).pipe(Effect.zipRight(appendRecords(runId, records))) })
  }
}

/** The in-memory store with its backend's writes routed through `plan` (a fresh store per build). */
export const layerMemory = (plan: FaultPlan): Layer.Layer<RunLogStore.RunLogStore> =>
  RunLogStore.layerBackend(Effect.sync(() => backend(RunLogStore.makeMemoryBackend(), plan)))

/** What an executor wrapper does to chosen actions. */
export interface ExecutorFaults {
  /** Actions for which the environment is reported broken (`EnvError` with this observation). */
  readonly envError?: (action: Action) => string | undefined
  /** Actions that never complete: they block until the fiber is interrupted. */
  readonly hang?: (action: Action) => boolean
}

/** Wraps an executor: chosen actions report `EnvError` or hang; the rest run as usual. */
export const executor = (inner: ActionExecutor.ActionExecutor.Service, faults: ExecutorFaults): ActionExecutor.ActionExecutor.Service =>
  ActionExecutor.make({
    execute: (action) => {
      if (faults.hang?.(action) === true) return Effect.never
      const observation = faults.envError?.(action)
      return observation === undefined ? inner.execute(action) : Effect.succeed(ActionOutcome.envError(observation))
    },
    replayPolicy: inner.replayPolicy
  })
