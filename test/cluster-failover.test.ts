/**
 * Runs as `@effect/cluster` entities across processes (design 0200, issue 20): 3 runner
 * processes on loopback share one PostgreSQL database; a client submits 300 runs. One runner is
 * killed with SIGKILL mid-way, another later. Every run finishes exactly once, no step is
 * recorded twice, no `"Never"` tool runs twice for one step, and the dead runners' runs are
 * resumed and finished by the survivor, after a failover whose duration is printed. Then a fourth
 * runner joins and the survivor is stopped gracefully (SIGTERM) while it holds runs: it exits
 * cleanly and its runs move to the newcomer and finish there.
 */
import { assert, describe, it } from "@effect/vitest"
import * as SqlClient from "@effect/sql/SqlClient"
import * as Cluster from "@polyloop/cluster/Cluster"
import * as ClusterRunner from "@polyloop/cluster/ClusterRunner"
import * as RunIndex from "@polyloop/cluster/RunIndex"
import * as SqlRunLogStore from "@polyloop/sql/SqlRunLogStore"
import * as Clock from "effect/Clock"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Redacted from "effect/Redacted"
import { checkExactlyOnce } from "./support/cluster-checks.js"
import { createExecutionsTable, timings } from "./support/cluster-fixture.js"
import { killMidway, poll } from "./support/cluster-kill.js"
import { freshDatabaseUrl } from "./support/pg-database.js"
import { freePort } from "./support/pg-server.js"
import { spawnRunner } from "./support/runner-spawn.js"

const RUNS = 300
const RUNNERS = 3

