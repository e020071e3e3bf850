/**
 * The `RunLogStore` contract suite (SPEC §7, §14): property-based checks any store runs inside
 * its own vitest file — `RunLogStoreContract.suite("my store", myLayer, options)`. Generated runs
 * read back as exactly the prefix written, records round-trip exactly, unknown runs read as the
 * empty log, out-of-sequence writes are rejected with `ConcurrentWriter`, `completeStep` is
 * atomic (under interruption, and under injected storage faults), interrupted operations leak
 * nothing later ones wait for, claims are exclusive and released, and instances never see each
 * other's state; and, run in a child process killed by SIGKILL at random moments, the store
 * keeps whole writes, every acknowledged one among them. Capabilities a store may lack are
 * options (`survivesRestart`, `claimsAcrossInstances`, `faultInjection`, `killedWriter`), never
 * adapter names.
 *
 * Why over ~400 lines: `properties` holds one property per clause of the contract; issue 15 is
 * changing several of them now, so the split (one file per group of properties under
 * `internal/`, as `AgentLoopSuite` is split) waits until that has landed.
 *
 * @since 0.1.0
 */
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as FastCheck from "effect/FastCheck"
import * as Fiber from "effect/Fiber"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import type * as Scope from "effect/Scope"
import { type RunId, StepIndex } from "@polyloop/core/Ids"
import * as RunLog from "@polyloop/core/RunLog"
import { RunLogStore } from "@polyloop/core/RunLogStore"
import * as FaultInjection from "./FaultInjection.js"
import * as Arb from "./internal/arbitraries.js"
import { diff, show } from "./internal/equal.js"
import * as Property from "./internal/property.js"
import * as KilledWriter from "./internal/killedWriterCheck.js"
import { build, describeError } from "./internal/subject.js"
import { register } from "./internal/suite.js"
import { describeWrite, perform } from "./internal/writes.js"

export {
  /** A contract was broken; the message says what was expected and what was seen. */
  ContractViolation,
  /** A property of a suite: `id`, `name`, `numRuns` and its generated cases. */
  type Property,
  /** The result of `check`. */
  type Report
} from "./internal/property.js"

/** Runs one property outside vitest (e.g. to prove it fails on a broken store). */
export const check: (property: Property.Property, options?: Property.RunOptions) => Effect.Effect<Property.Report> = Property.run

/**
 * The store under test. A `Layer`: every build is a fresh, independent store (e.g. the memory
 * store). Or a scoped `Effect` that prepares fresh storage (a temporary file, a new schema) and
 * returns a layer opening it: the suite runs the effect once per case, and builds the layer
 * again to reopen the same storage (a restart, or a second process).
 */
export type StoreUnderTest<E = never> =
  | Layer.Layer<RunLogStore, E>
  | Effect.Effect<Layer.Layer<RunLogStore, E>, E, Scope.Scope>

/** Where the killed-writer property finds the store in another process (`Options.killedWriter`). */
export type KilledWriterOptions = KilledWriter.KilledWriter

/** What the store can do, beyond the contract every store obeys. */
export interface Options<E = never> {
  /**
   * Reopening the storage (building the layer again) reads back everything written before:
   * the store survives a process restart. Needs the `Effect` form of `StoreUnderTest`.
   */
  readonly survivesRestart?: boolean
  /**
   * Claims are exclusive across instances opened over the same storage (several processes or
   * machines sharing one database). Needs the `Effect` form of `StoreUnderTest`.
   */
  readonly claimsAcrossInstances?: boolean
  /**
   * The store with its storage writes routed through a fault plan: call `plan.beforeWrite`
   * before each physical record write (inside your transaction), or wrap your backend with
   * `FaultInjection.backend(backend, plan)`. Enables the atomicity-under-faults property.
   */
  readonly faultInjection?: (plan: FaultInjection.FaultPlan) => StoreUnderTest<E>
  /**
   * The store opened in another process, for the killed-writer property: a child process writes
   * a run and is killed with SIGKILL at random moments (`kills` times); the run read back must
   * be whole writes holding every acknowledged one, and the next writer goes on from there. Give
   * the module (a file URL or absolute path) whose export (default `open`) is
   * `(storage: string) => Layer<RunLogStore>` over a fresh directory `storage`. The child runs
   * the module with `node --import tsx`.
   */
  readonly killedWriter?: KilledWriterOptions
  /**
   * Milliseconds within which each operation must answer after other operations were
   * interrupted (the leak property; default 10 000): longer means it waits for something an
   * interrupted operation never gave back.
   */
  readonly answerWithin?: number
  /** Multiplies every property's number of generated cases (default 1). */
  readonly runsFactor?: number
  /** Per-test timeout in milliseconds for `suite` (default 30 000). */
  readonly timeout?: number
  /** A fast-check seed, to replay a failure printed by a previous run. */
  readonly seed?: number
}

