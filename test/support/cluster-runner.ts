/**
 * One runner process of the cluster failover tests: `ClusterRunner` over a shared PostgreSQL
 * database (run log, claims, the cluster's messages, runners and shard locks, the run index),
 * listening on loopback, with a scripted model and a `"Never"` tool whose every execution is
 * recorded in `tool_executions` — so the parent can check that no execution happened twice for
 * one step, even across a SIGKILL.
 *
 * Usage: `node cluster-runner.mjs <database url> <runner id> <port>`. Prints `ready <id>` once
 * the runner is registered, then serves until SIGTERM/SIGINT (graceful: runs in flight stop
 * resumable and move) or SIGKILL.
 *
 * Each run (each turn of a conversation sent with `Cluster.send`): its first two steps call
 * `charge` (records the execution, then takes a little time, so a kill can land between the side
 * effect and the step's completion), the third answers.
 *
 * With `POLYLOOP_TEST_SUBAGENTS=1` (design 0414) each submitted run is a planner whose step 0
 * hands two parts to `delegate`, a sub-agent whose child runs are the runs above (two charges,
 * then "all charged"), both at once; its step 1 answers "delegated".
 */
import { NodeRuntime } from "@effect/platform-node"
import * as SqlClient from "@effect/sql/SqlClient"
import * as ClusterRunner from "@polyloop/cluster/ClusterRunner"
import * as Agent from "@polyloop/core/Agent"
import * as AgentDefinition from "@polyloop/core/AgentDefinition"
import * as EventSink from "@polyloop/core/EventSink"
import { runId as makeRunId } from "@polyloop/core/Ids"
import * as ModelReply from "@polyloop/core/ModelReply"
import * as NativeToolCallParser from "@polyloop/core/NativeToolCallParser"
import * as Tool from "@polyloop/core/Tool"
import * as ToolContext from "@polyloop/core/ToolContext"
import * as ToolRegistry from "@polyloop/core/ToolRegistry"
import * as SqlRunLogStore from "@polyloop/sql/SqlRunLogStore"
import * as ScriptedModel from "@polyloop/testing/ScriptedModel"
import * as Console from "effect/Console"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Logger from "effect/Logger"
import * as LogLevel from "effect/LogLevel"
import * as Redacted from "effect/Redacted"
import * as Schedule from "effect/Schedule"
import * as Schema from "effect/Schema"
import * as SubAgent from "@polyloop/core/SubAgent"
import { randomUUID } from "node:crypto"
import * as fs from "node:fs"
import { holdFileOf, Payload, timings } from "./cluster-fixture.js"

const holdFile = holdFileOf(process.pid)

const agent = AgentDefinition.make({
  name: "cluster-failover",
  systemPrompt: "Charge twice, then answer.",
  budget: { maxSteps: 8 },
  modelRetry: { maxAttempts: 3, baseDelay: Duration.millis(50), maxDelay: Duration.millis(200) }
})

const planner = AgentDefinition.make({
  name: "cluster-planner",
  systemPrompt: "Delegate two parts, then answer.",
  // The children's steps count in it (design 0392): 2 of its own and 2 × 3 of theirs.
  budget: { maxSteps: 12 },
  actionConcurrency: 2,
  modelRetry: { maxAttempts: 3, baseDelay: Duration.millis(50), maxDelay: Duration.millis(200) }
})

