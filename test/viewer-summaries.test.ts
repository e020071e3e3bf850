/**
 * The viewer answers from the store's summaries (design 0343), counted in work, not time: the
 * statistics, a run's forks and the runs list's costs read no log when the store's summaries
 * carry the details (the SQL store, schema version 5), and the figures are still those of
 * `Stats.fromStore` (what `polyloop stats --json` prints). Over a store whose summaries lack
 * them (a user's own backend, here the same store with the fields taken off) the viewer reads
 * each finished log once, and its figures are the same.
 */
import * as NodeContext from "@effect/platform-node/NodeContext"
import { assert, describe, it } from "@effect/vitest"
import * as Serve from "@polyloop/cli/Serve"
import * as Fork from "@polyloop/core/Fork"
import * as Ids from "@polyloop/core/Ids"
import * as RunLogStore from "@polyloop/core/RunLogStore"
import * as Stats from "@polyloop/core/Stats"
import * as SqlRunLogStore from "@polyloop/sql/SqlRunLogStore"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Schema from "effect/Schema"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import * as Scenario from "./support/viewer-scenario.js"

const token = "viewer-summaries-test-token"
const prices: Serve.PriceTable = { currency: "EUR", models: { "*": { input: 3, output: 15 } } }
const priced = (input: number, output: number) => (input * 3 + output * 15) / 1_000_000

/** The store in context, with its `readLog` calls counted; `bare` takes the details (design 0343) off every summary. */
const counted = (inner: RunLogStore.RunLogStore.Service, bare: boolean) => {
  const reads = { count: 0 }
  const strip = ({ counters: _c, forkedFrom: _f, inputTokens: _i, model: _m, outputTokens: _o, snapshotHash: _s, ...rest }: RunLogStore.RunSummary): RunLogStore.RunSummary => rest
  const service: RunLogStore.RunLogStore.Service = {
    ...inner,
    readLog: (runId, options) => Effect.suspend(() => {
      reads.count++
      return inner.readLog(runId, options)
    }),
    listRuns: (query) => bare ? Effect.map(inner.listRuns(query), (runs) => runs.map(strip)) : inner.listRuns(query)
  }
  return { reads, layer: Layer.succeed(RunLogStore.RunLogStore, service) }
}

const encodeGroups = Schema.encodeSync(Schema.Array(Stats.Group))

/** A SQLite store with finished runs of three configurations, a resumed run and two forks of one run. */
const seeded = Effect.gen(function*() {
  const dir = yield* Effect.acquireRelease(
    Effect.sync(() => fs.mkdtempSync(path.join(os.tmpdir(), "polyloop-viewer-summaries-"))),
    (dir) => Effect.sync(() => fs.rmSync(dir, { recursive: true, force: true }))
  )
  const layer = SqlRunLogStore.layerSqlite({ filename: path.join(dir, "runs.db") })
  const store = yield* Layer.build(layer).pipe(Effect.map(Context.get(RunLogStore.RunLogStore)))
  yield* Effect.gen(function*() {
    for (const [runId, name] of [["budget-a", "budget"], ["budget-b", "budget"], ["env-a", "envError"], ["hostile-a", "hostile"]] as const) {
      yield* Scenario.run(name, runId)
    }
    yield* Effect.flip(Scenario.run("hostile", "resumed-a", { failFromStep: 1 }))
    yield* Scenario.run("hostile", "resumed-a")
    yield* Fork.fork({ from: Ids.runId("hostile-a"), atStep: 1, runId: Ids.runId("fork-1") })
    yield* Scenario.run("hostileAlt", "fork-1")
    yield* Fork.fork({ from: Ids.runId("hostile-a"), atStep: 2, runId: Ids.runId("fork-2") })
  }).pipe(Effect.provideService(RunLogStore.RunLogStore, store))
  return store
})

const get = <A>(url: string, pathname: string) =>
  Effect.promise(async () => {
    const response = await fetch(new URL(pathname, url), { headers: { authorization: `Bearer ${token}` } })
    assert.strictEqual(response.status, 200, pathname)
    return (await response.json()) as A
  })

interface StatsDocument {
  readonly groups: unknown
  readonly finished: number
  readonly cost: { readonly total: number; readonly unpriced: number } | null
}
interface RunsPage {
  readonly runs: ReadonlyArray<{ readonly runId: string; readonly tokens: number; readonly cost?: number | null }>
  readonly total: number
  readonly totals: { readonly runs: number; readonly tokens: number; readonly cost: { readonly currency: string; readonly amount: number; readonly unpriced: number } | null }
}
interface ForksDocument {
  readonly forks: ReadonlyArray<{ readonly runId: string; readonly step: number; readonly differences: number }>
}

