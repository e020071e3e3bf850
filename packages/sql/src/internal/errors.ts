/**
 * Turns driver failures into `StoreError`s. The drivers report what went wrong in an error
 * `code`: better-sqlite3 uses SQLite's extended result codes (`SQLITE_BUSY`,
 * `SQLITE_CONSTRAINT_PRIMARYKEY`, …), node-postgres uses SQLSTATE (`23505`, `53100`, …). Both
 * are classified here so the store itself stays dialect-neutral.
 *
 * @internal
 */
import * as Migrator from "@effect/sql/Migrator"
import { SqlError } from "@effect/sql/SqlError"
import { StoreError, type StoreErrorReason } from "@polyloop/core/Errors"
import * as Cause from "effect/Cause"
import * as Option from "effect/Option"

/** What a driver failure means for the store. */
export type Classified =
  | { readonly _tag: "UniqueViolation"; readonly code: string }
  | { readonly _tag: "Store"; readonly reason: StoreErrorReason; readonly code: string | undefined }

const codeOf = (cause: unknown): string | undefined => {
  if (typeof cause === "object" && cause !== null && "code" in cause) {
    const code = (cause as { readonly code: unknown }).code
    if (typeof code === "string") return code
  }
  return undefined
}

const messageOf = (cause: unknown): string => {
  if (cause instanceof Error) return cause.message
  if (typeof cause === "object" && cause !== null && "message" in cause) {
    const message = (cause as { readonly message: unknown }).message
    if (typeof message === "string") return message
  }
  return String(cause)
}

/**
 * Is this a SQLite "database is locked" failure (`SQLITE_BUSY*` or `SQLITE_LOCKED*`): another
 * connection holds a lock this one needs?
 */
export const isSqliteBusy = (error: unknown): boolean => {
  const code = codeOf(driverCause(error))
  return code !== undefined && (code.startsWith("SQLITE_BUSY") || code.startsWith("SQLITE_LOCKED"))
}

/** The innermost driver error: `SqlError` wraps the driver's own error in `cause`. */
export const driverCause = (error: unknown): unknown => {
  let current = error
  for (let depth = 0; depth < 4; depth++) {
    if (codeOf(current) !== undefined) return current
    if (typeof current === "object" && current !== null && "cause" in current) {
      const next = (current as { readonly cause: unknown }).cause
      if (next === undefined || next === null) return current
      current = next
    } else {
      return current
    }
  }
  return current
}

const sqliteReason = (code: string): StoreErrorReason | "UniqueViolation" => {
  if (code === "SQLITE_CONSTRAINT_PRIMARYKEY" || code === "SQLITE_CONSTRAINT_UNIQUE") return "UniqueViolation"
  if (code.startsWith("SQLITE_BUSY") || code.startsWith("SQLITE_LOCKED")) return "Unavailable"
  if (code.startsWith("SQLITE_READONLY") || code === "SQLITE_PERM" || code === "SQLITE_AUTH") return "ReadOnly"
  if (code === "SQLITE_FULL") return "DiskFull"
  if (code === "SQLITE_NOTADB" || code.startsWith("SQLITE_CORRUPT")) return "Corrupt"
  if (code.startsWith("SQLITE_CANTOPEN") || code.startsWith("SQLITE_IOERR") || code === "SQLITE_PROTOCOL") {
    return "Unavailable"
  }
  return "Unknown"
}

const pgReason = (code: string): StoreErrorReason | "UniqueViolation" => {
  if (code === "23505") return "UniqueViolation"
  if (code === "53100") return "DiskFull"
  if (code === "25006") return "ReadOnly"
  if (code === "XX001" || code === "XX002") return "Corrupt"
  // A protocol violation is a statement the server refuses (a bind message over 65,535
  // parameters, a malformed message): the connection is fine and a retry fails the same way.
  if (code === "08P01") return "Unknown"
  // connection exceptions, insufficient resources, operator intervention, serialization/deadlock
  if (code.startsWith("08") || code.startsWith("53") || code.startsWith("57") || code.startsWith("40")) return "Unavailable"
  if (code === "55P03") return "Unavailable" // lock not available
  if (code === "42P01") return "SchemaVersion" // undefined table: the schema is not the one this code expects
  return "Unknown"
}

/** Node's codes for a network that does not carry the connection (the server down or unreachable). */
const networkCodes: ReadonlySet<string> = new Set([
  "ECONNREFUSED",
  "ECONNRESET",
  "ETIMEDOUT",
  "EHOSTUNREACH",
  "ENETUNREACH",
  "ENOTFOUND",
  "EAI_AGAIN",
  "EPIPE"
])

/**
 * What `pg` and `pg-pool` say, without a code, when no connection could be had in time or the
 * one in use was lost.
 */
