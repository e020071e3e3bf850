/**
 * The RunLogStore contract (`@polyloop/testing`) against `SqlRunLogStore.layerSqlite`: each case
 * gets a fresh file; reopening it is a restart or a second process on the same file; the
 * contract's fault plan is consulted at the store's own fault point, inside the transaction,
 * before each record is inserted. A writer in a child process killed by SIGKILL leaves whole
 * writes, every acknowledged one among them (`support/killable-sqlite.ts` opens the store there).
 */
import * as SqlRunLogStore from "@polyloop/sql/SqlRunLogStore"
import * as RunLogStoreContract from "@polyloop/testing/RunLogStoreContract"
import * as Effect from "effect/Effect"
import * as path from "node:path"
import * as F from "./fixtures.js"

const sqliteStore = (options: Omit<SqlRunLogStore.SqliteOptions, "filename"> = {}) =>
  Effect.map(F.tempDir("polyloop-contract-"), (dir) =>
    SqlRunLogStore.layerSqlite({ filename: path.join(dir, "runs.db"), synchronous: "NORMAL", ...options }))

RunLogStoreContract.suite("SqlRunLogStore.layerSqlite", sqliteStore(), {
  survivesRestart: true,
  claimsAcrossInstances: true,
  killedWriter: { module: new URL("./support/killable-sqlite.ts", import.meta.url) },
  faultInjection: (plan) =>
    sqliteStore({
      faultPoint: ({ runId, seq, stage }) => stage === "BeforeRecord" ? plan.beforeWrite(runId, seq) : Effect.void
    }),
  timeout: 240_000
})
