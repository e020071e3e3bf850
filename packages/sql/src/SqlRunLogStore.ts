/**
 * The durable run log store on `@effect/sql` (SPEC §7): one backend over `SqlClient` for every
 * dialect, plugged into `RunLogStore.make`, with SQLite (`layerSqlite`, the embedded default) as
 * the first dialect and PostgreSQL (`layerPg`, many workers on many machines sharing one database)
 * as the second.
 *
 * Storage (see `internal/migrations/`):
 * - `polyloop_records(run_id, seq, kind, step, payload)`: append-only, one row per record, the
 *   record's JSON as `RunLogStore.encodeRecord` writes it. `PRIMARY KEY (run_id, seq)` makes the
 *   database reject a duplicate sequence number; a gap is rejected by a check of the run's
 *   `next_seq` in the same statement or transaction. Either becomes `ConcurrentWriter`.
 * - `polyloop_runs`: one summary row per run, inserted with `RunStarted` and updated with each
 *   append, atomically with it (constant work per step, earlier records are never rewritten),
 *   so `listRuns` is one query.
 * - `polyloop_claims(run_id, owner, expires_at)`: leases. A claim is one compare-and-set upsert
 *   (a random owner id per process and claim; it takes a lease that is free, expired, or held
 *   by a dead process of this machine when `reclaimDeadLocalOwners` is on), a heartbeat fiber
 *   renews it while the claim's scope is open, and closing the scope deletes it. Appends by a
 *   claim's holder are fenced: atomically with the append, the lease row must still name that
 *   holder, otherwise the append is rejected with `ConcurrentWriter { leaseHolder }`.
 * - `polyloop_append` (SQLite only): a view with no rows whose `INSTEAD OF INSERT` trigger
 *   is the append — per record it creates the summary row (`RunStarted`), refuses a gap or a
 *   lost lease (`RAISE(ABORT)`), inserts the record and updates the summary.
 * - `polyloop_migrations`: `@effect/sql`'s `Migrator` table. A database whose schema is newer
 *   than this code is refused with `StoreError { reason: "SchemaVersion" }`. On PostgreSQL the
 *   migration runs in one transaction under an advisory lock, so workers starting together on
 *   an empty database migrate one after another (`internal/migrationLock.ts`).
 *
 * Appends are atomic: `completeStep`'s two records are written together or not at all.
 * - On SQLite an append is one statement, `INSERT INTO polyloop_append VALUES (…), (…)` (one
 *   row per record, carrying its summary delta and the writer's lease owner). A statement is
 *   atomic and, in autocommit, its own transaction: one commit (one `fsync` at
 *   `synchronous=FULL`) and no `BEGIN`/`COMMIT` statements. While several runs are claimed on
 *   the store, the appends that reach the store together are committed together (group
 *   commit: one statement with all their rows, one `fsync`); an append still returns only once
 *   its rows are committed, and a refused one is written again alone, so one run's conflict
 *   never fails another's. With a fault hook the rows go in one by one inside `BEGIN IMMEDIATE
 *   … COMMIT`, so the hook can run between them.
 * - On PostgreSQL an append is one statement too (one round trip): `WITH upd AS (UPDATE
 *   polyloop_runs … WHERE next_seq = $n [AND EXISTS (the lease row, locked FOR SHARE)]
 *   RETURNING …), ins AS (INSERT INTO polyloop_records … WHERE EXISTS (SELECT 1 FROM upd))` —
 *   no row updated means a gap or a lost lease, and nothing is inserted; a takeover waits for
 *   the lease row's lock. The `RunStarted` append (which creates the summary row) and appends
 *   with a fault hook run as `BEGIN`, one `INSERT` per record, the summary `UPDATE … RETURNING`,
 *   the lease `SELECT … FOR SHARE`, `COMMIT`.
 *
 * Every statement is compiled once per dialect and run with `Connection.execute` (prepared once
 * by the driver): a durable step is two commits, and `sql` templates cost more CPU per statement
 * than SQLite's own work. `layerSqlite` opens a client for the store alone and holds its one
 * connection for the layer's life, since every operation there is a single statement; a store
 * over a client it shares (`layer`, `backend`, PostgreSQL) reserves a connection per operation.
 * Driver failures become `StoreError`s with the path and a reason (`Unavailable` for a locked or
 * unreachable database, `ReadOnly`, `DiskFull`, `Corrupt`, …), including a failing `COMMIT` and
 * SQLite's own rollback on a full disk (which `SqlClient.withTransaction` would turn into a
 * defect). Schema migrations run in `Migrator`'s transaction, which reports a storage failure as
 * a defect; `migrate` turns exactly those defects back into `StoreError`s.
 *
 * @since 0.1.0
 */
import * as Reactivity from "@effect/experimental/Reactivity"
import * as Migrator from "@effect/sql/Migrator"
import * as SqlClient from "@effect/sql/SqlClient"
import type { Connection } from "@effect/sql/SqlConnection"
import type { SqlError } from "@effect/sql/SqlError"
import * as SqliteClient from "@effect/sql-sqlite-node/SqliteClient"
import type * as PgClient from "@effect/sql-pg/PgClient"
import { ConcurrentWriter, RunBusy, StoreError } from "@polyloop/core/Errors"
import type { RunId } from "@polyloop/core/Ids"
import { totalTokens } from "@polyloop/core/ModelReply"
import * as RunLog from "@polyloop/core/RunLog"
import * as RunLogStore from "@polyloop/core/RunLogStore"
import { StopReason } from "@polyloop/core/StopReason"
import type * as Arr from "effect/Array"
import * as Clock from "effect/Clock"
import * as Config from "effect/Config"
import type * as ConfigError from "effect/ConfigError"
import * as Context from "effect/Context"
import * as Data from "effect/Data"
import * as Deferred from "effect/Deferred"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as FiberId from "effect/FiberId"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as ParseResult from "effect/ParseResult"
import * as Predicate from "effect/Predicate"
import * as Random from "effect/Random"
import * as Redacted from "effect/Redacted"
import * as Schedule from "effect/Schedule"
import * as Schema from "effect/Schema"
import type * as Scope from "effect/Scope"
import * as os from "node:os"
import { driverCause, isAppendRefused, isUniqueViolation, migrationStorageFailure, storeError } from "./internal/errors.js"
import { serialized } from "./internal/migrationLock.js"
import * as PgMigrations from "./internal/migrations/pg.js"
import * as SqliteMigrations from "./internal/migrations/sqlite.js"
import { reserve } from "./internal/reserve.js"
import { probe } from "./internal/sqliteFile.js"
import { connectionTransaction } from "./internal/transaction.js"

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

