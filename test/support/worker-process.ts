/**
 * One worker process of the multi-worker test: `Worker.run` over a shared PostgreSQL database
 * (run log, claims and queue), with a scripted model and a `"Never"` tool whose every execution
 * is recorded in `tool_executions` — so the parent can check that no execution happened twice
 * for one step, even across a SIGKILL.
 *
 * Usage: `node --import tsx worker-process.ts <database url> <worker id>`. Prints `ready <id>`
 * once connected, then serves until SIGTERM/SIGINT (graceful: runs in flight go back to the
 * queue) or SIGKILL.
 *
 * Each run: step 0 and step 1 call `charge` (records the execution, then takes a little time,
 * so a kill can land between the side effect and the step's completion), step 2 answers.
 */
import { NodeRuntime } from "@effect/platform-node"
import * as SqlClient from "@effect/sql/SqlClient"
import * as Agent from "@polyloop/core/Agent"
import * as AgentDefinition from "@polyloop/core/AgentDefinition"
import * as EventSink from "@polyloop/core/EventSink"
import { runId as makeRunId } from "@polyloop/core/Ids"
import * as NativeToolCallParser from "@polyloop/core/NativeToolCallParser"
import * as Tool from "@polyloop/core/Tool"
import * as ToolContext from "@polyloop/core/ToolContext"
import * as ToolRegistry from "@polyloop/core/ToolRegistry"
import * as SqlRunLogStore from "@polyloop/sql/SqlRunLogStore"
import * as Worker from "@polyloop/sql/Worker"
import * as ScriptedModel from "@polyloop/testing/ScriptedModel"
import * as Console from "effect/Console"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Redacted from "effect/Redacted"
import * as Schema from "effect/Schema"
import { Payload, timings } from "./worker-fixture.js"

const agent = AgentDefinition.make({
  name: "multi-worker",
  systemPrompt: "Charge twice, then answer.",
  budget: { maxSteps: 8 },
  modelRetry: { maxAttempts: 3, baseDelay: Duration.millis(50), maxDelay: Duration.millis(200) }
})

const main = (url: string, workerId: string) => {
  const charge = Tool.make({
    name: "charge",
    description: "Charges an amount (a side effect that must not run twice).",
    parameters: Schema.Struct({ amount: Schema.Int }),
    replayPolicy: "Never",
    handler: ({ amount }) =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const ctx = yield* ToolContext.ToolContext
        yield* sql`INSERT INTO tool_executions (run_id, step, call_id, worker) VALUES (${ctx.runId}, ${ctx.step}, ${ctx.callId}, ${workerId})`.pipe(
          Effect.orDie
        )
        // The side effect happened; its step is not complete yet.
        yield* Effect.sleep(Duration.millis(40))
        return `charged ${amount}`
      })
  })
  const tools = ToolRegistry.make(charge)

  const model = ScriptedModel.make(
    (_request, call) => (call.step < 2 ? ScriptedModel.toolCall("charge", { amount: call.step + 1 }) : ScriptedModel.text("all charged")),
    { latency: Duration.millis(10) }
  )

  const client = SqlRunLogStore.layerPgClient({ url: Redacted.make(url), maxConnections: 8 })
  const store = SqlRunLogStore.layer({
    path: `worker ${workerId}`,
    leaseDuration: timings.leaseDuration,
    heartbeatInterval: timings.leaseHeartbeat
  })
  const services = Layer.mergeAll(
    store,
    NativeToolCallParser.layer(),
    EventSink.layerNoop,
    Layer.unwrapEffect(Effect.map(model, (m) => m.layer))
  ).pipe(Layer.provideMerge(client))

  return Console.log(`ready ${workerId}`).pipe(
    Effect.zipRight(
      Worker.run({
        concurrency: timings.concurrency,
        workerId,
        pollInterval: timings.pollInterval,
        heartbeatInterval: timings.queueHeartbeat,
        staleAfter: timings.staleAfter,
        retryDelay: timings.retryDelay,
        payload: Payload,
        resolve: ({ n }, job) =>
          Effect.map(tools.executor(), (executor) => ({
            request: { runId: makeRunId(job.runId), agent, task: `charge for run ${n}`, tools } satisfies Agent.RunRequest,
            executor
          }))
      })
    ),
    Effect.provide(services)
  )
}

const [url, workerId] = process.argv.slice(2)
if (url === undefined || workerId === undefined) {
  process.stderr.write("usage: worker-process.ts <database url> <worker id>\n")
  process.exit(2)
}
NodeRuntime.runMain(main(url, workerId))
