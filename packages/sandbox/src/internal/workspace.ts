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

/**
 * One entry of a workspace manifest. `path` (and a link's `target`) is the name as text; when the
 * name's bytes are not valid UTF-8, `pathBytes` (`targetBytes`) holds them exactly, in base64
 * (design 0331, decision 3) — both optional, so manifests written before read as they did.
 */
export const Entry = Schema.Union(
  Schema.Struct({
    kind: Schema.Literal("file"),
    path: Schema.String,
    pathBytes: Schema.optional(Schema.String),
    hash: Schema.String,
    size: Schema.Number,
    mode: Schema.Number
  }),
  Schema.Struct({ kind: Schema.Literal("dir"), path: Schema.String, pathBytes: Schema.optional(Schema.String), mode: Schema.Number }),
  Schema.Struct({
    kind: Schema.Literal("symlink"),
    path: Schema.String,
    pathBytes: Schema.optional(Schema.String),
    target: Schema.String,
    targetBytes: Schema.optional(Schema.String)
  })
)
/** @internal */
export type Entry = typeof Entry.Type

/** A path that was not saved, and why. */
export const Skipped = Schema.Struct({ path: Schema.String, pathBytes: Schema.optional(Schema.String), reason: Schema.String })
/** @internal */
export type Skipped = typeof Skipped.Type

interface Cached {
  readonly size: number
  readonly mtimeMs: number
  readonly ctimeMs: number
  readonly ino: number
  readonly hash: Blobs.BlobHash
}

/** The hash cache of one session's workspace, by the relative path's bytes (as latin1 text). */
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
    return readOpen(fd, max, path.basename(file))
  } finally {
    fs.closeSync(fd)
  }
}

const readOpen = (fd: number, max: number, name: string): Buffer => {
  const stat = fs.fstatSync(fd)
  if (!stat.isFile()) throw new Error(`${name} is not a regular file`)
  if (stat.size > max) throw new Error(`${name} is larger than ${max} bytes`)
  return fs.readFileSync(fd)
}

/** Text of a name's bytes, and the bytes themselves (base64) when they are not valid UTF-8. */
const named = (bytes: Buffer): { readonly text: string; readonly raw: string | undefined } => {
  const text = bytes.toString("utf8")
  return Buffer.from(text, "utf8").equals(bytes) ? { text, raw: undefined } : { text, raw: bytes.toString("base64") }
}

const byPath = <A extends { readonly key: Buffer }>(a: A, b: A) => Buffer.compare(a.key, b.key)

/** How deep a walk goes (each level holds an open directory). */
export const maxDepth = 256

const slash = Buffer.from("/")
const changed = "changed while it was saved"

/** The path of `name` in the directory open as `fd` (resolved through the descriptor, never a path: design 0331). */
const at = (fd: number, name: Buffer): Buffer => Buffer.concat([Buffer.from(`/proc/self/fd/${fd}/`), name])

const errorCode = (error: unknown): string | undefined =>
  typeof error === "object" && error !== null && "code" in error && typeof error.code === "string" ? error.code : undefined

/**
 * Walks `root` (see the module header). Every entry is resolved as one name relative to its open
 * parent directory (`/proc/self/fd/<fd>/<name>`, the last component never followed), so a
 * directory swapped with a link while the walk runs can never lead it outside the workspace; an
 * entry that changes meanwhile is listed as not saved (design 0331, decision 1).
 */