/** Is a lease owner a process of this machine that no longer runs? */
export const isDeadLocalOwner = (owner: string): boolean => {
  const parts = owner.split(":")
  if (parts.length !== 4 || parts[0] !== os.hostname()) return false
  const pid = Number(parts[1])
  if (!Number.isSafeInteger(pid) || pid <= 0 || pid === process.pid) return false
  try {
    process.kill(pid, 0)
    return false
  } catch (error) {
    return Predicate.hasProperty(error, "code") && error.code === "ESRCH"
  }
}

/**
 * Options of the SQLite store.
 *
 * `synchronous` chooses what a returned write survives:
 * - `"FULL"` (default): each commit waits for the write-ahead log to reach the disk (`fsync`), so
 *   a returned write survives a killed process, an OS crash and a power loss. Cost: one `fsync`
 *   per transaction, two per step (the reply, then the step's completion) — from well under a
 *   millisecond on an SSD with a write cache to several milliseconds on slower disks.
 * - `"NORMAL"`: commits reach the OS but are synced only at checkpoints, so a returned write
 *   survives a killed process (`kill -9`), but the last transactions before a power loss or OS
 *   crash may be rolled back (the file stays consistent; the run resumes from an earlier step and
 *   may re-run a `"Never"` action whose result was lost). Faster: no `fsync` per step.
 *
 * `busyTimeout` is how long a write waits for another connection's write lock before failing
 * with `StoreError { reason: "Unavailable" }`. Default 5 seconds.
 */
export interface SqliteOptions extends Omit<Options, "path"> {
  readonly filename: string
  readonly synchronous?: "FULL" | "NORMAL"
  readonly busyTimeout?: Duration.DurationInput
}

/** The `Migrator` table that records the applied schema versions. */
export const migrationsTable = "polyloop_migrations"

/** The migrations of a dialect (`<id>_<name>` → effect); `StoreError` for a dialect without them. */
export const migrationsFor = (
  sql: SqlClient.SqlClient
): Effect.Effect<Record<string, Effect.Effect<void, SqlError, SqlClient.SqlClient>>, StoreError> =>
  sql.onDialectOrElse({
    sqlite: () => Effect.succeed(SqliteMigrations.migrations),
    pg: () => Effect.succeed(PgMigrations.migrations),
    orElse: () =>
      Effect.fail(
        new StoreError({ reason: "SchemaVersion", message: "@polyloop/sql has no migrations for this SQL dialect" })
      )
  })

/** The newest schema version among migrations keyed `<id>_<name>`. */
export const latestVersion = (migrations: Record<string, unknown>): number =>
  Object.keys(migrations).reduce((max, key) => Math.max(max, Number(/^(\d+)_/.exec(key)?.[1] ?? 0)), 0)

/**
 * PostgreSQL: two processes creating the migrations table at the same moment — the loser fails
 * with "relation already exists" (42P07), "type already exists" (42710) or a unique violation on
 * the catalog (23505). Migrations of this version are serialised by an advisory lock
 * (`internal/migrationLock.ts`), so this only happens against a process of an older
 * `@polyloop/sql` that migrates without the lock; trying again finds the table.
 */
const concurrentSchemaCreation = (error: unknown): boolean => {
  if (typeof error !== "object" || error === null || !("_tag" in error) || error._tag !== "StoreError") return false
  const cause = driverCause((error as StoreError).cause)
  const code = typeof cause === "object" && cause !== null && "code" in cause ? (cause as { readonly code: unknown }).code : undefined
  return code === "42P07" || code === "42710" || code === "23505"
}

class MigrationPending extends Data.TaggedError("MigrationPending")<{ readonly current: number; readonly latest: number }> {}

const runMigrator = Migrator.make({})

/**
 * Brings the database's schema up to date with `@effect/sql`'s `Migrator`: creates it in a fresh
 * database, applies the missing migrations to an older one, and refuses one that is newer than
 * this code with `StoreError { reason: "SchemaVersion" }`. Waits while another process is
 * migrating the same database (on PostgreSQL behind an advisory lock held for the whole
 * migration). Returns the migrations it applied.
 */
export const migrate = (
  options: { readonly path?: string } = {}
): Effect.Effect<ReadonlyArray<readonly [id: number, name: string]>, StoreError, SqlClient.SqlClient> =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const migrations = yield* migrationsFor(sql)
    const latest = latestVersion(migrations)
    const context = { operation: "migrating the schema", path: options.path }
    const once = Effect.gen(function*() {
      const applied = yield* serialized(migrationsTable)(runMigrator({ loader: Migrator.fromRecord(migrations), table: migrationsTable })).pipe(
        Effect.catchSomeCause((cause) => Option.map(migrationStorageFailure(cause), (error) => Effect.fail(storeError(error, context)))),
        Effect.catchTags({
          SqlError: (error) => Effect.fail(storeError(error, context)),
          MigrationError: (error) => Effect.fail(storeError(error, context, "SchemaVersion"))
        })
      )
      const rows = yield* sql<{ readonly version: unknown }>`SELECT max(migration_id) AS version FROM ${sql(migrationsTable)}`.pipe(
        Effect.mapError((error) => storeError(error, context))
      )
      const current = Number(rows[0]?.version ?? 0)
      if (current > latest) {
        return yield* new StoreError({
          reason: "SchemaVersion",
          message: `the store${options.path === undefined ? "" : ` ${options.path}`} has schema version ${current}, newer than this @polyloop/sql (version ${latest}); refusing to use it — upgrade @polyloop/sql`,
          ...(options.path === undefined ? {} : { path: options.path })
        })
      }
      if (current < latest) return yield* new MigrationPending({ current, latest })
      return applied
    })
    return yield* once.pipe(
      Effect.retry({
        schedule: Schedule.spaced(Duration.millis(100)),
        times: 100,
        while: (error) => error._tag === "MigrationPending" || concurrentSchemaCreation(error)
      }),
      Effect.catchTag("MigrationPending", (pending) =>
        Effect.fail(
          new StoreError({
            reason: "Unavailable",
            message: `the schema stays at version ${pending.current} (expected ${pending.latest}): another process is migrating it or failed to`,
            ...(options.path === undefined ? {} : { path: options.path })
          })
        ))
    )
  }).pipe(Effect.withSpan("SqlRunLogStore.migrate"))

class SeqConflict extends Data.TaggedError("SeqConflict")<{}> {}

