/**
 * Content-addressed blobs in the run store (design 0330): byte strings keyed by their SHA-256,
 * stored once however often they are put, and per-run *refs* — names that point at a blob
 * (`sandbox/00000003` → a snapshot's manifest). A capability of a store, optional like
 * `appendRecords`: `RunLogStore.Backend.blobs` is what an adapter implements, `Blobs.make` the
 * front every backend gets (hashing, the hash checked on read, spans).
 *
 * Contract: `put` of the same bytes twice stores them once and returns the same hash; `get` of a
 * hash never put is `None`; a blob read back whose bytes do not hash to its key is
 * `StoreError { reason: "Corrupt" }`; `setRef` replaces the run's ref of that name; `listRefs`
 * returns a run's refs whose names start with the prefix, sorted by name; two runs never see each
 * other's refs (blobs are shared: they are named by their content).
 *
 * @since 0.1.0
 */
import { createHash } from "node:crypto"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import * as Schema from "effect/Schema"
import { StoreError } from "./Errors.js"

/** A blob's key: the SHA-256 of its bytes, 64 lowercase hex digits. */
export const BlobHash = Schema.String.pipe(Schema.pattern(/^[0-9a-f]{64}$/), Schema.brand("@polyloop/core/BlobHash"))
/** @since 0.1.0 */
export type BlobHash = typeof BlobHash.Type

/** One ref of a run. */
export interface Ref {
  readonly name: string
  readonly hash: BlobHash
}

/** The hash of some bytes. */
export const hashOf = (data: Uint8Array): BlobHash => createHash("sha256").update(data).digest("hex") as BlobHash

/**
 * What a storage adapter implements. `putBlobs` stores each blob not yet present (present ones
 * are left as they are; each blob whole, not necessarily all in one transaction: blobs are
 * content-addressed, so a put cut short leaves only blobs no ref names yet); `hasBlobs` returns the hashes of the given ones
 * that are present; `getBlob` returns a blob's bytes; `setRef` inserts or replaces; `listRefs`
 * returns the run's refs whose names start with `prefix`, by name.
 */
export interface Backend {
  readonly putBlobs: (blobs: ReadonlyArray<{ readonly hash: BlobHash; readonly data: Uint8Array }>) => Effect.Effect<void, StoreError>
  readonly hasBlobs: (hashes: ReadonlyArray<BlobHash>) => Effect.Effect<ReadonlySet<string>, StoreError>
  readonly getBlob: (hash: BlobHash) => Effect.Effect<Option.Option<Uint8Array>, StoreError>
  readonly setRef: (runId: string, name: string, hash: BlobHash) => Effect.Effect<void, StoreError>
  readonly listRefs: (runId: string, prefix: string) => Effect.Effect<ReadonlyArray<Ref>, StoreError>
}

/** The blob service a store offers. */
export interface Service {
  /** Stores the bytes (once) and returns their hash. */
  readonly put: (data: Uint8Array) => Effect.Effect<BlobHash, StoreError>
  /** Stores many (once each) in one write; returns their hashes in order. */
  readonly putAll: (data: ReadonlyArray<Uint8Array>) => Effect.Effect<ReadonlyArray<BlobHash>, StoreError>
  /** Which of these hashes are stored. */
  readonly has: (hashes: ReadonlyArray<BlobHash>) => Effect.Effect<ReadonlySet<string>, StoreError>
  /** A blob's bytes, checked against its hash; `None` if never stored. */
  readonly get: (hash: BlobHash) => Effect.Effect<Option.Option<Uint8Array>, StoreError>
  /** Points the run's ref `name` at a blob (replacing what it pointed at). */
  readonly setRef: (runId: string, name: string, hash: BlobHash) => Effect.Effect<void, StoreError>
  /** The run's refs whose names start with `prefix`, sorted by name. */
  readonly listRefs: (runId: string, prefix?: string) => Effect.Effect<ReadonlyArray<Ref>, StoreError>
}

/** The front over a backend: hashes on put, verifies on get. */
export const make = (backend: Backend): Service => {
  const putAll: Service["putAll"] = (data) =>
    Effect.suspend(() => {
      const blobs = data.map((bytes) => ({ hash: hashOf(bytes), data: bytes }))
      const unique = new Map<string, { readonly hash: BlobHash; readonly data: Uint8Array }>()
      for (const blob of blobs) unique.set(blob.hash, blob)
      const hashes = blobs.map((blob) => blob.hash)
      return unique.size === 0 ? Effect.succeed(hashes) : Effect.as(backend.putBlobs([...unique.values()]), hashes)
    }).pipe(Effect.withSpan("Blobs.put", { attributes: { "polyloop.blobs": data.length } }))
  return {
    put: (data) => Effect.map(putAll([data]), (hashes) => hashes[0]!),
    putAll,
    has: (hashes) => hashes.length === 0 ? Effect.succeed(new Set()) : backend.hasBlobs(hashes),
    get: (hash) =>
      Effect.flatMap(backend.getBlob(hash), (found) => {
        if (Option.isSome(found) && hashOf(found.value) !== hash) {
          return Effect.fail(new StoreError({ reason: "Corrupt", message: `blob ${hash}: its bytes do not hash to its key` }))
        }
        return Effect.succeed(found)
      }).pipe(Effect.withSpan("Blobs.get")),
    setRef: (runId, name, hash) => backend.setRef(runId, name, hash),
    listRefs: (runId, prefix) => backend.listRefs(runId, prefix ?? "")
  }
}

/** An in-memory backend (the memory store's). */
export const makeMemoryBackend = (): Backend => {
  const blobs = new Map<string, Uint8Array>()
  const refs = new Map<string, Map<string, BlobHash>>()
  return {
    putBlobs: (entries) =>
      Effect.sync(() => {
        for (const entry of entries) if (!blobs.has(entry.hash)) blobs.set(entry.hash, Uint8Array.from(entry.data))
      }),
    hasBlobs: (hashes) => Effect.sync(() => new Set(hashes.filter((hash) => blobs.has(hash)))),
    getBlob: (hash) => Effect.sync(() => Option.map(Option.fromNullable(blobs.get(hash)), (data) => Uint8Array.from(data))),
    setRef: (runId, name, hash) =>
      Effect.sync(() => {
        let run = refs.get(runId)
        if (run === undefined) refs.set(runId, run = new Map())
        run.set(name, hash)
      }),
    listRefs: (runId, prefix) =>
      Effect.sync(() =>
        [...(refs.get(runId) ?? new Map<string, BlobHash>()).entries()]
          .filter(([name]) => name.startsWith(prefix))
          .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))
          .map(([name, hash]) => ({ name, hash }))
      )
  }
}
