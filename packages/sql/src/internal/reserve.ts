/**
 * Reserving a connection so that an interruption cannot lose it.
 *
 * `@effect/sql-pg` 0.53 (the last release on the Effect 3 line) reserves a connection with
 * `pool.connect` inside an `Effect.async` that has no canceler: a fiber interrupted while it
 * waits for the connection is gone when the pool hands the connection over, nothing registers
 * its release, and the connection is checked out for good. Each such interruption costs the
 * pool one connection; once all are lost, every operation waits forever (seen: two interrupted
 * appends on a pool of two, and the store stops answering). Interrupting a run mid-write is
 * ordinary (a timeout, a cancelled request, a shutdown), so the store must not lose anything
 * to it.
 *
 * `reserve` therefore waits for the connection uninterruptibly, except on SQLite: an
 * interruption that arrives meanwhile takes effect as soon as the connection is in hand, and
 * the reserving scope's finalizer — registered by then — gives it back at once. Only the wait
 * for a connection is shielded; the statements run on it stay interruptible (`@effect/sql-pg`
 * cancels an interrupted statement with `pg_cancel_backend`). SQLite's reserve (a semaphore
 * taken with `uninterruptibleMask`, released by the scope) is already safe and stays
 * interruptible while it waits; an unknown dialect gets the shielded wait.
 *
 * @internal
 */
import type * as SqlClient from "@effect/sql/SqlClient"
import type { Connection } from "@effect/sql/SqlConnection"
import type { SqlError } from "@effect/sql/SqlError"
import * as Effect from "effect/Effect"
import type * as Scope from "effect/Scope"

/** `sql.reserve`, whose wait for a connection an interruption cannot turn into a lost connection. */
export const reserve = (sql: SqlClient.SqlClient): Effect.Effect<Connection, SqlError, Scope.Scope> =>
  sql.onDialectOrElse({
    sqlite: () => sql.reserve,
    orElse: () => Effect.uninterruptible(sql.reserve)
  })