/** The append's writer held a claim on the run, and the lease row now names another owner (or none). */
class LeaseLost extends Data.TaggedError("LeaseLost")<{ readonly holder: string }> {}

const Numeric = Schema.Union(Schema.Number, Schema.NumberFromString)

const SummaryRow = Schema.Struct({
  run_id: Schema.String,
  agent: Schema.String,
  status: RunLogStore.RunStatus,
  stop_reason: Schema.NullOr(Schema.parseJson(StopReason)),
  steps: Numeric,
  effective_steps: Numeric,
  tokens: Numeric,
  started_at: Numeric,
  finished_at: Schema.NullOr(Numeric),
  elapsed: Numeric
})

const decodeSummaryRows = Schema.decodeUnknown(Schema.Array(SummaryRow))
const encodeStopReasonSync = Schema.encodeEither(Schema.parseJson(StopReason))

/** Effect's built-in tracer (spans kept in memory, seen by nobody). */
const builtInTracer = Effect.runSync(Effect.tracer)

/**
 * A span on a hot path (an append runs twice per step) only when a tracer other than the
 * built-in one is installed: a span costs more CPU than the append's own statements.
 */
const withSpanIfTraced = (name: string, attributes: () => Record<string, unknown>) =>
<A, E, R>(effect: Effect.Effect<A, E, R>): Effect.Effect<A, E, R> =>
  Effect.tracerWith((tracer) =>
    tracer === builtInTracer ? effect : Effect.withSpan(effect, name, { attributes: attributes(), captureStackTrace: false })
  )

const stepOf = (record: RunLog.RunRecord): number | null => {
  switch (record._tag) {
    case "ModelReplied":
    case "ActionResulted":
    case "StepCompleted":
      return record.step
    case "RunResumed":
      return record.fromStep
    default:
      return null
  }
}

/** What one record adds to the run's summary row (`finished`: the record ends the run). */
interface RecordDelta {
  steps: number
  effectiveSteps: number
  tokens: number
  elapsed: number
  finished: RunLog.RunFinished | undefined
}

/** Adds what `record` contributes to the run's summary row to `delta`. */
const addDelta = (delta: RecordDelta, record: RunLog.RunRecord): RecordDelta => {
  switch (record._tag) {
    case "ModelReplied":
      delta.tokens += totalTokens(record.reply.usage)
      break
    case "StepCompleted":
      // A step is effective when one of its actions was Executed (design 0150): the step
      // record says so, as the results of a step may be written in several appends.
      delta.steps++
      if (record.effective) delta.effectiveSteps++
      delta.elapsed += record.elapsed
      break
    case "RunFinished":
      delta.finished = record
      break
    default:
      break
  }
  return delta
}

const emptyDelta = (): RecordDelta => ({ steps: 0, effectiveSteps: 0, tokens: 0, elapsed: 0, finished: undefined })

/** What an append adds to the run's summary row. */
const summaryDelta = (records: ReadonlyArray<RunLogStore.StoredRecord>): RecordDelta => {
  const delta = emptyDelta()
  for (const { record } of records) addDelta(delta, record)
  return delta
}

/** The agent's name a `RunStarted` record carries, for the summary row ("?" if it has none). */
const agentOf = (record: RunLog.RunRecord): string =>
  Option.match(RunLogStore.summarize(RunLog.fromRecords([record])), { onNone: () => "?", onSome: (s) => s.agent })

/** The columns of SQLite's append view (`internal/migrations/sqlite.ts`, version 3), in order. */
const appendViewColumns =
  "run_id, seq, kind, step, payload, owner, agent, started_at, steps, effective_steps, tokens, elapsed, stop_reason, finished_at"

const appendViewText = (rows: number): string =>
  `INSERT INTO polyloop_append (${appendViewColumns}) VALUES ${Array.from({ length: rows }, () => "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)").join(", ")}`

/** Texts of the statements of small appends and groups, made once (larger groups' texts are made when needed). */
const appendViewSql: ReadonlyArray<string> = Array.from({ length: 33 }, (_, rows) => appendViewText(rows))

/** The one statement of a SQLite append (or group of appends) of `rows` records; the driver prepares each text once. */
const appendViewFor = (rows: number): string => appendViewSql[rows] ?? appendViewText(rows)

let claimCounter = 0

/**
 * How the backend gets a connection for one operation: every statement of the store runs on a
 * connection it is given here (`Connection.execute` with statements compiled once, or per call
 * for `listRuns`), never through `sql` templates.
 */
type Connect = <A, E>(use: (conn: Connection) => Effect.Effect<A, E>) => Effect.Effect<A, E | SqlError>

/**
 * A connection reserved from the client for each operation (`SqlClient.reserve`, its wait shielded
 * from interruption where the driver would lose the connection: `internal/reserve.ts`): the client may
 * be shared (a `Worker`, the application), and the reservation keeps other fibers' statements
 * out of an open transaction.
 */
const reservePerOperation = (sql: SqlClient.SqlClient): Connect => (use) => Effect.scoped(Effect.flatMap(reserve(sql), use))

/**
 * The SQL backend of `RunLogStore` over the `SqlClient` in context (any dialect whose schema
 * `migrate` has created), which may be shared with other code. Most users want `layerSqlite` or
 * `layer`.
 */
export const backend = (options: Options = {}): Effect.Effect<RunLogStore.Backend, never, SqlClient.SqlClient> =>
  Effect.flatMap(SqlClient.SqlClient, (sql) => makeBackend(sql, options, reservePerOperation(sql)))

/**
 * The backend on a client that nothing else uses — the SQLite client `layerSqlite` opens for the
 * store alone: the client's one connection is reserved once, for the life of the scope, and every
 * operation runs on it without a reservation of its own (which costs more CPU than the append's
 * statement). Safe because, in this mode, every operation of the store is one statement (an
 * append is one `INSERT` into the append view, a claim a compare-and-set upsert; no transaction
 * stays open across statements), and better-sqlite3 runs each statement synchronously, whole.
 * With a fault hook (whose point is inside an open transaction) it reserves per operation, as
 * `backend` does. Any other user of the client would wait for the connection forever, so the
 * client must be private to the store.
 */
const backendOwningClient = (options: Options): Effect.Effect<RunLogStore.Backend, StoreError, SqlClient.SqlClient | Scope.Scope> =>
  Effect.flatMap(SqlClient.SqlClient, (sql) => {
    const single = sql.onDialectOrElse({ sqlite: () => options.faultPoint === undefined, orElse: () => false })
    if (!single) return makeBackend(sql, options, reservePerOperation(sql))
    return Effect.flatMap(
      Effect.mapError(reserve(sql), (error) => storeError(error, { operation: "opening the store", path: options.path })),
      (conn) => makeBackend(sql, options, (use) => use(conn))
    )
  })

