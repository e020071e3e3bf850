/**
 * An append of any number of records (a fork's copied log, an imported log: `appendRecords`) is
 * written whole or not at all, on every store — whatever the database's limit on a statement's
 * parameters (SQLite 32,766; PostgreSQL 65,535) — and fenced by the writer's claim as a small
 * append is. The refusal that undoes the whole append is the duplicate of its LAST record, put
 * under the store by a raw client.
 */
import { assert, describe, it } from "@effect/vitest"
import * as SqlClient from "@effect/sql/SqlClient"
import { ConcurrentWriter } from "@polyloop/core/Errors"
import type { RunId } from "@polyloop/core/Ids"
import * as RunLog from "@polyloop/core/RunLog"
import * as RunLogStore from "@polyloop/core/RunLogStore"
import * as SqlRunLogStore from "@polyloop/sql/SqlRunLogStore"
import type * as Arr from "effect/Array"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Redacted from "effect/Redacted"
import type * as Scope from "effect/Scope"
import * as path from "node:path"
import * as F from "./fixtures.js"
import { freshSchemaUrl } from "./PgSupport.js"

/** Records per big append: 20,000 (×15 parameters on SQLite, ×4–5 on PostgreSQL: past both limits). */
const big = 20_000

/** Odd text in every observation (written here): quotes, backslashes, NUL, a lone surrogate, non-ASCII, an emoji, SQL and JSON syntax. */
const odd = (step: number) => `"${step}" \\ \u0000 \0 \ud800 é 😀 '); DROP TABLE x; -- ], [ {"a":1}`

/** `steps` whole steps of a run from `seq`, `step` on: reply, result, completion (3 records a step). */
const steps = (seq: number, step: number, count: number): Array<RunLog.RunRecord> => {
  const out: Array<RunLog.RunRecord> = []
  for (let i = 0; i < count; i++) {
    out.push(F.replied(seq++, step + i, 7), F.resulted(seq++, step + i, "Executed", odd(step + i)), F.completed(seq++, step + i, true, 3, 7))
  }
  return out
}

/** A log of about `records` records from `RunStarted` on, finished or not. */
const logOf = (runId: RunId, records: number, finished: boolean): Arr.NonEmptyReadonlyArray<RunLog.RunRecord> => {
  const body = steps(1, 0, Math.floor((records - 1) / 3))
  const all: Array<RunLog.RunRecord> = [F.started(runId, { agent: "bulk", startedAt: 5_000 }), ...body]
  if (finished) all.push(F.finished(all.length))
  return all as unknown as Arr.NonEmptyReadonlyArray<RunLog.RunRecord>
}

const stepsIn = (records: ReadonlyArray<RunLog.RunRecord>) => records.filter((r) => r._tag === "StepCompleted").length

interface Subject {
  readonly store: RunLogStore.RunLogStore.Service
  /** A raw client on the store's database, to put a conflicting row under the store (none for the memory store). */
  readonly raw: SqlClient.SqlClient | undefined
}

const appendOf = (store: RunLogStore.RunLogStore.Service) => {
  const append = store.appendRecords
  if (append === undefined) throw new Error("the store has no appendRecords")
  return append
}

