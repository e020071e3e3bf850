/**
 * A run's workspace as blobs (design 0330, decision 3): a walk that never follows a symbolic
 * link, records regular files by the SHA-256 of their bytes (re-hashing only files whose size,
 * mtime, ctime or inode changed since the last walk), directories as entries and links as their
 * target text; and the restore of such a manifest into an empty directory.
 *
 * @internal
 */
import * as Blobs from "@polyloop/core/Blobs"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import * as Schema from "effect/Schema"
import * as fs from "node:fs"
import * as path from "node:path"
import { SessionFailure } from "./failure.js"

/** One entry of a workspace manifest. */
export const Entry = Schema.Union(
  Schema.Struct({ kind: Schema.Literal("file"), path: Schema.String, hash: Schema.String, size: Schema.Number, mode: Schema.Number }),
  Schema.Struct({ kind: Schema.Literal("dir"), path: Schema.String, mode: Schema.Number }),
  Schema.Struct({ kind: Schema.Literal("symlink"), path: Schema.String, target: Schema.String })
)
/** @internal */
export type Entry = typeof Entry.Type

/** A path that was not saved, and why. */
export const Skipped = Schema.Struct({ path: Schema.String, reason: Schema.String })
/** @internal */
export type Skipped = typeof Skipped.Type

interface Cached {
  readonly size: number
  readonly mtimeMs: number
  readonly ctimeMs: number
  readonly ino: number
  readonly hash: Blobs.BlobHash
}

/** The hash cache of one session's workspace. */
export type HashCache = Map<string, Cached>

/** What a walk found: entries sorted by path; the files' bytes only for hashes not cached. */
export interface Walked {
  readonly entries: ReadonlyArray<Entry>
  readonly skipped: ReadonlyArray<Skipped>
  /** Files read during this walk (new or changed), by hash. */
  readonly fresh: ReadonlyMap<string, Uint8Array>
}

/**
 * Reads a file the sandbox could have replaced since it was looked at: never through a link
 * (`O_NOFOLLOW`), never blocking on a FIFO (`O_NONBLOCK`), only a regular file of at most `max`
 * bytes. Throws otherwise.
 */
export const readRegular = (file: string, max: number): Buffer => {
  const fd = fs.openSync(file, fs.constants.O_RDONLY | fs.constants.O_NOFOLLOW | fs.constants.O_NONBLOCK)
  try {
    const stat = fs.fstatSync(fd)
    if (!stat.isFile()) throw new Error(`${path.basename(file)} is not a regular file`)
    if (stat.size > max) throw new Error(`${path.basename(file)} is larger than ${max} bytes`)
    return fs.readFileSync(fd)
  } finally {
    fs.closeSync(fd)
  }
}

const byPath = <A extends { readonly path: string }>(a: A, b: A) => (a.path < b.path ? -1 : a.path > b.path ? 1 : 0)

