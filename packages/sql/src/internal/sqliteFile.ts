/**
 * Opening a SQLite file safely. `@effect/sql-sqlite-node` opens the file while building its
 * client and lets a failure there (not a database, a read-only directory, a missing directory)
 * escape as a defect. The store opens the file once first, here, so that each of those becomes
 * a typed `StoreError` with the path and the reason before the client is built.
 *
 * @internal
 */
import type { StoreError } from "@polyloop/core/Errors"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Schedule from "effect/Schedule"
import type * as Scope from "effect/Scope"
import * as fs from "node:fs"
import { createRequire } from "node:module"
import * as path from "node:path"
import { isSqliteBusy, storeError } from "./errors.js"

/** The part of better-sqlite3's `Database` the probe uses. */
interface Database {
  pragma(source: string, options?: { readonly simple?: boolean }): unknown
  close(): void
}

type DatabaseConstructor = new (
  filename: string,
  options?: { readonly timeout?: number; readonly readonly?: boolean; readonly fileMustExist?: boolean }
) => Database

const require = createRequire(import.meta.url)
const Sqlite = require("better-sqlite3") as DatabaseConstructor

const isMemory = (filename: string): boolean => filename === "" || filename === ":memory:" || filename.startsWith("file::memory:")

const writable = (target: string): boolean => {
  try {
    fs.accessSync(target, fs.constants.W_OK)
    return true
  } catch {
    return false
  }
}

/** Why a file could not be opened, refined with what the file system says. */
const openFailure = (filename: string, cause: unknown): StoreError => {
  const context = { operation: "opening the SQLite store", path: filename }
  const error = storeError(cause, context)
  // better-sqlite3 reports a missing directory itself, without an SQLite code (reason Unknown).
  if ((error.reason !== "Unavailable" && error.reason !== "Unknown") || isMemory(filename)) return error
  const directory = path.dirname(path.resolve(filename))
  if (!fs.existsSync(directory)) {
    return storeError(new Error(`the directory ${directory} does not exist`), context, "Unavailable")
  }
  if (fs.existsSync(filename) ? !writable(filename) || !writable(directory) : !writable(directory)) {
    return storeError(cause, context, "ReadOnly")
  }
  if (error.reason === "Unknown" && fs.existsSync(filename) && fs.statSync(filename).isDirectory()) {
    return storeError(cause, context, "Unavailable")
  }
  return error
}

/**
 * How long to wait before trying the open again after `SQLITE_BUSY`: 5 ms growing to at most
 * 100 ms, jittered (so that processes that collided once do not collide again in step), for at
 * most the busy timeout.
 */
const busyRetry = (busyTimeoutMillis: number) =>
  Schedule.exponential(Duration.millis(5), 1.5).pipe(
    Schedule.union(Schedule.spaced(Duration.millis(100))),
    Schedule.jittered,
    Schedule.upTo(Duration.millis(busyTimeoutMillis))
  )

/**
 * Opens the file, switches it to WAL (a persistent setting) and reads its header: a file that is
 * not a database, a directory or file that cannot be written, or a missing directory fails here
 * with a typed error. Creates the file when it does not exist. The connection stays open until
 * the scope closes: the caller opens its own connection first, so that closing this one is not
 * closing the file's last connection (which checkpoints the WAL and deletes it, only for the
 * next connection to create it again — most of what opening an existing store cost).
 *
 * Several processes opening one brand-new file at once all switch it to WAL, which takes the
 * file's exclusive lock; SQLite does not call the busy handler for that upgrade (the connection
 * already reads the file, and waiting could deadlock), so the loser gets `SQLITE_BUSY` at once.
 * The probe then tries again, for up to the busy timeout, as every other write waits for a
 * lock; only a lock held longer than that fails (`StoreError { reason: "Unavailable" }`).
 */
export const probe = (filename: string, busyTimeoutMillis: number): Effect.Effect<void, StoreError, Scope.Scope> =>
  Effect.acquireRelease(
    Effect.try({
      try: () => {
        const db = new Sqlite(filename, { timeout: busyTimeoutMillis })
        try {
          const mode = db.pragma("journal_mode = WAL", { simple: true })
          db.pragma("schema_version", { simple: true })
          if (!isMemory(filename) && mode !== "wal") {
            throw Object.assign(new Error(`cannot switch the journal to WAL (it stays "${String(mode)}")`), {
              code: "SQLITE_READONLY"
            })
          }
          return db
        } catch (error) {
          db.close()
          throw error
        }
      },
      catch: (cause) => cause
    }).pipe(
      Effect.retry({ schedule: busyRetry(busyTimeoutMillis), while: isSqliteBusy }),
      Effect.mapError((cause) => openFailure(filename, cause))
    ),
    (db) => Effect.sync(() => db.close())
  )
