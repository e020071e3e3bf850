/**
 * The viewer over a big store (issue 34): `polyloop serve`'s runs list and statistics over a
 * SQLite store of 10,000 finished runs, against a target of < 1 s each, with the server's
 * memory before and after.
 *
 *   npx tsx --conditions=@polyloop/source bench/viewer.ts [--runs 10000] [--out <file>]
 *
 * The store is filled once (real runs of the benchmark agent at 1 to 8 steps, one of each made
 * by `Agent.run` in memory, then copied under 10,000 run ids with `appendRecords`, one commit per
 * run); then a real server (`Serve.serve`, loopback, a token) answers over HTTP: the runs list
 * (first page, a filtered page, a far page), the statistics (`/api/stats`),
 * a search (`/api/search`, the store's own query), a run's forks (`/api/runs/<id>/forks`), the
 * list with each run's cost and the totals (a price table given). Since design 0343 the statistics
 * and the forks are answered from the summary rows (one query, no log read). Each figure is the median wall time of 5
 * requests after 2 unrecorded ones, with the first request's time apart; memory is the process's RSS and V8 heap after a
 * full GC, before the server starts and after the last request. Results go to
 * `bench/results.viewer.json` (or `--out`) with the machine and its load; see `VIEWER.md`.
 */
import * as NodeContext from "@effect/platform-node/NodeContext"
import * as SqlClient from "@effect/sql/SqlClient"
import * as Serve from "@polyloop/cli/Serve"
import * as Ids from "@polyloop/core/Ids"
import * as RunLog from "@polyloop/core/RunLog"
import * as RunLogStore from "@polyloop/core/RunLogStore"
import * as SqlRunLogStore from "@polyloop/sql/SqlRunLogStore"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { fileURLToPath } from "node:url"
import * as F from "./lib/fixtures.js"
import { gc, now, option, round, stat } from "./lib/measure.js"

const benchDir = path.dirname(fileURLToPath(import.meta.url))
const runs = Number(option("--runs") ?? "10000")
const out = option("--out") ?? path.join(benchDir, "results.viewer.json")
const token = "bench-viewer-token"

const memory = () => {
  gc()
  const usage = process.memoryUsage()
  return { rssMB: round(usage.rss / 1048576, 1), heapUsedMB: round(usage.heapUsed / 1048576, 1) }
}

/** The store in context with the summaries' details (design 0343) taken off: how a store without them is answered. */
const withoutDetails = Layer.effect(
  RunLogStore.RunLogStore,
  Effect.map(RunLogStore.RunLogStore, (store): RunLogStore.RunLogStore.Service => ({
    ...store,
    listRuns: (query) =>
      Effect.map(store.listRuns(query), (summaries) =>
        summaries.map(({ counters: _c, forkedFrom: _f, inputTokens: _i, model: _m, outputTokens: _o, snapshotHash: _s, ...rest }) => rest))
  }))
)

/** One finished run per step budget 1 … 8, made by the loop in memory: the templates. */
const templates = Effect.gen(function*() {
  const store = yield* RunLogStore.makeMemory
  const made: Array<ReadonlyArray<RunLog.RunRecord>> = []
  for (let steps = 1; steps <= 8; steps++) {
    const id = `template-${steps}`
    yield* F.runOn(store, F.model(F.replies(steps)), F.request(id, steps))
    made.push(RunLog.records(yield* store.readLog(Ids.runId(id))))
  }
  return made
})

