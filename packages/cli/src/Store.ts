/**
 * Opening the run log store the command works on: a SQLite file (`--db`, default
 * `./polyloop.db`) or a PostgreSQL database (`--pg <url>`), through `@polyloop/sql`.
 *
 * The commands that only read (`runs`, `show`, `export`) never create anything: a missing file
 * is an error, and so is a SQLite file that holds no polyloop store (it is not migrated). The
 * demo creates the file and its schema when needed.
 *
 * @since 0.1.0
 */
import * as FileSystem from "@effect/platform/FileSystem"
import * as SqlClient from "@effect/sql/SqlClient"
import type { StoreError } from "@polyloop/core/Errors"
import * as RunLogStore from "@polyloop/core/RunLogStore"
import * as SqlRunLogStore from "@polyloop/sql/SqlRunLogStore"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import type * as Redacted from "effect/Redacted"
import { CliError } from "./CliError.js"

/** Where the store is. */
export interface Location {
  /** The SQLite file (used when `pg` is none). */
  readonly db: string
  /** A PostgreSQL connection URL. */
  readonly pg: Option.Option<Redacted.Redacted>
}

/** A short description of the location, for messages. */
export const describe = (location: Location): string => (Option.isSome(location.pg) ? "the PostgreSQL store (--pg)" : location.db)

/** Does this SQLite database hold a polyloop store? (Checked before anything is migrated.) */
const checkPolyloopTables = (db: string) =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const rows = yield* sql<{ readonly name: string }>`SELECT name FROM sqlite_master WHERE type = 'table' AND name = 'polyloop_runs'`.pipe(
      Effect.mapError((error) => new CliError({ message: `cannot read ${db}: ${error.message}` }))
    )
    if (rows.length === 0) {
      return yield* new CliError({ message: `${db} is not a polyloop run store (it has no polyloop tables)` })
    }
  })

/**
 * The store for commands that only read: fails with a `CliError` when the SQLite file does not
 * exist or holds no polyloop store (creating nothing), and with the store's `StoreError` when the
 * file is not a database or cannot be opened.
 */
export const layerExisting = (
  location: Location
): Layer.Layer<RunLogStore.RunLogStore, CliError | StoreError, FileSystem.FileSystem> => {
  if (Option.isSome(location.pg)) return SqlRunLogStore.layerPg({ url: location.pg.value })
  const db = location.db
  return Layer.unwrapEffect(
    Effect.gen(function*() {
      const fs = yield* FileSystem.FileSystem
      const exists = yield* fs.exists(db).pipe(Effect.orElseSucceed(() => false))
      if (!exists) {
        return yield* new CliError({
          message: `no run store at ${db} (the file does not exist); run "polyloop demo" to create one, or pass --db <file>`
        })
      }
      const open = checkPolyloopTables(db).pipe(
        Effect.zipRight(SqlRunLogStore.migrate({ path: db })),
        Effect.zipRight(SqlRunLogStore.make({ path: db }))
      )
      return Layer.effect(RunLogStore.RunLogStore, open).pipe(Layer.provide(SqlRunLogStore.layerSqliteClient({ filename: db })))
    })
  )
}

export const layerCreate = (location: Location): Layer.Layer<RunLogStore.RunLogStore, StoreError> =>
  Option.isSome(location.pg)
    ? SqlRunLogStore.layerPg({ url: location.pg.value, reclaimDeadLocalOwners: true })
    : SqlRunLogStore.layerSqlite({ filename: location.db })
