/**
 * The invariants the cluster tests check once every run is finished: each run started and
 * finished exactly once and ended as the script says after three steps, no step is recorded
 * twice, no `"Never"` tool ran twice for one step, and an execution without an executed result
 * is a step cut by a kill, resumed as `NotExecuted` (the interrupted text), never run again.
 */
import { assert } from "@effect/vitest"
import * as SqlClient from "@effect/sql/SqlClient"
import { runId } from "@polyloop/core/Ids"
import type * as RunLog from "@polyloop/core/RunLog"
import * as SqlRunLogStore from "@polyloop/sql/SqlRunLogStore"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"

const countBy = <A>(items: ReadonlyArray<A>, key: (a: A) => string): Map<string, number> => {
  const counts = new Map<string, number>()
  for (const item of items) counts.set(key(item), (counts.get(key(item)) ?? 0) + 1)
  return counts
}

/** What the checks found. */
export interface Checked {
  /** Each run's log. */
  readonly logs: ReadonlyMap<string, RunLog.RunLog>
  /** Executions of `charge` whose step's result is not `Executed` (cut by a kill). */
  readonly cut: number
}

/**
 * Checks the invariants over `ids`; `mayCut(runId, worker)` says whether an execution of that run
 * on that process (the `worker` column of `tool_executions`) may have been left without its
 * result: the process was killed or stopped, or the run was retried in place.
 */
export const checkExactlyOnce = (ids: ReadonlyArray<string>, mayCut: (runId: string, worker: string) => boolean) =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const store = yield* SqlRunLogStore.make()
    const records = yield* sql<{ run_id: string; seq: number; kind: string; step: number | null; payload: string }>`
      SELECT run_id, seq, kind, step, payload FROM polyloop_records ORDER BY run_id, seq`
    const finishedCount = countBy(records.filter((r) => r.kind === "RunFinished"), (r) => r.run_id)
    const startedCount = countBy(records.filter((r) => r.kind === "RunStarted"), (r) => r.run_id)
    const logs = new Map<string, RunLog.RunLog>()
    for (const id of ids) {
      assert.strictEqual(finishedCount.get(id), 1, `${id} finished ${finishedCount.get(id) ?? 0} times`)
      assert.strictEqual(startedCount.get(id), 1, `${id} started ${startedCount.get(id) ?? 0} times`)
      const log = yield* store.readLog(runId(id))
      assert.deepStrictEqual(Option.getOrThrow(log.finished).stopReason, { _tag: "Completed", by: "Answer", answer: "all charged" }, id)
      assert.deepStrictEqual(log.steps.map((s) => s.step), [0, 1, 2], `${id}: steps`)
      logs.set(id, log)
    }

    const perStep = countBy(
      records.filter((r) => r.kind === "ModelReplied" || r.kind === "ActionResulted" || r.kind === "StepCompleted"),
      // A step of several calls (a planner's sub-agents) has one result per call index.
      (r) => `${r.run_id}/${r.step}/${r.kind}${r.kind === "ActionResulted" ? `/${(JSON.parse(r.payload) as { callIndex: number }).callIndex}` : ""}`
    )
    assert.deepStrictEqual([...perStep].filter(([, n]) => n > 1), [], "a step was recorded twice")

    const executions = yield* sql<{ run_id: string; step: number; worker: string }>`SELECT run_id, step, worker FROM tool_executions`
    const perExecution = countBy(executions, (e) => `${e.run_id}/${e.step}`)
    assert.deepStrictEqual([...perExecution].filter(([, n]) => n > 1), [], "a Never tool ran twice for one step")
    // The charges' results: those of the checked runs (a planner's results are its sub-agents').
    const checked = new Set(ids)
    const results = new Map(
      records
        .filter((r) => r.kind === "ActionResulted" && checked.has(r.run_id))
        .map((r) => [`${r.run_id}/${r.step}`, JSON.parse(r.payload) as { outcome: { status: string; observationIsSynthetic: boolean } }])
    )
    for (const e of executions) {
      const result = results.get(`${e.run_id}/${e.step}`)
      assert.isDefined(result, `execution ${e.run_id}/${e.step} has no result in the log`)
      if (result!.outcome.status !== "Executed") {
        assert.isTrue(mayCut(e.run_id, e.worker), `${e.run_id}/${e.step} lost its result without a kill or a retry (ran on ${e.worker})`)
        assert.deepStrictEqual(result!.outcome, { ...result!.outcome, status: "NotExecuted", observationIsSynthetic: true })
      }
    }
    for (const [key, result] of results) {
      if (result.outcome.status === "Executed") assert.strictEqual(perExecution.get(key), 1, `${key} executed without a recorded execution`)
    }
    const cut = executions.filter((e) => results.get(`${e.run_id}/${e.step}`)?.outcome.status !== "Executed").length
    return { logs, cut } satisfies Checked
  })