/** The identifiers of the store properties. */
export type PropertyId =
  | "prefix"
  | "roundTrip"
  | "unknownRun"
  | "isolation"
  | "sequence"
  | "atomicUnderInterruption"
  | "interruptionLeaksNothing"
  | "atomicUnderFaults"
  | "claimExclusive"
  | "claimReleasedOnClose"
  | "claimReleasedOnInterruption"
  | "listRuns"
  | "survivesRestart"
  | "claimsAcrossInstances"
  | "survivesKill"

type Service = RunLogStore.Service

interface Storage {
  /** Opens an instance over this storage, in the current scope. */
  readonly open: Effect.Effect<Service, Property.ContractViolation, Scope.Scope>
}

const prepare = <E>(subject: StoreUnderTest<E>): Effect.Effect<Storage, Property.ContractViolation, Scope.Scope> => {
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

const openFresh = <E>(subject: StoreUnderTest<E>) => Effect.flatMap(prepare(subject), (storage) => storage.open)

/** Runs a store operation that must succeed. */
const ok = <A, E, R>(label: string, effect: Effect.Effect<A, E, R>): Effect.Effect<A, Property.ContractViolation, R> =>
  Effect.mapError(effect, (error) => new Property.ContractViolation({ message: `${label} failed: ${describeError(error)}` }))


const writeOk = (store: Service, runId: RunId, write: Arb.Write) => ok(describeWrite(write), perform(store, runId, write))

const writeAll = (store: Service, run: Arb.Run, count = run.writes.length) =>
  Effect.forEach(run.writes.slice(0, count), (write) => writeOk(store, run.runId, write), { discard: true })

/** Reads a log (`verify`: with every record decoded by its schema) and requires it to equal `expected`. */
const expectLog = (store: Service, runId: RunId, expected: RunLog.RunLog, when: string, verify = false) =>
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

const expectEmpty = (store: Service, runId: RunId, when: string) =>
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
const claimIn = (store: Service, runId: RunId) =>
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

const expectBusy = (store: Service, runId: RunId, when: string) =>
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

const claimOk = (store: Service, runId: RunId, when: string) => ok(`claim(${show(runId)}) ${when}`, Effect.scoped(store.claim(runId)))

type BadKind = "Start" | "Reply" | "Results" | "ResultsGapInside" | "Complete" | "CompleteGapInside" | "Resume" | "Finish"

interface BadWrite {
  readonly label: string
  readonly perform: (store: Service, runId: RunId) => Effect.Effect<void, unknown>
}

const badWrite = (
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
const lastCompletionWithResult = (run: Arb.Run): number => {
  for (let i = run.writes.length - 1; i >= 0; i--) {
    const write = run.writes[i]!
    if (write._tag === "Complete" && write.results.length > 0) return i
  }
  return -1
}

/**
 * The properties of the store contract, keyed by id, for a store under test. Properties that
 * need a capability are present only when `options` declares it.
 */
export const properties = <E>(store: StoreUnderTest<E>, options: Options<E> = {}): Readonly<Partial<Record<PropertyId, Property.Property>>> => {
  const factor = options.runsFactor ?? 1
  const runs = (n: number) => Math.max(1, Math.round(n * factor))
  const reopenable = !Layer.isLayer(store)
  if ((options.survivesRestart === true || options.claimsAcrossInstances === true) && !reopenable) {
    throw new Error(
      "RunLogStoreContract: survivesRestart and claimsAcrossInstances need the Effect form of the store under test (an effect preparing storage and returning a layer that opens it), so the suite can open the same storage twice"
    )
  }
  const props: Partial<Record<PropertyId, Property.Property>> = {}

  props.prefix = Property.make({
    id: "prefix",
    name: "readLog returns exactly the records written, after every write",
    numRuns: runs(25),
    arbitrary: Arb.run(),
    check: (run) =>
      Effect.scoped(
        Effect.gen(function*() {
          const s = yield* openFresh(store)
          for (let i = 0; i < run.writes.length; i++) {
            const write = run.writes[i]!
            yield* writeOk(s, run.runId, write)
            yield* expectLog(s, run.runId, Arb.logUpTo(run, i + 1), `after ${describeWrite(write)}`)
          }
        })
      )
  })

  props.roundTrip = Property.make({
    id: "roundTrip",
    name: "records round-trip exactly (long texts, raw unicode, lone surrogates, large JSON snapshots)",
    numRuns: runs(10),
    arbitrary: Arb.extremeRun,
    check: (run) =>
      Effect.scoped(
        Effect.gen(function*() {
          const s = yield* openFresh(store)
          yield* writeAll(s, run)
          yield* expectLog(s, run.runId, Arb.logUpTo(run, run.writes.length), "after the whole run")
          // The store's front trusts its own rows on the hot path; the full schema decode of
          // what it wrote must give the same records.
          yield* expectLog(s, run.runId, Arb.logUpTo(run, run.writes.length), "after the whole run", true)
        })
      )
  })

  props.unknownRun = Property.make({
    id: "unknownRun",
    name: "readLog of an unknown run is the empty log, never an error",
    numRuns: runs(15),
    arbitrary: FastCheck.record({ run: Arb.run({ maxSteps: 2 }), other: Arb.runId }).filter(({ other, run }) => other !== run.runId),
    check: ({ other, run }) =>
      Effect.scoped(
        Effect.gen(function*() {
          const s = yield* openFresh(store)
          yield* expectEmpty(s, other, "on a fresh store")
          yield* writeAll(s, run)
          yield* expectEmpty(s, other, "on a store holding another run")
        })
      )
  })

  props.isolation = Property.make({
    id: "isolation",
    name: "two instances never see each other's state (logs and claims)",
    numRuns: runs(10),
    arbitrary: Arb.run({ maxSteps: 2 }),
    check: (run) =>
      Effect.scoped(
        Effect.gen(function*() {
          const a = yield* openFresh(store)
          const b = yield* openFresh(store)
          yield* writeAll(a, run)
          yield* expectEmpty(b, run.runId, "on a second, independent instance after the first wrote it")
          const release = yield* claimIn(a, run.runId)
          yield* claimOk(b, run.runId, "on an independent instance while the first instance holds it")
          yield* release
        })
      )
  })

  props.sequence = Property.make({
    id: "sequence",
    name: "a duplicate or gapped sequence number is rejected with ConcurrentWriter and changes nothing",
    numRuns: runs(30),
    arbitrary: FastCheck.record({
      run: Arb.run({ maxSteps: 3 }),
      kind: FastCheck.constantFrom<BadKind>("Start", "Reply", "Results", "ResultsGapInside", "Complete", "CompleteGapInside", "Resume", "Finish"),
      duplicate: FastCheck.boolean(),
      offset: FastCheck.integer({ min: 1, max: 3 }),
      templates: Arb.templates
    }),
    check: ({ duplicate, kind, offset, run, templates }) =>
      Effect.scoped(
        Effect.gen(function*() {
          const s = yield* openFresh(store)
          yield* writeAll(s, run)
          const next = Arb.recordsUpTo(run, run.writes.length).length
          const seq =
            kind === "CompleteGapInside" || kind === "ResultsGapInside" ? next : duplicate ? Math.max(0, next - offset) : next + offset
          const bad = badWrite(kind, seq, templates, run.runId)
          const error = yield* bad.perform(s, run.runId).pipe(
            Effect.flip,
            Effect.mapError(
              () =>
                new Property.ContractViolation({
                  message: `${bad.label} on a log of ${next} record(s) succeeded; it must fail with ConcurrentWriter`
                })
            )
          )
          yield* Property.ensure(
            typeof error === "object" && error !== null && "_tag" in error && error._tag === "ConcurrentWriter",
            () => `${bad.label} on a log of ${next} record(s) failed with ${describeError(error)}; it must fail with ConcurrentWriter`
          )
          yield* expectLog(s, run.runId, Arb.logUpTo(run, run.writes.length), `after the rejected ${bad.label}`)
        })
      )
  })

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

  props.claimExclusive = Property.make({
    id: "claimExclusive",
    name: "claim is exclusive per run: a second claim of a claimed run fails with RunBusy, other runs stay free",
    numRuns: runs(15),
    arbitrary: Arb.runIds(2),
    check: ([a, b]) =>
      Effect.scoped(
        Effect.gen(function*() {
          const s = yield* openFresh(store)
          const release = yield* claimIn(s, a!)
          yield* expectBusy(s, a!, "while the first is held")
          yield* claimOk(s, b!, `of another run while ${show(a)} is claimed`)
          yield* release
        })
      )
  })

  props.claimReleasedOnClose = Property.make({
    id: "claimReleasedOnClose",
    name: "a claim is released when its scope closes",
    numRuns: runs(10),
    arbitrary: FastCheck.record({ runId: Arb.runId, times: FastCheck.integer({ min: 2, max: 4 }) }),
    check: ({ runId, times }) =>
      Effect.scoped(
        Effect.gen(function*() {
          const s = yield* openFresh(store)
          for (let i = 0; i < times; i++) yield* claimOk(s, runId, i === 0 ? "on a fresh store" : `after the claim's scope closed (${i} time(s))`)
        })
      )
  })

  props.claimReleasedOnInterruption = Property.make({
    id: "claimReleasedOnInterruption",
    name: "a claim is released when the fiber holding it is interrupted",
    numRuns: runs(10),
    arbitrary: Arb.runId,
    check: (runId) =>
      Effect.scoped(
        Effect.gen(function*() {
          const s = yield* openFresh(store)
          const claimed = yield* Deferred.make<void, unknown>()
          const holder = yield* Effect.fork(
            Effect.scoped(
              s.claim(runId).pipe(
                Effect.tapError((error) => Deferred.fail(claimed, error)),
                Effect.zipRight(Deferred.succeed(claimed, undefined)),
                Effect.zipRight(Effect.never)
              )
            )
          )
          yield* ok(`claim(${show(runId)})`, Deferred.await(claimed))
          yield* Fiber.interrupt(holder)
          yield* claimOk(s, runId, "after the fiber holding the claim was interrupted")
        })
      )
  })

  props.listRuns = Property.make({
    id: "listRuns",
    name: "listRuns lists every started run once with its status and step count, newest first, honouring status and limit",
    numRuns: runs(10),
    arbitrary: FastCheck.uniqueArray(Arb.run({ maxSteps: 3 }), { minLength: 1, maxLength: 4, selector: (r) => r.runId }),
    check: (generated) =>
      Effect.scoped(
        Effect.gen(function*() {
          const s = yield* openFresh(store)
          for (const run of generated) yield* writeAll(s, run)
          const all = yield* ok("listRuns()", s.listRuns())
          const listed = all.map((summary) => summary.runId).sort()
          const expected = generated.map((r) => r.runId as string).sort()
          yield* Option.match(diff(expected, listed), {
            onNone: () => Effect.void,
            onSome: (d) => Property.violation(`listRuns() does not list each started run exactly once: ${d}`)
          })
          for (const run of generated) {
            const log = Arb.logUpTo(run, run.writes.length)
            const summary = all.find((x) => x.runId === run.runId)!
            const status = Option.isSome(log.finished) ? "Finished" : "Unfinished"
            yield* Property.ensure(summary.status === status, () => `listRuns() reports run ${show(run.runId)} as ${summary.status}; it is ${status}`)
            yield* Property.ensure(
              summary.steps === log.steps.length,
              () => `listRuns() reports ${summary.steps} step(s) for run ${show(run.runId)}; it has ${log.steps.length}`
            )
          }
          for (let i = 1; i < all.length; i++) {
            yield* Property.ensure(all[i - 1]!.startedAt >= all[i]!.startedAt, () => "listRuns() is not ordered newest first (by startedAt)")
          }
          const finished = yield* ok("listRuns({ status: \"Finished\" })", s.listRuns({ status: "Finished" }))
          const finishedIds = generated.filter((r) => r.writes.some((w) => w._tag === "Finish")).map((r) => r.runId as string).sort()
          yield* Option.match(diff(finishedIds, finished.map((x) => x.runId).sort()), {
            onNone: () => Effect.void,
            onSome: (d) => Property.violation(`listRuns({ status: "Finished" }) does not list exactly the finished runs: ${d}`)
          })
          const limited = yield* ok("listRuns({ limit: 1 })", s.listRuns({ limit: 1 }))
          yield* Property.ensure(limited.length === 1, () => `listRuns({ limit: 1 }) returned ${limited.length} runs`)
        })
      )
  })

  if (options.survivesRestart === true) {
    props.survivesRestart = Property.make({
      id: "survivesRestart",
      name: "reopening the storage reads back everything written and continues the sequence",
      numRuns: runs(10),
      arbitrary: Arb.run({ maxSteps: 3 }),
      check: (run) =>
        Effect.scoped(
          Effect.gen(function*() {
            const storage = yield* prepare(store)
            yield* Effect.scoped(Effect.flatMap(storage.open, (s) => writeAll(s, run)))
            const reopened = yield* storage.open
            const log = Arb.logUpTo(run, run.writes.length)
            yield* expectLog(reopened, run.runId, log, "after reopening the storage")
            if (Option.isNone(log.finished)) {
              yield* ok(
                `appendResume(seq ${RunLog.nextSeq(log)}) after reopening`,
                reopened.appendResume(run.runId, {
                  _tag: "RunResumed",
                  seq: RunLog.nextSeq(log),
                  fromStep: StepIndex.make(log.steps.length),
                  at: 0,
                  logVersion: RunLog.logVersion
                })
              )
            }
          })
        )
    })
  }

  if (options.claimsAcrossInstances === true) {
    props.claimsAcrossInstances = Property.make({
      id: "claimsAcrossInstances",
      name: "a claim held by one instance excludes every other instance over the same storage until released",
      numRuns: runs(10),
      arbitrary: Arb.runId,
      check: (runId) =>
        Effect.scoped(
          Effect.gen(function*() {
            const storage = yield* prepare(store)
            const a = yield* storage.open
            const b = yield* storage.open
            const release = yield* claimIn(a, runId)
            yield* expectBusy(b, runId, "from another instance over the same storage")
            yield* release
            yield* claimOk(b, runId, "from another instance after the first released it")
          })
        )
    })
  }
  const killedWriter = options.killedWriter
  if (killedWriter !== undefined) {
    const kills = killedWriter.kills ?? 8
    props.survivesKill = Property.make({
      id: "survivesKill",
      name: `a writer in another process killed by SIGKILL at random moments (${kills} times) leaves whole writes, every acknowledged one among them; the next writer goes on to the end`,
      numRuns: runs(2),
      // A seed and a kill schedule: shrinking them says nothing more than the first failure.
      endOnFailure: true,
      arbitrary: FastCheck.record({
        seed: FastCheck.integer(),
        schedule: FastCheck.array(
          FastCheck.record({ acks: FastCheck.integer({ min: 0, max: 3 }), delay: FastCheck.double({ min: 0, max: 1, noNaN: true }) }),
          { minLength: kills, maxLength: kills }
        )
      }),
      check: ({ schedule, seed }) => KilledWriter.check(killedWriter, seed, schedule)
    })
  }
  return props
}

/**
 * Registers the store contract as vitest tests, in a `describe` block named after the store.
 * Call it at the top level of a test file.
 */
export const suite = <E>(name: string, store: StoreUnderTest<E>, options: Options<E> = {}): void =>
  register(`RunLogStore contract: ${name}`, properties(store, options) as Readonly<Record<string, Property.Property>>, {
    ...(options.timeout === undefined ? {} : { timeout: options.timeout }),
    ...(options.seed === undefined ? {} : { seed: options.seed })
  })
