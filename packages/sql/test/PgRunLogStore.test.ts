/**
 * The RunLogStore contract (`@polyloop/testing`) against `SqlRunLogStore.layerPg` on the test
 * run's private PostgreSQL server: each case gets a fresh schema; reopening it is a restart or
 * a second worker on the same database.
 */
import * as SqlRunLogStore from "@polyloop/sql/SqlRunLogStore"
import * as RunLogStoreContract from "@polyloop/testing/RunLogStoreContract"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Redacted from "effect/Redacted"
import { freshSchemaUrl } from "./PgSupport.js"

const pgStore = Effect.map(freshSchemaUrl, (url) =>
  SqlRunLogStore.layerPg({ url: Redacted.make(url), maxConnections: 4, leaseDuration: Duration.seconds(30) })
)

RunLogStoreContract.suite("SqlRunLogStore.layerPg", pgStore, {
  survivesRestart: true,
  claimsAcrossInstances: true,
  timeout: 120_000
})
