/**
 * The index of runs submitted to the cluster (`polyloop_cluster_runs`, design 0200): one row per
 * run with its payload, where it is (`Submitted`, `Running`, `Retrying`, `Suspended`,
 * `Finished`, `Failed`), how many attempts and failures it had, the runner that last held it,
 * its last error and its result. An index, not a queue: `@effect/cluster` decides what runs
 * where; the rows answer `Cluster.status`, `Cluster.list` and `Cluster.await` without asking a
 * runner, and keep a failed run's error. Same SQL on PostgreSQL and SQLite.
 *
 * @since 0.1.0
 */
import * as Migrator from "@effect/sql/Migrator"
import * as SqlClient from "@effect/sql/SqlClient"
import type { SqlError } from "@effect/sql/SqlError"
import * as Agent from "@polyloop/core/Agent"
import { StoreError } from "@polyloop/core/Errors"
import * as SqlErrors from "@polyloop/sql/SqlErrors"
import * as SqlMigration from "@polyloop/sql/SqlMigration"
import * as Clock from "effect/Clock"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import * as Schema from "effect/Schema"
import { FailureReason } from "./RunEntity.js"

/** Where a run is. */
export const IndexStatus = Schema.Literal("Submitted", "Running", "Retrying", "Suspended", "Finished", "Failed")
/** @since 0.1.0 */
export type IndexStatus = typeof IndexStatus.Type

/** One row of the index. */
export interface Entry {
  readonly runId: string
  /** The payload as submitted (decoded JSON). */
  readonly payload: unknown
  readonly status: IndexStatus
  /** Epoch milliseconds. */
  readonly submittedAt: number
  readonly updatedAt: number
  /** Attempts of `Agent.run` (every runner, every delivery). */
  readonly attempts: number
  /** Attempts that failed with a store or model error (retried), or ended the run. */
  readonly failures: number
  /** `host:port` of the runner that last held the run. */
  readonly runner: Option.Option<string>
  /** The last error (of a retried attempt, or why the run failed). */
  readonly error: Option.Option<string>
  /** Why a `Failed` run failed. */
  readonly reason: Option.Option<FailureReason>
  /** The result of a `Finished` run. */
  readonly result: Option.Option<Agent.RunResult>
}

/** The table `Migrator` records the index's migrations in. */
export const migrationsTable = "polyloop_cluster_migrations"

const createIndex = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`CREATE TABLE IF NOT EXISTS polyloop_cluster_runs (
    run_id text PRIMARY KEY,
    payload text NOT NULL,
    status text NOT NULL CHECK (status IN ('Submitted', 'Running', 'Retrying', 'Suspended', 'Finished', 'Failed')),
    submitted_at bigint NOT NULL,
    updated_at bigint NOT NULL,
    attempts integer NOT NULL DEFAULT 0,
    failures integer NOT NULL DEFAULT 0,
    runner text,
    error text,
    reason text,
    outcome text
  )`
  yield* sql`CREATE INDEX IF NOT EXISTS polyloop_cluster_runs_status ON polyloop_cluster_runs (status, submitted_at, run_id)`
})

/** Creates the index table if needed (PostgreSQL or SQLite); safe to run from many processes at once. */
export const migrate: Effect.Effect<void, StoreError, SqlClient.SqlClient> = SqlMigration.run({
  table: migrationsTable,
  loader: Migrator.fromRecord({ "1_create_index": createIndex }),
  what: "cluster run index"
})

const failure = (operation: string, runId?: string) => (error: SqlError): StoreError => {
  const base = SqlErrors.fromSqlError(error, runId === undefined ? { operation: `cluster run index: ${operation}` } : {
    operation: `cluster run index: ${operation}`,
    runId
  })
  return base.reason === "SchemaVersion"
    ? new StoreError({ ...base, message: `${base.message} (run RunIndex.migrate, or start a runner, which migrates, first)` })
    : base
}

/** The payload's JSON text; a payload with no JSON form is refused with `StoreError { reason: "Encode" }`. */
export const encodePayload = (runId: string, payload: unknown): Effect.Effect<string, StoreError> =>
  Effect.try({
    try: () => {
      const text = JSON.stringify(payload)
      if (text === undefined) throw new Error("the value has no JSON form")
      return text
    },
    catch: (cause) =>
      new StoreError({
        reason: "Encode",
        runId,
        message: `cluster: the payload of run ${runId} is not serialisable as JSON: ${cause instanceof Error ? cause.message : String(cause)}`,
        cause
      })
  })

/** Records a run about to be submitted (before its `Start` is sent); `false` when it was already in the index. */
export const submitted = (runId: string, payloadText: string): Effect.Effect<boolean, StoreError, SqlClient.SqlClient> =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const now = yield* Clock.currentTimeMillis
    const rows = yield* sql<{ run_id: string }>`INSERT INTO polyloop_cluster_runs (run_id, payload, status, submitted_at, updated_at)
      VALUES (${runId}, ${payloadText}, 'Submitted', ${now}, ${now})
      ON CONFLICT (run_id) DO NOTHING
      RETURNING run_id`.pipe(Effect.mapError(failure("recording a submission", runId)))
    return rows.length > 0
  })

/** A transition written by the runner holding the run. */
export interface Transition {
  readonly status: Exclude<IndexStatus, "Submitted">
  /** Counts one more attempt (`Running`). */
  readonly attempt?: boolean
  /** Counts one more failure. */
  readonly failed?: boolean
  readonly runner?: string
  readonly error?: string
  readonly reason?: FailureReason
  /** The encoded `RunResult` (JSON) of a finished run. */
  readonly outcome?: string
}