const main = Effect.gen(function*() {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "polyloop-bench-viewer-"))
  const file = path.join(dir, "runs.db")
  const made = yield* templates
  const fillStarted = now()
  yield* Effect.scoped(Effect.gen(function*() {
    const store = yield* RunLogStore.RunLogStore
    const base = Date.now() - runs * 60_000
    for (let i = 0; i < runs; i++) {
      const template = made[i % made.length]!
      const runId = Ids.runId(`run-${String(i).padStart(6, "0")}`)
      const records = template.map((record) =>
        record._tag === "RunStarted" ? { ...record, runId, startedAt: base + i * 60_000 } : record
      ) as unknown as readonly [RunLog.RunRecord, ...Array<RunLog.RunRecord>]
      yield* store.appendRecords!(runId, records)
    }
  }).pipe(Effect.provide(SqlRunLogStore.layerSqlite({ filename: file }))))
  const fillSeconds = round((now() - fillStarted) / 1000, 1)
  // The migration to schema version 5 (design 0343) on this store: a copy taken back to version 4's
  // columns (the new ones dropped, the version unrecorded), then opened: the backfill's time.
  const copy = path.join(dir, "schema-4.db")
  fs.copyFileSync(file, copy)
  yield* Effect.scoped(Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    // The trigger names the new columns: it goes while they are dropped (version 5 makes it again).
    yield* sql`DROP TRIGGER polyloop_append_insert`
    for (const column of ["snapshot_hash", "model", "forked_from", "fork_step", "fork_differences", "input_tokens", "fin_steps", "fin_effective_steps", "fin_input_tokens", "fin_output_tokens", "fin_resumed"]) {
      yield* sql.unsafe(`ALTER TABLE polyloop_runs DROP COLUMN ${column}`)
    }
    yield* sql.unsafe("CREATE TRIGGER polyloop_append_insert INSTEAD OF INSERT ON polyloop_append BEGIN SELECT 1; END")
    yield* sql`DELETE FROM polyloop_migrations WHERE migration_id = 5`
  }).pipe(Effect.provide(SqlRunLogStore.layerSqliteClient({ filename: copy }))))
  const migrationStarted = now()
  yield* Effect.scoped(Effect.asVoid(RunLogStore.RunLogStore).pipe(Effect.provide(SqlRunLogStore.layerSqlite({ filename: copy }))))
  const migrationSeconds = round((now() - migrationStarted) / 1000, 2)
  fs.rmSync(copy, { force: true })
  const before = memory()
  /**
   * The server's answers on the store; `bare`: over summaries without the details of design 0343
   * (a store that does not keep them, answered as before it: every finished log read by the first
   * statistics request, every log by the first forks request).
   */
  const measure = (bare: boolean) => Effect.scoped(Effect.gen(function*() {
    const bound = yield* Serve.serve({ port: 0, token, prices: { currency: "USD", models: { "*": { input: 3, output: 15 } } } })
    const time = (pathname: string) =>
      Effect.promise(async () => {
        const samples: Array<number> = []
        let first = 0
        let status = 0
        let bytes = 0
        for (let rep = 0; rep < 7; rep++) {
          const started = now()
          const response = await fetch(new URL(pathname, bound.baseUrl), { headers: { authorization: `Bearer ${token}` } })
          const body = await response.text()
          if (rep === 0) first = now() - started
          if (rep >= 2) samples.push(now() - started)
          status = response.status
          bytes = body.length
        }
        const s = stat(samples)
        return { path: pathname, status, bytes, firstMs: round(first, 1), medianMs: round(s.median, 1), minMs: round(s.min, 1), maxMs: round(s.max, 1) }
      })
    const list = yield* time("/api/runs")
    const filtered = yield* time("/api/runs?stopReason=BudgetExhausted(Steps)&page=7")
    const far = yield* time(`/api/runs?page=${Math.ceil(runs / 25)}`)
    const stats = yield* time("/api/stats")
    const search = yield* time("/api/search?q=nothing-matches-this")
    const forks = yield* time("/api/runs/run-000000/forks")
    const priced = yield* time("/api/runs?pageSize=25")
    return { list, filtered, far, stats, search, forks, priced }
  }).pipe(
    Effect.provide(bare ? withoutDetails : Layer.empty),
    Effect.provide(SqlRunLogStore.layerSqlite({ filename: file })),
    Effect.provide(NodeContext.layer)
  ))
  const figures = yield* measure(false)
  const after = memory()
  const bare = yield* measure(true)
  fs.rmSync(dir, { recursive: true, force: true })
  const result = {
    at: new Date().toISOString(),
    machine: { cpus: os.cpus().length, model: os.cpus()[0]?.model ?? "?", node: process.version, loadavg: os.loadavg().map((l) => round(l, 1)) },
    runs,
    fillSeconds,
    migrationSeconds,
    figures,
    withoutDetails: bare,
    memory: { before, after },
    target: "runs list and statistics < 1000 ms each",
    met: figures.list.medianMs < 1000 && figures.stats.medianMs < 1000
  }
  fs.writeFileSync(out, `${JSON.stringify(result, null, 2)}\n`)
  process.stdout.write(`${JSON.stringify(result, null, 2)}\n`)
})

Effect.runPromise(main.pipe(Effect.provide(Layer.empty))).catch((error: unknown) => {
  process.stderr.write(`bench/viewer: ${error instanceof Error ? error.stack ?? error.message : String(error)}\n`)
  process.exitCode = 1
})
