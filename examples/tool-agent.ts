/**
 * A tool-calling agent (GovDoc-like, see `@polyloop/cli/GovDoc` (packages/cli/src/GovDoc.ts)): it edits two documents in a temporary
 * workspace by writing JSON actions, read by `JsonActionParser` and run by the registry's
 * derived executor; the run log is a SQLite file (`@polyloop/sql`) and the model is scripted.
 *
 *   npx tsx examples/tool-agent.ts
 *
 * Each step is printed as it happens (from the loop's events); at the end the files, the ledger
 * of applied writes and the run's counters are printed. Exits 0 when the run completed through
 * the `submit` tool.
 */
import * as FileSystem from "@effect/platform/FileSystem"
import * as NodeContext from "@effect/platform-node/NodeContext"
import * as NodeRuntime from "@effect/platform-node/NodeRuntime"
import * as Agent from "@polyloop/core/Agent"
import * as EventSink from "@polyloop/core/EventSink"
import { runId } from "@polyloop/core/Ids"
import * as JsonActionParser from "@polyloop/core/JsonActionParser"
import * as StopReason from "@polyloop/core/StopReason"
import * as SqlRunLogStore from "@polyloop/sql/SqlRunLogStore"
import * as ScriptedModel from "@polyloop/testing/ScriptedModel"
import * as Console from "effect/Console"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as path from "node:path"
import * as GovDoc from "@polyloop/cli/GovDoc"
import { print } from "./steps.js"

const main = Effect.gen(function*() {
  const fs = yield* FileSystem.FileSystem
  const dir = yield* fs.makeTempDirectoryScoped({ prefix: "polyloop-tool-agent-" })
  const root = path.join(dir, "workspace")
  yield* GovDoc.seed(root)
  const tools = GovDoc.makeTools(root)

  const services = Agent.layer({
    store: SqlRunLogStore.layerSqlite({ filename: path.join(dir, "runs.db") }),
    model: ScriptedModel.layer(GovDoc.script),
    parser: JsonActionParser.layer(),
    tools,
    events: EventSink.layer(print)
  }).pipe(Layer.provide(NodeContext.layer))

  yield* Console.log(`task: ${GovDoc.task}\nworkspace: ${root}\n`)
  const result = yield* Agent.run({ runId: runId("tool-agent-1"), agent: GovDoc.agent, task: GovDoc.task, tools }).pipe(
    Effect.provide(services)
  )

  yield* Console.log(
    `\nsteps: ${result.steps} (${result.effectiveSteps} effective), tokens: ${result.usage.inputTokens} in + ${result.usage.outputTokens} out`
  )
  for (const name of Object.keys(GovDoc.initialFiles)) {
    yield* Console.log(`\n--- ${name}\n${yield* fs.readFileString(path.join(root, name))}`)
  }
  const applied = yield* GovDoc.ledger(root)
  yield* Console.log(`--- writes applied (idempotency keys)\n${applied.map((entry) => `${entry.key}  ${entry.tool} ${entry.path}`).join("\n")}`)
  if (result.stopReason._tag !== "Completed") {
    return yield* Effect.fail(`the run did not complete: ${StopReason.format(result.stopReason)}`)
  }
}).pipe(Effect.scoped, Effect.provide(NodeContext.layer))

NodeRuntime.runMain(main)
