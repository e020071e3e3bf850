/**
 * How the store runs its statements, in both dialects. Every statement is compiled once for the
 * dialect (placeholders `?` or `$n`) and run with `Connection.execute` on a connection a
 * `Connect` gives (prepared once, cached by the driver), never through `sql` templates: a durable
 * step is two commits, and a template costs more CPU per statement than SQLite's own work.
 * Parameters are passed in the order they appear in each statement.
 *
 * @internal
 */
import * as SqlClient from "@effect/sql/SqlClient"
import type { Connection } from "@effect/sql/SqlConnection"
import type { SqlError } from "@effect/sql/SqlError"
import type { StoreError } from "@polyloop/core/Errors"
import * as Effect from "effect/Effect"
import type { FaultContext, FaultPoint } from "./options.js"
import { storeError } from "./errors.js"
import { reserve } from "./reserve.js"
import { connectionTransaction } from "./transaction.js"

/** A statement parameter. */
export type Param = string | number | null

/**
 * How the backend gets a connection for one operation: every statement of the store runs on a
 * connection it is given here.
 */
export type Connect = <A, E>(use: (conn: Connection) => Effect.Effect<A, E>) => Effect.Effect<A, E | SqlError>

/**
 * A connection reserved from the client for each operation (`SqlClient.reserve`, its wait shielded
 * from interruption where the driver would lose the connection: `reserve.ts`): the client may be
 * shared (the application, a cluster runner), and the reservation keeps other fibers' statements out
 * of an open transaction.
 */
export const reservePerOperation = (sql: SqlClient.SqlClient): Connect => (use) => Effect.scoped(Effect.flatMap(reserve(sql), use))

/** The store's statement runner over one client, handed to the lease and dialect modules. */
export interface Statements {
  readonly sql: SqlClient.SqlClient
  /** Where the store lives, for `StoreError`s. */
  readonly path: string | undefined
  readonly connect: Connect
  /** The text of a `sql` template compiled for the dialect (its parameters are passed at each run). */
  readonly compiled: (statement: { readonly compile: () => readonly [string, ReadonlyArray<unknown>] }) => string
  /** Runs a compiled statement on `conn`. */
  readonly exec: (conn: Connection, statement: string, params: ReadonlyArray<Param>) => Effect.Effect<ReadonlyArray<unknown>, SqlError>
  /** Runs a compiled statement on a connection of its own (`connect`). */
  readonly query: (statement: string, params: ReadonlyArray<Param>) => Effect.Effect<ReadonlyArray<unknown>, SqlError>
  /** A driver failure of `operation` as a `StoreError` with the path (and the run). */
  readonly failWith: (operation: string, runId?: string) => (error: SqlError) => StoreError
  /** Runs `use` in one write transaction on a connection of its own (`transaction.ts`). */
  readonly transaction: <A, E>(use: (conn: Connection) => Effect.Effect<A, E>) => Effect.Effect<A, E | SqlError>
  /**
   * Calls the fault hook (tests), if any, inside the transaction on `conn`: the hook is outside
   * code, so statements it runs through `sql` use this transaction.
   */
  readonly faultIn: (conn: Connection, context: FaultContext) => Effect.Effect<void, StoreError>
}

/** The statement runner of a store on `sql`, its operations' connections from `connect`. */
export const make = (
  sql: SqlClient.SqlClient,
  options: { readonly path?: string | undefined; readonly faultPoint?: FaultPoint | undefined },
  connect: Connect
): Statements => {
  const path = options.path
  const fault = options.faultPoint
  const exec = (conn: Connection, statement: string, params: ReadonlyArray<Param>) => conn.execute(statement, params, undefined)
  return {
    sql,
    path,
    connect,
    compiled: (statement) => statement.compile()[0],
    exec,
    query: (statement, params) => connect((conn) => exec(conn, statement, params)),
    failWith: (operation, runId) => (error) => storeError(error, { operation, path, runId }),
    transaction: connectionTransaction(sql, connect),
    faultIn: (conn, context) =>
      fault === undefined
        ? Effect.void
        : Effect.provideService(fault(context), SqlClient.TransactionConnection, [conn, 0] as const)
  }
}

const builtInTracer = Effect.runSync(Effect.tracer)

/**
 * A span on a hot path (an append runs twice per step; a read and a claim once per run) only when
 * a tracer other than the built-in one is installed: a span, with the stack trace Effect takes
 * for it by default, costs more CPU than the operation's own statements (design 0350).
 */
export const withSpanIfTraced = (name: string, attributes: () => Record<string, unknown>) =>
<A, E, R>(effect: Effect.Effect<A, E, R>): Effect.Effect<A, E, R> =>
  Effect.tracerWith((tracer) =>
    tracer === builtInTracer ? effect : Effect.withSpan(effect, name, { attributes: attributes(), captureStackTrace: false })
  )
