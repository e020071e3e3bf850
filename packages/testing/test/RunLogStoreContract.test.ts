import { describe, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Layer from "effect/Layer"
import { ConcurrentWriter, RunBusy, StoreError } from "@polyloop/core/Errors"
import * as RunLog from "@polyloop/core/RunLog"
import * as RunLogStore from "@polyloop/core/RunLogStore"
import * as FaultInjection from "../src/FaultInjection.js"
import * as RunLogStoreContract from "../src/RunLogStoreContract.js"
import { holdsAll, registerBroken } from "./helpers.js"

type Service = RunLogStore.RunLogStore.Service
type Backend = RunLogStore.Backend

const layerOf = (make: () => Service): Layer.Layer<RunLogStore.RunLogStore> => Layer.sync(RunLogStore.RunLogStore, make)
const memory = (): Service => RunLogStore.make(RunLogStore.makeMemoryBackend())
const wrap = (f: (inner: Service) => Partial<Service>) => layerOf(() => {
  const inner = memory()
  return { ...inner, ...f(inner) }
})

/** A store over one storage (a backend shared by every instance opened over it). */
const sharedStorage = (makeBackend: (storage: Backend) => Backend = (b) => b) =>
  Effect.sync(() => {
    const storage = RunLogStore.makeMemoryBackend()
    return RunLogStore.layerBackend(Effect.sync(() => makeBackend(storage)))
  })

/** A store whose completeStep writes its records in two backend calls. */
const twoCallFront = (backend: Backend, between: Effect.Effect<void> = Effect.void): Service => {
  const front = RunLogStore.make(backend)
  return {
    ...front,
    completeStep: (runId, results, step) => {
      const [first, ...rest] = results.map(RunLogStore.toStored)
      return first === undefined
        ? front.completeStep(runId, results, step)
        : backend.append(runId, [first, ...rest]).pipe(
          Effect.zipRight(between),
          Effect.zipRight(backend.append(runId, [RunLogStore.toStored(step)]))
        )
    }
  }
}

/** A backend that writes a call's records one at a time, each through the plan. */
const recordByRecordBackend = (inner: Backend, plan: FaultInjection.FaultPlan): Backend => ({
  ...inner,
  append: (runId, records) =>
    Effect.forEach(records, (r) => plan.beforeWrite(runId, r.seq).pipe(Effect.zipRight(inner.append(runId, [r]))), {
      discard: true
    })
})

/** A store that checks no sequence number at all. */
const acceptsAnySeq = (): Service => {
  const logs = new Map<string, Array<RunLog.RunRecord>>()
  const push = (runId: string, records: ReadonlyArray<RunLog.RunRecord>) =>
    Effect.sync(() => {
      logs.set(runId, [...(logs.get(runId) ?? []), ...records])
    })
  const inner = memory()
  return {
    ...inner,
    readLog: (runId) => Effect.sync(() => RunLog.fromRecords(logs.get(runId) ?? [])),
    start: (record) => push(record.runId, [record]),
    appendReply: (runId, record) => push(runId, [record]),
    appendResults: (runId, results) => push(runId, results),
    completeStep: (runId, results, step) => push(runId, [...results, step]),
    appendResume: (runId, record) => push(runId, [record]),
    finish: (runId, record) => push(runId, [record])
  }
}

/**
 * A store whose operations share two permits, taken and given back around the operation but not
 * as a resource: an operation interrupted while it holds one never gives it back (as a driver
 * that loses a pooled connection when the fiber waiting for it is interrupted).
 */
const leaksPermits = (): Service => {
  const inner = memory()
  const permits = Effect.unsafeMakeSemaphore(2)
  const guarded = <A, E>(effect: Effect.Effect<A, E>) =>
    permits.take(1).pipe(Effect.zipRight(Effect.yieldNow()), Effect.zipRight(effect), Effect.zipLeft(permits.release(1)))
  return {
    ...inner,
    readLog: (runId, options) => guarded(inner.readLog(runId, options)),
    start: (record) => guarded(inner.start(record)),
    appendReply: (runId, record) => guarded(inner.appendReply(runId, record)),
    appendResults: (runId, results) => guarded(inner.appendResults(runId, results)),
    completeStep: (runId, results, step) => guarded(inner.completeStep(runId, results, step)),
    appendResume: (runId, record) => guarded(inner.appendResume(runId, record)),
    finish: (runId, record) => guarded(inner.finish(runId, record)),
    listRuns: (query) => guarded(inner.listRuns(query))
  }
}

const globalShared = RunLogStore.makeMemoryBackend()

const claimWith = (acquire: (runId: string, held: Set<string>) => Effect.Effect<void, RunBusy>, release: (runId: string, held: Set<string>, exit: Exit.Exit<unknown, unknown>) => void) =>
  wrap(() => {
    const held = new Set<string>()
    return {
      claim: (runId) => Effect.acquireRelease(acquire(runId, held), (_, exit) => Effect.sync(() => release(runId, held, exit)))
    }
  })

const exclusive = (runId: string, held: Set<string>) =>
  Effect.suspend(() => {
    if (held.has(runId)) return Effect.fail(new RunBusy({ runId }))
    held.add(runId)
    return Effect.void
  })

/** A file store's module, opened in a child process by the killed-writer property. */
const fileStores = new URL("./fixtures/file-stores.ts", import.meta.url)

const all = RunLogStoreContract.properties(sharedStorage(), {
  survivesRestart: true,
  claimsAcrossInstances: true,
  killedWriter: { module: fileStores },
  faultInjection: (plan) => sharedStorage((b) => FaultInjection.backend(b, plan))
})

describe("RunLogStoreContract", () => {
  it.live("the memory store (a fresh store per build) satisfies every property", () =>
    holdsAll(RunLogStoreContract.properties(RunLogStore.layerMemory, { faultInjection: FaultInjection.layerMemory })), 120_000)

  it.live("a store over shared storage satisfies every property, restart and cross-instance claims included", () => holdsAll(all), 240_000)

  it("refuses restart and cross-instance capabilities for a plain layer", ({ expect }) => {
    expect(() => RunLogStoreContract.properties(RunLogStore.layerMemory, { survivesRestart: true })).toThrow(/Effect form/)
  })

  registerBroken(all, [
    {
      name: "a store whose readLog drops the last record",
      props: () =>
        RunLogStoreContract.properties(
          wrap((inner) => ({
            readLog: (runId) => Effect.map(inner.readLog(runId), (log) => RunLog.fromRecords(RunLog.records(log).slice(0, -1)))
          }))
        ),
      breaks: { prefix: /differs from the \d+ record/, roundTrip: /differs from the \d+ record/ }
    },
    {
      name: "a store that truncates long texts",
      props: () =>
        RunLogStoreContract.properties(
          wrap((inner) => ({
            start: (record) => inner.start({ ...record, task: record.task.slice(0, 4096) }),
            appendReply: (runId, record) => inner.appendReply(runId, { ...record, reply: { ...record.reply, text: record.reply.text.slice(0, 4096) } })
          }))
        ),
      breaks: { roundTrip: /differs from the \d+ record/ }
    },
    {
      name: "a store whose readLog fails for unknown runs",
      props: () =>
        RunLogStoreContract.properties(
          wrap((inner) => ({
            readLog: (runId) =>
              Effect.flatMap(inner.readLog(runId), (log) =>
                RunLog.isEmpty(log) ? Effect.fail(new StoreError({ reason: "Unknown", message: `no run ${runId}` })) : Effect.succeed(log))
          }))
        ),
      breaks: { unknownRun: /failed \(StoreError: no run .*\); it must return the empty log/, isolation: /must return the empty log/ }
    },
    {
      name: "a store whose instances share one global backend",
      props: () => RunLogStoreContract.properties(RunLogStore.layerBackend(Effect.succeed(globalShared))),
      // Shrinking replays cases over the same leaked state, so the reported case may be a conflict.
      breaks: { isolation: /second, independent instance after the first wrote it returned \d+ record|failed: ConcurrentWriter/ }
    },
    {
      name: "a store that checks no sequence number",
      props: () => RunLogStoreContract.properties(layerOf(acceptsAnySeq)),
      breaks: { sequence: /succeeded; it must fail with ConcurrentWriter/ }
    },
    {
      name: "a store that reports a sequence conflict as StoreError",
      props: () =>
        RunLogStoreContract.properties(
          wrap((inner) => {
            const remap = <A>(effect: Effect.Effect<A, StoreError | ConcurrentWriter>) =>
              Effect.catchTag(effect, "ConcurrentWriter", (e) => Effect.fail(new StoreError({ reason: "Unknown", message: e.message })))
            return {
              start: (r) => remap(inner.start(r)),
              appendReply: (id, r) => remap(inner.appendReply(id, r)),
              appendResults: (id, r) => remap(inner.appendResults(id, r)),
              completeStep: (id, a, b) => remap(inner.completeStep(id, a, b)),
              appendResume: (id, r) => remap(inner.appendResume(id, r)),
              finish: (id, r) => remap(inner.finish(id, r))
            }
          })
        ),
      breaks: { sequence: /failed with StoreError.*must fail with ConcurrentWriter/ }
    },
    {
      name: "a store whose completeStep yields between its two writes",
      props: () => RunLogStoreContract.properties(layerOf(() => twoCallFront(RunLogStore.makeMemoryBackend(), Effect.yieldNow()))),
      breaks: { atomicUnderInterruption: /shows neither the log before it nor the log with all its records/ }
    },
    {
      name: "a store whose interrupted operations keep a permit",
      props: () => RunLogStoreContract.properties(layerOf(leaksPermits), { answerWithin: 100 }),
      breaks: { interruptionLeaksNothing: /did not answer within 100 ms after \d+ interrupted operation/ }
    },
    {
      name: "a file store that appends a step's records one at a time",
      props: () => RunLogStoreContract.properties(RunLogStore.layerMemory, { killedWriter: { module: fileStores, export: "openTorn", kills: 20 } }),
      breaks: { survivesKill: /is not the run's first writes, whole — a write was torn or altered by the kill/ }
    },
    {
      name: "a file store that acknowledges a write before it is written",
      props: () => RunLogStoreContract.properties(RunLogStore.layerMemory, { killedWriter: { module: fileStores, export: "openLazy" } }),
      breaks: { survivesKill: /acknowledged before the kill, was lost/ }
    },
    {
      name: "a backend that writes a batch record by record",
      props: () =>
        RunLogStoreContract.properties(RunLogStore.layerMemory, {
          faultInjection: (plan) => RunLogStore.layerBackend(Effect.sync(() => recordByRecordBackend(RunLogStore.makeMemoryBackend(), plan)))
        }),
      breaks: { atomicUnderFaults: /after completeStep\(seq \d+(, \d+)+\) failed on its record \d+ differs/ }
    },
    {
      name: "a store whose completeStep makes two atomic backend calls",
      props: () =>
        RunLogStoreContract.properties(RunLogStore.layerMemory, {
          faultInjection: (plan) => layerOf(() => twoCallFront(FaultInjection.backend(RunLogStore.makeMemoryBackend(), plan)))
        }),
      breaks: { atomicUnderFaults: /after completeStep\(seq \d+(, \d+)+\) failed on its record \d+ differs/ }
    },
    {
      name: "a fault-injection hook that never consults the plan",
      props: () => RunLogStoreContract.properties(RunLogStore.layerMemory, { faultInjection: () => RunLogStore.layerMemory }),
      breaks: { atomicUnderFaults: /never fired/ }
    },
    {
      name: "a store whose claim is not exclusive",
      props: () => RunLogStoreContract.properties(wrap(() => ({ claim: () => Effect.void }))),
      breaks: { claimExclusive: /succeeded; it must fail with RunBusy/ }
    },
    {
      name: "a store with one claim for all runs",
      props: () =>
        RunLogStoreContract.properties(
          claimWith(
            (runId, held) => (held.size > 0 ? Effect.fail(new RunBusy({ runId })) : Effect.sync(() => void held.add(runId))),
            (runId, held) => held.delete(runId)
          )
        ),
      breaks: { claimExclusive: /claim\(.*\) of another run while .* is claimed failed/ }
    },
    {
      name: "a store that never releases claims",
      props: () => RunLogStoreContract.properties(claimWith(exclusive, () => undefined)),
      breaks: {
        claimReleasedOnClose: /after the claim's scope closed .* failed: RunBusy/,
        claimReleasedOnInterruption: /after the fiber holding the claim was interrupted failed: RunBusy/
      }
    },
    {
      name: "a store that releases claims on scope close but not on interruption",
      props: () =>
        RunLogStoreContract.properties(
          claimWith(exclusive, (runId, held, exit) => {
            if (!Exit.isInterrupted(exit)) held.delete(runId)
          })
        ),
      breaks: { claimReleasedOnInterruption: /after the fiber holding the claim was interrupted failed: RunBusy/ }
    },
    {
      name: "a store whose listRuns omits unfinished runs",
      props: () =>
        RunLogStoreContract.properties(wrap((inner) => ({ listRuns: (query) => Effect.map(inner.listRuns(query), (runs) => runs.filter((r) => r.status === "Finished")) }))),
      breaks: { listRuns: /does not list each started run exactly once/ }
    },
    {
      name: "a store that keeps its records in the instance, not in the storage",
      props: () => RunLogStoreContract.properties(sharedStorage(() => RunLogStore.makeMemoryBackend()), { survivesRestart: true }),
      breaks: { survivesRestart: /after reopening the storage differs/ }
    },
    {
      name: "a store whose claims are per instance over shared storage",
      props: () =>
        RunLogStoreContract.properties(
          sharedStorage((storage) => ({ ...storage, claim: RunLogStore.makeMemoryBackend().claim })),
          { claimsAcrossInstances: true }
        ),
      breaks: { claimsAcrossInstances: /from another instance over the same storage succeeded; it must fail with RunBusy/ }
    }
  ])
})
