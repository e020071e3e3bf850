/**
 * The store contract's properties of atomicity (SPEC §7, design 0150): an interrupted
 * `completeStep` leaves all of its records or none, operations interrupted at any moment leak
 * nothing later ones wait for, and a write failing under an injected storage fault writes
 * nothing and can be retried (design 0390).
 *
 * @internal
 */
import * as Effect from "effect/Effect"
import * as FastCheck from "effect/FastCheck"
import * as Fiber from "effect/Fiber"
import * as Option from "effect/Option"
import type { RunId } from "@polyloop/core/Ids"
import * as RunLog from "@polyloop/core/RunLog"
import * as FaultInjection from "../../FaultInjection.js"
import * as Arb from "../arbitraries.js"
import { diff, show } from "../equal.js"
import * as Property from "../property.js"
import { describeError } from "../subject.js"
import { describeWrite, perform } from "../writes.js"
import { expectLog, lastCompletionWithResult, ok, openFresh, type Properties, type StoreContext, writeAll, writeOk } from "./harness.js"

/** Atomicity's properties: under interruption, leaking nothing, under storage faults. */
export const properties = <E>(ctx: StoreContext<E>): Properties => {
  const { options, runs, store } = ctx
  const props: Properties = {}
  props.atomicUnderInterruption = Property.make({
    id: "atomicUnderInterruption",
    name: "an interrupted completeStep leaves all of its records (results and step) or none",
    numRuns: runs(30),
    arbitrary: FastCheck.record({ run: Arb.runWithResult, yields: FastCheck.integer({ min: 0, max: 6 }) }),
    check: ({ run, yields }) =>
      Effect.scoped(
        Effect.gen(function*() {
          const s = yield* openFresh(store)
          const k = lastCompletionWithResult(run)
          const target = run.writes[k]!
          yield* writeAll(s, run, k)
          const fiber = yield* Effect.fork(perform(s, run.runId, target))
          for (let i = 0; i < yields; i++) yield* Effect.yieldNow()
          yield* Fiber.interrupt(fiber)
          const log = yield* ok(`readLog after an interrupted ${describeWrite(target)}`, s.readLog(run.runId))
          const before = Arb.logUpTo(run, k)
          const after = Arb.logUpTo(run, k + 1)
          if (Option.isNone(diff(after, log))) return
          yield* Option.match(diff(before, log), {
            onNone: () => Effect.void,
            onSome: (difference) =>
              Property.violation(
                `after ${describeWrite(target)} was interrupted (${yields} yields in), readLog shows neither the log before it nor the log with all its records: ${difference}`
              )
          })
          yield* writeOk(s, run.runId, target)
          yield* expectLog(s, run.runId, after, `after retrying the interrupted ${describeWrite(target)}`)
        })
      )
  })

  const answerWithin = options.answerWithin ?? 10_000
  props.interruptionLeaksNothing = Property.make({
    id: "interruptionLeaksNothing",
    name: "operations interrupted at any moment leak nothing: afterwards every operation still answers and the run is written to its end",
    numRuns: runs(5),
    // A failing case waits out `answerWithin`; shrinking would wait it out again per case tried.
    endOnFailure: true,
    arbitrary: FastCheck.record({
      run: Arb.run({ maxSteps: 4 }),
      other: Arb.runId,
      interrupted: FastCheck.array(
        FastCheck.record({
          operation: FastCheck.constantFrom("write" as const, "readLog" as const, "listRuns" as const, "claim" as const),
          yields: FastCheck.integer({ min: 0, max: 4 })
        }),
        { minLength: 16, maxLength: 32 }
      )
    }).filter(({ other, run }) => other !== run.runId),
    check: ({ interrupted, other, run }) =>
      Effect.scoped(
        Effect.gen(function*() {
          const s = yield* openFresh(store)
          let count = 0
          // An operation that must succeed, and answer in time: one waiting for a connection,
          // lock or permit that an interrupted operation kept would wait forever — perhaps
          // uninterruptibly (a claim's acquisition), so the wait is disconnected from the
          // deadline, which then fails the case without waiting for it.
          const within = <A>(what: string, effect: Effect.Effect<A, Property.ContractViolation>) =>
            Effect.timeoutFail(effect, {
              duration: answerWithin,
              onTimeout: () =>
                new Property.ContractViolation({
                  message: `${what} within ${answerWithin} ms after ${count} interrupted operation(s): an interrupted operation kept what later ones wait for (a pooled connection, a lock, a permit)`
                })
            })
          const answers = <A, E>(label: string, effect: Effect.Effect<A, E>) => within(`${label} did not answer`, ok(label, Effect.disconnect(effect)))
          const claimAndRelease = (runId: RunId) => Effect.scoped(s.claim(runId))
          // How many of the run's writes the log holds (an interrupted write is there whole or not at all).
          const writtenIn = (log: RunLog.RunLog): Effect.Effect<number, Property.ContractViolation> => {
            const size = RunLog.size(log)
            for (let k = 0; k <= run.writes.length; k++) {
              if (Arb.recordsUpTo(run, k).length === size) return Effect.succeed(k)
            }
            return Property.violation(`after an interrupted write readLog shows ${size} record(s), which is no whole number of writes: a write was split`)
          }
          let written = 0
          for (const { operation, yields } of interrupted) {
            const target = run.writes[written]
            const effect: Effect.Effect<unknown, unknown> = operation === "write"
              ? target === undefined ? s.readLog(run.runId) : perform(s, run.runId, target)
              : operation === "readLog"
              ? s.readLog(run.runId)
              : operation === "listRuns"
              ? s.listRuns()
              : claimAndRelease(other)
            const fiber = yield* Effect.fork(effect)
            for (let i = 0; i < yields; i++) yield* Effect.yieldNow()
            yield* Fiber.interruptFork(fiber)
            yield* within(`an interrupted ${operation} did not stop`, Fiber.await(fiber))
            count++
            if (operation === "write" && target !== undefined) {
              written = yield* Effect.flatMap(answers(`readLog(${show(run.runId)}) after an interrupted ${describeWrite(target)}`, s.readLog(run.runId)), writtenIn)
            }
          }
          yield* answers("listRuns()", s.listRuns())
          yield* answers(`claim(${show(other)}) (then released)`, claimAndRelease(other))
          yield* answers(`claim(${show(run.runId)}) (then released)`, claimAndRelease(run.runId))
          for (const write of run.writes.slice(written)) yield* answers(describeWrite(write), perform(s, run.runId, write))
          yield* expectLog(s, run.runId, Arb.logUpTo(run, run.writes.length), `after ${count} interrupted operations and the remaining writes`)
        })
      )
  })

  const faultInjection = options.faultInjection
  if (faultInjection !== undefined) {
    props.atomicUnderFaults = Property.make({
      id: "atomicUnderFaults",
      name: "a write failing under an injected storage fault writes nothing (completeStep is atomic), loses nothing, and can be retried",
      numRuns: runs(30),
      arbitrary: FastCheck.record({
        run: Arb.runWithResult,
        anyWrite: FastCheck.boolean(),
        pick: FastCheck.nat(),
        second: FastCheck.boolean()
      }),
      check: ({ anyWrite, pick, run, second }) =>
        Effect.scoped(
          Effect.gen(function*() {
            const plan = yield* FaultInjection.makePlan
            const s = yield* openFresh(faultInjection(plan))
            const k = anyWrite ? pick % run.writes.length : lastCompletionWithResult(run)
            const target = run.writes[k]!
            const records = Arb.recordsOf(target)
            // The first record, or (second) another one of a write that has several.
            const faulted = records[second && records.length > 1 ? 1 + (pick % (records.length - 1)) : 0]!
            yield* writeAll(s, run, k)
            yield* plan.arm({ runId: run.runId, seq: faulted.seq })
            const outcome = yield* Effect.either(perform(s, run.runId, target))
            const fired = yield* plan.fired
            if (outcome._tag === "Right") {
              return yield* Property.violation(
                fired.length === 0
                  ? `the fault armed on record ${faulted.seq} never fired: the faultInjection store must call plan.beforeWrite before writing each record (or wrap its backend with FaultInjection.backend)`
                  : `${describeWrite(target)} succeeded although the write of its record ${faulted.seq} failed`
              )
            }
            yield* Property.ensure(
              outcome.left._tag === "StoreError",
              () => `${describeWrite(target)} under an injected storage fault failed with ${describeError(outcome.left)}; it must fail with StoreError`
            )
            yield* expectLog(s, run.runId, Arb.logUpTo(run, k), `after ${describeWrite(target)} failed on its record ${faulted.seq}`)
            yield* plan.disarm
            for (let i = k; i < run.writes.length; i++) yield* writeOk(s, run.runId, run.writes[i]!)
            yield* expectLog(s, run.runId, Arb.logUpTo(run, run.writes.length), "after retrying the failed write and writing the rest")
          })
        )
    })
  }
  return props
}
