/**
 * Helpers for the SQL store tests: open a store or a raw client on a file, inside a scope.
 */
import * as SqlClient from "@effect/sql/SqlClient"
import type { StoreError } from "@polyloop/core/Errors"
import * as RunLogStore from "@polyloop/core/RunLogStore"
import * as SqlRunLogStore from "@polyloop/sql/SqlRunLogStore"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import type * as Scope from "effect/Scope"

/** Opens the SQLite store on `filename` for the life of the scope. */
export const openStore = (
  filename: string,
  options: Omit<SqlRunLogStore.SqliteOptions, "filename"> = {}
): Effect.Effect<RunLogStore.RunLogStore.Service, StoreError, Scope.Scope> =>
  Layer.build(SqlRunLogStore.layerSqlite({ filename, synchronous: "NORMAL", ...options })).pipe(
    Effect.map((context) => Context.get(context, RunLogStore.RunLogStore))
  )

/** Opens a raw SQL client on `filename` (set up as the store's) for the life of the scope. */
export const openClient = (
  filename: string,
  options: Omit<SqlRunLogStore.SqliteOptions, "filename"> = {}
): Effect.Effect<SqlClient.SqlClient, StoreError, Scope.Scope> =>
  Layer.build(SqlRunLogStore.layerSqliteClient({ filename, synchronous: "NORMAL", ...options })).pipe(
    Effect.map((context) => Context.get(context, SqlClient.SqlClient))
  )
