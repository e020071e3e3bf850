/**
 * The loop's whole test suite (`@polyloop/testing` `AgentLoopSuite`) with the run log in a
 * SQLite file (`SqlRunLogStore.layerSqlite`, its defaults: WAL, `synchronous=FULL`), a fresh file
 * per test.
 */
import * as SqlRunLogStore from "@polyloop/sql/SqlRunLogStore"
import * as AgentLoopSuite from "@polyloop/testing/AgentLoopSuite"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as path from "node:path"
import * as F from "./fixtures.js"

AgentLoopSuite.suite(
  "Agent.run on SqlRunLogStore.layerSqlite",
  () =>
    Layer.unwrapScoped(
      Effect.map(F.tempDir("polyloop-loop-"), (dir) => SqlRunLogStore.layerSqlite({ filename: path.join(dir, "runs.db") }))
    ),
  { timeout: 60_000 }
)
