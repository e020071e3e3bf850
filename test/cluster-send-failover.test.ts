/**
 * A conversation hosted on the cluster across a runner's death (design 0300, issue 31): two
 * runner processes (`support/cluster-runner.ts`) share the test's PostgreSQL database; a
 * conversation's first message is answered by the runner owning its shard; the second message's
 * turn is cut on that runner between a `"Never"` side effect and its record (the hold file, then
 * SIGKILL). The persisted `Send` is delivered to the survivor, which finishes the turn — the cut
 * call `NotExecuted`, never run again — and a third message is answered there: every message
 * recorded once, every turn once, no step recorded twice, no `"Never"` call run twice.
 */
import { assert, describe, it } from "@effect/vitest"
import * as SqlClient from "@effect/sql/SqlClient"
import * as Cluster from "@polyloop/cluster/Cluster"
import * as RunIndex from "@polyloop/cluster/RunIndex"
import { runId } from "@polyloop/core/Ids"
import * as SqlRunLogStore from "@polyloop/sql/SqlRunLogStore"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Fiber from "effect/Fiber"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Redacted from "effect/Redacted"
import * as Schedule from "effect/Schedule"
import * as fs from "node:fs"
import { createExecutionsTable, holdFileOf, timings } from "./support/cluster-fixture.js"
import { freshDatabaseUrl } from "./support/pg-database.js"
import { freePort } from "./support/pg-server.js"
import { spawnRunner } from "./support/runner-spawn.js"

const RUNNERS = 2
const chat = "chat-failover"

const poll = <A, E, R>(what: string, effect: Effect.Effect<A, E, R>, done: (a: A) => boolean, timeout: Duration.DurationInput) =>
  effect.pipe(
    Effect.filterOrFail(done, () => "not yet" as const),
    Effect.retry({ while: (e) => e === "not yet", schedule: Schedule.spaced(Duration.millis(20)) }),
    Effect.timeoutFail({ duration: timeout, onTimeout: () => new Error(`timed out waiting for ${what}`) }),
    Effect.orDie
  )

