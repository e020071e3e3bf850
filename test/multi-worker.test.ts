/**
 * Many workers on one PostgreSQL database (SPEC §7, issue 9): 4 worker processes run 200 queued
 * runs; one worker is killed with SIGKILL in the middle. Every run finishes exactly once, no
 * step is recorded twice, no `"Never"` tool runs twice for one step, and the killed worker's
 * runs are taken over and resumed by the others once its queue heartbeat and store leases expire.
 */
import { assert, describe, it } from "@effect/vitest"
import * as SqlClient from "@effect/sql/SqlClient"
import { runId } from "@polyloop/core/Ids"
import * as SqlRunLogStore from "@polyloop/sql/SqlRunLogStore"
import * as Worker from "@polyloop/sql/Worker"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import * as Redacted from "effect/Redacted"
import * as Schedule from "effect/Schedule"
import { freshDatabaseUrl } from "./support/pg-database.js"
import { createExecutionsTable } from "./support/worker-fixture.js"
import { spawnWorker } from "./support/worker-spawn.js"

const RUNS = 200
const WORKERS = 4

const countBy = <A>(items: ReadonlyArray<A>, key: (a: A) => string): Map<string, number> => {
  const counts = new Map<string, number>()
  for (const item of items) counts.set(key(item), (counts.get(key(item)) ?? 0) + 1)
  return counts
}

/** Polls the queue until `done` holds; fails with `what` after `timeout`. */
const waitForQueue = (
  what: string,
  done: (entries: ReadonlyArray<Worker.QueueEntry>) => boolean,
  timeout: Duration.DurationInput
) =>
  Worker.entries().pipe(
    Effect.filterOrFail(done, () => "not yet" as const),
    Effect.retry({ while: (e) => e === "not yet", schedule: Schedule.spaced(Duration.millis(50)) }),
    Effect.timeoutFail({ duration: timeout, onTimeout: () => new Error(`timed out waiting for ${what}`) }),
    Effect.orDie
  )

