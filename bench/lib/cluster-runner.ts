/**
 * A runner process of `bench/cluster.ts`: `ClusterRunner` on loopback over a PostgreSQL
 * database, running the benchmarks' workload (the no-op tool, precomputed replies, `STEPS`
 * steps per run). Usage: `node --conditions=@polyloop/source --import tsx bench/lib/cluster-runner.ts <url> <id> <port> <steps>`;
 * prints `ready <id>`, serves until SIGTERM.
 */
import { NodeRuntime } from "@effect/platform-node"
import * as Entity from "@effect/cluster/Entity"
import * as ClusterRunner from "@polyloop/cluster/ClusterRunner"
import * as RunEntity from "@polyloop/cluster/RunEntity"
import * as RunIndex from "@polyloop/cluster/RunIndex"
import * as Agent from "@polyloop/core/Agent"
import { runId as makeRunId } from "@polyloop/core/Ids"
import * as DecisionParser from "@polyloop/core/DecisionParser"
import * as EventSink from "@polyloop/core/EventSink"
import * as ModelClient from "@polyloop/core/ModelClient"
import * as SqlRunLogStore from "@polyloop/sql/SqlRunLogStore"
import * as Console from "effect/Console"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Logger from "effect/Logger"
import * as LogLevel from "effect/LogLevel"
import * as Redacted from "effect/Redacted"
import * as Schema from "effect/Schema"
import * as fs from "node:fs"
import { clusterTimings, maxConcurrentRuns, shardsPerGroup } from "./cluster-settings.js"
import * as F from "./fixtures.js"
import * as PgCount from "./pgCount.js"

const [url, id, port, steps] = process.argv.slice(2)

// `POLYLOOP_BENCH_COUNT_QUERIES=<file>`: every statement this runner sends PostgreSQL is counted
// by its text, written as JSON to `<file>.<id>.<pid>` when the runner stops.
const countFile = process.env["POLYLOOP_BENCH_COUNT_QUERIES"]
if (countFile !== undefined && countFile !== "") {
  const counter = PgCount.install()
  process.on("exit", () => fs.writeFileSync(`${countFile}.${id}.${process.pid}`, JSON.stringify(counter.counts(), null, 1)))
}

if (url === undefined || id === undefined || port === undefined || steps === undefined) {
  process.stderr.write("usage: cluster-runner <url> <id> <port> <steps>\n")
  process.exit(2)
}
const pool = (maxConnections: number) => SqlRunLogStore.layerPgClient({ url: Redacted.make(url), maxConnections })
const services = Layer.mergeAll(
  SqlRunLogStore.layer(),
  Layer.succeedContext(
    Context.pick(DecisionParser.DecisionParser, EventSink.EventSink)(F.loopServices).pipe(
      Context.add(ModelClient.ModelClient, F.model(F.replies(Number(steps))))
    )
  )
)
/**
 * `POLYLOOP_BENCH_CLUSTER_FLOOR=1`: the entity does no run at all — `Start` records `Finished` in
 * the run index (the one write the client waits for) and replies. What the runner then spends
 * per run is `@effect/cluster`'s own cost of a persisted message and its reply, plus that write:
 * the floor under the cluster's overhead (design 0350).
 */
const floor = process.env["POLYLOOP_BENCH_CLUSTER_FLOOR"] === "1"
const floorEntity = Layer.unwrapEffect(Effect.gen(function*() {
  yield* RunIndex.migrate
  return RunEntity.RunEntity.toLayer(Effect.gen(function*() {
    const address = yield* Entity.CurrentAddress
    const runId = makeRunId(address.entityId)
    const result: Agent.RunResult = {
      runId,
      stopReason: { _tag: "Completed", by: "Tool" },
      steps: Number(steps),
      effectiveSteps: Number(steps),
      usage: { inputTokens: 0, outputTokens: 0 },
      resumedCount: 0,
      eventDeliveryFailures: 0
    }
    const outcome = JSON.stringify(Schema.encodeSync(Agent.RunResult)(result))
    return RunEntity.RunEntity.of({
      Start: () => Effect.as(Effect.orDie(RunIndex.transition(runId, "{}", { status: "Finished", outcome })), result),
      Send: () => Effect.die("floor runner: no conversations"),
      Decide: () => Effect.die("floor runner: no decisions"),
      Status: () => Effect.succeed({ runId, state: "Idle" as const, runner: "floor", attempts: 0 })
    })
  }), { concurrency: "unbounded" })
}))

const runner = (floor ? floorEntity : ClusterRunner.layer({
  payload: Schema.Struct({}),
  resolve: (_payload, runId) => Effect.map(Effect.orDie(F.tools.executor()), (executor) => ({ request: F.request(runId, Number(steps)), executor })),
  maxConcurrentRuns
})).pipe(
  Layer.provideMerge(
    ClusterRunner.layerSocket({ host: "127.0.0.1", port: Number(port), timings: clusterTimings, shardsPerGroup }).pipe(Layer.provide(pool(6)))
  ),
  Layer.provide(services),
  Layer.provide(pool(maxConcurrentRuns + 4)),
  Layer.tap(() => Console.log(`ready ${id}`))
)
NodeRuntime.runMain(Layer.launch(runner).pipe(Logger.withMinimumLogLevel(LogLevel.Warning)))