describe.sequential("a conversation on the cluster across a runner's death", () => {
  it.scopedLive(
    "the runner hosting a turn is killed mid-turn (SIGKILL): the persisted message is delivered to the survivor, which finishes the turn; nothing lost or doubled, no Never call run twice",
    () =>
      Effect.flatMap(freshDatabaseUrl("cluster_send_failover"), (url) =>
        Effect.gen(function*() {
          const sql = yield* SqlClient.SqlClient
          yield* SqlRunLogStore.migrate()
          yield* sql.unsafe(createExecutionsTable)
          const ports = yield* Effect.forEach(Array.from({ length: RUNNERS }), () => Effect.promise(() => freePort()))
          const runners = yield* Effect.forEach(ports, (port, i) => spawnRunner(url, `runner-${i}`, port))
          yield* Effect.promise(() => Promise.all(runners.map((r) => r.ready)))
          // The shards settled on both runners (each holds its shards' advisory locks), so only the kill moves them.
          yield* poll(
            "the shards to settle on every runner",
            sql<{ locks: number | string; holders: number | string }>`SELECT count(*) AS locks, count(DISTINCT pid) AS holders
              FROM pg_locks WHERE locktype = 'advisory' AND granted AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`,
            ([row]) => Number(row?.locks) === timings.shardsPerGroup && Number(row?.holders) === RUNNERS,
            Duration.seconds(120)
          )

          // Turn 0 on the runner owning the conversation's shard.
          const first = yield* Cluster.send(chat, { messageId: "m0", text: "please charge" }, { n: 0 })
          assert.deepStrictEqual([first.turn, first.steps, first.stopReason._tag], [0, 3, "Completed"])
          const host = Option.getOrThrow(Option.flatMap(Option.fromNullable((yield* RunIndex.list()).find((e) => e.runId === chat)), (e) => e.runner))
          const victim = runners.find((r) => r.address === host)!
          const survivor = runners.find((r) => r !== victim)!

          // Turn 1 is held in its first charge, after the side effect (step 3), then its runner is killed.
          const hold = holdFileOf(victim.child.pid ?? -1)
          fs.writeFileSync(hold, "")
          const second = yield* Effect.fork(Effect.either(Cluster.send(chat, { messageId: "m1", text: "and charge again" }, { n: 0 })))
          yield* poll(
            `${victim.id} to be held in turn 1's first charge`,
            sql<{ cut: number | string }>`SELECT count(*) AS cut FROM tool_executions e WHERE e.run_id = ${chat} AND e.step = 3
              AND e.worker = ${victim.id} AND NOT EXISTS (
                SELECT 1 FROM polyloop_records r WHERE r.run_id = e.run_id AND r.kind = 'ActionResulted' AND r.step = e.step)`,
            ([row]) => Number(row?.cut) === 1,
            Duration.seconds(120)
          )
          victim.child.kill("SIGKILL")
          fs.rmSync(hold, { force: true })
          assert.strictEqual((yield* Effect.promise(() => victim.exited)).signal, "SIGKILL")

          // The caller's reply: the first send's, or — if its connection went with the runner — the
          // retried send's (the same message id: a duplicate of the persisted message, its reply the first's).
          const reply = Option.flatMap(yield* Fiber.join(second).pipe(Effect.timeout(Duration.seconds(150)), Effect.option), Either.getRight)
          const delivered = Option.isSome(reply)
          const answered = Option.isSome(reply)
            ? reply.value
            : yield* Cluster.send(chat, { messageId: "m1", text: "and charge again" }, { n: 0 }).pipe(
              Effect.retry({ schedule: Schedule.spaced(Duration.seconds(1)), times: 60 })
            )
          assert.deepStrictEqual([answered.turn, answered.stopReason._tag], [1, "Completed"])
          // Turn 1's steps: the cut charge (settled NotExecuted on resume), the second charge, the answer.
          assert.strictEqual(answered.steps, 3)
          const third = yield* Cluster.send(chat, { messageId: "m2", text: "thanks" }, { n: 0 })
          assert.deepStrictEqual([third.turn, third.stopReason._tag], [2, "Completed"])
          assert.isTrue(Option.contains((yield* RunIndex.list()).find((e) => e.runId === chat)!.runner, survivor.address), "the survivor answered")

          // Every message once, every turn once, in order; no step twice; no Never call twice.
          const store = yield* SqlRunLogStore.make()
          const log = yield* store.readLog(runId(chat))
          assert.deepStrictEqual(log.userMessages.map((m) => [m.turn, m.messageId]), [[1, "m1"], [2, "m2"]])
          assert.deepStrictEqual(log.turns.map((t) => [t.turn, t.stopReason._tag]), [[0, "Completed"], [1, "Completed"], [2, "Completed"]])
          assert.deepStrictEqual(log.steps.map((s) => s.step), [0, 1, 2, 3, 4, 5, 6, 7, 8])
          assert.isAtLeast(log.resumes.length, 1, "turn 1 was resumed on the survivor")
          const cut = log.results.find((r) => r.step === 3)!
          assert.strictEqual(cut.outcome.status, "NotExecuted", "the cut Never call is not run again")
          const executions = yield* sql<{ step: number | string; n: number | string }>`SELECT step, count(*) AS n FROM tool_executions
            WHERE run_id = ${chat} GROUP BY step ORDER BY step`
          assert.deepStrictEqual(executions.map((e) => [Number(e.step), Number(e.n)]), [[0, 1], [1, 1], [3, 1], [4, 1], [6, 1], [7, 1]])
          const kinds = yield* sql<{ kind: string; step: number | string | null; n: number | string }>`SELECT kind, step, count(*) AS n
            FROM polyloop_records WHERE run_id = ${chat} AND step IS NOT NULL AND kind IN ('ModelReplied', 'ActionResulted', 'StepCompleted')
            GROUP BY kind, step HAVING count(*) > 1`
          assert.deepStrictEqual(kinds, [], "a step was recorded twice")
          console.log(`cluster send failover: turn 1 cut on ${victim.id}, finished on ${survivor.id}; the caller's first send ${delivered ? "got its reply" : "was retried (same message id)"}`)
        }).pipe(
          Effect.provide(
            Cluster.layerClient({ timings: timings.cluster, shardsPerGroup: timings.shardsPerGroup }).pipe(
              Layer.provideMerge(SqlRunLogStore.layerPgClient({ url: Redacted.make(url), maxConnections: 6 }))
            )
          )
        )
      ),
    300_000
  )
})
