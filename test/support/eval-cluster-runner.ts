/**
 * A runner process of the cluster experiment test: `ClusterRunner` over a PostgreSQL database,
 * resolving each submitted run of `eval-cluster-experiment.ts` with `ClusterExperiment.resolver`.
 *
 * Usage: `node eval-cluster-runner.ts <database url> <runner id> <port>`; prints `ready <id>`.
 */
import { NodeRuntime } from "@effect/platform-node"
import * as ClusterRunner from "@polyloop/cluster/ClusterRunner"
import * as EventSink from "@polyloop/core/EventSink"
import * as NativeToolCallParser from "@polyloop/core/NativeToolCallParser"
import * as ClusterExperiment from "@polyloop/eval/ClusterExperiment"
import * as SqlRunLogStore from "@polyloop/sql/SqlRunLogStore"
import * as Console from "effect/Console"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Logger from "effect/Logger"
import * as LogLevel from "effect/LogLevel"
import * as Redacted from "effect/Redacted"
import { timings } from "./cluster-fixture.js"
import { experiment, model } from "./eval-cluster-experiment.js"

const main = (url: string, runnerId: string, port: number) => {
  const client = SqlRunLogStore.layerPgClient({ url: Redacted.make(url), maxConnections: 8 })
  const services = Layer.mergeAll(
    SqlRunLogStore.layer({ path: `runner ${runnerId}`, leaseDuration: timings.leaseDuration, heartbeatInterval: timings.leaseHeartbeat }),
    NativeToolCallParser.layer(),
    EventSink.layerNoop,
    model
  )
  const runner = Layer.unwrapScoped(
    Effect.map(ClusterExperiment.resolver(experiment), (resolve) =>
      ClusterRunner.layer({ payload: ClusterExperiment.Payload, resolve, maxConcurrentRuns: timings.maxConcurrentRuns, busyRetryInterval: timings.busyRetryInterval }))
  )
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

const [url, runnerId, port] = process.argv.slice(2)
if (url === undefined || runnerId === undefined || port === undefined) {
  process.stderr.write("usage: eval-cluster-runner <database url> <runner id> <port>\n")
  process.exit(2)
}
NodeRuntime.runMain(main(url, runnerId, Number(port)))
