/**
 * The store's write transactions. `SqlClient.withTransaction` of `@effect/sql` 0.52 turns a
 * failing `COMMIT` or `ROLLBACK` into a defect. SQLite rolls a transaction back by itself on
 * some errors (`SQLITE_FULL`, some `SQLITE_IOERR`s), after which `ROLLBACK` fails with "no
 * transaction is active" — a full disk would then crash the run instead of failing it with a
 * typed `StoreError`. This helper keeps both typed: a failing `COMMIT` is a `SqlError` (and the
 * transaction is rolled back), a `ROLLBACK` after SQLite's own rollback is a no-op. It runs on a
 * connection reserved from the client (`SqlClient.reserve`) and provides it as the
 * `TransactionConnection`, so statements (and nested `withTransaction`s) inside use it.
 *
 * On SQLite it begins with `BEGIN IMMEDIATE`: the write lock is taken at once (waiting up to the
 * busy timeout), never upgraded from a read snapshot that another writer has since made stale.
 *
 * @internal
 */
import * as SqlClient from "@effect/sql/SqlClient"
import type { Connection } from "@effect/sql/SqlConnection"
import type { SqlError } from "@effect/sql/SqlError"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import { driverCause } from "./errors.js"
import { reserve } from "./reserve.js"

const noActiveTransaction = (error: SqlError): boolean => {
  const cause = driverCause(error)
  const message = cause instanceof Error ? cause.message : ""
  const code = typeof cause === "object" && cause !== null && "code" in cause ? (cause as { code: unknown }).code : undefined
  return /no transaction is active/i.test(message) || code === "25P01"
}

const rollback = (conn: Connection): Effect.Effect<void> =>
  conn.executeUnprepared("ROLLBACK", [], undefined).pipe(
    Effect.asVoid,
    // A ROLLBACK that fails while a transaction is still open leaves the connection in an
    // unknown state: that is a defect, not a store failure the caller could handle.
    Effect.catchAll((error) => noActiveTransaction(error) ? Effect.void : Effect.die(error))
  )

/** Runs `effect` in one transaction on a reserved connection; commits on success, rolls back otherwise. */
export const transaction = (sql: SqlClient.SqlClient) => <A, E, R>(effect: Effect.Effect<A, E, R>): Effect.Effect<A, E | SqlError, R> => {
  const begin = sql.onDialectOrElse({ sqlite: () => "BEGIN IMMEDIATE", orElse: () => "BEGIN" })
  return Effect.scoped(
    Effect.flatMap(reserve(sql), (conn) =>
      Effect.acquireUseRelease(
        conn.executeUnprepared(begin, [], undefined),
        () =>
          effect.pipe(
            Effect.provideService(SqlClient.TransactionConnection, [conn, 0] as const),
            Effect.zipLeft(conn.executeUnprepared("COMMIT", [], undefined))
          ),
        (_, exit) => Exit.isSuccess(exit) ? Effect.void : rollback(conn)
      ))
  )
}

/**
 * Runs `use` in one transaction on the connection `connect` gives it (a connection reserved for
 * the operation): its statements go straight to the connection (`conn.execute`, prepared once
 * and cached by the driver), without `@effect/sql`'s per-statement compile, span and connection
 * acquisition, and no `TransactionConnection` is provided (a `sql` statement inside would wait
 * for the connection this transaction holds). Commits on success, rolls back otherwise, like
 * `transaction`. On SQLite `BEGIN IMMEDIATE` and `COMMIT` are prepared statements too.
 */
export const connectionTransaction = (
  sql: SqlClient.SqlClient,
  connect: <A, E>(use: (conn: Connection) => Effect.Effect<A, E>) => Effect.Effect<A, E | SqlError>
) => {
  const sqlite = sql.onDialectOrElse({ sqlite: () => true, orElse: () => false })
  const begin = sqlite ? "BEGIN IMMEDIATE" : "BEGIN"
  const run = (conn: Connection, statement: string) =>
    sqlite ? conn.execute(statement, [], undefined) : conn.executeUnprepared(statement, [], undefined)
  return <A, E>(use: (conn: Connection) => Effect.Effect<A, E>): Effect.Effect<A, E | SqlError> =>
    connect((conn) =>
      Effect.acquireUseRelease(
        run(conn, begin),
        () => Effect.zipLeft(use(conn), run(conn, "COMMIT")),
        (_, exit) => Exit.isSuccess(exit) ? Effect.void : rollback(conn)
      )
    )
}
