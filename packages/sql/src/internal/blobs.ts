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

/** The blob backend over the store's statement runner. */
export const make = (statements: Statements.Statements): Blobs.Backend => {
  const { compiled, connect, failWith, sql, transaction } = statements
  const putSql = compiled(sql`INSERT INTO polyloop_blobs (hash, size, data) VALUES (${""}, ${0}, ${""}) ON CONFLICT (hash) DO NOTHING`)
  const hasSql = compiled(sql`SELECT hash FROM polyloop_blobs WHERE hash = ${""}`)
  const getSql = compiled(sql`SELECT data FROM polyloop_blobs WHERE hash = ${""}`)
  const setRefSql = compiled(
    sql`INSERT INTO polyloop_refs (run_id, name, hash) VALUES (${""}, ${""}, ${""}) ON CONFLICT (run_id, name) DO UPDATE SET hash = excluded.hash`
  )
  const listRefsSql = compiled(sql`SELECT name, hash FROM polyloop_refs WHERE run_id = ${""} AND substr(name, 1, ${0}) = ${""}`)

  return {
    putBlobs: (blobs) =>
      transaction((conn) =>
        Effect.forEach(blobs, (blob) => conn.execute(putSql, [blob.hash, blob.data.byteLength, blob.data], undefined), { discard: true })
      ).pipe(Effect.mapError(failWith("storing blobs"))),
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
