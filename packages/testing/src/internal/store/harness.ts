/**
 * The store contract kit's harness: opening the store under test (fresh, or the same storage
 * again), store operations that must succeed, the expectations the properties share (the log
 * read back, the empty log, a busy claim), out-of-sequence writes, and the `StoreContext` each
 * group of properties receives (design 0390).
 *
 * @internal
 */
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import type * as FastCheck from "effect/FastCheck"
import * as Fiber from "effect/Fiber"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import type * as Scope from "effect/Scope"
import type { RunId } from "@polyloop/core/Ids"
import * as RunLog from "@polyloop/core/RunLog"
import { RunLogStore } from "@polyloop/core/RunLogStore"
import type * as Arb from "../arbitraries.js"
import { diff, show } from "../equal.js"
import * as Property from "../property.js"
import { build, describeError } from "../subject.js"
import { describeWrite, perform } from "../writes.js"
import type { Options, PropertyId, StoreUnderTest } from "./types.js"

/** What a group of properties is built from: the store under test, its options, and the scaled number of runs. */
export interface StoreContext<E> {
  readonly store: StoreUnderTest<E>
  readonly options: Options<E>
  /** A property's number of generated cases, scaled by `Options.runsFactor`. */
  readonly runs: (n: number) => number
}

/** Some of the contract's properties, by id. */
export type Properties = Partial<Record<PropertyId, Property.Property>>

export type Service = RunLogStore.Service

export interface Storage {
  /** Opens an instance over this storage, in the current scope. */
  readonly open: Effect.Effect<Service, Property.ContractViolation, Scope.Scope>
}

export const prepare = <E>(subject: StoreUnderTest<E>): Effect.Effect<Storage, Property.ContractViolation, Scope.Scope> => {
  if (Layer.isLayer(subject)) {
    const layer = subject as Layer.Layer<RunLogStore, E>
    return Effect.succeed({ open: build(RunLogStore, layer, "the store") })
  }
  const make = subject as Effect.Effect<Layer.Layer<RunLogStore, E>, E, Scope.Scope>
  return make.pipe(
    Effect.mapError((error) => new Property.ContractViolation({ message: `could not prepare the storage: ${describeError(error)}` })),
    Effect.map((layer): Storage => ({ open: build(RunLogStore, layer, "the store") }))
  )
}

export const openFresh = <E>(subject: StoreUnderTest<E>) => Effect.flatMap(prepare(subject), (storage) => storage.open)

/** Runs a store operation that must succeed. */
export const ok = <A, E, R>(label: string, effect: Effect.Effect<A, E, R>): Effect.Effect<A, Property.ContractViolation, R> =>
  Effect.mapError(effect, (error) => new Property.ContractViolation({ message: `${label} failed: ${describeError(error)}` }))


export const writeOk = (store: Service, runId: RunId, write: Arb.Write) => ok(describeWrite(write), perform(store, runId, write))

export const writeAll = (store: Service, run: Arb.Run, count = run.writes.length) =>
  Effect.forEach(run.writes.slice(0, count), (write) => writeOk(store, run.runId, write), { discard: true })

/** Reads a log (`verify`: with every record decoded by its schema) and requires it to equal `expected`. */
export const expectLog = (store: Service, runId: RunId, expected: RunLog.RunLog, when: string, verify = false) =>
  ok(`readLog(${show(runId)}${verify ? ", { verify: true }" : ""}) ${when}`, store.readLog(runId, { verify })).pipe(
    Effect.flatMap((actual) =>
      Option.match(diff(expected, actual), {
        onNone: () => Effect.void,
        onSome: (difference) =>
          Property.violation(
            `readLog(${show(runId)}) ${when} differs from the ${RunLog.size(expected)} record(s) written: ${difference}`
          )
      })
    )
  )

export const expectEmpty = (store: Service, runId: RunId, when: string) =>
  store.readLog(runId).pipe(
    Effect.mapError(
      (error) =>
        new Property.ContractViolation({
          message: `readLog(${show(runId)}) of a run that does not exist ${when} failed (${describeError(error)}); it must return the empty log`
        })
    ),
    Effect.flatMap((log) =>
      Property.ensure(
        RunLog.isEmpty(log),
        () => `readLog(${show(runId)}) of a run that does not exist ${when} returned ${RunLog.size(log)} record(s), not the empty log`
      )
    )
  )

