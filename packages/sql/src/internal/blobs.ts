/**
 * The SQL backend of `Blobs` (design 0330), in both dialects: `polyloop_blobs(hash, size, data)`
 * written with `ON CONFLICT DO NOTHING` (a blob is stored once, whoever puts it first), and
 * `polyloop_refs(run_id, name, hash)` upserted. Statements run on the store's connections
 * (`statements.ts`), so on SQLite they go through the one connection the store holds.
 *
 * @internal
 */
import * as Blobs from "@polyloop/core/Blobs"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import type * as Statements from "./statements.js"

const asBytes = (value: unknown): Uint8Array | undefined => value instanceof Uint8Array ? value : undefined

/** Rows per insert (3 parameters each: under SQLite's oldest limit of 999) and bytes per insert. */
const chunkRows = 300
const chunkBytes = 16 * 1024 * 1024

/** Blobs in insert-sized chunks, in order; a blob over `chunkBytes` is a chunk of its own. */
const chunksOf = <B extends { readonly data: Uint8Array }>(blobs: ReadonlyArray<B>): Array<Array<B>> => {
  const chunks: Array<Array<B>> = []
  let current: Array<B> = []
  let bytes = 0
  for (const blob of blobs) {
    if (current.length > 0 && (current.length >= chunkRows || bytes + blob.data.byteLength > chunkBytes)) {
      chunks.push(current)
      current = []
      bytes = 0
    }
    current.push(blob)
    bytes += blob.data.byteLength
  }
  if (current.length > 0) chunks.push(current)
  return chunks
}

/** The blob backend over the store's statement runner. */
export const make = (statements: Statements.Statements): Blobs.Backend => {
  const { compiled, connect, failWith, sql } = statements
  const putSql = compiled(sql`INSERT INTO polyloop_blobs (hash, size, data) VALUES (${""}, ${0}, ${""}) ON CONFLICT (hash) DO NOTHING`)
  const hasSql = compiled(sql`SELECT hash FROM polyloop_blobs WHERE hash = ${""}`)
  const getSql = compiled(sql`SELECT data FROM polyloop_blobs WHERE hash = ${""}`)
  const setRefSql = compiled(
    sql`INSERT INTO polyloop_refs (run_id, name, hash) VALUES (${""}, ${""}, ${""}) ON CONFLICT (run_id, name) DO UPDATE SET hash = excluded.hash`
  )
  const listRefsSql = compiled(sql`SELECT name, hash FROM polyloop_refs WHERE run_id = ${""} AND substr(name, 1, ${0}) = ${""}`)

  return {
    // Each chunk is one statement, whole on its own: on SQLite's held connection no statement of
    // another fiber can land between two of a put's (design 0003), and a put interrupted or
    // failed between chunks leaves only blobs stored — content-addressed, so harmless; the ref
    // naming them is set after.
    putBlobs: (blobs) =>
      Effect.forEach(chunksOf(blobs), (chunk) =>
        connect((conn) => {
          if (chunk.length === 1) return conn.execute(putSql, [chunk[0]!.hash, chunk[0]!.data.byteLength, chunk[0]!.data], undefined)
          const rows = chunk.map((blob) => ({ hash: blob.hash, size: blob.data.byteLength, data: blob.data }))
          const [text, params] = sql`INSERT INTO polyloop_blobs ${sql.insert(rows)} ON CONFLICT (hash) DO NOTHING`.compile()
          return conn.execute(text, params, undefined)
        }), { discard: true }).pipe(Effect.mapError(failWith("storing blobs"))),
    hasBlobs: (hashes) =>
      connect((conn) =>
        Effect.reduce(hashes, new Set<string>(), (found, hash) =>
          Effect.map(conn.execute(hasSql, [hash], undefined), (rows) => (rows.length > 0 ? found.add(hash) : found)))
      ).pipe(Effect.mapError(failWith("looking up blobs"))),
    getBlob: (hash) =>
      connect((conn) => conn.execute(getSql, [hash], undefined)).pipe(
        Effect.mapError(failWith("reading a blob")),
        Effect.map((rows) => Option.fromNullable(asBytes((rows[0] as { readonly data?: unknown } | undefined)?.data)))
      ),
    setRef: (runId, name, hash) =>
      connect((conn) => conn.execute(setRefSql, [runId, name, hash], undefined)).pipe(
        Effect.mapError(failWith("writing a ref", runId)),
        Effect.asVoid
      ),
    listRefs: (runId, prefix) =>
      connect((conn) => conn.execute(listRefsSql, [runId, prefix.length, prefix], undefined)).pipe(
        Effect.mapError(failWith("listing refs", runId)),
        Effect.map((rows) =>
          (rows as ReadonlyArray<{ readonly name: string; readonly hash: string }>)
            .filter((row) => row.name.startsWith(prefix))
            .map((row): Blobs.Ref => ({ name: row.name, hash: row.hash as Blobs.BlobHash }))
            .sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0))
        )
      )
  }
}