const makeBackend = (
  sql: SqlClient.SqlClient,
  options: Options,
  connect: Connect
): Effect.Effect<RunLogStore.Backend> =>
  Effect.sync(() => {
    const path = options.path
    const leaseMillis = Duration.toMillis(Duration.decode(options.leaseDuration ?? Duration.seconds(30)))
    const reclaimDeadLocalOwners = options.reclaimDeadLocalOwners ?? false
    const heartbeat = options.heartbeatInterval === undefined
      ? Duration.millis(Math.max(1, Math.floor(leaseMillis / 3)))
      : Duration.decode(options.heartbeatInterval)
    const fault: FaultPoint = options.faultPoint ?? (() => Effect.void)
    const failWith = (operation: string, runId?: string) => (error: SqlError) => storeError(error, { operation, path, runId })
    /** Claims this store instance holds: run id → lease owner. Appends to these runs are fenced by the lease. */
    const held = new Map<string, string>()

    // Every statement is compiled once for the dialect (placeholders `?` or `$n`) and run with
    // `Connection.execute` on the connection `connect` gives (prepared once, cached by the
    // driver). Parameters are passed in the order they appear in each statement.
    type Param = string | number | null
    const compiled = (statement: { readonly compile: () => readonly [string, ReadonlyArray<unknown>] }): string => statement.compile()[0]
    const exec = (conn: Connection, statement: string, params: ReadonlyArray<Param>) => conn.execute(statement, params, undefined)
    const query = (statement: string, params: ReadonlyArray<Param>) => connect((conn) => exec(conn, statement, params))

    const nextSeqSql = compiled(sql`SELECT next_seq FROM polyloop_runs WHERE run_id = ${""}`)
    const claimOwnerSql = compiled(sql`SELECT owner FROM polyloop_claims WHERE run_id = ${""}`)
    const readSql = compiled(sql`SELECT payload FROM polyloop_records WHERE run_id = ${""} ORDER BY seq`)
    // A claim is one compare-and-set: insert the lease, or take over one that expired (or whose
    // owner is known dead), atomically; a live lease is left alone.
    const upsertClaimSql = compiled(
      sql`INSERT INTO polyloop_claims (run_id, owner, expires_at) VALUES (${""}, ${""}, ${0}) ON CONFLICT (run_id) DO UPDATE SET owner = excluded.owner, expires_at = excluded.expires_at WHERE polyloop_claims.expires_at <= ${0} OR polyloop_claims.owner = ${""}`
    )
    const renewClaimSql = compiled(sql`UPDATE polyloop_claims SET expires_at = ${0} WHERE run_id = ${""} AND owner = ${""}`)
    const releaseClaimSql = compiled(sql`DELETE FROM polyloop_claims WHERE run_id = ${""} AND owner = ${""}`)

    /** The current holder of a run's lease ("" for none). */
    const leaseHolder = (runId: RunId) =>
      Effect.map(query(claimOwnerSql, [runId]), (rows) => (rows[0] as { readonly owner?: string } | undefined)?.owner ?? "")

    const nextSeq = (runId: RunId) =>
      query(nextSeqSql, [runId]).pipe(
        Effect.map((rows) => Number((rows[0] as { readonly next_seq?: unknown } | undefined)?.next_seq ?? 0)),
        Effect.mapError(failWith("reading the run's next sequence number", runId))
      )

    const conflict = (runId: RunId, actualSeq: number) =>
      Effect.flatMap(nextSeq(runId), (expectedSeq) => Effect.fail(new ConcurrentWriter({ runId, expectedSeq, actualSeq })))

    /** A rejected append by a claim holder whose lease is gone names the lease's new holder ("" for none). */
    const fencedConflict = (runId: RunId, actualSeq: number, holder?: string) =>
      Effect.gen(function*() {
        const owner = held.get(runId)
        if (owner === undefined) return yield* conflict(runId, actualSeq)
        const current = holder ?? (yield* leaseHolder(runId).pipe(Effect.mapError(failWith("reading the run's claim", runId))))
        if (current === owner) return yield* conflict(runId, actualSeq)
        const expectedSeq = yield* nextSeq(runId)
        return yield* new ConcurrentWriter({ runId, expectedSeq, actualSeq, leaseHolder: current })
      })

    const read: RunLogStore.Backend["read"] = (runId) =>
      query(readSql, [runId]).pipe(
        Effect.mapError(failWith("reading the log", runId)),
        Effect.flatMap((rows) => {
          const texts: Array<string> = []
          for (const row of rows as ReadonlyArray<{ readonly payload?: unknown }>) {
            if (typeof row.payload !== "string") {
              return Effect.fail(
                new StoreError({
                  reason: "Corrupt",
                  runId,
                  ...(path === undefined ? {} : { path }),
                  message: `run ${runId}: record ${texts.length} is not stored as text`
                })
              )
            }
            texts.push(row.payload)
          }
          return Effect.succeed(texts)
        }),
        Effect.withSpan("SqlRunLogStore.read", { attributes: { runId } })
      )

    // The append's statements. SQLite's append is one statement into the append view
    // (`appendViewFor`); the others are PostgreSQL's.
    const sqlite = sql.onDialectOrElse({ sqlite: () => true, orElse: () => false })
    const insertRecordSql = compiled(
      sql`INSERT INTO polyloop_records (run_id, seq, kind, step, payload) VALUES (${""}, ${0}, ${""}, ${0}, ${""})`
    )
    const insertRunSql = compiled(
      sql`INSERT INTO polyloop_runs (run_id, agent, status, stop_reason, steps, effective_steps, tokens, started_at, finished_at, elapsed, next_seq) VALUES (${""}, ${""}, ${"Unfinished"}, NULL, 0, 0, 0, ${0}, NULL, 0, 0)`
    )
    // Compare-and-set on the run's next sequence number: a gap (or a record for a run that was
    // never started) updates no row and returns nothing.
    const updateRunSql = (finishing: boolean): string =>
      compiled(
        sql`UPDATE polyloop_runs SET next_seq = ${0}, steps = steps + ${0}, effective_steps = effective_steps + ${0}, tokens = tokens + ${0}, elapsed = elapsed + ${0}${
          finishing ? sql`, status = ${"Finished"}, stop_reason = ${""}, finished_at = ${0}` : sql``
        } WHERE run_id = ${""} AND next_seq = ${0} RETURNING next_seq`
      )
    const updateRun = { plain: updateRunSql(false), finishing: updateRunSql(true) }
    // PostgreSQL: lock the lease row until commit, so a takeover waits for the append to finish.
    const leaseOwnerSql = compiled(sql`SELECT owner FROM polyloop_claims WHERE run_id = ${""} FOR SHARE`)
    const inAppendTransaction = connectionTransaction(sql, connect)
    // The fault hook is outside code: statements it runs through `sql` use this transaction.
    const faultIn = (conn: Connection, context: FaultContext): Effect.Effect<void, StoreError> =>
      options.faultPoint === undefined
        ? Effect.void
        : Effect.provideService(fault(context), SqlClient.TransactionConnection, [conn, 0] as const)

    /** The stop reason's JSON for the summary row, or a typed `Encode` failure. */
    const stopReasonJson = (runId: RunId, finished: RunLog.RunFinished): Effect.Effect<string, StoreError> | string => {
      const encoded = encodeStopReasonSync(finished.stopReason)
      return encoded._tag === "Right"
        ? encoded.right
        : Effect.fail(
          new StoreError({ reason: "Encode", runId, message: `run ${runId}: the stop reason does not encode`, cause: encoded.left })
        )
    }

    /** An append waiting for the next group commit: its rows, and where its outcome goes. */
    interface Waiting {
      readonly params: ReadonlyArray<Param>
      readonly rows: number
      readonly done: Deferred.Deferred<void, SqlError>
    }
    let waiting: Array<Waiting> = []
    /** Rows per group statement at most (14 parameters a row; SQLite allows 32,766 per statement). */
    const maxGroupRows = 1_000

    /**
     * Writes waiting appends in one statement, or each alone when that statement is refused. It
     * runs inside the flusher's uninterruptible region, so each exit handed to a waiter is its
     * statement's own (success, `SqlError` or defect, passed on unchanged), never an interruption.
     */
    const writeGroup = (group: ReadonlyArray<Waiting>): Effect.Effect<void> => {
      const alone = (entry: Waiting) =>
        Effect.flatMap(Effect.exit(Effect.asVoid(query(appendViewFor(entry.rows), entry.params))), (exit) => Deferred.done(entry.done, exit))
      if (group.length === 1) return alone(group[0]!)
      const params: Array<Param> = []
      let rows = 0
      for (const entry of group) {
        for (const param of entry.params) params.push(param)
        rows += entry.rows
      }
      return Effect.flatMap(Effect.exit(Effect.asVoid(query(appendViewFor(rows), params))), (exit) =>
        Exit.isSuccess(exit)
          ? Effect.forEach(group, (entry) => Deferred.done(entry.done, exit), { discard: true })
          // One append's refusal (a gap, a lost lease, a duplicate) or a storage failure undoes
          // the whole statement: each append is written again alone, and gets its own outcome.
          : Effect.forEach(group, alone, { discard: true }))
    }

    /** Takes every waiting append, in groups of at most `maxGroupRows` rows, and writes them. */
    const flush: Effect.Effect<void> = Effect.suspend(() => {
      const taken = waiting
      waiting = []
      const groups: Array<Array<Waiting>> = []
      let current: Array<Waiting> = []
      let rows = 0
      for (const entry of taken) {
        if (current.length > 0 && rows + entry.rows > maxGroupRows) {
          groups.push(current)
          current = []
          rows = 0
        }
        current.push(entry)
        rows += entry.rows
      }
      if (current.length > 0) groups.push(current)
      return Effect.forEach(groups, writeGroup, { discard: true })
    })

    /**
     * A SQLite append (one statement into the append view). With one run claimed on this store it
     * is written at once. With several, appends are committed in groups (group commit): the
     * first append of a group lets the other runs' fibers run once, so that those reaching an
     * append join it, then writes them all in one statement — one commit, one `fsync`, for many
     * runs' steps. Each append still returns only once its rows are committed (or it was
     * refused: then it is written alone, so that one run's conflict never fails another's
     * append). The writer finishes the group even if its own fiber is interrupted meanwhile; an
     * append whose fiber is interrupted while it waits may still be committed, as a write that
     * had not returned may be after a crash.
     */
    const writeAppend = (params: ReadonlyArray<Param>, rows: number): Effect.Effect<void, SqlError> => {
      if (held.size <= 1 || rows > maxGroupRows) return Effect.asVoid(query(appendViewFor(rows), params))
      return Effect.suspend(() => {
        const done = Deferred.unsafeMake<void, SqlError>(FiberId.none)
        waiting.push({ params, rows, done })
        if (waiting.length > 1) return Deferred.await(done)
        return Effect.zipRight(Effect.uninterruptible(Effect.zipRight(Effect.yieldNow(), flush)), Deferred.await(done))
      })
    }

    /**
     * SQLite: one `INSERT` into the append view, one row per record with its summary delta and
     * the writer's lease owner; the view's trigger checks and writes (migration 3). A single
     * statement is atomic and, at `synchronous=FULL`, durable when it returns — one commit, no
     * `BEGIN`/`COMMIT` statements. With a fault hook the same rows go in one by one inside an
     * explicit transaction, so the hook runs between them.
     */
    const appendSqlite = (
      runId: RunId,
      records: Arr.NonEmptyReadonlyArray<RunLogStore.StoredRecord>,
      owner: string | undefined
    ): Effect.Effect<void, SqlError | StoreError> => {
      const params: Array<Param> = []
      for (const stored of records) {
        const record = stored.record
        const delta = addDelta(emptyDelta(), record)
        let stopReason: string | null = null
        if (delta.finished !== undefined) {
          const json = stopReasonJson(runId, delta.finished)
          if (typeof json !== "string") return json
          stopReason = json
        }
        const started = record._tag === "RunStarted"
        params.push(
          runId,
          stored.seq,
          stored.kind,
          stepOf(record),
          stored.json,
          owner ?? null,
          started ? agentOf(record) : null,
          started ? record.startedAt : null,
          delta.steps,
          delta.effectiveSteps,
          delta.tokens,
          delta.elapsed,
          stopReason,
          delta.finished === undefined ? null : delta.finished.finishedAt
        )
      }
      if (options.faultPoint === undefined) return writeAppend(params, records.length)
      const width = params.length / records.length
      return inAppendTransaction((conn) => {
        let chain: Effect.Effect<unknown, SqlError | StoreError> = Effect.void
        for (let i = 0; i < records.length; i++) {
          const row = params.slice(i * width, (i + 1) * width)
          chain = Effect.zipRight(chain, faultIn(conn, { stage: "BeforeRecord", runId, seq: records[i]!.seq, index: i }))
          chain = Effect.zipRight(chain, exec(conn, appendViewFor(1), row))
        }
        const end = records[records.length - 1]!.seq
        return Effect.zipRight(chain, faultIn(conn, { stage: "BeforeCommit", runId, seq: end, index: records.length }))
      })
    }

    /**
     * PostgreSQL's append of `rows` records after `RunStarted`, as one statement: the summary's
     * compare-and-set `UPDATE` (for a claim holder, only while the lease row still names it,
     * locked `FOR SHARE` until the statement commits, so a takeover waits) and, only if it
     * updated the row, the records' `INSERT`. It returns `updated` = 0 for a gap or a lost lease
     * (`fencedConflict` tells which); a duplicate is the primary key's unique violation. A
     * statement is its own transaction: all of it is written, or none.
     */
    const pgAppendSql = new Map<string, string>()
    const pgAppendFor = (rows: number, finishing: boolean, fenced: boolean): string => {
      const key = `${rows}:${finishing}:${fenced}`
      const cached = pgAppendSql.get(key)
      if (cached !== undefined) return cached
      // $1 next_seq, $2..$5 deltas, [$6..$8 finishing], then run_id, expected seq, [owner], records.
      let n = 5
      const finish = finishing ? `, status = $${++n}, stop_reason = $${++n}, finished_at = $${++n}` : ""
      const run = ++n
      const expected = ++n
      const lease = fenced
        ? ` AND EXISTS (SELECT 1 FROM polyloop_claims WHERE run_id = $${run} AND owner = $${++n} FOR SHARE)`
        : ""
      const values: Array<string> = []
      for (let i = 0; i < rows; i++) values.push(`($${++n}::integer, $${++n}::text, $${++n}::integer, $${++n}::text)`)
      const text = `WITH upd AS (
  UPDATE polyloop_runs SET next_seq = $1, steps = steps + $2, effective_steps = effective_steps + $3, tokens = tokens + $4, elapsed = elapsed + $5${finish}
  WHERE run_id = $${run} AND next_seq = $${expected}${lease}
  RETURNING next_seq
), ins AS (
  INSERT INTO polyloop_records (run_id, seq, kind, step, payload)
  SELECT $${run}, v.seq, v.kind, v.step, v.payload FROM (VALUES ${values.join(", ")}) AS v (seq, kind, step, payload)
  WHERE EXISTS (SELECT 1 FROM upd)
  RETURNING 1
)
SELECT (SELECT count(*) FROM upd) AS updated, (SELECT count(*) FROM ins) AS inserted`
      pgAppendSql.set(key, text)
      return text
    }

    /**
     * PostgreSQL: one transaction — one `INSERT` per record, the run's row with `RunStarted`, the
     * summary `UPDATE`'s compare-and-set, and for a claim holder the lease row locked `FOR SHARE`
     * and checked.
     */
    const appendPg = (
      runId: RunId,
      records: Arr.NonEmptyReadonlyArray<RunLogStore.StoredRecord>,
      owner: string | undefined
    ): Effect.Effect<void, SqlError | SeqConflict | LeaseLost | StoreError> => {
      const first = records[0]
      const delta = summaryDelta(records)
      const end = first.seq + records.length
      const fenced = owner !== undefined
      const finished = delta.finished
      const update: Array<Param> = [end, delta.steps, delta.effectiveSteps, delta.tokens, delta.elapsed]
      if (finished !== undefined) {
        const json = stopReasonJson(runId, finished)
        if (typeof json !== "string") return json
        update.push("Finished", json, finished.finishedAt)
      }
      update.push(runId, first.seq)
      const updateSql = finished === undefined ? updateRun.plain : updateRun.finishing
      const agent = first.record._tag === "RunStarted" ? agentOf(first.record) : undefined
      const startedAt = first.record._tag === "RunStarted" ? first.record.startedAt : 0

      if (options.faultPoint === undefined && agent === undefined) {
        // One statement, one round trip: its parameters are the summary UPDATE's, the lease
        // owner when fenced, then each record's (seq, kind, step, payload).
        const params: Array<Param> = update
        if (fenced) params.push(owner)
        for (const stored of records) params.push(stored.seq, stored.kind, stepOf(stored.record), stored.json)
        return Effect.flatMap(
          query(pgAppendFor(records.length, finished !== undefined, fenced), params),
          (rows) => Number((rows[0] as { readonly updated?: unknown } | undefined)?.updated ?? 0) === 1 ? Effect.void : Effect.fail(new SeqConflict())
        )
      }

      // One chain of statements on the transaction's connection (built, not run, here).
      const writes = (conn: Connection): Effect.Effect<void, SqlError | SeqConflict | LeaseLost | StoreError> => {
        let chain: Effect.Effect<unknown, SqlError | StoreError> = Effect.void
        for (let i = 0; i < records.length; i++) {
          const stored = records[i]!
          if (options.faultPoint !== undefined) {
            chain = Effect.zipRight(chain, faultIn(conn, { stage: "BeforeRecord", runId, seq: stored.seq, index: i }))
          }
          chain = Effect.zipRight(chain, exec(conn, insertRecordSql, [runId, stored.seq, stored.kind, stepOf(stored.record), stored.json]))
        }
        if (agent !== undefined) chain = Effect.zipRight(chain, exec(conn, insertRunSql, [runId, agent, "Unfinished", startedAt]))
        const checked = Effect.flatMap(
          Effect.zipRight(chain, exec(conn, updateSql, update)),
          // No row: the sequence number is not the run's next one.
          (rows): Effect.Effect<void, SqlError | LeaseLost | SeqConflict> =>
            rows.length !== 1
              ? Effect.fail(new SeqConflict())
              : fenced
              ? Effect.flatMap(exec(conn, leaseOwnerSql, [runId]), (lease) => {
                const holder = (lease[0] as { readonly owner?: string } | undefined)?.owner
                return holder === owner ? Effect.void : Effect.fail(new LeaseLost({ holder: holder ?? "" }))
              })
              : Effect.void
        )
        return options.faultPoint === undefined
          ? checked
          : Effect.zipRight(checked, faultIn(conn, { stage: "BeforeCommit", runId, seq: end - 1, index: records.length }))
      }
      return inAppendTransaction(writes)
    }

    const append: RunLogStore.Backend["append"] = (runId, records) =>
      Effect.suspend(() => {
        const first = records[0]
        // Sequence 0 is the RunStarted record and nothing else.
        if ((first.seq === 0) !== (first.kind === "RunStarted")) return conflict(runId, first.seq)
        const owner = held.get(runId)
        return (sqlite ? appendSqlite(runId, records, owner) : appendPg(runId, records, owner)).pipe(
          Effect.catchTags({
            SeqConflict: () => fencedConflict(runId, first.seq),
            LeaseLost: (lost) => fencedConflict(runId, first.seq, lost.holder),
            // A duplicate sequence number (the primary key) or, on SQLite, the append trigger's
            // refusal (a gap, a lost lease): `fencedConflict` tells which it was.
            SqlError: (error) =>
              isUniqueViolation(error) || isAppendRefused(error)
                ? fencedConflict(runId, first.seq)
                : Effect.fail(failWith("appending to the log", runId)(error))
          })
        )
      }).pipe(withSpanIfTraced("SqlRunLogStore.append", () => ({ runId, records: records.length })))

    const listRuns: RunLogStore.Backend["listRuns"] = (query) =>
      Effect.gen(function*() {
        const where = query.status === undefined ? sql`` : sql`WHERE status = ${query.status}`
        const limit = query.limit === undefined ? sql`` : sql`LIMIT ${Math.max(0, Math.floor(query.limit))}`
        const [text, params] = sql`SELECT run_id, agent, status, stop_reason, steps, effective_steps, tokens, started_at, finished_at, elapsed FROM polyloop_runs ${where} ORDER BY started_at DESC, run_id ASC ${limit}`
          .compile()
        const rows = yield* connect((conn) => conn.execute(text, params, undefined)).pipe(Effect.mapError(failWith("listing runs")))
        const decoded = yield* decodeSummaryRows(rows).pipe(
          Effect.mapError((error) =>
            new StoreError({
              reason: "Decode",
              ...(path === undefined ? {} : { path }),
              message: `a run summary does not decode: ${ParseResult.TreeFormatter.formatErrorSync(error)}`
            })
          )
        )
        return decoded.map((row): RunLogStore.RunSummary => ({
          runId: row.run_id,
          agent: row.agent,
          status: row.status,
          stopReason: Option.fromNullable(row.stop_reason),
          steps: row.steps,
          effectiveSteps: row.effective_steps,
          tokens: row.tokens,
          startedAt: row.started_at,
          finishedAt: Option.fromNullable(row.finished_at),
          elapsed: row.elapsed
        }))
      }).pipe(Effect.withSpan("SqlRunLogStore.listRuns"))

    /**
     * Takes the run's lease for `owner` if it is free, expired, or (with `reclaimDeadLocalOwners`)
     * held by a dead process of this machine — one atomic upsert, no transaction — then reads
     * who holds it: `RunBusy` names a live holder.
     */
    const takeLease = (runId: RunId, owner: string) =>
      Effect.gen(function*() {
        const now = yield* Clock.currentTimeMillis
        let dead: string | null = null
        if (reclaimDeadLocalOwners) {
          const previous = yield* leaseHolder(runId)
          if (previous !== "" && isDeadLocalOwner(previous)) dead = previous
        }
        yield* query(upsertClaimSql, [runId, owner, now + leaseMillis, now, dead])
        return yield* leaseHolder(runId)
      }).pipe(
        Effect.mapError(failWith("claiming the run", runId)),
        Effect.flatMap((holder) => holder === owner ? Effect.void : Effect.fail(new RunBusy({ runId, ...(holder === "" ? {} : { owner: holder }) })))
      )

    const renewLease = (runId: RunId, owner: string) =>
      Effect.gen(function*() {
        const now = yield* Clock.currentTimeMillis
        yield* query(renewClaimSql, [now + leaseMillis, runId, owner])
        const holder = yield* leaseHolder(runId)
        if (holder !== owner) {
          yield* Effect.logWarning(
            `run ${runId}: the claim's lease was lost (now held by ${holder === "" ? "nobody" : holder}); another writer may take over`
          )
        }
      }).pipe(
        Effect.catchTag("SqlError", (error) =>
          Effect.logWarning(`run ${runId}: renewing the claim failed; retrying`, failWith("renewing the claim", runId)(error)))
      )

    const releaseLease = (runId: RunId, owner: string) =>
      query(releaseClaimSql, [runId, owner]).pipe(
        Effect.asVoid,
        Effect.catchTag("SqlError", (error) =>
          Effect.logWarning(
            `run ${runId}: releasing the claim failed; it expires by itself`,
            failWith("releasing the claim", runId)(error)
          ))
      )

    const claim: RunLogStore.Backend["claim"] = (runId) =>
      Effect.gen(function*() {
        const random = yield* Random.nextIntBetween(0, 0x7fffffff)
        const owner = `${os.hostname()}:${process.pid}:${++claimCounter}:${random.toString(36)}`
        yield* Effect.acquireRelease(
          Effect.tap(takeLease(runId, owner), () => Effect.sync(() => held.set(runId, owner))),
          () =>
            Effect.zipRight(
              Effect.sync(() => {
                if (held.get(runId) === owner) held.delete(runId)
              }),
              releaseLease(runId, owner)
            )
        )
        yield* Effect.sleep(heartbeat).pipe(
          Effect.zipRight(renewLease(runId, owner)),
          Effect.forever,
          Effect.forkScoped
        )
      }).pipe(Effect.withSpan("SqlRunLogStore.claim", { attributes: { runId } }))

    return { read, append, listRuns, claim } satisfies RunLogStore.Backend
  })

