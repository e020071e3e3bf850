/**
 * The child of the sandbox crash test: runs (or resumes) a scripted data-analysis agent whose
 * Python code runs in the sandbox, on a SQLite file or a PostgreSQL database, until the parent
 * kills it with SIGKILL or the run finishes. Arguments: `sqlite <file> | pg <url>`, the run id,
 * the sandbox root, and a crash point `none | BeforeSnapshot:<step> | AfterSnapshot:<step>` at
 * which the child kills itself. Prints `running` when the run starts or resumes and `finished
 * <stop reason>` at the end.
 *
 * The scripted model is a function of the history: its next program is the one after the last
 * that ran, so a step the resume settled as interrupted is written again, as a model would.
 */
import * as NodeRuntime from "@effect/platform-node/NodeRuntime"
import * as Agent from "@polyloop/core/Agent"
import * as AgentDefinition from "@polyloop/core/AgentDefinition"
import * as CodeBlockParser from "@polyloop/core/CodeBlockParser"
import * as EventSink from "@polyloop/core/EventSink"
import { runId } from "@polyloop/core/Ids"
import type * as RunLogStore from "@polyloop/core/RunLogStore"
import * as ToolRegistry from "@polyloop/core/ToolRegistry"
import * as Sandbox from "@polyloop/sandbox/Sandbox"
import * as SqlRunLogStore from "@polyloop/sql/SqlRunLogStore"
import * as ScriptedModel from "@polyloop/testing/ScriptedModel"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Redacted from "effect/Redacted"
import * as StopReason from "@polyloop/core/StopReason"
import { nextProgram } from "./crash-script.js"

export const agent = AgentDefinition.make({
  name: "crash-analyst",
  systemPrompt: "Analyse data.csv in Python; call final_answer when done.",
  budget: { maxSteps: 40 }
})

const main = Effect.gen(function*() {
  const [kind, location, id, root, crash] = process.argv.slice(2) as [string, string, string, string, string]
  const store: Layer.Layer<RunLogStore.RunLogStore, unknown> = kind === "sqlite"
    ? SqlRunLogStore.layerSqlite({ filename: location, synchronous: "FULL" })
    : SqlRunLogStore.layerPg({ url: Redacted.make(location), maxConnections: 2, reclaimDeadLocalOwners: true, leaseDuration: "3 seconds" })
  const [stage, at] = crash === "none" ? ["none", -1] : [crash.split(":")[0], Number(crash.split(":")[1])]
  const services = Layer.mergeAll(
    ScriptedModel.layer((request) => ScriptedModel.code("python", nextProgram(request))),
    CodeBlockParser.layer({ language: "python" }),
    EventSink.layer((event) => event._tag === "RunStarted" || event._tag === "RunResumed" ? Effect.sync(() => console.log("running")) : Effect.void),
    Sandbox.layer({
      root,
      wallTime: "20 seconds",
      crashPoint: ({ stage: now, step }) =>
        now === stage && step === at ? Effect.sync(() => process.kill(process.pid, "SIGKILL")) : Effect.void
    })
  ).pipe(Layer.provideMerge(store))
  const result = yield* Agent.run({ runId: runId(id), agent, task: "analyse data.csv", tools: ToolRegistry.empty }).pipe(Effect.provide(services))
  console.log(`finished ${StopReason.format(result.stopReason)}`)
})

NodeRuntime.runMain(main)
