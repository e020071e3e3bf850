/**
 * Waiting on a cluster's database and killing a runner mid-way, shared by the cluster failover
 * tests (`cluster-failover.test.ts`, `cluster-subagents.test.ts`).
 */
import { assert } from "@effect/vitest"
import * as SqlClient from "@effect/sql/SqlClient"
import * as RunIndex from "@polyloop/cluster/RunIndex"
import * as Clock from "effect/Clock"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import * as Schedule from "effect/Schedule"
import * as fs from "node:fs"
import { holdFileOf } from "./cluster-fixture.js"
import type { RunnerProcess } from "./runner-spawn.js"

/** Polls `effect` every 20 ms until `done`, dying after `timeout`. */
export const poll = <A, E, R>(what: string, effect: Effect.Effect<A, E, R>, done: (a: A) => boolean, timeout: Duration.DurationInput) =>
  effect.pipe(
    Effect.filterOrFail(done, () => "not yet" as const),
    Effect.retry({ while: (e) => e === "not yet", schedule: Schedule.spaced(Duration.millis(20)) }),
    Effect.timeoutFail({ duration: timeout, onTimeout: () => new Error(`timed out waiting for ${what}`) }),
    Effect.orDie
  )

/**
 * Waits until `victim` is in the middle of runs (index rows `Running` on it whose logs are not
 * finished) and is between a side effect and its record (an execution with no `ActionResulted`),
 * with at least `finished` runs done, then kills it with SIGKILL. Returns the kill time.
 */
export const killMidway = (victim: RunnerProcess, finished: number) =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    // Its next side effect then never completes its step: the kill below cuts one, every time.
    const hold = holdFileOf(victim.child.pid ?? -1)
    fs.writeFileSync(hold, "")
    yield* poll(
      `${victim.id} to hold runs mid-way`,
      sql<{ done: number | string; inflight: number | string; cut: number | string }>`SELECT
        (SELECT count(*) FROM polyloop_cluster_runs WHERE status = 'Finished') AS done,
        (SELECT count(*) FROM polyloop_cluster_runs c JOIN polyloop_runs r ON r.run_id = c.run_id
          WHERE c.status = 'Running' AND c.runner = ${victim.address} AND r.status = 'Unfinished') AS inflight,
        (SELECT count(*) FROM tool_executions e WHERE e.worker = ${victim.id} AND NOT EXISTS (
          SELECT 1 FROM polyloop_records r WHERE r.run_id = e.run_id AND r.kind = 'ActionResulted' AND r.step = e.step)) AS cut`,
      ([row]) => Number(row?.done) >= finished && Number(row?.inflight) >= 2 && Number(row?.cut) >= 1,
      Duration.seconds(300)
    )
    victim.child.kill("SIGKILL")
    fs.rmSync(hold, { force: true })
    const killedAt = yield* Clock.currentTimeMillis
    const exit = yield* Effect.promise(() => victim.exited)
    assert.strictEqual(exit.signal, "SIGKILL")
    // The runs it held, and those of them whose log was started and not finished.
    const held = (yield* RunIndex.list()).filter((e) =>
      (e.status === "Running" || e.status === "Retrying") && Option.contains(e.runner, victim.address)
    ).map((e) => e.runId)
    const started = held.length === 0 ? [] : (yield* sql<{ run_id: string }>`SELECT run_id FROM polyloop_runs
      WHERE status = 'Unfinished' AND ${sql.in("run_id", held)}`).map((r) => r.run_id)
    return { victim, killedAt, held, started }
  })
