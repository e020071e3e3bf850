/**
 * The PostgreSQL store as the contract's killed-writer property opens it, in the child that is
 * killed and in the test process that reads back: `layerPg` on the test server
 * (`POLYLOOP_TEST_PG_URL`, inherited by the child), in a schema named after the storage
 * directory, created if missing (the test server is private and thrown away after the run).
 */
import * as Reactivity from "@effect/experimental/Reactivity"
import * as PgClient from "@effect/sql-pg/PgClient"
import * as SqlRunLogStore from "@polyloop/sql/SqlRunLogStore"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Redacted from "effect/Redacted"
import * as crypto from "node:crypto"
import { testPgUrl, urlWithSchema } from "../PgSupport.js"

export const open = (storage: string) =>
  Layer.unwrapScoped(
    Effect.gen(function*() {
      const url = yield* testPgUrl
      const schema = `k_${crypto.createHash("sha256").update(storage).digest("hex").slice(0, 16)}`
      const admin = yield* PgClient.make({ url: Redacted.make(url), maxConnections: 1 }).pipe(Effect.provide(Reactivity.layer), Effect.orDie)
      yield* Effect.orDie(admin.unsafe(`CREATE SCHEMA IF NOT EXISTS ${schema}`))
      return SqlRunLogStore.layerPg({ url: Redacted.make(urlWithSchema(url, schema)), maxConnections: 2 })
    })
  )
