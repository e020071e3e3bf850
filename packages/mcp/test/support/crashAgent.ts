/**
 * The child of the kill test: `node --import tsx crashAgent.ts <db> <recordFile>` runs (or
 * resumes) run `mcp-crash` on the SQLite file `<db>` over the test server's tools. Step 0 calls
 * `record` (replay policy "Never": destructive, not idempotent) which takes a minute — the parent
 * kills this process with SIGKILL while it runs; step 1 calls `echo`; step 2 answers. Prints
 * `result <json>` (stop reason, counters, the observations the model saw) when the run ends.
 */
import * as NodeContext from "@effect/platform-node/NodeContext"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as SqlRunLogStore from "@polyloop/sql/SqlRunLogStore"
import * as McpClient from "@polyloop/mcp/McpClient"
import * as McpToolkit from "@polyloop/mcp/McpToolkit"
import * as ScriptedModel from "@polyloop/testing/ScriptedModel"
import { runAgent, toolTexts } from "./agent.js"
import { testServer } from "./servers.js"

const [db, recordFile] = process.argv.slice(2)
if (db === undefined || recordFile === undefined) throw new Error("usage: crashAgent.ts <db> <recordFile>")

const program = Effect.gen(function*() {
  const client = yield* McpClient.connect({ transport: testServer({ recordFile }) })
  const tools = yield* McpToolkit.fromClient(client)
  const store = SqlRunLogStore.layerSqlite({ filename: db }).pipe(Layer.provide(NodeContext.layer), Layer.orDie)
  const { last, result } = yield* runAgent("mcp-crash", tools, [
    ScriptedModel.toolCall("record", { key: "once", ms: 60_000 }),
    ScriptedModel.toolCall("echo", { text: "resumed" }),
    "done"
  ], store)
  process.stdout.write(`result ${JSON.stringify({ stopReason: result.stopReason, steps: result.steps, effectiveSteps: result.effectiveSteps, resumedCount: result.resumedCount, observations: toolTexts(last) })}\n`)
})

Effect.runPromise(Effect.scoped(program)).then(
  () => process.exit(0),
  (error) => {
    process.stderr.write(`${String(error)}\n`)
    process.exit(1)
  }
)