export const walk = (root: string, cache: HashCache, maxFileBytes: number): Effect.Effect<Walked, SessionFailure> =>
  Effect.try({
    try: () => {
      const entries: Array<{ readonly key: Buffer; readonly entry: Entry }> = []
      const skipped: Array<{ readonly key: Buffer; readonly entry: Skipped }> = []
      const fresh = new Map<string, Uint8Array>()
      const seen = new Set<string>()
      const skip = (rel: Buffer, reason: string) => {
        const name = named(rel)
        skipped.push({ key: rel, entry: name.raw === undefined ? { path: name.text, reason } : { path: name.text, pathBytes: name.raw, reason } })
      }
      const directory = fs.constants.O_RDONLY | fs.constants.O_DIRECTORY | fs.constants.O_NOFOLLOW
      const visit = (dirFd: number, relative: Buffer, depth: number) => {
        const names = (fs.readdirSync(`/proc/self/fd/${dirFd}`, { encoding: "buffer" }) as Array<Buffer>).sort(Buffer.compare)
        for (const nameBytes of names) {
          const rel = relative.length === 0 ? nameBytes : Buffer.concat([relative, slash, nameBytes])
          const name = named(rel)
          const withPath = name.raw === undefined ? { path: name.text } : { path: name.text, pathBytes: name.raw }
          const full = at(dirFd, nameBytes)
          try {
            const stat = fs.lstatSync(full)
            if (stat.isSymbolicLink()) {
              const target = named(fs.readlinkSync(full, { encoding: "buffer" }))
              entries.push({
                key: rel,
                entry: target.raw === undefined
                  ? { kind: "symlink", ...withPath, target: target.text }
                  : { kind: "symlink", ...withPath, target: target.text, targetBytes: target.raw }
              })
            } else if (stat.isDirectory()) {
              if (depth >= maxDepth) {
                skip(rel, `nested deeper than ${maxDepth} directories`)
                continue
              }
              const fd = fs.openSync(full, directory)
              try {
                const opened = fs.fstatSync(fd)
                entries.push({ key: rel, entry: { kind: "dir", ...withPath, mode: opened.mode & 0o777 } })
                visit(fd, rel, depth + 1)
              } finally {
                fs.closeSync(fd)
              }
            } else if (stat.isFile()) {
              if (stat.size > maxFileBytes) {
                skip(rel, `larger than ${maxFileBytes} bytes`)
                continue
              }
              const key = rel.toString("latin1")
              const cached = cache.get(key)
              let hash: Blobs.BlobHash
              let size = stat.size
              let mode = stat.mode
              if (
                cached !== undefined && cached.size === stat.size && cached.mtimeMs === stat.mtimeMs &&
                cached.ctimeMs === stat.ctimeMs && cached.ino === stat.ino
              ) {
                hash = cached.hash
              } else {
                const fd = fs.openSync(full, fs.constants.O_RDONLY | fs.constants.O_NOFOLLOW | fs.constants.O_NONBLOCK)
                try {
                  const opened = fs.fstatSync(fd)
                  const data = readOpen(fd, maxFileBytes, name.text)
                  hash = Blobs.hashOf(data)
                  size = data.length
                  mode = opened.mode
                  fresh.set(hash, data)
                  cache.set(key, { size: opened.size, mtimeMs: opened.mtimeMs, ctimeMs: opened.ctimeMs, ino: opened.ino, hash })
                } finally {
                  fs.closeSync(fd)
                }
              }
              seen.add(key)
              entries.push({ key: rel, entry: { kind: "file", ...withPath, hash, size, mode: mode & 0o777 } })
            } else {
              skip(rel, "not a regular file, directory or symbolic link")
            }
          } catch (error) {
            // The code changed the entry while it was read (gone, a link or a file where a
            // directory was, …): listed as not saved, the action stays Executed.
            const code = errorCode(error)
            if (code === "EMFILE" || code === "ENFILE" || code === "ENOMEM") throw error
            skip(rel, code === "EACCES" || code === "EPERM" ? "not readable" : changed)
          }
        }
      }
      const rootFd = fs.openSync(root, directory)
      try {
        visit(rootFd, Buffer.alloc(0), 0)
      } finally {
        fs.closeSync(rootFd)
      }
      for (const key of [...cache.keys()]) if (!seen.has(key)) cache.delete(key)
      return {
        entries: entries.sort(byPath).map((e) => e.entry),
        skipped: skipped.sort(byPath).map((e) => e.entry),
        fresh
      }
    },
    catch: (error) => new SessionFailure({ reason: "Snapshot", message: `the workspace could not be read: ${String(error)}` })
  })

/** The exact bytes of an entry's path. */
const pathOf = (entry: { readonly path: string; readonly pathBytes?: string | undefined }): Buffer =>
  entry.pathBytes !== undefined ? Buffer.from(entry.pathBytes, "base64") : Buffer.from(entry.path, "utf8")

const safe = (rel: Buffer): boolean => {
  if (rel.length === 0 || rel[0] === 0x2f || rel.includes(0)) return false
  const parts = rel.toString("latin1").split("/")
  return parts.every((part) => part !== "" && part !== "." && part !== "..")
}

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
      if (!safe(pathOf(entry))) return yield* failure(`the snapshot names an unsafe path ${JSON.stringify(entry.path)}`)
    }
    const rootBytes = Buffer.from(root.endsWith("/") ? root : `${root}/`)
    const fullOf = (entry: Entry) => Buffer.concat([rootBytes, pathOf(entry)])
    for (const entry of entries) {
      const full = fullOf(entry)
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
            cache.set(pathOf(entry).toString("latin1"), { size: stat.size, mtimeMs: stat.mtimeMs, ctimeMs: stat.ctimeMs, ino: stat.ino, hash: entry.hash as Blobs.BlobHash })
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
      const full = fullOf(entry)
      const target = entry.targetBytes !== undefined ? Buffer.from(entry.targetBytes, "base64") : entry.target
      yield* Effect.try({
        try: () => {
          fs.symlinkSync(target, full)
          if (owner !== undefined) fs.lchownSync(full, owner.uid, owner.gid)
        },
        catch: (e) => failure(String(e))
      })
    }
  })
