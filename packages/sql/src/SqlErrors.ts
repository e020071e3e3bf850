/**
 * Turns an `@effect/sql` failure into polyloop's `StoreError`, classified by the driver's code
 * (SQLite's result codes, PostgreSQL's SQLSTATE) exactly as the run log store does: a lost
 * connection or a server shutting down is `Unavailable`, a full disk `Full`, a missing table
 * `SchemaVersion`, and so on. For packages that keep their own tables beside the run log.
 *
 * @since 0.1.0
 */
import type { SqlError } from "@effect/sql/SqlError"
import type { StoreError } from "@polyloop/core/Errors"
import { storeError } from "./internal/errors.js"

/** The `StoreError` of a failed statement; `operation` says what was being done. */
export const fromSqlError = (error: SqlError, context: { readonly operation: string; readonly runId?: string }): StoreError =>
  storeError(error, context)