/** The same cases on every store. */
const cases = (name: string, open: Effect.Effect<Subject, unknown, Scope.Scope>, options: { readonly rawClient: boolean }) =>
  describe(name, () => {
    let counter = 0
    const fresh = (prefix: string) => F.rid(`${prefix}-${++counter}`)

    it.scoped(`an unfinished log of ${big} records in one append, then ${big} more in another`, () =>
      Effect.gen(function*() {
        const { store } = yield* open
        const runId = fresh("bulk")
        const first = logOf(runId, big, false)
        yield* appendOf(store)(runId, first)
        const more = steps(first.length, stepsIn(first), Math.floor(big / 3))
        yield* appendOf(store)(runId, more as unknown as Arr.NonEmptyReadonlyArray<RunLog.RunRecord>)
        const log = yield* store.readLog(runId)
        assert.strictEqual(RunLog.nextSeq(log), first.length + more.length)
        assert.strictEqual(log.steps.length, stepsIn(first) + stepsIn(more))
        // Every record back in its place, its text byte for byte.
        assert.deepStrictEqual(log.results.map((r) => [r.seq, r.step, r.executorObservation]), log.results.map((_, i) => [3 * i + 2, i, odd(i)]))
        const [summary] = (yield* store.listRuns()).filter((r) => r.runId === runId)
        assert.strictEqual(summary?.steps, stepsIn(first) + stepsIn(more))
        assert.strictEqual(summary?.tokens, (stepsIn(first) + stepsIn(more)) * 10)
        assert.strictEqual(summary?.status, "Unfinished")
      }))

    it.scoped(`a finished log of ${big} records (an import) in one append, by the run's claim holder`, () =>
      Effect.gen(function*() {
        const { store } = yield* open
        const runId = fresh("import")
        const records = logOf(runId, big, true)
        yield* Effect.scoped(Effect.zipRight(store.claim(runId), appendOf(store)(runId, records)))
        const log = yield* store.readLog(runId)
        assert.strictEqual(RunLog.nextSeq(log), records.length)
        assert.isTrue(log.finished._tag === "Some")
        const [summary] = (yield* store.listRuns()).filter((r) => r.runId === runId)
        assert.strictEqual(summary?.status, "Finished")
        assert.strictEqual(summary?.steps, stepsIn(records))
      }))

    it.scoped(`big appends of two claimed runs at once (several claims held: grouped appends)`, () =>
      Effect.gen(function*() {
        const { store } = yield* open
        const a = fresh("pair")
        const b = fresh("pair")
        yield* store.claim(a)
        yield* store.claim(b)
        yield* store.start(F.started(a))
        yield* store.start(F.started(b))
        const batch = steps(1, 0, Math.floor(big / 3)) as unknown as Arr.NonEmptyReadonlyArray<RunLog.RunRecord>
        yield* Effect.all([appendOf(store)(a, batch), appendOf(store)(b, batch)], { concurrency: 2 })
        for (const runId of [a, b]) assert.strictEqual(RunLog.nextSeq(yield* store.readLog(runId)), batch.length + 1)
      }))

    if (options.rawClient) {
      it.scoped(`a duplicate of the last of ${big} records refuses the whole append: nothing of it is written`, () =>
        Effect.gen(function*() {
          const { raw, store } = yield* open
          if (raw === undefined) return yield* Effect.dieMessage("no raw client")
          const runId = fresh("atomic")
          yield* store.start(F.started(runId))
          const batch = steps(1, 0, Math.floor(big / 3)) as unknown as Arr.NonEmptyReadonlyArray<RunLog.RunRecord>
          const last = batch.length
          // A row at the batch's last sequence number, under the store (its summary not updated).
          yield* raw`INSERT INTO polyloop_records (run_id, seq, kind, step, payload) VALUES (${runId}, ${last}, 'StepCompleted', NULL, '{}')`
          const refused = yield* Effect.flip(appendOf(store)(runId, batch))
          assert.instanceOf(refused, ConcurrentWriter)
          const rows = yield* raw<{ n: number | string }>`SELECT count(*) AS n FROM polyloop_records WHERE run_id = ${runId}`
          assert.strictEqual(Number(rows[0]?.n), 2)
          const [summary] = (yield* store.listRuns()).filter((r) => r.runId === runId)
          assert.strictEqual(summary?.steps, 0)
          // The run's next record is still the first of the batch.
          yield* store.appendReply(runId, F.replied(1, 0))
        }))

      it.scoped(`a claim holder whose lease was taken over is fenced off at a ${big}-record append: nothing of it is written`, () =>
        Effect.gen(function*() {
          const { raw, store } = yield* open
          if (raw === undefined) return yield* Effect.dieMessage("no raw client")
          const runId = fresh("fenced")
          yield* store.claim(runId)
          yield* store.start(F.started(runId))
          // Another process took the lease over (as after an expiry).
          yield* raw`UPDATE polyloop_claims SET owner = 'other-host:1:1:x' WHERE run_id = ${runId}`
          const batch = steps(1, 0, Math.floor(big / 3)) as unknown as Arr.NonEmptyReadonlyArray<RunLog.RunRecord>
          const refused = yield* Effect.flip(appendOf(store)(runId, batch))
          assert.instanceOf(refused, ConcurrentWriter)
          assert.strictEqual((refused as ConcurrentWriter).leaseHolder, "other-host:1:1:x")
          assert.strictEqual(RunLog.nextSeq(yield* store.readLog(runId)), 1)
          const [summary] = (yield* store.listRuns()).filter((r) => r.runId === runId)
          assert.strictEqual(summary?.steps, 0)
        }))
    }
  })