/** Walks `root` (see the module header). */
export const walk = (root: string, cache: HashCache, maxFileBytes: number): Effect.Effect<Walked, SessionFailure> =>
  Effect.try({
    try: () => {
      const entries: Array<Entry> = []
      const skipped: Array<Skipped> = []
      const fresh = new Map<string, Uint8Array>()
      const seen = new Set<string>()
      const visit = (relative: string) => {
        const absolute = relative === "" ? root : path.join(root, relative)
        for (const name of fs.readdirSync(absolute).sort()) {
          const rel = relative === "" ? name : `${relative}/${name}`
          const full = path.join(root, rel)
          const stat = fs.lstatSync(full)
          if (stat.isSymbolicLink()) {
            entries.push({ kind: "symlink", path: rel, target: fs.readlinkSync(full) })
          } else if (stat.isDirectory()) {
            entries.push({ kind: "dir", path: rel, mode: stat.mode & 0o777 })
            visit(rel)
          } else if (stat.isFile()) {
            if (stat.size > maxFileBytes) {
              skipped.push({ path: rel, reason: `larger than ${maxFileBytes} bytes` })
              continue
            }
            seen.add(rel)
            const cached = cache.get(rel)
            let hash: Blobs.BlobHash
            if (
              cached !== undefined && cached.size === stat.size && cached.mtimeMs === stat.mtimeMs &&
              cached.ctimeMs === stat.ctimeMs && cached.ino === stat.ino
            ) {
              hash = cached.hash
            } else {
              const data = readRegular(full, maxFileBytes)
              hash = Blobs.hashOf(data)
              fresh.set(hash, data)
              cache.set(rel, { size: stat.size, mtimeMs: stat.mtimeMs, ctimeMs: stat.ctimeMs, ino: stat.ino, hash })
            }
            entries.push({ kind: "file", path: rel, hash, size: stat.size, mode: stat.mode & 0o777 })
          } else {
            skipped.push({ path: rel, reason: "not a regular file, directory or symbolic link" })
          }
        }
      }
      visit("")
      for (const key of [...cache.keys()]) if (!seen.has(key)) cache.delete(key)
      return { entries: entries.sort(byPath), skipped: skipped.sort(byPath), fresh }
    },
    catch: (error) => new SessionFailure({ reason: "Snapshot", message: `the workspace could not be read: ${String(error)}` })
  })

const safe = (rel: string): boolean =>
  rel !== "" && !rel.startsWith("/") && !rel.includes("\u0000") && rel.split("/").every((part) => part !== "" && part !== "." && part !== "..")

/**
 * Restores `entries` into the empty directory `root` (owned by `owner` when given): directories
 * and files first (files created exclusively, never through a link), links last.
 */
export const restore = (
  root: string,
  entries: ReadonlyArray<Entry>,
  blobs: Blobs.Service,
  cache: HashCache,
  owner: { readonly uid: number; readonly gid: number } | undefined
): Effect.Effect<void, SessionFailure> =>
  Effect.gen(function*() {
    const failure = (message: string) => new SessionFailure({ reason: "Restore", message })
    for (const entry of entries) {
      if (!safe(entry.path)) return yield* failure(`the snapshot names an unsafe path ${JSON.stringify(entry.path)}`)
    }
    for (const entry of entries) {
      const full = path.join(root, entry.path)
      if (entry.kind === "dir") {
        yield* Effect.try({ try: () => fs.mkdirSync(full, { mode: entry.mode | 0o700 }), catch: (e) => failure(String(e)) })
      } else if (entry.kind === "file") {
        const data = yield* blobs.get(entry.hash as Blobs.BlobHash).pipe(Effect.mapError((e) => failure(`blob ${entry.hash}: ${e.message}`)))
        if (Option.isNone(data)) return yield* failure(`blob ${entry.hash} of ${entry.path} is missing from the store`)
        yield* Effect.try({
          try: () => {
            fs.writeFileSync(full, data.value, { flag: "wx", mode: entry.mode })
            fs.chmodSync(full, entry.mode)
            const stat = fs.lstatSync(full)
            cache.set(entry.path, { size: stat.size, mtimeMs: stat.mtimeMs, ctimeMs: stat.ctimeMs, ino: stat.ino, hash: entry.hash as Blobs.BlobHash })
          },
          catch: (e) => failure(String(e))
        })
      }
      if (owner !== undefined && entry.kind !== "symlink") {
        yield* Effect.try({ try: () => fs.lchownSync(full, owner.uid, owner.gid), catch: (e) => failure(String(e)) })
      }
    }
    for (const entry of entries) {
      if (entry.kind !== "symlink") continue
      const full = path.join(root, entry.path)
      yield* Effect.try({
        try: () => {
          fs.symlinkSync(entry.target, full)
          if (owner !== undefined) fs.lchownSync(full, owner.uid, owner.gid)
        },
        catch: (e) => failure(String(e))
      })
    }
  })