describe.sequential("many workers on one PostgreSQL database", () => {
  it.scopedLive(
    `${WORKERS} worker processes run ${RUNS} runs; one is killed with SIGKILL mid-way and its runs are resumed by the others`,
    () =>
      Effect.flatMap(freshDatabaseUrl("multi_worker"), (url) =>
          Effect.gen(function*() {
            const sql = yield* SqlClient.SqlClient
            yield* SqlRunLogStore.migrate()
            yield* Worker.migrate
            yield* sql.unsafe(createExecutionsTable)

            const workers = yield* Effect.forEach(
              Array.from({ length: WORKERS }, (_, i) => `worker-${i}`),
              (id) => spawnWorker(url, id)
            )
            yield* Effect.promise(() => Promise.all(workers.map((w) => w.ready)))

            const ids = Array.from({ length: RUNS }, (_, i) => `run-${String(i).padStart(3, "0")}`)
            yield* Effect.forEach(ids, (id, n) => Worker.enqueue(runId(id), { n }), { concurrency: 4, discard: true })

            // Mid-way: a good part of the runs is done, and the victim is in the middle of runs
            // (started, not finished) — the kill lands right after this is seen.
            const victim = workers[0]!
            // It is also between a side effect and its record: its charge ran, the step's result is
            // not written yet — so the kill tests that the resumed step does not charge again.
            yield* sql<{ done: number | string; inflight: number | string; cut: number | string }>`SELECT
                (SELECT count(*) FROM polyloop_queue WHERE status = 'Done') AS done,
                (SELECT count(*) FROM polyloop_queue q JOIN polyloop_runs r ON r.run_id = q.run_id
                  WHERE q.status = 'Running' AND q.worker = ${victim.id} AND r.status = 'Unfinished') AS inflight,
                (SELECT count(*) FROM tool_executions e WHERE e.worker = ${victim.id} AND NOT EXISTS (
                  SELECT 1 FROM polyloop_records r WHERE r.run_id = e.run_id AND r.kind = 'ActionResulted' AND r.step = e.step)) AS cut`.pipe(
              Effect.filterOrFail(
                ([row]) => Number(row?.done) >= RUNS / 4 && Number(row?.inflight) >= 2 && Number(row?.cut) >= 1,
                () => "not yet" as const
              ),
              Effect.retry({ while: (e) => e === "not yet", schedule: Schedule.spaced(Duration.millis(5)) }),
              Effect.timeoutFail({ duration: Duration.seconds(90), onTimeout: () => new Error("the victim never held runs mid-way") }),
              Effect.orDie
            )
            victim.child.kill("SIGKILL")
            const victimExit = yield* Effect.promise(() => victim.exited)
            assert.strictEqual(victimExit.signal, "SIGKILL")
            const orphaned = (yield* Worker.entries({ status: "Running" }))
              .filter((e) => Option.contains(e.worker, victim.id))
              .map((e) => e.runId)
            assert.isAbove(orphaned.length, 0, "the killed worker held no run")
            // Its runs that were started and not finished when it died must be resumed by others
            // (a run whose RunFinished was written just before the kill only needs its entry closed).
            const startedBeforeTakeover = yield* sql<{ run_id: string }>`SELECT run_id FROM polyloop_runs
              WHERE status = 'Unfinished' AND ${sql.in("run_id", orphaned)}`

            const final = yield* waitForQueue("every run to finish", (es) => es.length === RUNS && es.every((e) => e.status === "Done"), Duration.seconds(150))

            // The survivors shut down gracefully on SIGTERM (interruption), with nothing left in flight.
            for (const w of workers.slice(1)) w.child.kill("SIGTERM")
            const exits = yield* Effect.promise(() => Promise.all(workers.slice(1).map((w) => w.exited)))
            exits.forEach((exit, i) =>
              assert.deepStrictEqual(exit, { code: 0, signal: null }, `worker-${i + 1} did not exit cleanly: ${workers[i + 1]!.stderr()}`)
            )

            // Every run finished exactly once.
            const store = yield* SqlRunLogStore.make()
            const records = yield* sql<{ run_id: string; seq: number; kind: string; step: number | null; payload: string }>`
              SELECT run_id, seq, kind, step, payload FROM polyloop_records ORDER BY run_id, seq`
            const finishedCount = countBy(records.filter((r) => r.kind === "RunFinished"), (r) => r.run_id)
            const startedCount = countBy(records.filter((r) => r.kind === "RunStarted"), (r) => r.run_id)
            for (const id of ids) {
              assert.strictEqual(finishedCount.get(id), 1, `${id} finished ${finishedCount.get(id) ?? 0} times`)
              assert.strictEqual(startedCount.get(id), 1, `${id} started ${startedCount.get(id) ?? 0} times`)
            }
            assert.strictEqual(records.length > 0 && new Set(records.map((r) => r.run_id)).size, RUNS)

            // Every log decodes as a gap-free sequence and ends Completed(Answer) after 3 steps.
            for (const id of ids) {
              const log = yield* store.readLog(runId(id))
              const finished = Option.getOrThrow(log.finished)
              assert.deepStrictEqual(finished.stopReason, { _tag: "Completed", by: "Answer", answer: "all charged" }, id)
              assert.deepStrictEqual(log.steps.map((s) => s.step), [0, 1, 2], `${id}: steps`)
            }
            const summaries = yield* store.listRuns({ status: "Finished" })
            assert.strictEqual(summaries.length, RUNS)

            // No step recorded twice: one reply, one result at most, one completion per step.
            const perStep = countBy(
              records.filter((r) => r.kind === "ModelReplied" || r.kind === "ActionResulted" || r.kind === "StepCompleted"),
              (r) => `${r.run_id}/${r.step}/${r.kind}`
            )
            const twice = [...perStep].filter(([, n]) => n > 1)
            assert.deepStrictEqual(twice, [], "a step was recorded twice")

            // No "Never" tool ran twice for one step; every execution belongs to a step of the log,
            // and a step whose action counts as executed ran it exactly once.
            const executions = yield* sql<{ run_id: string; step: number; worker: string }>`SELECT run_id, step, worker FROM tool_executions`
            const perExecution = countBy(executions, (e) => `${e.run_id}/${e.step}`)
            assert.deepStrictEqual([...perExecution].filter(([, n]) => n > 1), [], "a Never tool ran twice for one step")
            const results = new Map(
              records
                .filter((r) => r.kind === "ActionResulted")
                .map((r) => [`${r.run_id}/${r.step}`, JSON.parse(r.payload) as { outcome: { status: string; observationIsSynthetic: boolean } }])
            )
            for (const e of executions) {
              const result = results.get(`${e.run_id}/${e.step}`)
              assert.isDefined(result, `execution ${e.run_id}/${e.step} has no result in the log`)
              if (result!.outcome.status !== "Executed") {
                // Only a step cut by the kill may have run without its result being recorded:
                // it resumed as NotExecuted (the interrupted text), not run again.
                assert.strictEqual(e.worker, victim.id, `${e.run_id}/${e.step} lost its result without a kill`)
                assert.deepStrictEqual(result!.outcome, { ...result!.outcome, status: "NotExecuted", observationIsSynthetic: true })
              }
            }
            for (const [key, result] of results) {
              if (result.outcome.status === "Executed") assert.strictEqual(perExecution.get(key), 1, `${key} executed without a recorded execution`)
            }

            // The killed worker's runs were taken over by the others, and the started ones resumed.
            const byId = new Map(final.map((e) => [e.runId, e]))
            for (const id of orphaned) {
              const entry = byId.get(id)!
              assert.isFalse(Option.contains(entry.worker, victim.id), `${id} was finished by the killed worker`)
              assert.isAtLeast(entry.attempts, 2, `${id} was not taken again`)
            }
            const resumed = new Set(records.filter((r) => r.kind === "RunResumed").map((r) => r.run_id))
            for (const { run_id } of startedBeforeTakeover) assert.isTrue(resumed.has(run_id), `${run_id} was not resumed`)
            assert.isAbove(startedBeforeTakeover.length, 0, "no run of the killed worker had started")
            const cut = executions.filter((e) => results.get(`${e.run_id}/${e.step}`)?.outcome.status !== "Executed").length
            assert.isAtLeast(cut, 1, "the kill cut no step between its side effect and its record")
            console.log(
              `multi-worker: ${orphaned.length} run(s) orphaned by the kill, ${startedBeforeTakeover.length} resumed, ` +
                `${cut} step(s) cut between the side effect and its record (resumed as NotExecuted)`
            )
            // Nobody else was resumed: only the kill interrupted runs.
            for (const id of resumed) assert.include(orphaned, id, `${id} was resumed though its worker was not killed`)
          }).pipe(Effect.provide(SqlRunLogStore.layerPgClient({ url: Redacted.make(url), maxConnections: 4 })))
      ),
    240_000
  )
})
