/**
 * An experiment on `@polyloop/cluster` (design 0320): every run submitted as a cluster run and
 * run by one of 2 runner processes over PostgreSQL (`ClusterExperiment.execute` and
 * `resolver`); the results are byte-equal to the same experiment run in one process, each run
 * was run once (two model calls recorded per run), both runners ran some, and a second start
 * submits nothing.
 */
import { assert, describe, it } from "@effect/vitest"
import * as Cluster from "@polyloop/cluster/Cluster"
import { RunId } from "@polyloop/core/Ids"
import * as RunLogStore from "@polyloop/core/RunLogStore"
import * as ClusterExperiment from "@polyloop/eval/ClusterExperiment"
import * as Experiment from "@polyloop/eval/Experiment"
import * as ExperimentStore from "@polyloop/eval/ExperimentStore"
import * as Results from "@polyloop/eval/Results"
import * as SqlRunLogStore from "@polyloop/sql/SqlRunLogStore"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Redacted from "effect/Redacted"
import { spawn } from "node:child_process"
import { fileURLToPath } from "node:url"
import { timings } from "./support/cluster-fixture.js"
import { experiment } from "./support/eval-cluster-experiment.js"
import { freshDatabaseUrl } from "./support/pg-database.js"
import { freePort } from "./support/pg-server.js"

const runnerScript = fileURLToPath(new URL("./support/eval-cluster-runner.ts", import.meta.url))

/** Starts a runner process; resolves once it is ready; killed when the scope closes. */
const runner = (url: string, id: string, port: number) =>
  Effect.acquireRelease(
    Effect.promise(() =>
      new Promise<{ readonly kill: () => Promise<void> }>((resolve, reject) => {
        const child = spawn(process.execPath, [runnerScript, url, id, String(port)], { stdio: ["ignore", "pipe", "pipe"] })
        let out = ""
        let err = ""
        const exited = new Promise<void>((done) => child.on("close", () => done()))
        child.stderr.setEncoding("utf8").on("data", (c: string) => (err += c))
        child.stdout.setEncoding("utf8").on("data", (c: string) => {
          out += c
          if (out.includes(`ready ${id}\n`)) resolve({ kill: () => (child.exitCode === null && child.signalCode === null ? (child.kill("SIGKILL"), exited) : exited) })
        })
        void exited.then(() => reject(new Error(`runner ${id} exited before it was ready:\n${out}\n${err}`)))
      })
    ),
    (r) => Effect.promise(() => r.kill())
  )

describe.sequential("an experiment on the cluster", () => {
  it.scopedLive("2 runner processes on PostgreSQL give the results of the same experiment run in one process", () =>
    Effect.gen(function*() {
      // In one process, on the memory store.
      const memory = RunLogStore.inMemory()
      const local = yield* Effect.gen(function*() {
        yield* Experiment.run(experiment)
        return Results.toJson(yield* Results.compute(experiment.name))
      }).pipe(Effect.provide(Layer.merge(memory, ExperimentStore.layer.pipe(Layer.provide(memory)))))

      // On the cluster.
      const url = yield* freshDatabaseUrl("eval_cluster")
      const ports = [yield* Effect.promise(() => freePort()), yield* Effect.promise(() => freePort())]
      const sql = SqlRunLogStore.layerPgClient({ url: Redacted.make(url), maxConnections: 8 })
      const store = SqlRunLogStore.layer({})
      const client = Layer.mergeAll(
        Cluster.layerClient({ timings: timings.cluster, shardsPerGroup: timings.shardsPerGroup }),
        ExperimentStore.layer.pipe(Layer.provideMerge(store))
      ).pipe(Layer.provideMerge(sql))
      // The runners migrate the store and the cluster's tables; the first starts alone.
      yield* runner(url, "r1", ports[0]!)
      yield* runner(url, "r2", ports[1]!)
      const onCluster = yield* Effect.gen(function*() {
        const execute = yield* ClusterExperiment.execute
        const first = yield* Experiment.run(experiment, { execute })
        assert.strictEqual(first.ran, 60)
        assert.strictEqual(first.done, 60)
        const second = yield* Experiment.run(experiment, { execute })
        assert.strictEqual(second.ran, 0)
        const entries = yield* Cluster.list()
        assert.strictEqual(entries.length, 60)
        assert.isTrue(entries.every((e) => e.status === "Finished" && e.attempts === 1))
        const runners = new Set(entries.map((e) => Option.getOrElse(e.runner, () => "?")))
        assert.strictEqual(runners.size, 2, `runs ran on ${[...runners].join(", ")}`)
        const logs = yield* RunLogStore.RunLogStore
        let calls = 0
        for (const e of entries) calls += (yield* logs.readLog(RunId.make(e.runId))).replies.length
        assert.strictEqual(calls, 120)
        return Results.toJson(yield* Results.compute(experiment.name))
      }).pipe(Effect.provide(client))
      assert.strictEqual(onCluster, local)
    }), { timeout: 300_000 })
})
