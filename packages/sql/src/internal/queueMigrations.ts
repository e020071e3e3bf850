/**
 * Schema of the worker queue (`polyloop_queue`), one migration list per dialect, run by
 * `@effect/sql`'s `Migrator` with its own bookkeeping table so it never collides with the run
 * log store's migrations.
 *
 * @internal
 */
import * as Migrator from "@effect/sql/Migrator"
import * as SqlClient from "@effect/sql/SqlClient"
import * as Effect from "effect/Effect"

/** The table `Migrator` records the queue's migrations in. @internal */
export const migrationsTable = "polyloop_queue_migrations"

const createPg = Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  yield* sql`CREATE TABLE IF NOT EXISTS polyloop_queue (
    run_id text PRIMARY KEY,
    payload text NOT NULL,
    status text NOT NULL CHECK (status IN ('Pending', 'Running', 'Done', 'Failed')),
    enqueued_at bigint NOT NULL,
    available_at bigint NOT NULL,
    attempts integer NOT NULL DEFAULT 0,
    failures integer NOT NULL DEFAULT 0,
    worker text,
    token text,
    heartbeat_at bigint,
    finished_at bigint,
    outcome text,
    error text
  )`
  yield* sql`CREATE INDEX IF NOT EXISTS polyloop_queue_pending ON polyloop_queue (available_at, enqueued_at, run_id) WHERE status = 'Pending'`
  yield* sql`CREATE INDEX IF NOT EXISTS polyloop_queue_running ON polyloop_queue (heartbeat_at) WHERE status = 'Running'`
})

const createSqlite = Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  yield* sql`CREATE TABLE IF NOT EXISTS polyloop_queue (
    run_id TEXT PRIMARY KEY NOT NULL,
    payload TEXT NOT NULL,
    status TEXT NOT NULL CHECK (status IN ('Pending', 'Running', 'Done', 'Failed')),
    enqueued_at INTEGER NOT NULL,
    available_at INTEGER NOT NULL,
    attempts INTEGER NOT NULL DEFAULT 0,
    failures INTEGER NOT NULL DEFAULT 0,
    worker TEXT,
    token TEXT,
    heartbeat_at INTEGER,
    finished_at INTEGER,
    outcome TEXT,
    error TEXT
  ) STRICT`
  yield* sql`CREATE INDEX IF NOT EXISTS polyloop_queue_pending ON polyloop_queue (available_at, enqueued_at, run_id) WHERE status = 'Pending'`
  yield* sql`CREATE INDEX IF NOT EXISTS polyloop_queue_running ON polyloop_queue (heartbeat_at) WHERE status = 'Running'`
})

const statuses = "('Pending', 'Running', 'Done', 'Failed', 'Suspended')"

/** Migration 2 (design 0160): the `Suspended` status of a run waiting for a person's decision. */
const suspendedPg = Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  yield* sql`ALTER TABLE polyloop_queue DROP CONSTRAINT IF EXISTS polyloop_queue_status_check`
  yield* sql.unsafe(`ALTER TABLE polyloop_queue ADD CONSTRAINT polyloop_queue_status_check CHECK (status IN ${statuses})`)
  yield* sql`CREATE INDEX IF NOT EXISTS polyloop_queue_suspended ON polyloop_queue (enqueued_at, run_id) WHERE status = 'Suspended'`
})

/** SQLite cannot change a check constraint: the table is rebuilt with its rows (in the migration's transaction). */
const suspendedSqlite = Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  yield* sql.unsafe(`CREATE TABLE polyloop_queue_v2 (
    run_id TEXT PRIMARY KEY NOT NULL,
    payload TEXT NOT NULL,
    status TEXT NOT NULL CHECK (status IN ${statuses}),
    enqueued_at INTEGER NOT NULL,
    available_at INTEGER NOT NULL,
    attempts INTEGER NOT NULL DEFAULT 0,
    failures INTEGER NOT NULL DEFAULT 0,
    worker TEXT,
    token TEXT,
    heartbeat_at INTEGER,
    finished_at INTEGER,
    outcome TEXT,
    error TEXT
  ) STRICT`)
  yield* sql`INSERT INTO polyloop_queue_v2 (run_id, payload, status, enqueued_at, available_at, attempts, failures, worker, token, heartbeat_at, finished_at, outcome, error)
    SELECT run_id, payload, status, enqueued_at, available_at, attempts, failures, worker, token, heartbeat_at, finished_at, outcome, error FROM polyloop_queue`
  yield* sql`DROP TABLE polyloop_queue`
  yield* sql`ALTER TABLE polyloop_queue_v2 RENAME TO polyloop_queue`
  yield* sql`CREATE INDEX IF NOT EXISTS polyloop_queue_pending ON polyloop_queue (available_at, enqueued_at, run_id) WHERE status = 'Pending'`
  yield* sql`CREATE INDEX IF NOT EXISTS polyloop_queue_running ON polyloop_queue (heartbeat_at) WHERE status = 'Running'`
  yield* sql`CREATE INDEX IF NOT EXISTS polyloop_queue_suspended ON polyloop_queue (enqueued_at, run_id) WHERE status = 'Suspended'`
})

/** The migrations for the client's dialect (PostgreSQL or SQLite). @internal */
export const loader: Migrator.Loader<SqlClient.SqlClient> = Effect.flatMap(SqlClient.SqlClient, (sql) =>
  sql.onDialectOrElse({
    pg: () => Migrator.fromRecord({ "1_create_queue": createPg, "2_suspended": suspendedPg }),
    sqlite: () => Migrator.fromRecord({ "1_create_queue": createSqlite, "2_suspended": suspendedSqlite }),
    orElse: () =>
      Effect.fail(
        new Migrator.MigrationError({ reason: "failed", message: "polyloop's worker queue supports PostgreSQL and SQLite only" })
      )
  })
)

/** Runs the queue's migrations. @internal */
export const run = Migrator.make({})({ loader, table: migrationsTable })
