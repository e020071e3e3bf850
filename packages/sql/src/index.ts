/**
 * @polyloop/sql
 *
 * @since 0.1.0
 */

/**
 * The durable run log store on `@effect/sql` (SPEC §7): one backend over `SqlClient` for every dialect, plugged into `RunLogStore.make`, with SQLite (`layerSqlite`, the embedded default) as the first dialect.
 */
export * as SqlRunLogStore from "./SqlRunLogStore.js"
