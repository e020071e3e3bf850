/**
 * A runner process of `bench/cluster.ts`: `ClusterRunner` on loopback over a PostgreSQL
 * database, running the benchmarks' workload (the no-op tool, precomputed replies, `STEPS`
 * steps per run). Usage: `node --conditions=@polyloop/source --import tsx bench/lib/cluster-runner.ts <url> <id> <port> <steps>`;
 * prints `ready <id>`, serves until SIGTERM.
 */
import { NodeRuntime } from "@effect/platform-node"
import * as ClusterRunner from "@polyloop/cluster/ClusterRunner"
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
import { createRequire } from "node:module"
import { clusterTimings, maxConcurrentRuns, shardsPerGroup } from "./cluster-settings.js"
import * as F from "./fixtures.js"

const [url, id, port, steps] = process.argv.slice(2)

// `POLYLOOP_BENCH_COUNT_QUERIES=<file>`: every statement this runner sends PostgreSQL is counted
// by its text (the first 100 characters), written as JSON to `<file>.<id>` when the runner stops.
const countFile = process.env["POLYLOOP_BENCH_COUNT_QUERIES"]
if (countFile !== undefined && countFile !== "") {
  const counts = new Map<string, number>()
  // `pg` (under `@effect/sql-pg`, no types of its own here): its `Client.prototype.query`.
  const pg = createRequire(import.meta.url)("pg") as { readonly Client: { readonly prototype: { query: (...args: Array<unknown>) => unknown } } }
  const proto = pg.Client.prototype
  const original = proto.query
  proto.query = function(this: unknown, ...args: Array<unknown>) {
    const first = args[0]
    const text = typeof first === "string" ? first : typeof first === "object" && first !== null && "text" in first ? String((first as { text: unknown }).text) : "?"
    const key = text.replace(/\s+/g, " ").slice(0, 100)
    counts.set(key, (counts.get(key) ?? 0) + 1)
    return original.apply(this, args)
  }
  process.on("exit", () => fs.writeFileSync(`${countFile}.${id}.${process.pid}`, JSON.stringify([...counts].sort((a, b) => b[1] - a[1]), null, 1)))
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
const runner = ClusterRunner.layer({
  payload: Schema.Struct({}),
  resolve: (_payload, runId) => Effect.map(Effect.orDie(F.tools.executor()), (executor) => ({ request: F.request(runId, Number(steps)), executor })),
  maxConcurrentRuns
}).pipe(
  Layer.provideMerge(
    ClusterRunner.layerSocket({ host: "127.0.0.1", port: Number(port), timings: clusterTimings, shardsPerGroup }).pipe(Layer.provide(pool(6)))
  ),
  Layer.provide(services),
  Layer.provide(pool(maxConcurrentRuns + 4)),
  Layer.tap(() => Console.log(`ready ${id}`))
)
NodeRuntime.runMain(Layer.launch(runner).pipe(Logger.withMinimumLogLevel(LogLevel.Warning)))