/** The loop-facing store over the SQL backend (`RunLogStore.make(backend)`); the schema must exist. */
export const make = (options: Options = {}): Effect.Effect<RunLogStore.RunLogStore.Service, never, SqlClient.SqlClient> =>
  Effect.map(backend(options), RunLogStore.make)

/** The store over the `SqlClient` in context: migrates the schema, then builds the store. */
export const layer = (options: Options = {}): Layer.Layer<RunLogStore.RunLogStore, StoreError, SqlClient.SqlClient> =>
  Layer.effect(
    RunLogStore.RunLogStore,
    Effect.zipRight(migrate(options.path === undefined ? {} : { path: options.path }), make(options))
  )

const busyTimeoutMillis = (options: { readonly busyTimeout?: Duration.DurationInput }): number =>
  Math.max(0, Math.floor(Duration.toMillis(Duration.decode(options.busyTimeout ?? Duration.seconds(5)))))

/**
 * A SQLite client on `filename` set up for the store: the file is opened and checked first (a
 * file that is not a database, a read-only directory or a missing directory fail with a typed
 * `StoreError` naming the path), then WAL, `synchronous` and the busy timeout are set.
 */
export const layerSqliteClient = (
  options: Pick<SqliteOptions, "filename" | "synchronous" | "busyTimeout">
): Layer.Layer<SqliteClient.SqliteClient | SqlClient.SqlClient, StoreError> =>
  Layer.scopedContext(
    Effect.gen(function*() {
      const timeout = busyTimeoutMillis(options)
      yield* probe(options.filename, timeout)
      const client = yield* SqliteClient.make({ filename: options.filename })
      const synchronous = options.synchronous ?? "FULL"
      yield* client.unsafe(`PRAGMA busy_timeout = ${timeout}`).pipe(
        Effect.zipRight(client.unsafe(`PRAGMA synchronous = ${synchronous === "NORMAL" ? "NORMAL" : "FULL"}`)),
        Effect.mapError((error) => storeError(error, { operation: "configuring the SQLite store", path: options.filename }))
      )
      return Context.make(SqliteClient.SqliteClient, client).pipe(Context.add(SqlClient.SqlClient, client))
    })
  ).pipe(Layer.provide(Reactivity.layer))