const main = (url: string, runnerId: string, port: number) => {
  const charge = Tool.make({
    name: "charge",
    description: "Charges an amount (a side effect that must not run twice).",
    parameters: Schema.Struct({ amount: Schema.Int }),
    replayPolicy: "Never",
    handler: ({ amount }) =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const ctx = yield* ToolContext.ToolContext
        const token = yield* Effect.sync(() => randomUUID())
        yield* sql`INSERT INTO tool_executions (run_id, step, call_id, worker, token)
          VALUES (${ctx.runId}, ${ctx.step}, ${ctx.callId}, ${runnerId}, ${token}) ON CONFLICT (token) DO NOTHING`.pipe(
          // The database may be restarting: the same execution's row, again until it is there.
          Effect.retry(Schedule.exponential(Duration.millis(100)).pipe(Schedule.upTo(Duration.seconds(60)))),
          Effect.orDie
        )
        // The side effect happened; its step is not complete yet. Held here for good while the
        // test is about to kill this runner (`holdFileOf`).
        if (fs.existsSync(holdFile)) yield* Effect.never
        yield* Effect.sleep(Duration.millis(40))
        return `charged ${amount}`
      })
  })
  const tools = ToolRegistry.make(charge)
  const subAgents = process.env["POLYLOOP_TEST_SUBAGENTS"] === "1"
  const delegate = SubAgent.tool({
    name: "delegate",
    description: "Hands one part of the work to an agent that charges for it.",
    parameters: Schema.Struct({ part: Schema.Int }),
    agent,
    tools,
    task: ({ part }) => `charge for part ${part}`
  })
  const plannerTools = ToolRegistry.make(delegate)

  // Per turn (a single-task run is one turn, so its steps are the run's): two charges, then the
  // answer (a conversation's turn, `Cluster.send`, the same).
  const model = ScriptedModel.make(
    (request) => {
      const messages = request.messages
      const system = messages[0]
      if (system?._tag === "System" && system.text === planner.systemPrompt) {
        return messages.some((m) => m._tag === "Assistant")
          ? ScriptedModel.text("delegated")
          : ModelReply.make({
            text: "",
            toolCalls: [1, 2].map((part) => ({ id: "", name: "delegate", argumentsText: JSON.stringify({ part }) }))
          })
      }
      let since = 0
      for (let i = messages.length - 1; i >= 0 && messages[i]!._tag !== "User"; i--) if (messages[i]!._tag === "Assistant") since++
      return since < 2 ? ScriptedModel.toolCall("charge", { amount: since + 1 }) : ScriptedModel.text("all charged")
    },
    { latency: Duration.millis(10) }
  )

  // POLYLOOP_TEST_CONNECT_RETRY_MS: connect again every that many ms while the database is down (design 0364).
  const retryMs = Number(process.env["POLYLOOP_TEST_CONNECT_RETRY_MS"] ?? "")
  const connectRetry = Number.isFinite(retryMs) && retryMs > 0 ? { connectRetry: Schedule.spaced(Duration.millis(retryMs)) } : {}
  const client = SqlRunLogStore.layerPgClient({ url: Redacted.make(url), maxConnections: 16, ...connectRetry })
  const services = Layer.mergeAll(
    SqlRunLogStore.layer({ path: `runner ${runnerId}`, leaseDuration: timings.leaseDuration, heartbeatInterval: timings.leaseHeartbeat }),
    NativeToolCallParser.layer(),
    EventSink.layerNoop,
    Layer.unwrapEffect(Effect.map(model, (m) => m.layer))
  )
  const runner = ClusterRunner.layer({
    payload: Payload,
    resolve: ({ n }, id) =>
      subAgents
        ? Effect.map(plannerTools.executor(), (executor) => ({
          request: { runId: makeRunId(id), agent: planner, task: `delegate the charges of run ${n}`, tools: plannerTools } satisfies Agent.RunRequest,
          executor
        }))
        : Effect.map(tools.executor(), (executor) => ({
          request: { runId: makeRunId(id), agent, task: `charge for run ${n}`, tools } satisfies Agent.RunRequest,
          executor
        })),
    maxConcurrentRuns: timings.maxConcurrentRuns,
    busyRetryInterval: timings.busyRetryInterval,
    retryBaseDelay: Duration.millis(500),
    maxFailures: 8
  })
  // The cluster's storage gets a pool of its own (design 0200): its shard-lock operations must
  // never wait behind the runs' statements.
  const clusterClient = SqlRunLogStore.layerPgClient({ url: Redacted.make(url), maxConnections: 6, ...connectRetry })
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

const [url, runnerId, port] = process.argv.slice(2)
if (url === undefined || runnerId === undefined || port === undefined) {
  process.stderr.write("usage: cluster-runner <database url> <runner id> <port>\n")
  process.exit(2)
}
NodeRuntime.runMain(main(url, runnerId, Number(port)))
