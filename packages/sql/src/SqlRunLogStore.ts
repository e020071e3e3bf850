/**
 * The durable run log store on `@effect/sql` (SPEC §7): one `RunLogStore.Backend` per SQL
 * dialect, plugged into `RunLogStore.make`, with SQLite (`layerSqlite`, the embedded default) as
 * the first dialect and PostgreSQL (`layerPg`, many workers on many machines sharing one
 * database) as the second. This module is the public API: the layers, the options, `migrate`.
 *
 * Where things are (all under `internal/`):
 * - `sqlite.ts` — how an append reaches SQLite: one `INSERT` into an append view whose trigger
 *   checks and writes, on the connection the store holds for its life;
 * - `pg.ts` — how an append reaches PostgreSQL: one statement with data-modifying `WITH` clauses;
 * - `backend.ts` — what both share: reads, `listRuns`, sequence and lease conflicts, the storage;
 * - `lease.ts` — claims as leases, the heartbeat, dead-owner detection;
 * - `groupCommit.ts` — many runs' appends committed in one SQLite statement;
 * - `summary.ts` — the run's summary row; `statements.ts` — how statements are compiled and run;
 * - `pgClient.ts` — the PostgreSQL client's settings; `sqliteFile.ts` — opening the SQLite file;
 * - `migrations/`, `migrationLock.ts` — the schema; `errors.ts` — driver failures as `StoreError`s.
 * The decisions behind them are recorded in `docs/design/` (0001–0006).
 *
 * Appends are atomic: `completeStep`'s two records are written together or not at all. Driver
 * failures become `StoreError`s with the path and a reason (`Unavailable` for a locked or
 * unreachable database, `ReadOnly`, `DiskFull`, `Corrupt`, …), including a failing `COMMIT` and
 * SQLite's own rollback on a full disk (which `SqlClient.withTransaction` would turn into a
 * defect). Schema migrations run in `Migrator`'s transaction, which reports a storage failure as
 * a defect; `migrate` turns exactly those defects back into `StoreError`s. A database whose
 * schema is newer than this code is refused with `StoreError { reason: "SchemaVersion" }`; on
 * PostgreSQL the migration runs in one transaction under an advisory lock, so workers starting
 * together on an empty database migrate one after another.
 *
 * @since 0.1.0
 */
import * as Reactivity from "@effect/experimental/Reactivity"
import * as Migrator from "@effect/sql/Migrator"
import * as SqlClient from "@effect/sql/SqlClient"
import type { SqlError } from "@effect/sql/SqlError"
import * as SqliteClient from "@effect/sql-sqlite-node/SqliteClient"
import type * as PgClient from "@effect/sql-pg/PgClient"
import { StoreError } from "@polyloop/core/Errors"
import * as RunLogStore from "@polyloop/core/RunLogStore"
import * as Config from "effect/Config"
import type * as ConfigError from "effect/ConfigError"
import * as Context from "effect/Context"
import * as Data from "effect/Data"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Schedule from "effect/Schedule"
import * as Scope from "effect/Scope"
import { driverCause, migrationStorageFailure, storeError } from "./internal/errors.js"
import * as Lease from "./internal/lease.js"
import { serialized } from "./internal/migrationLock.js"
import * as PgMigrations from "./internal/migrations/pg.js"
import * as SqliteMigrations from "./internal/migrations/sqlite.js"
import * as Pg from "./internal/pg.js"
import * as PgSettings from "./internal/pgClient.js"
import * as Sqlite from "./internal/sqlite.js"
import { probe } from "./internal/sqliteFile.js"
import { reservePerOperation } from "./internal/statements.js"

export type { FaultContext, FaultPoint, FaultStage, Options, PgClientOptions } from "./internal/options.js"
import type { Options, PgClientOptions } from "./internal/options.js"

/** Is a lease owner a process of this machine that no longer runs? (Owners are named `<host>:<pid>:<n>:<random>`.) */
export const isDeadLocalOwner: (owner: string) => boolean = Lease.isDeadLocalOwner

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
    // The common case, an existing store of this version: one read, no migrator (its table
    // probe, transaction and bookkeeping cost more than opening the file). A store without the
    // bookkeeping table (a new file) fails the read and takes the migrator's path below. The
    // read's text differs from the one below on purpose: @effect/sql-sqlite-node caches a
    // statement that failed to prepare, failure included, by its text.
    const recorded = yield* Effect.option(sql<{ readonly schema_version: unknown }>`SELECT max(migration_id) AS schema_version FROM ${sql(migrationsTable)}`)
    if (Option.isSome(recorded) && Number(recorded.value[0]?.schema_version ?? 0) === latest) return []
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