/** What the viewer answers on `store` (its reads counted), and what the command computes. */
const answers = (store: RunLogStore.RunLogStore.Service, bare: boolean) =>
  Effect.gen(function*() {
    const { layer, reads } = counted(store, bare)
    const expected = encodeGroups(yield* Stats.fromStore().pipe(Effect.provideService(RunLogStore.RunLogStore, store)))
    return yield* Effect.scoped(Effect.gen(function*() {
      const bound = yield* Serve.serve({ port: 0, token, prices })
      const url = bound.baseUrl
      const first = yield* get<StatsDocument>(url, "/api/stats")
      const afterFirst = reads.count
      const second = yield* get<StatsDocument>(url, "/api/stats")
      const afterSecond = reads.count
      const forks = yield* get<ForksDocument>(url, "/api/runs/hostile-a/forks")
      const afterForks = reads.count
      const list = yield* get<RunsPage>(url, "/api/runs?pageSize=200")
      const afterList = reads.count
      return { expected, first, second, forks, list, reads: { afterFirst, afterSecond, afterForks, afterList } }
    }).pipe(Effect.provide(layer), Effect.provide(NodeContext.layer)))
  })

/** Each run's replies' input and output tokens, from its log. */
const tokensOf = (store: RunLogStore.RunLogStore.Service, runId: string) =>
  Effect.map(store.readLog(Ids.runId(runId)), (log) => {
    let input = 0
    let output = 0
    for (const reply of log.replies) {
      input += reply.reply.usage.inputTokens
      output += reply.reply.usage.outputTokens
    }
    return { input, output }
  })

describe.sequential("polyloop serve answers from the store's summaries", () => {
  it.scopedLive("statistics, forks and the list's costs read no log on a store that keeps the details; the figures are the command's", () =>
    Effect.gen(function*() {
      const store = yield* seeded
      const finished = (yield* store.listRuns({ status: "Finished" })).length
      assert.isAtLeast(finished, 6)
      const got = yield* answers(store, false)
      assert.deepStrictEqual(got.first.groups, got.expected)
      assert.deepStrictEqual(got.second.groups, got.expected)
      assert.strictEqual(got.first.finished, finished)
      assert.deepStrictEqual(got.reads, { afterFirst: 0, afterSecond: 0, afterForks: 0, afterList: 0 })
      assert.deepStrictEqual(got.forks.forks.map((f) => [f.runId, f.step]), [["fork-1", 1], ["fork-2", 2]])
      // Each run's cost is its replies' tokens priced; the totals are the filtered runs'.
      let total = 0
      let tokens = 0
      for (const run of got.list.runs) {
        const { input, output } = yield* tokensOf(store, run.runId)
        assert.strictEqual(run.tokens, input + output, run.runId)
        assert.closeTo(run.cost ?? -1, priced(input, output), 1e-12, run.runId)
        total += priced(input, output)
        tokens += input + output
      }
      assert.strictEqual(got.list.runs.length, got.list.total)
      assert.deepStrictEqual([got.list.totals.runs, got.list.totals.tokens, got.list.totals.cost?.currency, got.list.totals.cost?.unpriced], [got.list.total, tokens, "EUR", 0])
      assert.closeTo(got.list.totals.cost?.amount ?? -1, total, 1e-12)
      assert.isAbove(total, 0)
    }))

  it.scopedLive("over summaries without the details, each finished log is read once (first request), the forks' logs once, and the figures are the same", () =>
    Effect.gen(function*() {
      const store = yield* seeded
      const finished = (yield* store.listRuns({ status: "Finished" })).length
      const all = (yield* store.listRuns()).length
      const got = yield* answers(store, true)
      assert.deepStrictEqual(got.first.groups, got.expected)
      assert.deepStrictEqual(got.second.groups, got.expected)
      assert.deepStrictEqual(got.reads, { afterFirst: finished, afterSecond: finished, afterForks: finished + all, afterList: finished + all })
      assert.deepStrictEqual(got.forks.forks.map((f) => [f.runId, f.step]), [["fork-1", 1], ["fork-2", 2]])
      // Without the token split a run cannot be priced: counted apart, never at zero.
      assert.isTrue(got.list.runs.every((run) => run.cost === null))
      assert.deepStrictEqual([got.list.totals.cost?.amount, got.list.totals.cost?.unpriced], [0, got.list.total])
    }))
})