/** Claims `runId` in a scope of its own that the returned effect closes. */
export const claimIn = (store: Service, runId: RunId) =>
  Effect.gen(function*() {
    const released = yield* Deferred.make<void>()
    const claimed = yield* Deferred.make<void, unknown>()
    const fiber = yield* Effect.fork(
      Effect.scoped(
        store.claim(runId).pipe(
          Effect.tapError((error) => Deferred.fail(claimed, error)),
          Effect.zipRight(Deferred.succeed(claimed, undefined)),
          Effect.zipRight(Deferred.await(released))
        )
      )
    )
    yield* ok(`claim(${show(runId)})`, Deferred.await(claimed))
    return Deferred.succeed(released, undefined).pipe(Effect.zipRight(Fiber.join(fiber)), Effect.ignore)
  })

export const expectBusy = (store: Service, runId: RunId, when: string) =>
  Effect.scoped(store.claim(runId)).pipe(
    Effect.flip,
    Effect.mapError(() => new Property.ContractViolation({ message: `a second claim(${show(runId)}) ${when} succeeded; it must fail with RunBusy` })),
    Effect.flatMap((error) =>
      Property.ensure(
        error._tag === "RunBusy",
        () => `a second claim(${show(runId)}) ${when} failed with ${describeError(error)}; it must fail with RunBusy`
      )
    )
  )

export const claimOk = (store: Service, runId: RunId, when: string) => ok(`claim(${show(runId)}) ${when}`, Effect.scoped(store.claim(runId)))

export type BadKind = "Start" | "Reply" | "Results" | "ResultsGapInside" | "Complete" | "CompleteGapInside" | "Resume" | "Finish"

export interface BadWrite {
  readonly label: string
  readonly perform: (store: Service, runId: RunId) => Effect.Effect<void, unknown>
}

export const badWrite = (
  kind: BadKind,
  seq: number,
  t: typeof Arb.templates extends FastCheck.Arbitrary<infer T> ? T : never,
  runId: RunId
): BadWrite => {
  switch (kind) {
    case "Start":
      return { label: `start(seq 0) of a run already started`, perform: (s) => s.start({ ...t.started, runId, seq: 0 }) }
    case "Reply":
      return { label: `appendReply(seq ${seq})`, perform: (s, r) => s.appendReply(r, { ...t.reply, seq }) }
    case "Complete":
      return {
        label: `completeStep(seq ${seq}, ${seq + 1}, ${seq + 2}) (two results and the step)`,
        perform: (s, r) => s.completeStep(r, [{ ...t.result, seq }, { ...t.result, callIndex: 1, seq: seq + 1 }], { ...t.step, seq: seq + 2 })
      }
    case "CompleteGapInside":
      return {
        label: `completeStep(seq ${seq}, ${seq + 2}) (a gap between its two records)`,
        perform: (s, r) => s.completeStep(r, [{ ...t.result, seq }], { ...t.step, seq: seq + 2 })
      }
    case "Results":
      return { label: `appendResults(seq ${seq})`, perform: (s, r) => s.appendResults(r, [{ ...t.result, seq }]) }
    case "ResultsGapInside":
      return {
        label: `appendResults(seq ${seq}, ${seq + 2}) (a gap between its two records)`,
        perform: (s, r) => s.appendResults(r, [{ ...t.result, seq }, { ...t.result, callIndex: 1, seq: seq + 2 }])
      }
    case "Resume":
      return { label: `appendResume(seq ${seq})`, perform: (s, r) => s.appendResume(r, { ...t.resume, seq }) }
    case "Finish":
      return { label: `finish(seq ${seq})`, perform: (s, r) => s.finish(r, { ...t.finished, seq }) }
  }
}

/** The index of the last `completeStep` write carrying a result. */
export const lastCompletionWithResult = (run: Arb.Run): number => {
  for (let i = run.writes.length - 1; i >= 0; i--) {
    const write = run.writes[i]!
    if (write._tag === "Complete" && write.results.length > 0) return i
  }
  return -1
}