/**
 * The embedded default store: a SQLite file in WAL mode with `synchronous=FULL` (see
 * `SqliteOptions` for `NORMAL` and its cost), a busy timeout, and migrations applied.
 */
export const layerSqlite = (options: SqliteOptions): Layer.Layer<RunLogStore.RunLogStore, StoreError> => {
  const store: Options = { reclaimDeadLocalOwners: true, ...options, path: options.filename }
  // The client is the store's alone (not in the layer's output), so the store may hold its
  // connection for the layer's life (`backendOwningClient`).
  return Layer.scoped(
    RunLogStore.RunLogStore,
    Effect.zipRight(migrate({ path: options.filename }), Effect.map(backendOwningClient(store), RunLogStore.make))
  ).pipe(Layer.provide(layerSqliteClient(options)))
}

/** Connection options of the PostgreSQL client (`@effect/sql-pg`), without the name transforms the store's queries do not expect. */
export type PgClientOptions = Omit<PgClient.PgClientConfig, "transformResultNames" | "transformQueryNames" | "transformJson">

/**
 * Options of the PostgreSQL store: the connection (`url`, or `host`, `port`, `database`,
 * `username`, `password`; `maxConnections`, timeouts, `ssl`, …) and the store's lease options.
 */
export interface PgOptions extends Omit<Options, "path">, PgClientOptions {}

