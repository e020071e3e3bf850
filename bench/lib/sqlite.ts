/**
 * Raw `better-sqlite3`, the physical limit the SQLite store is measured against: the same file
 * settings (WAL, `synchronous=FULL`) and the same table as `polyloop_records`.
 */
import * as fs from "node:fs"
import { createRequire } from "node:module"
import * as os from "node:os"
import * as path from "node:path"

/** The part of better-sqlite3's `Statement` the benchmarks use. */
export interface Statement {
  run(...params: ReadonlyArray<unknown>): unknown
  all(...params: ReadonlyArray<unknown>): Array<unknown>
  pluck(toggle?: boolean): Statement
}

/** The part of better-sqlite3's `Database` the benchmarks use. */
export interface Database {
  prepare(source: string): Statement
  exec(source: string): void
  pragma(source: string, options?: { readonly simple?: boolean }): unknown
  transaction<A extends ReadonlyArray<unknown>>(fn: (...args: A) => void): (...args: A) => void
  close(): void
}

type DatabaseConstructor = new (filename: string, options?: { readonly readonly?: boolean }) => Database

const require = createRequire(import.meta.url)
/** better-sqlite3's `Database` constructor. */
export const Sqlite = require("better-sqlite3") as DatabaseConstructor

/** Opens a file with the store's settings: WAL and `synchronous=FULL`. */
export const open = (filename: string, options: { readonly readonly?: boolean } = {}): Database => {
  const db = new Sqlite(filename, options)
  if (options.readonly !== true) {
    db.pragma("journal_mode = WAL")
    db.pragma("synchronous = FULL")
  }
  return db
}

/** The records table, as the store's first migration creates it. */
export const createRecordsTable = (db: Database): void =>
  db.exec(`CREATE TABLE polyloop_records (
  run_id TEXT NOT NULL,
  seq INTEGER NOT NULL,
  kind TEXT NOT NULL,
  step INTEGER,
  payload TEXT NOT NULL,
  PRIMARY KEY (run_id, seq)
)`)

/** One stored row of the log. */
export interface Row {
  readonly seq: number
  readonly kind: string
  readonly step: number | null
  readonly payload: string
}

/** The rows of a run, in sequence order. */
export const readRows = (db: Database, runId: string): ReadonlyArray<Row> =>
  db.prepare("SELECT seq, kind, step, payload FROM polyloop_records WHERE run_id = ? ORDER BY seq").all(runId) as Array<Row>

/** Checkpoints the WAL into the main file and truncates it, so the file alone holds the data. */
export const checkpoint = (filename: string): void => {
  const db = open(filename)
  db.pragma("wal_checkpoint(TRUNCATE)")
  db.close()
}

/** Bytes the database uses: page count × page size, free pages excluded (after a checkpoint). */
export const usedBytes = (filename: string): number => {
  checkpoint(filename)
  const db = new Sqlite(filename, { readonly: true })
  const pageSize = Number(db.pragma("page_size", { simple: true }))
  const pages = Number(db.pragma("page_count", { simple: true }))
  const free = Number(db.pragma("freelist_count", { simple: true }))
  db.close()
  return (pages - free) * pageSize
}

/**
 * The directory the benchmark databases live in: `POLYLOOP_BENCH_DIR`, else `bench/.tmp` (on the
 * same disk as the work tree, never a RAM file system unless the work tree is on one).
 */
export const dataDir = (benchDir: string): string => {
  const dir = process.env.POLYLOOP_BENCH_DIR ?? path.join(benchDir, ".tmp")
  fs.mkdirSync(dir, { recursive: true })
  return fs.mkdtempSync(path.join(dir, `run-${process.pid}-`))
}

/** Removes a database and its WAL files. */
export const remove = (filename: string): void => {
  for (const suffix of ["", "-wal", "-shm", "-journal"]) fs.rmSync(filename + suffix, { force: true })
}

/** The file system type a path lives on (from /proc/mounts; "unknown" elsewhere). */
export const fsType = (target: string): string => {
  try {
    const mounts = fs.readFileSync("/proc/mounts", "utf8").split("\n").map((line) => line.split(" "))
    const real = fs.realpathSync(target)
    let best: { readonly mount: string; readonly type: string } = { mount: "", type: "unknown" }
    for (const [, mount, type] of mounts) {
      if (mount !== undefined && type !== undefined && (real === mount || real.startsWith(mount.endsWith("/") ? mount : `${mount}/`)) && mount.length >= best.mount.length) {
        best = { mount, type }
      }
    }
    return best.type
  } catch {
    return `unknown (${os.platform()})`
  }
}
