/**
 * The loop's whole test suite (`@polyloop/testing` `AgentLoopSuite`) with the run log on
 * PostgreSQL (`SqlRunLogStore.layerPg`), a fresh schema per test.
 */
import * as SqlRunLogStore from "@polyloop/sql/SqlRunLogStore"
import * as AgentLoopSuite from "@polyloop/testing/AgentLoopSuite"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Redacted from "effect/Redacted"
import { freshSchemaUrl } from "./PgSupport.js"

AgentLoopSuite.suite(
  "Agent.run on SqlRunLogStore.layerPg",
  () => Layer.unwrapScoped(Effect.map(freshSchemaUrl, (url) => SqlRunLogStore.layerPg({ url: Redacted.make(url), maxConnections: 4 }))),
  { timeout: 60_000 }
)
