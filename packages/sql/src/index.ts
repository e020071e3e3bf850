/**
 * @polyloop/sql
 *
 * @since 0.1.0
 */

/**
 * The durable run log store on `@effect/sql` (SPEC §7): one `RunLogStore.Backend` per SQL dialect, plugged into `RunLogStore.make`, with SQLite (`layerSqlite`, the embedded default) as the first dialect and PostgreSQL (`layerPg`, many workers on many machines sharing one database) as the second. This module is the public API: the layers, the options, `migrate`.
 */
export * as SqlRunLogStore from "./SqlRunLogStore.js"

/**
 * Workers over a queue of pending runs in SQL (`polyloop_queue`): `enqueue` adds a run id and a serialisable payload; `run` starts N fibers that take runs (`SELECT … FOR UPDATE SKIP LOCKED` on PostgreSQL, one serialised `UPDATE … RETURNING` on SQLite), turn each payload into a `RunRequest` with the caller's `resolve` and run it with `Agent.run`.
 */
export * as Worker from "./Worker.js"
