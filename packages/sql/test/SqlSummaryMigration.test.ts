/**
 * Schema version 5 (design 0343) on a store written by the previous version: the fixture
 * `fixtures-schema-4/runs.db` (written by the code at schema 4, never opened for writing here) is
 * migrated on SQLite, and its rows are loaded into a PostgreSQL database at schema 4 and migrated
 * there. After the migration every run's summary carries the snapshot, model, fork, token split
 * and finished counters, equal to what `RunLogStore.summarize` makes of its log, and new appends
 * keep them.
 */
import { assert, describe, it } from "@effect/vitest"
import * as Migrator from "@effect/sql/Migrator"
import * as SqlClient from "@effect/sql/SqlClient"
import { runId as makeRunId } from "@polyloop/core/Ids"
import * as RunLog from "@polyloop/core/RunLog"
import * as RunLogStore from "@polyloop/core/RunLogStore"
import * as SqlRunLogStore from "@polyloop/sql/SqlRunLogStore"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Redacted from "effect/Redacted"
import * as fs from "node:fs"
import * as path from "node:path"
import { fileURLToPath } from "node:url"
import { migrations as pgMigrations } from "../src/internal/migrations/pg.js"
import * as F from "./fixtures.js"
import { freshSchemaUrl } from "./PgSupport.js"
import { openClient, openStore } from "./support/store.js"

const fixtureDir = path.join(path.dirname(fileURLToPath(import.meta.url)), "fixtures-schema-4")
const fixtureRecords = JSON.parse(fs.readFileSync(path.join(fixtureDir, "records.json"), "utf8")) as Record<string, ReadonlyArray<RunLog.RunRecord>>

/** A copy of the fixture store in a fresh directory. */
const copyOfFixture = Effect.map(F.tempDir(), (dir) => {
  const file = path.join(dir, "runs.db")
  fs.copyFileSync(path.join(fixtureDir, "runs.db"), file)
  return file
})

/** What every run's summary must be: `summarize` of its log, newest first. */
const expectedSummaries = (store: RunLogStore.RunLogStore.Service) =>
  Effect.gen(function*() {
    const runs = yield* store.listRuns()
    const expected: Array<RunLogStore.RunSummary> = []
    for (const run of runs) expected.push(Option.getOrThrow(RunLogStore.summarize(yield* store.readLog(makeRunId(run.runId)))))
    return { runs, expected }
  })

/** The migrated summaries' new fields, checked by value (not only against `summarize`). */
const checkDetails = (runs: ReadonlyArray<RunLogStore.RunSummary>) => {
  const byId = new Map(runs.map((run) => [run.runId, run]))
  assert.deepStrictEqual([...byId.keys()].sort(), Object.keys(fixtureRecords).sort())
  const finished = byId.get("s4-finished")!
  assert.strictEqual(finished.snapshotHash, "a".repeat(64))
  assert.strictEqual(finished.model, "gpt-test")
  assert.strictEqual(finished.forkedFrom, null)
  assert.deepStrictEqual([finished.inputTokens, finished.outputTokens], [50, 25])
  assert.deepStrictEqual(finished.counters, { steps: 2, effectiveSteps: 1, inputTokens: 50, outputTokens: 25, resumedCount: 1 })
  const fork = byId.get("s4-fork")!
  assert.deepStrictEqual(fork.forkedFrom, { runId: "s4-finished", step: 1, differences: 1 })
  assert.strictEqual(fork.snapshotHash, "b".repeat(64))
  assert.deepStrictEqual(fork.counters, { steps: 1, effectiveSteps: 1, inputTokens: 40, outputTokens: 20, resumedCount: 0 })
  const open = byId.get("s4-open")!
  assert.strictEqual(open.model, null)
  assert.strictEqual(open.counters, null)
  assert.deepStrictEqual([open.inputTokens, open.outputTokens], [8, 4])
  assert.strictEqual(byId.get("s4-suspended")!.status, "Suspended")
  assert.strictEqual(byId.get("s4-suspended")!.model, "gpt-other")
}

/** After the migration: the open run continues and finishes, a new fork starts; the summaries stay `summarize`'s. */
const continueAfterMigration = (store: RunLogStore.RunLogStore.Service) =>
  Effect.gen(function*() {
    const open = makeRunId("s4-open")
    yield* store.appendReply(open, F.replied(3, 1, 20))
    yield* store.completeStep(open, [F.resulted(4, 1)], F.completed(5, 1, true, 2, 20))
    yield* store.finish(open, {
      ...F.finished(6, { _tag: "Completed", by: "Tool" }, 7_000),
      counters: { steps: 2, effectiveSteps: 1, usage: { inputTokens: 28, outputTokens: 14 }, elapsed: 6, resumedCount: 0 }
    })
    const fork = makeRunId("after-fork")
    yield* store.appendRecords!(fork, [{
      ...F.started(fork, { agent: "veteran", startedAt: 8_000 }),
      snapshot: { agent: { name: "veteran", modelSettings: { model: "gpt-new" } } },
      forkedFrom: { runId: makeRunId("s4-fork"), step: F.replied(0, 0).step, snapshotHash: "b".repeat(64), differences: [] }
    }, F.replied(1, 0, 6)])
    const { expected, runs } = yield* expectedSummaries(store)
    assert.deepStrictEqual(runs, expected)
    const byId = new Map(runs.map((run) => [run.runId, run]))
    assert.deepStrictEqual(byId.get("s4-open")!.counters, { steps: 2, effectiveSteps: 1, inputTokens: 28, outputTokens: 14, resumedCount: 0 })
    assert.deepStrictEqual([byId.get("s4-open")!.inputTokens, byId.get("s4-open")!.outputTokens], [28, 14])
    assert.deepStrictEqual(byId.get("after-fork")!.forkedFrom, { runId: "s4-fork", step: 0, differences: 0 })
    assert.strictEqual(byId.get("after-fork")!.model, "gpt-new")
  })

