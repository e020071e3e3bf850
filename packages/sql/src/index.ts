/**
 * @polyloop/sql
 *
 * @since 0.1.0
 */

/**
 * Turns an `@effect/sql` failure into polyloop's `StoreError`, classified by the driver's code (SQLite's result codes, PostgreSQL's SQLSTATE) exactly as the run log store does: a lost connection or a server shutting down is `Unavailable`, a full disk `Full`, a missing table `SchemaVersion`, and so on. For packages that keep their own tables beside the run log.
 */
export * as SqlErrors from "./SqlErrors.js"

/**
 * Runs a set of `@effect/sql` migrations the way polyloop's own tables are migrated, for a package that keeps its own table beside the run log (`@polyloop/cluster`'s run index): many processes may start at once on an empty database (on PostgreSQL they wait for each other on an advisory lock instead of racing to create the bookkeeping table), and a storage failure of a migration's statement is a typed `StoreError`, as everywhere else.
 */
export * as SqlMigration from "./SqlMigration.js"

/**
 * The durable run log store on `@effect/sql` (SPEC §7): one `RunLogStore.Backend` per SQL dialect, plugged into `RunLogStore.make`, with SQLite (`layerSqlite`, the embedded default) as the first dialect and PostgreSQL (`layerPg`, many workers on many machines sharing one database) as the second. This module is the public API: the layers, the options, `migrate`.
 */
export * as SqlRunLogStore from "./SqlRunLogStore.js"
