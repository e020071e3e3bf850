/**
 * The store's option types, shared by the public module (`SqlRunLogStore.ts`, which re-exports
 * them) and the internal modules, so that no internal module imports the public one (design 0380:
 * no import circle inside a package).
 *
 * @internal
 */
import type * as PgClient from "@effect/sql-pg/PgClient"
import type { StoreError } from "@polyloop/core/Errors"
import type { RunId } from "@polyloop/core/Ids"
import type * as Duration from "effect/Duration"
import type * as Effect from "effect/Effect"
import type * as Schedule from "effect/Schedule"

/** Where a fault can be injected inside an append's transaction. */
export type FaultStage = "BeforeRecord" | "BeforeCommit"

/** Where an append is when its fault point is called. */
export interface FaultContext {
  readonly stage: FaultStage
  readonly runId: RunId
  /** `BeforeRecord`: the sequence number of the record about to be inserted; `BeforeCommit`: the append's last. */
  readonly seq: number
  /**
   * `BeforeRecord`: the record's position in the append — 1 is between the two writes of
   * `completeStep` (its `ActionResulted` is inserted, its `StepCompleted` is not yet).
   * `BeforeCommit`: the number of records written.
   */
  readonly index: number
}

/**
 * A hook called inside an append's transaction, for tests of atomicity: before each record is
 * inserted (`"BeforeRecord"`) and after every write, before the commit (`"BeforeCommit"`).
 * Failing there, being interrupted there, or killing the process there must leave none of the
 * append's records visible. On SQLite a store with a hook writes an append's records one by one
 * inside `BEGIN IMMEDIATE … COMMIT` (through the same append trigger), so that the hook has a
 * point between them; without one an append is a single statement.
 */
export type FaultPoint = (context: FaultContext) => Effect.Effect<void, StoreError>

/** Options of the SQL backend, for every dialect. */
export interface Options {
  /** Where the store lives, named in every `StoreError` (`layerSqlite` sets the filename). */
  readonly path?: string
  /** How long a claim lasts without renewal; a dead owner's claim is free after it. Default 30 seconds. */
  readonly leaseDuration?: Duration.DurationInput
  /** How often a held claim is renewed. Default a third of `leaseDuration`. */
  readonly heartbeatInterval?: Duration.DurationInput
  /** A fault injection hook inside each append's transaction (tests only). */
  readonly faultPoint?: FaultPoint
  /**
   * Take over at once a claim whose owner is a process of this machine that no longer runs,
   * instead of waiting for its lease to expire (owners are named `<host>:<pid>:<n>:<random>`).
   * Safe when every writer of the store runs on this machine — the SQLite file's case, where it
   * is on by default: a killed process's run resumes immediately. Off by default for PostgreSQL,
   * where workers on other machines may share a host name. A reused pid only makes the claim
   * look alive (the lease then expires as usual); appends stay fenced by the lease either way.
   */
  readonly reclaimDeadLocalOwners?: boolean
}

/**
 * Connection options of the PostgreSQL client (`@effect/sql-pg`), without the name transforms the
 * store's queries do not expect; `connectRetry`: while the first connection fails, connect again
 * under this schedule, logging each attempt (design 0364; e.g. `SqlRunLogStore.connectRetry`).
 */
export type PgClientOptions = Omit<PgClient.PgClientConfig, "transformResultNames" | "transformQueryNames" | "transformJson"> & {
  readonly connectRetry?: Schedule.Schedule<unknown, StoreError>
}