describe("schema version 5 on a SQLite store written at version 4", () => {
  it.scoped("the fixture is at version 4 and without the columns", () =>
    Effect.gen(function*() {
      const file = yield* copyOfFixture
      const sql = yield* openClient(file)
      const versions = yield* sql<{ migration_id: number }>`SELECT migration_id FROM polyloop_migrations ORDER BY migration_id`
      assert.deepStrictEqual(versions.map((v) => v.migration_id), [1, 2, 3, 4])
      const columns = yield* sql<{ name: string }>`SELECT name FROM pragma_table_info('polyloop_runs')`
      assert.notInclude(columns.map((c) => c.name), "snapshot_hash")
    }))

  it.scoped("migrated: every summary carries the details, equal to summarize's; its logs read back unchanged", () =>
    Effect.gen(function*() {
      const file = yield* copyOfFixture
      const store = yield* openStore(file)
      for (const [id, records] of Object.entries(fixtureRecords)) {
        const log = yield* store.readLog(makeRunId(id))
        assert.strictEqual(JSON.stringify(RunLog.records(log)), JSON.stringify(records))
      }
      const { expected, runs } = yield* expectedSummaries(store)
      assert.deepStrictEqual(runs, expected)
      checkDetails(runs)
      const sql = yield* openClient(file)
      const versions = yield* sql<{ migration_id: number }>`SELECT migration_id FROM polyloop_migrations ORDER BY migration_id`
      assert.deepStrictEqual(versions.map((v) => v.migration_id), [1, 2, 3, 4, 5])
    }))

  it.scoped("migrated: appends keep the details (the new append view)", () =>
    Effect.gen(function*() {
      const file = yield* copyOfFixture
      yield* continueAfterMigration(yield* openStore(file))
    }))
})

describe("summary rows that do not decode", () => {
  it.scoped("a summary row changed behind the store's back (a stop reason, a count, a status) is StoreError Decode naming the column", () =>
    Effect.gen(function*() {
      for (const [column, value, named] of [["stop_reason", '{"_tag":"Nope"}', "stop_reason"], ["fin_steps", "many", "fin_steps"], ["status", "Lost", "status"]] as const) {
        const file = yield* copyOfFixture
        const store = yield* openStore(file)
        assert.strictEqual((yield* store.listRuns()).length, 4)
        const sql = yield* openClient(file)
        yield* sql.unsafe(`UPDATE polyloop_runs SET ${column} = ? WHERE run_id = 's4-fork'`, [value])
        const error = yield* Effect.flip(store.listRuns())
        assert.strictEqual(error.reason, "Decode", column)
        assert.include(error.message, "a run summary does not decode")
        assert.include(error.message, named)
      }
    }))
})

describe.sequential("schema version 5 on a PostgreSQL store at version 4 holding the fixture's rows", () => {
  it.scopedLive("migrated: every summary carries the details, equal to summarize's; appends keep them", () =>
    Effect.gen(function*() {
      const url = yield* freshSchemaUrl
      const pg = yield* Layer.build(SqlRunLogStore.layerPgClient({ url: Redacted.make(url), maxConnections: 2 })).pipe(
        Effect.map(Context.get(SqlClient.SqlClient))
      )
      const applied = yield* Migrator.make({})({
        loader: Migrator.fromRecord(Object.fromEntries(Object.entries(pgMigrations).filter(([key]) => Number(key.split("_")[0]) <= 4))),
        table: SqlRunLogStore.migrationsTable
      }).pipe(Effect.provideService(SqlClient.SqlClient, pg))
      assert.deepStrictEqual(applied.map(([id]) => id), [1, 2, 3, 4])
      // The fixture's rows, as the version-4 store wrote them (records and summary rows).
      const sqlite = yield* openClient(yield* copyOfFixture)
      const records = yield* sqlite<{ run_id: string; seq: number; kind: string; step: number | null; payload: string }>`SELECT run_id, seq, kind, step, payload FROM polyloop_records`
      for (const r of records) {
        yield* pg`INSERT INTO polyloop_records (run_id, seq, kind, step, payload) VALUES (${r.run_id}, ${r.seq}, ${r.kind}, ${r.step}, ${r.payload})`
      }
      const rows = yield* sqlite<Record<string, string | number | null>>`SELECT run_id, agent, status, stop_reason, steps, effective_steps, tokens, started_at, finished_at, elapsed, next_seq FROM polyloop_runs`
      for (const r of rows) {
        yield* pg`INSERT INTO polyloop_runs ${pg.insert(r)}`
      }
      assert.strictEqual(rows.length, Object.keys(fixtureRecords).length)
      const store = yield* Layer.build(SqlRunLogStore.layerPg({ url: Redacted.make(url), maxConnections: 2 })).pipe(
        Effect.map(Context.get(RunLogStore.RunLogStore))
      )
      const { expected, runs } = yield* expectedSummaries(store)
      assert.deepStrictEqual(runs, expected)
      checkDetails(runs)
      yield* continueAfterMigration(store)
    }))
})
