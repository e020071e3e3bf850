/**
 * Serialises `@effect/sql` `Migrator` runs on PostgreSQL across processes. The migrator itself
 * is not safe when several processes start at once on an empty database: each probes for its
 * bookkeeping table (`select 'table'::regclass`) and creates it when missing, so two of them
 * race on `CREATE TABLE`, and the loser fails with one of several errors depending on where the
 * race is lost (42P07 "relation already exists", 42710 "type already exists", 23505 on a catalog
 * index). Instead of retrying whichever of those it happens to be, the whole migration runs in
 * one transaction that first takes a transaction-scoped advisory lock
 * (`pg_advisory_xact_lock`) keyed by the bookkeeping table in the current schema: concurrent
 * migrators of the same table wait for each other, and the lock goes away with the
 * transaction (commit, rollback or a dropped connection), never left behind.
 *
 * Inside that transaction a failing statement aborts the transaction, so the migrator's
 * "probe, and create on failure" must not fail: the bookkeeping table is created first with
 * `CREATE TABLE IF NOT EXISTS` (race-free under the lock), with exactly the definition
 * `Migrator` uses on PostgreSQL. Every statement inside (the migrator's own nested transaction
 * becomes a savepoint) runs on the one connection this transaction holds, so it also works with
 * a pool of one connection. Other dialects run the migration as it is.
 *
 * @internal
 */
import * as SqlClient from "@effect/sql/SqlClient"
import type { SqlError } from "@effect/sql/SqlError"
import * as Effect from "effect/Effect"
import { transaction } from "./transaction.js"

/** First half of the advisory lock key: polyloop's schema migrations (an arbitrary constant). */
const lockClass = 0x706c6f6f // "ploo"

/**
 * Runs `migrate` (a `Migrator` run whose bookkeeping table is `table`) so that on PostgreSQL at
 * most one process migrates that table in the current schema at a time.
 */
export const serialized = (table: string) =>
<A, E, R>(migrate: Effect.Effect<A, E, R>): Effect.Effect<A, E | SqlError, R | SqlClient.SqlClient> =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    sql.onDialectOrElse({
      pg: () =>
        transaction(sql)(
          sql`SELECT pg_advisory_xact_lock(${lockClass}, hashtext(coalesce(current_schema()::text, '') || '.' || ${table}::text))`.pipe(
            Effect.zipRight(sql`CREATE TABLE IF NOT EXISTS ${sql(table)} (
  migration_id integer primary key,
  created_at timestamp with time zone not null default now(),
  name text not null
)`),
            Effect.zipRight(migrate)
          )
        ),
      orElse: () => migrate
    }))
