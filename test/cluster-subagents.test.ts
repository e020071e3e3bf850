/**
 * Sub-agents on the cluster (design 0414, issue 47): two runner processes share one PostgreSQL
 * database; each submitted run is a planner whose step 0 hands two parts to `delegate`, a
 * sub-agent whose child run charges twice through a `"Never"` tool (every execution recorded in
 * `tool_executions`) and answers. The runner holding parents is killed with SIGKILL while a
 * child stands between a charge and its record. Every planner and every child finishes exactly
 * once, no step is recorded twice, no charge runs twice, the cut charge is resumed as
 * `NotExecuted`, and the dead runner's children are resumed on the survivor, not started again.
 */
import { assert, describe, it } from "@effect/vitest"
import * as SqlClient from "@effect/sql/SqlClient"
import * as Cluster from "@polyloop/cluster/Cluster"
import * as RunIndex from "@polyloop/cluster/RunIndex"
import { runId as makeRunId } from "@polyloop/core/Ids"
import * as SubAgent from "@polyloop/core/SubAgent"
import * as SqlRunLogStore from "@polyloop/sql/SqlRunLogStore"
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

const PLANNERS = 24

describe.sequential("sub-agents on the cluster (design 0414)", () => {
  it.scopedLive(
    `two runners run ${PLANNERS} planners of two children each; the one holding them is killed mid-child, and every child finishes once on the survivor`,
    () =>
      Effect.flatMap(freshDatabaseUrl("cluster_subagents"), (url) =>
        Effect.gen(function*() {
          const sql = yield* SqlClient.SqlClient
          yield* SqlRunLogStore.migrate()
          yield* sql.unsafe(createExecutionsTable)

          const env = { POLYLOOP_TEST_SUBAGENTS: "1" }
          const ports = yield* Effect.forEach([0, 1], () => Effect.promise(() => freePort()))
          const runners = yield* Effect.forEach(ports, (port, i) => spawnRunner(url, `sub-runner-${i}`, port, env))
          yield* Effect.promise(() => Promise.all(runners.map((r) => r.ready)))
          yield* poll(
            "the shards to settle on both runners",
            sql<{ locks: number | string; holders: number | string }>`SELECT count(*) AS locks, count(DISTINCT pid) AS holders
              FROM pg_locks WHERE locktype = 'advisory' AND granted AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`,
            ([row]) => Number(row?.locks) === timings.shardsPerGroup && Number(row?.holders) === 2,
            Duration.seconds(120)
          )

          const ids = Array.from({ length: PLANNERS }, (_, i) => `planner-${String(i).padStart(2, "0")}`)
          yield* Effect.forEach(ids, (id, n) => Cluster.submit(id, { n }), { concurrency: 8, discard: true })
          // The victim holds planners mid-way and a child's charge whose step is not recorded.
          const kill = yield* killMidway(runners[0]!, PLANNERS / 6)
          assert.isAbove(kill.held.length, 0, "the killed runner held no planner")
          const survivor = runners[1]!

          yield* poll("every planner to finish", RunIndex.list({ status: "Finished" }), (es) => es.length === PLANNERS, Duration.seconds(400))
          const index = yield* RunIndex.list()
          survivor.child.kill("SIGTERM")
          const exit = yield* Effect.promise(() => survivor.exited)
          assert.deepStrictEqual(exit, { code: 0, signal: null }, `${survivor.id} did not exit cleanly: ${survivor.stderr()}`)

          // Each planner: started and finished once, answered after its two children.
          const store = yield* SqlRunLogStore.make()
          const starts = yield* sql<{ run_id: string; n: number | string }>`SELECT run_id, count(*) AS n FROM polyloop_records
            WHERE kind = 'RunStarted' GROUP BY run_id`
          const startedTimes = new Map(starts.map((r) => [r.run_id, Number(r.n)]))
          const childIds: Array<string> = []
          const childrenOf = new Map<string, ReadonlyArray<string>>()
          for (const id of ids) {
            assert.strictEqual(startedTimes.get(id), 1, `${id} started ${startedTimes.get(id) ?? 0} times`)
            const log = yield* store.readLog(makeRunId(id))
            const finished = Option.getOrThrow(log.finished)
            assert.deepStrictEqual(finished.stopReason, { _tag: "Completed", by: "Answer", answer: "delegated" }, id)
            const results = [...log.results].sort((a, b) => a.callIndex - b.callIndex)
            const children = results.map((r) => r.child?.runId)
            // The ids the scripted model's calls get: call_s0_0 and call_s0_1.
            assert.deepStrictEqual(children, [0, 1].map((i) => SubAgent.childRunId(makeRunId(id), 0, `call_s0_${i}`)), `${id}: children`)
            for (const r of results) assert.strictEqual(r.child?.stopReason._tag, "Completed", `${id}/${r.callIndex}`)
            // What the children cost is the parent's: 2 children × 3 steps.
            assert.strictEqual(finished.counters.children?.steps, 6, `${id}: children's steps`)
            const own = children.filter((c): c is NonNullable<typeof c> => c !== undefined)
            childIds.push(...own)
            childrenOf.set(id, own)
          }
          // Each child: started and finished once, its three steps each recorded once, its
          // charges each run at most once; a charge without its result only where the kill cut it.
          const parentOf = new Map([...childrenOf].flatMap(([p, cs]) => cs.map((c) => [c, p] as const)))
          const { cut, logs } = yield* checkExactlyOnce(
            childIds,
            (id, worker) => worker === kill.victim.id || (index.find((e) => e.runId === parentOf.get(id))?.attempts ?? 0) >= 2
          )
          assert.isAtLeast(cut, 1, "no kill cut a child's charge between its side effect and its record")
          // The killed runner's planners finished on the survivor, and the children it had
          // started were resumed there (a resume record after the kill), not started again.
          const byId = new Map(index.map((e) => [e.runId, e]))
          let resumedChildren = 0
          for (const id of kill.held) {
            assert.isTrue(Option.contains(byId.get(id)!.runner, survivor.address), `${id} was not finished by ${survivor.id}`)
            for (const child of childrenOf.get(id) ?? []) {
              if (logs.get(child)!.resumes.some((r) => r.at >= kill.killedAt)) resumedChildren++
            }
          }
          assert.isAtLeast(resumedChildren, 1, "no child of the killed runner was resumed on the survivor")
          console.log(
            `cluster sub-agents: ${kill.held.length} planner(s) held by ${kill.victim.id} at the kill; ${resumedChildren} child run(s) resumed on ` +
              `${survivor.id}; ${cut} charge(s) cut between side effect and record; ${childIds.length} children finished once each`
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