describe.sequential("runs as cluster entities across runner processes", () => {
  it.scopedLive(
    `${RUNNERS} runner processes run ${RUNS} runs; two are killed with SIGKILL, one after the other, and their runs finish on the survivor`,
    () =>
      Effect.flatMap(freshDatabaseUrl("cluster_failover"), (url) =>
        Effect.gen(function*() {
          const sql = yield* SqlClient.SqlClient
          yield* SqlRunLogStore.migrate()
          yield* sql.unsafe(createExecutionsTable)

          const ports = yield* Effect.forEach(Array.from({ length: RUNNERS }), () => Effect.promise(() => freePort()))
          const runners = yield* Effect.forEach(ports, (port, i) => spawnRunner(url, `runner-${i}`, port))
          yield* Effect.promise(() => Promise.all(runners.map((r) => r.ready)))
          // Before submitting, wait for the shards to settle on the three runners (each holds its
          // shards' advisory locks): runners joining one after the other move shards, which
          // interrupts and resumes runs, and this test wants only the kills to do that.
          yield* poll(
            "the shards to settle on every runner",
            sql<{ locks: number | string; holders: number | string }>`SELECT count(*) AS locks, count(DISTINCT pid) AS holders
              FROM pg_locks WHERE locktype = 'advisory' AND granted AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`,
            ([row]) => Number(row?.locks) === timings.shardsPerGroup && Number(row?.holders) === RUNNERS,
            Duration.seconds(120)
          )

          const ids = Array.from({ length: RUNS }, (_, i) => `run-${String(i).padStart(3, "0")}`)
          yield* Effect.forEach(ids, (id, n) => Cluster.submit(id, { n }), { concurrency: 8, discard: true })

          const first = yield* killMidway(runners[0]!, RUNS / 5)
          const second = yield* killMidway(runners[1]!, RUNS / 2)
          const survivor = runners[2]!
          const kills = [first, second]
          for (const kill of kills) assert.isAbove(kill.held.length, 0, `${kill.victim.id} held no run when killed`)

          // A fourth runner joins; then the survivor is stopped gracefully (SIGTERM) while it holds
          // runs: it exits cleanly and its runs, interrupted resumable, move to the newcomer.
          const newcomer = yield* spawnRunner(url, "runner-3", yield* Effect.promise(() => freePort()))
          yield* Effect.promise(() => newcomer.ready)
          const joinedAt = yield* Clock.currentTimeMillis
          // The runs it holds, taken just before the stop: read after its exit, the index may
          // already name the newcomer (on an idle machine it takes them over at once).
          const stopped = (yield* poll(
            `${survivor.id} to hold runs`,
            sql<{ run_id: string }>`SELECT c.run_id FROM polyloop_cluster_runs c JOIN polyloop_runs r ON r.run_id = c.run_id
              WHERE c.status = 'Running' AND c.runner = ${survivor.address} AND r.status = 'Unfinished'`,
            (rows) => rows.length >= 2,
            Duration.seconds(120)
          )).map((row) => row.run_id)
          survivor.child.kill("SIGTERM")
          const survivorExit = yield* Effect.promise(() => survivor.exited)
          assert.deepStrictEqual(survivorExit, { code: 0, signal: null }, `${survivor.id} did not exit cleanly: ${survivor.stderr()}`)

          yield* poll(
            "every run to finish",
            RunIndex.list({ status: "Finished" }),
            (es) => es.length === RUNS,
            Duration.seconds(400)
          )
          const index = yield* RunIndex.list()
          newcomer.child.kill("SIGTERM")
          const newcomerExit = yield* Effect.promise(() => newcomer.exited)
          assert.deepStrictEqual(newcomerExit, { code: 0, signal: null }, `${newcomer.id} did not exit cleanly: ${newcomer.stderr()}`)

          // Every run finished exactly once, no step twice, no Never call twice for one step (the
          // kills, the graceful stop that interrupts a tool, and a retry in place — a store error
          // or a lease lost on this loaded machine, counted in the run's row — may cut a step).
          const interrupted = new Set([...kills.map((k) => k.victim.id), survivor.id])
          const attempts = new Map(index.map((e) => [e.runId, e.attempts]))
          const { cut, logs } = yield* checkExactlyOnce(ids, (id, worker) => interrupted.has(worker) || (attempts.get(id) ?? 0) >= 2)
          assert.isAtLeast(cut, 1, "no kill cut a step between its side effect and its record")

          // The dead runners' runs finished elsewhere; the started ones were resumed.
          const byId = new Map(index.map((e) => [e.runId, e]))
          const resumedAt = new Map<string, number>()
          for (const [id, log] of logs) {
            const resume = log.resumes[0]
            if (resume !== undefined) resumedAt.set(id, resume.at)
          }
          const lines: Array<string> = []
          for (const kill of kills) {
            for (const id of kill.held) {
              const entry = byId.get(id)!
              assert.isFalse(Option.contains(entry.runner, kill.victim.address), `${id} was finished by the killed ${kill.victim.id}`)
            }
            // The first resume after the kill (a run may also have been retried in place before it).
            const resumedAfter = (id: string) => logs.get(id)!.resumes.find((r) => r.at >= kill.killedAt)?.at
            for (const id of kill.started) assert.isDefined(resumedAfter(id), `${id} was not resumed after ${kill.victim.id} died`)
            assert.isAbove(kill.started.length, 0, `no run of ${kill.victim.id} had started`)
            const delays = kill.started.map((id) => resumedAfter(id)! - kill.killedAt).sort((a, b) => a - b)
            lines.push(
              `${kill.victim.id}: ${kill.held.length} run(s) held, ${kill.started.length} resumed elsewhere; ` +
                `failover ${(delays[0]! / 1000).toFixed(1)} s to the first resume, ${(delays[delays.length - 1]! / 1000).toFixed(1)} s to the last`
            )
          }
          // The gracefully stopped runner's runs moved to the newcomer; those it had started were
          // resumed there (a run it finished just before stopping, whose reply the stop cut, was
          // delivered again and returned its recorded result: no resume, still finished once).
          // (A run in flight when the stop was asked may still have finished on the survivor first.)
          const moved = stopped.filter((id) => Option.contains(byId.get(id)!.runner, newcomer.address))
          for (const id of stopped) {
            assert.isTrue(
              Option.contains(byId.get(id)!.runner, newcomer.address) || Option.contains(byId.get(id)!.runner, survivor.address),
              `${id} of the stopped ${survivor.id} was finished by neither it nor ${newcomer.id}`
            )
          }
          // How many moved depends on the machine: on an idle one the stopping runner finishes the
          // short runs it holds before its shutdown interrupts them, so none may move; each run
          // still finished once (checked above) and by one of these two runners.
          const movedAndResumed = moved.filter((id) => resumedAt.has(id)).length
          lines.push(`${survivor.id} stopped gracefully holding ${stopped.length} run(s): ${moved.length} moved to ${newcomer.id}, ${movedAndResumed} resumed there`)
          // Before the newcomer joined (which moves shards), a run resumed that no kill orphaned was
          // retried in place (a store error or a late lease heartbeat on this loaded machine): its
          // row counts the attempts. No run is resumed silently.
          const orphans = new Set(kills.flatMap((k) => k.held))
          let retried = 0
          for (const [id, at] of resumedAt) {
            if (at >= joinedAt || orphans.has(id)) continue
            retried++
            assert.isAtLeast(byId.get(id)!.attempts, 2, `${id} was resumed (${at - first.killedAt} ms after the first kill) though its runner was not killed and it was not retried`)
          }
          lines.push(`${retried} other run(s) retried in place`)
          const bound = ClusterRunner.failoverBound(timings.cluster, {
            leaseDuration: timings.leaseDuration,
            busyRetryInterval: timings.busyRetryInterval
          })
          console.log(
            `cluster failover: ${lines.join("; ")}; ${cut} step(s) cut between side effect and record (resumed as NotExecuted); ` +
              `configured bound ${Duration.format(bound)}`
          )
        }).pipe(
          Effect.provide(
            Cluster.layerClient({ timings: timings.cluster, shardsPerGroup: timings.shardsPerGroup }).pipe(
              Layer.provideMerge(SqlRunLogStore.layerPgClient({ url: Redacted.make(url), maxConnections: 6 }))
            )
          )
        )
      ),
    600_000
  )
})