/** Where a PostgreSQL store lives, for messages: its URL without password or query. */
const describePg = (options: PgClientOptions): string => {
  if (options.url !== undefined) {
    try {
      const url = new URL(Redacted.value(options.url))
      url.password = ""
      url.search = ""
      return url.toString()
    } catch {
      return "postgres://(a URL that does not parse)"
    }
  }
  const user = options.username === undefined ? "" : `${options.username}@`
  return `postgres://${user}${options.host ?? "localhost"}:${options.port ?? 5432}/${options.database ?? ""}`
}

/** How long a PostgreSQL connection may take to get, unless `connectTimeout` says otherwise. */
export const defaultPgConnectTimeout: Duration.Duration = Duration.seconds(10)

/**
 * A PostgreSQL client for the store (`PgClient | SqlClient`); a server that cannot be reached
 * fails with `StoreError { reason: "Unavailable" }` naming it. Share it with `Worker` by
 * providing it to both: `SqlRunLogStore.layer(options).pipe(Layer.provideMerge(layerPgClient(…)))`.
 *
 * `connectTimeout` defaults to 10 seconds (`@effect/sql-pg` waits without end): it bounds the
 * first connection, each new pooled one, and the wait for a free connection when all are in
 * use. The store's waits for a connection are shielded from interruption (below), so this
 * bound is also how long an interrupted operation can wait before it stops; an operation that
 * reaches it fails with a `StoreError`.
 *
 * Sharing it with your own code: in `@effect/sql-pg` 0.53 a fiber interrupted while
 * `sql.reserve` or `sql.withTransaction` waits for a pooled connection loses that connection for
 * good. The store's own reservations are shielded (`internal/reserve.ts`); shield yours the same
 * way (`Effect.uninterruptible(sql.reserve)` inside the scope that uses it).
 */