/**
 * Writes a transition, with the payload the runner is running (the stored `Start`'s); creates the
 * row when the runner meets a run without one.
 */
export const transition = (
  runId: string,
  payloadText: string,
  change: Transition
): Effect.Effect<void, StoreError, SqlClient.SqlClient> => transitions([{ runId, payloadText, change }])

/** One run's transition, for `transitions`. */
export interface RunTransition {
  readonly runId: string
  readonly payloadText: string
  readonly change: Transition
}

/**
 * Writes the transitions of several runs as one statement (design 0350, decision 5): each row by
 * the rules of `transition`. A run may appear once (PostgreSQL refuses to upsert one row twice in
 * a statement): `internal/indexWriter.ts` splits what it groups.
 */
export const transitions = (
  items: ReadonlyArray<RunTransition>
): Effect.Effect<void, StoreError, SqlClient.SqlClient> =>
  Effect.gen(function*() {
    if (items.length === 0) return
    const sql = yield* SqlClient.SqlClient
    const now = yield* Clock.currentTimeMillis
    const rows = items.map(({ change, payloadText, runId }) =>
      sql`(${runId}, ${payloadText}, ${change.status}, ${now}, ${now}, ${change.attempt === true ? 1 : 0}, ${
        change.failed === true ? 1 : 0
      }, ${change.runner ?? null}, ${change.error ?? null}, ${change.reason ?? null}, ${change.outcome ?? null})`
    )
    const what = items.length === 1 ? `recording ${items[0]!.change.status}` : `recording ${items.length} transitions`
    yield* sql`INSERT INTO polyloop_cluster_runs (run_id, payload, status, submitted_at, updated_at, attempts, failures, runner, error, reason, outcome)
      VALUES ${sql.csv(rows)}
      ON CONFLICT (run_id) DO UPDATE SET
        payload = excluded.payload,
        status = excluded.status,
        updated_at = excluded.updated_at,
        attempts = polyloop_cluster_runs.attempts + excluded.attempts,
        failures = polyloop_cluster_runs.failures + excluded.failures,
        runner = coalesce(excluded.runner, polyloop_cluster_runs.runner),
        error = CASE WHEN excluded.status IN ('Running', 'Finished', 'Suspended') AND excluded.error IS NULL
          THEN polyloop_cluster_runs.error ELSE excluded.error END,
        reason = excluded.reason,
        outcome = excluded.outcome`.pipe(
      Effect.mapError(failure(what, items.length === 1 ? items[0]!.runId : undefined))
    )
  })

const Millis = Schema.Union(Schema.Number, Schema.NumberFromString)
const JsonText = Schema.parseJson()

const Row = Schema.Struct({
  run_id: Schema.String,
  payload: JsonText,
  status: IndexStatus,
  submitted_at: Millis,
  updated_at: Millis,
  attempts: Millis,
  failures: Millis,
  runner: Schema.NullOr(Schema.String),
  error: Schema.NullOr(Schema.String),
  reason: Schema.NullOr(FailureReason),
  outcome: Schema.NullOr(Schema.parseJson(Agent.RunResult))
})

const decodeRows = Schema.decodeUnknown(Schema.Array(Row))

const columns = "run_id, payload, status, submitted_at, updated_at, attempts, failures, runner, error, reason, outcome"

const read = (rows: ReadonlyArray<unknown>): Effect.Effect<ReadonlyArray<Entry>, StoreError> =>
  decodeRows(rows).pipe(
    Effect.map((decoded) =>
      decoded.map((row): Entry => ({
        runId: row.run_id,
        payload: row.payload,
        status: row.status,
        submittedAt: row.submitted_at,
        updatedAt: row.updated_at,
        attempts: row.attempts,
        failures: row.failures,
        runner: Option.fromNullable(row.runner),
        error: Option.fromNullable(row.error),
        reason: Option.fromNullable(row.reason),
        result: Option.fromNullable(row.outcome)
      }))
    ),
    Effect.mapError((error) =>
      new StoreError({ reason: "Decode", message: `cluster run index: a row does not decode: ${error.message}`, cause: error })
    )
  )

/** The row of one run, if it was ever submitted (or met by a runner). */
export const entry = (runId: string): Effect.Effect<Option.Option<Entry>, StoreError, SqlClient.SqlClient> =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const rows = yield* sql`SELECT ${sql.literal(columns)} FROM polyloop_cluster_runs WHERE run_id = ${runId}`.pipe(
      Effect.mapError(failure("reading a run", runId))
    )
    return Option.fromNullable((yield* read(rows))[0])
  })

/** The index's rows, oldest submission first; optionally only those with one status. */
export const list = (query?: {
  readonly status?: IndexStatus
  readonly limit?: number
}): Effect.Effect<ReadonlyArray<Entry>, StoreError, SqlClient.SqlClient> =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const where = query?.status === undefined ? sql`` : sql`WHERE status = ${query.status}`
    const limit = query?.limit === undefined ? sql`` : sql`LIMIT ${query.limit}`
    const rows = yield* sql`SELECT ${sql.literal(columns)} FROM polyloop_cluster_runs ${where}
      ORDER BY submitted_at, run_id ${limit}`.pipe(Effect.mapError(failure("listing runs")))
    return yield* read(rows)
  })
