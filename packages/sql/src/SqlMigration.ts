/**
 * Runs a set of `@effect/sql` migrations the way polyloop's own tables are migrated, for a
 * package that keeps its own table beside the run log (`@polyloop/cluster`'s run index): many
 * processes may start at once on an empty database (on PostgreSQL they wait for each other on an
 * advisory lock instead of racing to create the bookkeeping table), and a storage failure of a
 * migration's statement is a typed `StoreError`, as everywhere else.
 *
 * @since 0.1.0
 */
import * as Migrator from "@effect/sql/Migrator"
import type * as SqlClient from "@effect/sql/SqlClient"
import { StoreError } from "@polyloop/core/Errors"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import * as Schedule from "effect/Schedule"
import { migrationStorageFailure, storeError } from "./internal/errors.js"
import { serialized } from "./internal/migrationLock.js"

/** What `run` takes. */
export interface Options {
  /** The table `Migrator` records these migrations in (one per package: never the store's). */
  readonly table: string
  /** The migrations, by `<id>_<name>`, as `Migrator.fromRecord` takes them. */
  readonly loader: Migrator.Loader<SqlClient.SqlClient>
  /** Names the tables in error messages (`"cluster run index"`). */
  readonly what: string
}

/** Applies the migrations not yet applied; safe to run from many processes at once. */
export const run = (options: Options): Effect.Effect<void, StoreError, SqlClient.SqlClient> =>
  Migrator.make({})({ loader: options.loader, table: options.table }).pipe(
    serialized(options.table),
    // `Migrator` dies when a migration's statement fails: a storage failure is a typed failure.
    Effect.catchSomeCause((cause) => Option.map(migrationStorageFailure(cause), Effect.fail)),
    // A process of an older version creating the bookkeeping table without the lock at the same
    // moment: the loser's statement fails; the next attempt finds the table.
    Effect.retry({ times: 3, schedule: Schedule.spaced(Duration.millis(100)) }),
    Effect.mapError((error) =>
      error._tag === "SqlError"
        ? storeError(error, { operation: `${options.what}: migrating` })
        : new StoreError({ reason: "SchemaVersion", message: `${options.what}: migration failed: ${error.message}`, cause: error })
    ),
    Effect.asVoid,
    Effect.withSpan("SqlMigration.run", { attributes: { "polyloop.migrations": options.table } })
  )