const storeOf = (context: Context.Context<RunLogStore.RunLogStore>) => Context.get(context, RunLogStore.RunLogStore)

cases(
  "the memory store",
  Effect.map(RunLogStore.makeMemory, (store): Subject => ({ store, raw: undefined })),
  { rawClient: false }
)

cases(
  "SQLite, the store's own client (one held connection)",
  Effect.gen(function*() {
    const dir = yield* F.tempDir()
    const filename = path.join(dir, "runs.db")
    const store = storeOf(yield* Layer.build(SqlRunLogStore.layerSqlite({ filename, synchronous: "NORMAL" })))
    // A second connection on the file, for the conflicting row.
    const raw = Context.get(yield* Layer.build(SqlRunLogStore.layerSqliteClient({ filename, synchronous: "NORMAL" })), SqlClient.SqlClient)
    return { store, raw }
  }),
  { rawClient: true }
)

cases(
  "SQLite, a shared client",
  Effect.gen(function*() {
    const dir = yield* F.tempDir()
    const filename = path.join(dir, "runs.db")
    const context = yield* Layer.build(
      Layer.provideMerge(SqlRunLogStore.layer({ path: filename }), SqlRunLogStore.layerSqliteClient({ filename, synchronous: "NORMAL" }))
    )
    return { store: storeOf(context), raw: Context.get(context, SqlClient.SqlClient) }
  }),
  { rawClient: true }
)

cases(
  "PostgreSQL",
  Effect.gen(function*() {
    const url = yield* freshSchemaUrl
    const store = storeOf(yield* Layer.build(SqlRunLogStore.layerPg({ url: Redacted.make(url), maxConnections: 4 })))
    const raw = Context.get(yield* Layer.build(SqlRunLogStore.layerPgClient({ url: Redacted.make(url), maxConnections: 1 })), SqlClient.SqlClient)
    return { store, raw }
  }),
  { rawClient: true }
)

describe("grouped appends on PostgreSQL past the parameter limit (design 0396)", () => {
  it.scoped("100 runs' appends of 150 records that reach the store together (75,900 parameters) are a few statements, not one refused and 100 alone", () =>
    Effect.gen(function*() {
      const url = yield* freshSchemaUrl
      const context = yield* Layer.build(
        Layer.merge(SqlRunLogStore.layerPg({ url: Redacted.make(url), maxConnections: 4 }), SqlRunLogStore.layerPgClient({ url: Redacted.make(url), maxConnections: 1 }))
      )
      const store = Context.get(context, RunLogStore.RunLogStore)
      const sql = Context.get(context, SqlClient.SqlClient)
      const runs = Array.from({ length: 100 }, (_, i) => F.rid(`grouped-${i}`))
      yield* Effect.forEach(runs, (r) => Effect.zipRight(store.claim(r), store.start(F.started(r))), { discard: true })
      const batch = steps(1, 0, 50) as unknown as Arr.NonEmptyReadonlyArray<RunLog.RunRecord>
      yield* Effect.forEach(runs, (r) => appendOf(store)(r, batch), { concurrency: "unbounded", discard: true })
      for (const r of runs) assert.strictEqual(RunLog.nextSeq(yield* store.readLog(r)), batch.length + 1)
      // One transaction id per statement that wrote records.
      const xids = yield* sql<{ n: number | string }>`SELECT count(DISTINCT xmin::text) AS n FROM polyloop_records WHERE seq >= 1`
      const statements = Number(xids[0]!.n)
      assert.isAtMost(statements, 4, `${statements} statements for 100 appends`)
    }))
})
