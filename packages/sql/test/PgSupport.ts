/**
 * Test support for PostgreSQL: the private server the vitest `globalSetup`
 * (`test/support/pg-global-setup.ts`) starts, and a fresh schema per test so two tests (or two
 * stores) never see each other's tables.
 */
import * as Reactivity from "@effect/experimental/Reactivity"
import type * as SqlClient from "@effect/sql/SqlClient"
import * as PgClient from "@effect/sql-pg/PgClient"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Redacted from "effect/Redacted"

/**
 * The connection URL of the test run's database. Fails (as a defect with the reason) when the
 * server could not be installed or started: a PostgreSQL test never skips silently.
 */
export const testPgUrl: Effect.Effect<string> = Effect.suspend(() => {
  const url = process.env["POLYLOOP_TEST_PG_URL"]
  if (url !== undefined && url.length > 0) return Effect.succeed(url)
  const reason = process.env["POLYLOOP_TEST_PG_ERROR"]
  return Effect.dieMessage(
    reason !== undefined && reason.length > 0
      ? reason
      : "POLYLOOP_TEST_PG_URL is not set: run the tests through vitest with the root vitest.config.ts " +
          "(its globalSetup test/support/pg-global-setup.ts starts a private PostgreSQL server)"
  )
})

let schemaCounter = 0

/** `url` with every connection's `search_path` set to `schema`. */
export const urlWithSchema = (url: string, schema: string): string => {
  const parsed = new URL(url)
  parsed.searchParams.set("options", `-c search_path=${schema}`)
  return parsed.toString()
}

/**
 * Creates a fresh, empty schema on the test server (dropped when the scope closes) and returns
 * a URL whose connections use it.
 */
export const freshSchemaUrl: Effect.Effect<string, never, import("effect/Scope").Scope> = Effect.gen(function*() {
  const url = yield* testPgUrl
  const schema = `t_${process.pid}_${Date.now().toString(36)}_${++schemaCounter}`
  const admin = yield* PgClient.make({ url: Redacted.make(url), maxConnections: 1 }).pipe(Effect.provide(Reactivity.layer))
  yield* Effect.acquireRelease(
    admin.unsafe(`CREATE SCHEMA ${schema}`),
    () => admin.unsafe(`DROP SCHEMA IF EXISTS ${schema} CASCADE`).pipe(Effect.ignore)
  )
  return urlWithSchema(url, schema)
}).pipe(Effect.orDie)

/** A `PgClient` on a fresh schema (dropped afterwards). */
export const layerFreshClient = (
  options: { readonly maxConnections?: number } = {}
): Layer.Layer<PgClient.PgClient | SqlClient.SqlClient> =>
  Layer.unwrapScoped(
    Effect.map(freshSchemaUrl, (url) =>
      PgClient.layer({ url: Redacted.make(url), maxConnections: options.maxConnections ?? 10 }).pipe(Layer.orDie)
    )
  )
