/**
 * One runner process of the sandbox cluster test: `ClusterRunner` over a shared PostgreSQL
 * database whose runs act by code, executed by `@polyloop/sandbox` (its snapshots are blobs in
 * the same database). Each runner has a sessions root of its own — a different machine's disk, as
 * far as the sandbox can tell.
 *
 * Usage: `node sandbox-cluster-runner.ts <database url> <runner id> <port> <sandbox root> <crash>`
 * where `<crash>` is `none` or `<run id>` — this runner then kills itself with SIGKILL right after
 * that run's snapshot of step `crashStep` is stored (before the step's result is). Prints
 * `ready <id>` once registered, then serves until SIGTERM/SIGINT or SIGKILL.
 *
 * Started with tsx (vitest's NODE_OPTIONS), not bundled: the sandbox finds its drivers beside its
 * own module.
 */
import { NodeRuntime } from "@effect/platform-node"
import * as ClusterRunner from "@polyloop/cluster/ClusterRunner"
import type * as Agent from "@polyloop/core/Agent"
import { ActionExecutor } from "@polyloop/core/ActionExecutor"
import * as AgentDefinition from "@polyloop/core/AgentDefinition"
import * as CodeBlockParser from "@polyloop/core/CodeBlockParser"
import * as EventSink from "@polyloop/core/EventSink"
import { runId as makeRunId } from "@polyloop/core/Ids"
import * as ToolRegistry from "@polyloop/core/ToolRegistry"
import * as Sandbox from "@polyloop/sandbox/Sandbox"
import * as SqlRunLogStore from "@polyloop/sql/SqlRunLogStore"
import * as ScriptedModel from "@polyloop/testing/ScriptedModel"
import * as Console from "effect/Console"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Logger from "effect/Logger"
import * as LogLevel from "effect/LogLevel"
import * as Redacted from "effect/Redacted"
import { Payload, timings } from "./cluster-fixture.js"
import { crashStep, nextProgram } from "./sandbox-cluster-script.js"

const agent = AgentDefinition.make({
  name: "sandbox-cluster",
  systemPrompt: "Analyse data.csv in Python; call final_answer when done.",
  budget: { maxSteps: 20 },
  modelRetry: { maxAttempts: 3, baseDelay: Duration.millis(50), maxDelay: Duration.millis(200) }
})

const main = (url: string, runnerId: string, port: number, root: string, crash: string) => {
  const client = SqlRunLogStore.layerPgClient({ url: Redacted.make(url), maxConnections: 8 })
  const store = SqlRunLogStore.layer({ path: `runner ${runnerId}`, leaseDuration: timings.leaseDuration, heartbeatInterval: timings.leaseHeartbeat })
  const services = Layer.mergeAll(
    CodeBlockParser.layer({ language: "python" }),
    EventSink.layerNoop,
    ScriptedModel.layer((request) => ScriptedModel.code("python", nextProgram(request))),
    // The runner's code actions: the sandbox executor over the same store (its blobs).
    Sandbox.layer({
      root,
      wallTime: "20 seconds",
      crashPoint: ({ runId, stage, step }) =>
        runId === crash && stage === "AfterSnapshot" && step === crashStep ? Effect.sync(() => process.kill(process.pid, "SIGKILL")) : Effect.void
    })
  ).pipe(Layer.provideMerge(store))
  const runner = ClusterRunner.layer({
    payload: Payload,
    // A code-acting run: no tools; its actions go to the sandbox executor in context.
    resolve: (_payload, id) =>
      Effect.map(ActionExecutor, (executor) => ({
        request: { runId: makeRunId(id), agent, task: "analyse data.csv", tools: ToolRegistry.empty } satisfies Agent.RunRequest,
        executor
      })),
    maxConcurrentRuns: 4,
    busyRetryInterval: timings.busyRetryInterval,
    retryBaseDelay: Duration.millis(500),
    maxFailures: 8
  })
  const clusterClient = SqlRunLogStore.layerPgClient({ url: Redacted.make(url), maxConnections: 6 })
  return runner.pipe(
    Layer.provideMerge(
      ClusterRunner.layerSocket({ host: "127.0.0.1", port, timings: timings.cluster, shardsPerGroup: timings.shardsPerGroup }).pipe(
        Layer.provide(clusterClient)
      )
    ),
    Layer.provide(services),
    Layer.provide(client),
    Layer.tap(() => Console.log(`ready ${runnerId}`)),
    Layer.launch,
    Logger.withMinimumLogLevel(LogLevel.Warning)
  )
}

const [url, runnerId, port, root, crash] = process.argv.slice(2)
if (url === undefined || runnerId === undefined || port === undefined || root === undefined || crash === undefined) {
  process.stderr.write("usage: sandbox-cluster-runner <database url> <runner id> <port> <sandbox root> <none | run id>\n")
  process.exit(2)
}
NodeRuntime.runMain(main(url, runnerId, Number(port), root, crash))