/** The backend of `sql`'s dialect (PostgreSQL's for any dialect but SQLite), reserving a connection per operation. */
const dialectBackend = (sql: SqlClient.SqlClient, options: Options): Effect.Effect<RunLogStore.Backend> =>
  (Sqlite.isSqlite(sql) ? Sqlite.backend : Pg.backend)(sql, options, reservePerOperation(sql))

/**
 * The SQL backend of `RunLogStore` over the `SqlClient` in context (any dialect whose schema
 * `migrate` has created), which may be shared with other code: each operation reserves a
 * connection. Most users want `layerSqlite` or `layer`.
 */
export const backend = (options: Options = {}): Effect.Effect<RunLogStore.Backend, never, SqlClient.SqlClient> =>
  Effect.flatMap(SqlClient.SqlClient, (sql) => dialectBackend(sql, options))

/**
 * The backend on a client that nothing else uses (the SQLite client `layerSqlite` opens for the
 * store alone): on SQLite the store holds the client's one connection for the scope's life
 * (`internal/sqlite.ts`, `backendOwningClient`).
 */
const backendOwningClient = (options: Options): Effect.Effect<RunLogStore.Backend, StoreError, SqlClient.SqlClient | Scope.Scope> =>
  Effect.flatMap(SqlClient.SqlClient, (sql) => Sqlite.isSqlite(sql) ? Sqlite.backendOwningClient(sql, options) : dialectBackend(sql, options))

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
      // The probe's connection closes once the client's is open (see `probe`).
      const probed = yield* Scope.make()
      const client = yield* Scope.extend(probe(options.filename, timeout), probed).pipe(
        Effect.zipRight(SqliteClient.make({ filename: options.filename })),
        Effect.ensuring(Scope.close(probed, Exit.void))
      )
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

/**
 * A `connectRetry` for long-lived processes (a runner started with its database, design 0364):
 * exponential from 500 ms, each wait at most 10 s, for at most 5 minutes.
 */
export const connectRetry: Schedule.Schedule<unknown, StoreError> = PgSettings.defaultConnectRetry

/**
 * Options of the PostgreSQL store: the connection (`url`, or `host`, `port`, `database`,
 * `username`, `password`; `maxConnections`, timeouts, `ssl`, …) and the store's lease options.
 */
export interface PgOptions extends Omit<Options, "path">, PgClientOptions {}

/** How long a PostgreSQL connection may take to get, unless `connectTimeout` says otherwise. */
export const defaultPgConnectTimeout: Duration.Duration = PgSettings.defaultConnectTimeout

/**
 * A PostgreSQL client for the store (`PgClient | SqlClient`); a server that cannot be reached
 * fails with `StoreError { reason: "Unavailable" }` naming it. Share it with the application (and
 * `@polyloop/cluster`'s runner) by providing it to both:
 * `SqlRunLogStore.layer(options).pipe(Layer.provideMerge(layerPgClient(…)))`.
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
  PgSettings.layer(options)

/**
 * The scale-out store: PostgreSQL shared by many workers on many machines, migrations applied.
 * Claims are leases (`leaseDuration`, renewed every `heartbeatInterval`): a worker that dies
 * stops renewing and another worker can take the run over after the lease expires; a worker
 * whose lease was taken over is fenced off at its next write (`ConcurrentWriter`).
 */
export const layerPg = (options: PgOptions): Layer.Layer<RunLogStore.RunLogStore, StoreError> => {
  const { leaseDuration, heartbeatInterval, faultPoint, reclaimDeadLocalOwners, ...client } = options
  const store: Options = {
    path: PgSettings.describe(client),
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
  config: Config.Config.Wrap<Omit<PgOptions, "faultPoint" | "connectRetry">> = { url: Config.redacted("POLYLOOP_PG_URL") }
): Layer.Layer<RunLogStore.RunLogStore, StoreError | ConfigError.ConfigError> =>
  Layer.unwrapEffect(Effect.map(Config.unwrap(config), layerPg))