const unavailableMessage = /timeout exceeded when trying to connect|connection terminated|connection timeout/i

/** SQLite's messages for a table, view or column that does not exist. */
const missingSchemaObject = /^no such (table|column|view): /

/** Classifies a driver failure by its code (or, for the PostgreSQL pool's own failures, its message). */
export const classify = (error: unknown): Classified => {
  const cause = driverCause(error)
  const code = codeOf(cause)
  if (code === undefined) return { _tag: "Store", reason: unavailableMessage.test(messageOf(cause)) ? "Unavailable" : "Unknown", code }
  if (networkCodes.has(code)) return { _tag: "Store", reason: "Unavailable", code }
  // SQLite has no code of its own for a missing table or column (plain SQLITE_ERROR): a table
  // or column of the store that is gone means the schema is not the one this code expects, as
  // PostgreSQL's 42P01 / 42703 say.
  if (code === "SQLITE_ERROR" && missingSchemaObject.test(messageOf(cause))) return { _tag: "Store", reason: "SchemaVersion", code }
  const reason = code.startsWith("SQLITE_") ? sqliteReason(code) : /^[0-9A-Z]{5}$/.test(code) ? pgReason(code) : "Unknown"
  return reason === "UniqueViolation" ? { _tag: "UniqueViolation", code } : { _tag: "Store", reason, code }
}

/** Is this failure a violated uniqueness constraint? */
export const isUniqueViolation = (error: SqlError): boolean => classify(error)._tag === "UniqueViolation"

/**
 * Is this failure SQLite's append trigger refusing an append (`RAISE(ABORT, 'polyloop_append: …')`,
 * see `migrations/sqlite.ts`): a sequence number that is not the run's next one, or a lost lease?
 */
export const isAppendRefused = (error: SqlError): boolean => {
  const cause = driverCause(error)
  return codeOf(cause) === "SQLITE_CONSTRAINT_TRIGGER" && messageOf(cause).startsWith("polyloop_append: ")
}

const describe: Record<StoreErrorReason, string> = {
  Unavailable: "the database is unavailable (locked, busy or cannot be opened)",
  Corrupt: "the file is not a valid database or is corrupted",
  ReadOnly: "the database or its directory is read-only",
  DiskFull: "the database or disk is full",
  SchemaVersion: "the database schema is not the one this code expects",
  Decode: "a stored value does not decode",
  Encode: "a value does not encode",
  Unknown: "the database failed"
}

/** Where a failure happened, for the message. */
export interface ErrorContext {
  readonly operation: string
  readonly path?: string | undefined
  readonly runId?: string | undefined
}

/** Builds a `StoreError` with the path, the reason and the driver's own words. */
export const storeError = (
  error: unknown,
  context: ErrorContext,
  reasonOverride?: StoreErrorReason
): StoreError => {
  const classified = classify(error)
  const reason: StoreErrorReason = reasonOverride ?? (classified._tag === "Store" ? classified.reason : "Unknown")
  const cause = driverCause(error)
  const code = codeOf(cause)
  const where = context.path === undefined ? "" : ` (${context.path})`
  const run = context.runId === undefined ? "" : ` for run ${context.runId}`
  return new StoreError({
    reason,
    message: `${context.operation}${run} failed${where}: ${describe[reason]}: ${messageOf(cause)}${code === undefined ? "" : ` [${code}]`}`,
    ...(context.path === undefined ? {} : { path: context.path }),
    ...(context.runId === undefined ? {} : { runId: context.runId }),
    cause: error
  })
}

/**
 * The storage failure inside a defect of `Migrator`'s, if that is what the defect is. `Migrator`
 * turns a migration's failure into a defect (`orDieWith` → `MigrationError { reason: "failed" }`),
 * and `withTransaction` a failing `ROLLBACK` or `COMMIT` (a bare `SqlError`); so a full disk, a
 * read-only or failing file while the schema is being created would crash the program instead of
 * failing with a `StoreError` it can handle. Only a cause that is exactly such defects is taken:
 * one with an interruption (or a typed failure) in it passes through whole.
 */
export const migrationStorageFailure = (cause: Cause.Cause<unknown>): Option.Option<SqlError> => {
  if (Cause.isInterrupted(cause) || Cause.isFailure(cause)) return Option.none()
  const defects = Array.from(Cause.defects(cause))
  const storage = defects.map((defect) =>
    defect instanceof SqlError
      ? defect
      : defect instanceof Migrator.MigrationError && defect.reason === "failed" && defect.cause instanceof SqlError
      ? defect.cause
      : undefined
  )
  const first = storage[0]
  return first !== undefined && storage.every((e) => e !== undefined) ? Option.some(first) : Option.none()
}
