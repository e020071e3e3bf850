/**
 * A fresh database on the test run's private PostgreSQL server (see `pg-global-setup.ts`), for
 * tests that share one database between processes. Dropped when the scope closes.
 */
import * as Reactivity from "@effect/experimental/Reactivity"
import * as PgClient from "@effect/sql-pg/PgClient"
import * as Effect from "effect/Effect"
import * as Redacted from "effect/Redacted"
import type * as Scope from "effect/Scope"
import { testPgUrl } from "./pg-url.js"

let counter = 0

/** Creates an empty database and returns its URL; fails the test (with the reason) when PostgreSQL is unavailable. */
export const freshDatabaseUrl = (prefix: string): Effect.Effect<string, never, Scope.Scope> =>
  Effect.gen(function*() {
    const url = yield* Effect.sync(testPgUrl)
    const name = `${prefix}_${process.pid}_${Date.now().toString(36)}_${++counter}`.toLowerCase().replace(/[^a-z0-9_]/g, "_")
    const admin = yield* PgClient.make({ url: Redacted.make(url), maxConnections: 1 }).pipe(Effect.provide(Reactivity.layer))
    yield* Effect.acquireRelease(admin.unsafe(`CREATE DATABASE ${name}`), () =>
      admin.unsafe(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`).pipe(Effect.ignore))
    const parsed = new URL(url)
    parsed.pathname = `/${name}`
    return parsed.toString()
  }).pipe(Effect.orDie)
