/**
 * The RunLogStore contract (`@polyloop/testing`) against `SqlRunLogStore.layerPg` on the test
 * run's private PostgreSQL server: each case gets a fresh schema; reopening it is a restart or
 * a second worker on the same database; the contract's fault plan is consulted at the store's
 * own fault point, inside the transaction, before each record is inserted. A writer in a child
 * process killed by SIGKILL leaves whole writes, every acknowledged one among them
 * (`support/killable-pg.ts` opens the store there).
 */
import * as SqlRunLogStore from "@polyloop/sql/SqlRunLogStore"
import * as RunLogStoreContract from "@polyloop/testing/RunLogStoreContract"
import * as Effect from "effect/Effect"
import * as Redacted from "effect/Redacted"
import { freshSchemaUrl } from "./PgSupport.js"

const pgStore = (options: Omit<SqlRunLogStore.PgOptions, "url"> = {}) =>
  Effect.map(freshSchemaUrl, (url) => SqlRunLogStore.layerPg({ url: Redacted.make(url), maxConnections: 4, ...options }))

RunLogStoreContract.suite("SqlRunLogStore.layerPg", pgStore(), {
  survivesRestart: true,
  claimsAcrossInstances: true,
  killedWriter: { module: new URL("./support/killable-pg.ts", import.meta.url) },
  faultInjection: (plan) =>
    pgStore({
      faultPoint: ({ runId, seq, stage }) => (stage === "BeforeRecord" ? plan.beforeWrite(runId, seq) : Effect.void)
    }),
  timeout: 240_000
})
