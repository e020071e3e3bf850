/**
 * The blob contract (`@polyloop/testing`, design 0330) against both SQL dialects: a fresh SQLite
 * file per case, and a fresh schema on the test run's private PostgreSQL server; reopening is a
 * restart.
 */
import * as SqlRunLogStore from "@polyloop/sql/SqlRunLogStore"
import * as BlobsContract from "@polyloop/testing/BlobsContract"
import * as Effect from "effect/Effect"
import * as Redacted from "effect/Redacted"
import * as path from "node:path"
import * as F from "./fixtures.js"
import { freshSchemaUrl } from "./PgSupport.js"

BlobsContract.suite(
  "SqlRunLogStore.layerSqlite",
  Effect.map(F.tempDir("polyloop-blobs-"), (dir) => SqlRunLogStore.layerSqlite({ filename: path.join(dir, "runs.db"), synchronous: "NORMAL" })),
  { survivesRestart: true, timeout: 120_000 }
)

BlobsContract.suite(
  "SqlRunLogStore.layerPg",
  Effect.map(freshSchemaUrl, (url) => SqlRunLogStore.layerPg({ url: Redacted.make(url), maxConnections: 4 })),
  { survivesRestart: true, timeout: 120_000 }
)
