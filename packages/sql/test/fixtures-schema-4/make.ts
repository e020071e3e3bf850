/**
 * Writes `runs.db`: a SQLite store as schema version 4 (the code before design 0343) left it,
 * kept unchanged so that the migration to version 5 is tested on a store written by the previous
 * version (`SqlSummaryMigration.test.ts`, SQLite and PostgreSQL). Run once, at commit 92d55bb:
 *
 *   npx tsx --conditions=@polyloop/source packages/sql/test/fixtures-schema-4/make.ts
 *
 * Do not run it again: with later code it would write the later schema.
 *
 * The runs (`records.json` is the same runs as record lists, what the test compares against):
 * - `s4-finished`: two steps (one effective), a model in the snapshot, resumed once, finished;
 * - `s4-fork`: a fork of `s4-finished` at step 1 (`forkedFrom`, one difference), finished by a budget;
 * - `s4-open`: unfinished, one step, no model in the snapshot;
 * - `s4-suspended`: an approval requested and not decided.
 */
import { runId, StepIndex } from "@polyloop/core/Ids"
import type * as RunLog from "@polyloop/core/RunLog"
import * as RunLogStore from "@polyloop/core/RunLogStore"
import * as SqlRunLogStore from "@polyloop/sql/SqlRunLogStore"
import * as Effect from "effect/Effect"
import * as fs from "node:fs"
import * as path from "node:path"
import { fileURLToPath } from "node:url"
import * as F from "../fixtures.js"

const dir = path.dirname(fileURLToPath(import.meta.url))
const file = path.join(dir, "runs.db")

const startedWith = (id: string, agent: string, startedAt: number, model: string | undefined, hash: string, forkedFrom?: RunLog.ForkedFrom): RunLog.RunStarted => ({
  ...F.started(runId(id), { agent, startedAt, task: `task of ${id}` }),
  snapshot: { agent: { name: agent, ...(model === undefined ? {} : { modelSettings: { model, temperature: 0 } }) }, systemPrompt: "You are a test." },
  snapshotHash: hash,
  logVersion: 2,
  ...(forkedFrom === undefined ? {} : { forkedFrom })
})

const finishedWith = (seq: number, stopReason: RunLog.RunFinished["stopReason"], at: number, counters: RunLog.RunCounters): RunLog.RunFinished => ({
  ...F.finished(seq, stopReason, at),
  counters
})

const hashA = "a".repeat(64)
const hashB = "b".repeat(64)

const runs: Record<string, ReadonlyArray<RunLog.RunRecord>> = {
  "s4-finished": [
    startedWith("s4-finished", "veteran", 1_000, "gpt-test", hashA),
    F.replied(1, 0, 40),
    F.resulted(2, 0, "Executed"),
    F.completed(3, 0, true, 12, 40),
    F.resumed(4, 1, 1_500),
    F.replied(5, 1, 10),
    F.resulted(6, 1, "NotExecuted"),
    F.completed(7, 1, true, 3, 10, false),
    finishedWith(8, { _tag: "Completed", by: "Answer", answer: "42" }, 2_000, {
      steps: 2, effectiveSteps: 1, usage: { inputTokens: 50, outputTokens: 25 }, elapsed: 15, resumedCount: 1
    })
  ],
  "s4-fork": [
    startedWith("s4-fork", "veteran", 3_000, "gpt-test", hashB, {
      runId: runId("s4-finished"), step: StepIndex.make(1), snapshotHash: hashA,
      differences: [{ path: "agent.modelSettings.temperature", parent: 0, fork: 1 }]
    }),
    F.replied(1, 0, 40),
    F.resulted(2, 0, "Executed"),
    F.completed(3, 0, true, 12, 40),
    finishedWith(4, { _tag: "BudgetExhausted", budget: "Steps" }, 4_000, {
      steps: 1, effectiveSteps: 1, usage: { inputTokens: 40, outputTokens: 20 }, elapsed: 12, resumedCount: 0
    })
  ],
  "s4-open": [startedWith("s4-open", "rookie", 5_000, undefined, hashA), F.replied(1, 0, 8), F.completed(2, 0, false, 4, 8)],
  "s4-suspended": [
    startedWith("s4-suspended", "rookie", 6_000, "gpt-other", hashA),
    F.replied(1, 0, 6),
    {
      _tag: "ApprovalRequested",
      seq: 2,
      step: StepIndex.make(0),
      callId: "call_0",
      action: { _tag: "ToolCall", id: "call_0", name: "echo", arguments: { text: "0" } },
      actionHash: "c".repeat(64),
      at: 6_100
    }
  ]
}

const program = Effect.gen(function*() {
  const store = yield* RunLogStore.RunLogStore
  for (const [id, records] of Object.entries(runs)) {
    yield* store.appendRecords!(runId(id), records as unknown as readonly [RunLog.RunRecord, ...Array<RunLog.RunRecord>])
  }
  return yield* store.listRuns()
}).pipe(Effect.scoped, Effect.provide(SqlRunLogStore.layerSqlite({ filename: file })))

if (fs.existsSync(file)) throw new Error(`${file} exists: the fixture is never written again`)
Effect.runPromise(program).then((summaries) => {
  fs.writeFileSync(path.join(dir, "records.json"), `${JSON.stringify(runs, null, 2)}\n`)
  process.stdout.write(`${JSON.stringify(summaries)}\n`)
})
