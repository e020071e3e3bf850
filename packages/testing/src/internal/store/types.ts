/**
 * The store contract kit's public types (`RunLogStoreContract.ts` re-exports them): the store
 * under test, the options that declare what a store can do beyond the contract, and the
 * properties' identifiers in the order the suite registers them (design 0390).
 *
 * @internal
 */
import type * as Effect from "effect/Effect"
import type * as Layer from "effect/Layer"
import type * as Scope from "effect/Scope"
import type { RunLogStore } from "@polyloop/core/RunLogStore"
import type * as FaultInjection from "../../FaultInjection.js"
import type * as KilledWriter from "../killedWriterCheck.js"

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

/** Every property's id, in the order the suite registers them. */
export const propertyIds: ReadonlyArray<PropertyId> = [
  "prefix",
  "roundTrip",
  "unknownRun",
  "isolation",
  "sequence",
  "atomicUnderInterruption",
  "interruptionLeaksNothing",
  "atomicUnderFaults",
  "claimExclusive",
  "claimReleasedOnClose",
  "claimReleasedOnInterruption",
  "listRuns",
  "survivesRestart",
  "claimsAcrossInstances",
  "survivesKill"
]