export const layerPgClient = (options: PgClientOptions): Layer.Layer<PgClient.PgClient | SqlClient.SqlClient, StoreError> =>
  // Loaded on demand, so that SQLite users never load the PostgreSQL driver.
  Layer.unwrapEffect(
    Effect.map(Effect.promise(() => import("@effect/sql-pg/PgClient")), (Pg) =>
      Pg.layer({ applicationName: "polyloop", ...options, connectTimeout: options.connectTimeout ?? defaultPgConnectTimeout }).pipe(
        Layer.mapError((error) => storeError(error, { operation: "connecting to PostgreSQL", path: describePg(options) }, "Unavailable"))
      ))
  )

/**
 * The scale-out store: PostgreSQL shared by many workers on many machines, migrations applied.
 * Claims are leases (`leaseDuration`, renewed every `heartbeatInterval`): a worker that dies
 * stops renewing and another worker can take the run over after the lease expires; a worker
 * whose lease was taken over is fenced off at its next write (`ConcurrentWriter`).
 */
export const layerPg = (options: PgOptions): Layer.Layer<RunLogStore.RunLogStore, StoreError> => {
  const { leaseDuration, heartbeatInterval, faultPoint, reclaimDeadLocalOwners, ...client } = options
  const store: Options = {
    path: describePg(client),
    ...(leaseDuration === undefined ? {} : { leaseDuration }),
    ...(heartbeatInterval === undefined ? {} : { heartbeatInterval }),
    ...(faultPoint === undefined ? {} : { faultPoint }),
    ...(reclaimDeadLocalOwners === undefined ? {} : { reclaimDeadLocalOwners })
  }
  return layer(store).pipe(Layer.provide(layerPgClient(client)))
}

/**
 * `layerPg` from `Config`, by default `{ url: Config.redacted("POLYLOOP_PG_URL") }`, e.g.
 * `layerPgConfig({ url: Config.redacted("DATABASE_URL"), maxConnections: Config.integer("PG_POOL") })`.
 */
export const layerPgConfig = (
  config: Config.Config.Wrap<Omit<PgOptions, "faultPoint">> = { url: Config.redacted("POLYLOOP_PG_URL") }
): Layer.Layer<RunLogStore.RunLogStore, StoreError | ConfigError.ConfigError> =>
  Layer.unwrapEffect(Effect.map(Config.unwrap(config), layerPg))
