/**
 * A runner started before its database comes up (issue 44, item 11; design 0364): with
 * `connectRetry`, the runner process logs each failed connection attempt, joins the cluster once
 * PostgreSQL answers, and runs what is submitted. The database "comes up" as a TCP forwarder to
 * a private server, opened on the port the runner was given while nothing listened there.
 */
import { assert, describe, it } from "@effect/vitest"
import * as SqlClient from "@effect/sql/SqlClient"
import * as Cluster from "@polyloop/cluster/Cluster"
import * as SqlRunLogStore from "@polyloop/sql/SqlRunLogStore"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Redacted from "effect/Redacted"
import * as net from "node:net"
import { createExecutionsTable, timings } from "./support/cluster-fixture.js"
import * as PgServer from "./support/pg-server.js"
import { spawnRunner } from "./support/runner-spawn.js"

/** Forwards 127.0.0.1:`port` to `target` until the scope closes. */
const forward = (port: number, target: URL) =>
  Effect.acquireRelease(
    Effect.promise(() =>
      new Promise<{ readonly server: net.Server; readonly sockets: Set<net.Socket> }>((resolve, reject) => {
        const sockets = new Set<net.Socket>()
        const server = net.createServer((socket) => {
          const upstream = net.connect(Number(target.port || 5432), target.hostname)
          sockets.add(socket).add(upstream)
          socket.pipe(upstream).pipe(socket)
          socket.on("error", () => upstream.destroy())
          upstream.on("error", () => socket.destroy())
        })
        server.once("error", reject)
        server.listen(port, "127.0.0.1", () => resolve({ server, sockets }))
      })
    ),
    ({ server, sockets }) =>
      Effect.promise(() =>
        new Promise<void>((resolve) => {
          sockets.forEach((s) => s.destroy())
          server.close(() => resolve())
        })
      )
  )

const at = (url: string, port: number): string => {
  const parsed = new URL(url)
  parsed.hostname = "127.0.0.1"
  parsed.port = String(port)
  return parsed.toString()
}

describe.sequential("a cluster runner started while PostgreSQL is down", () => {
  it.scopedLive("logs each attempt, joins once the database answers, and runs what is submitted", () =>
    Effect.gen(function*() {
      const server = yield* Effect.acquireRelease(
        Effect.promise(() => PgServer.start({ database: "runner_waits", log: () => {} })),
        (s) => Effect.sync(() => s.stop())
      )
      const url = server.url
      yield* Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        yield* SqlRunLogStore.migrate()
        yield* sql.unsafe(createExecutionsTable)
      }).pipe(Effect.provide(SqlRunLogStore.layerPgClient({ url: Redacted.make(url), maxConnections: 2 })))

      const databasePort = yield* Effect.promise(() => PgServer.freePort())
      const runnerPort = yield* Effect.promise(() => PgServer.freePort())
      const runner = yield* spawnRunner(at(url, databasePort), "waiting-runner", runnerPort, { POLYLOOP_TEST_CONNECT_RETRY_MS: "200" })
      // While nothing listens at its database's address: it waits, logging each attempt.
      let attempts = 0
      for (let i = 0; i < 300 && attempts < 3; i++) {
        yield* Effect.sleep(Duration.millis(50))
        attempts = runner.stdout().split("\n").filter((l) => l.includes("connection attempt")).length
      }
      assert.isAtLeast(attempts, 3, runner.stdout() + runner.stderr())
      assert.isNull(runner.child.exitCode, "the runner did not exit while its database was down")
      assert.include(runner.stdout(), `127.0.0.1:${databasePort}`)

      // The database comes up at that address: the runner joins and runs what is submitted.
      yield* forward(databasePort, new URL(url))
      yield* Effect.promise(() => runner.ready).pipe(Effect.timeoutFail({ duration: Duration.seconds(60), onTimeout: () => new Error(runner.stderr()) }), Effect.orDie)
      const results = yield* Effect.forEach(["late-0", "late-1", "late-2"], (id, n) => Effect.zipRight(Cluster.submit(id, { n }), Cluster.await(id))).pipe(
        Effect.provide(
          Layer.merge(Cluster.layerClient({ timings: timings.cluster, shardsPerGroup: timings.shardsPerGroup }), SqlRunLogStore.layer()).pipe(
            Layer.provideMerge(SqlRunLogStore.layerPgClient({ url: Redacted.make(url), maxConnections: 4 }))
          )
        )
      )
      assert.deepStrictEqual(results.map((r) => r.stopReason._tag), ["Completed", "Completed", "Completed"])
      runner.child.kill("SIGTERM")
      const exit = yield* Effect.promise(() => runner.exited)
      assert.deepStrictEqual(exit, { code: 0, signal: null }, runner.stderr())
    }), 180_000)
})
