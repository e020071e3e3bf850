/**
 * The database restarts under the cluster (design 0200, issue 20): 2 runner processes and a
 * client on a PostgreSQL server of this test's own; in the middle of the runs the server is
 * restarted (`pg_ctl restart -m fast`: every connection is cut). The runners reconnect (their
 * pools open new connections, the shard locks are taken again, failed store writes are retried
 * as `StoreError`s) and every run still finishes exactly once, with no step recorded twice and
 * no `"Never"` tool run twice for one step.
 */
import { assert, describe, it } from "@effect/vitest"
import * as SqlClient from "@effect/sql/SqlClient"
import * as Cluster from "@polyloop/cluster/Cluster"
import * as RunIndex from "@polyloop/cluster/RunIndex"
import * as SqlRunLogStore from "@polyloop/sql/SqlRunLogStore"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Redacted from "effect/Redacted"
import * as Schedule from "effect/Schedule"
import { checkExactlyOnce } from "./support/cluster-checks.js"
import { createExecutionsTable, timings } from "./support/cluster-fixture.js"
import * as PgServer from "./support/pg-server.js"
import { spawnRunner } from "./support/runner-spawn.js"

const RUNS = 120
const RUNNERS = 2

/** Polls until `done`, through failures (the database may be down), up to `timeout`. */
const poll = <A, E, R>(what: string, effect: Effect.Effect<A, E, R>, done: (a: A) => boolean, timeout: Duration.DurationInput) =>
  effect.pipe(
    Effect.filterOrFail(done, () => "not yet" as const),
    Effect.retry(Schedule.spaced(Duration.millis(50))),
    Effect.timeoutFail({ duration: timeout, onTimeout: () => new Error(`timed out waiting for ${what}`) }),
    Effect.orDie
  )

describe.sequential("the cluster across a PostgreSQL restart", () => {
  it.scopedLive(
    `${RUNNERS} runner processes run ${RUNS} runs; the server restarts mid-way; every run finishes exactly once`,
    () =>
      Effect.gen(function*() {
        const server = yield* Effect.acquireRelease(
          Effect.promise(() => PgServer.start({ database: "cluster_restart", log: () => {} })),
          (s) => Effect.sync(() => s.stop())
        )
        const url = server.url
        yield* Effect.gen(function*() {
          const sql = yield* SqlClient.SqlClient
          yield* SqlRunLogStore.migrate()
          yield* sql.unsafe(createExecutionsTable)
          const ports = yield* Effect.forEach(Array.from({ length: RUNNERS }), () => Effect.promise(() => PgServer.freePort()))
          const runners = yield* Effect.forEach(ports, (port, i) => spawnRunner(url, `runner-${i}`, port))
          yield* Effect.promise(() => Promise.all(runners.map((r) => r.ready)))

          const ids = Array.from({ length: RUNS }, (_, i) => `run-${String(i).padStart(3, "0")}`)
          yield* Effect.forEach(ids, (id, n) => Cluster.submit(id, { n }), { concurrency: 8, discard: true })

          // Mid-way: some runs finished, some in flight.
          const underWay = yield* poll(
            "runs to be under way",
            sql<{ done: number | string; inflight: number | string }>`SELECT
              (SELECT count(*) FROM polyloop_runs WHERE status = 'Finished') AS done,
              (SELECT count(*) FROM polyloop_runs WHERE status = 'Unfinished') AS inflight`,
            ([row]) => Number(row?.done) >= RUNS / 5 && Number(row?.inflight) >= 4,
            Duration.seconds(300)
          )
          yield* Effect.sync(() => server.restart())
          yield* poll(
            "the server to answer again",
            sql<{ done: number | string }>`SELECT count(*) AS done FROM polyloop_runs WHERE status = 'Finished'`,
            () => true,
            Duration.seconds(60)
          )
          // Read before the restart: how many runs were left once the server answered again
          // depends on how fast the runners reconnected and finished, not on the restart.
          assert.isAtLeast(Number(underWay[0]?.inflight), 4, "runs were in flight when the server restarted")
          assert.isBelow(Number(underWay[0]?.done), RUNS, "runs were left to finish when the server restarted")

          yield* poll(
            "every run to finish",
            sql<{ done: number | string }>`SELECT count(*) AS done FROM polyloop_runs WHERE status = 'Finished'`,
            ([row]) => Number(row?.done) === RUNS,
            Duration.seconds(400)
          )
          // `await` gives every run's result (from the index, or from the log where a runner's
          // index write was lost to the restart).
          const results = yield* Effect.forEach(ids, (id) => Cluster.await(id), { concurrency: 16 })
          assert.deepStrictEqual(new Set(results.map((r) => r.stopReason._tag)), new Set(["Completed"]))
          const rows = yield* RunIndex.list()
          const stale = rows.filter((e) => e.status !== "Finished").map((e) => `${e.runId}: ${e.status}`)

          // The runners are still alive (they reconnected, not crashed) and stop cleanly.
          for (const r of runners) r.child.kill("SIGTERM")
          const exits = yield* Effect.promise(() => Promise.all(runners.map((r) => r.exited)))
          exits.forEach((exit, i) => assert.deepStrictEqual(exit, { code: 0, signal: null }, `runner-${i}: ${runners[i]!.stderr()}`))

          // The restart cut runs like a kill cuts them: any runner may leave a cut step.
          const { cut, logs } = yield* checkExactlyOnce(ids, () => true)
          const resumed = [...logs.values()].filter((log) => log.resumes.length > 0).length
          console.log(
            `cluster across a PostgreSQL restart: ${RUNS} runs finished once each; ${resumed} resumed, ${cut} step(s) cut; ` +
              `${stale.length} index row(s) not updated (${stale.join(", ")})`
          )
        }).pipe(
          Effect.provide(
            Layer.merge(Cluster.layerClient({ timings: timings.cluster, shardsPerGroup: timings.shardsPerGroup }), SqlRunLogStore.layer()).pipe(
              Layer.provideMerge(SqlRunLogStore.layerPgClient({ url: Redacted.make(url), maxConnections: 6 }))
            )
          )
        )
      }),
    600_000
  )
})
