/**
 * The viewer's sub-agent endpoints (design 0412), against a real server (`Serve.serve`) over a
 * real SQLite store holding a planner → reader → expert tree (`support/subagent-tree.ts`):
 *
 * - `GET /api/runs/<id>/tree`: the root and its two children, the grandchild under the first,
 *   each with its own model's cost from the price table, and the descendants' totals; a child's
 *   tree names its verified parent; a child whose log is gone is a node of status "missing"
 *   (not an error); an unknown root is a 404 like `GET /api/runs/<id>`;
 * - a run merely *named* like a child (`<parent>/<step>/<callId>`) gets no parent;
 * - `GET /api/runs`: a child run's row names its parent; `children=hide` leaves the child runs out.
 */
import * as NodeContext from "@effect/platform-node/NodeContext"
import { assert, describe, layer } from "@effect/vitest"
import * as Serve from "@polyloop/cli/Serve"
import * as SqlRunLogStore from "@polyloop/sql/SqlRunLogStore"
import * as Context from "effect/Context"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as fs from "node:fs"
import { createRequire } from "node:module"
import * as os from "node:os"
import * as path from "node:path"
import * as Tree from "./support/subagent-tree.js"

const token = "viewer-subagents-api-token"
const auth = { authorization: `Bearer ${token}` }

interface Database {
  prepare(sql: string): { run(...params: ReadonlyArray<unknown>): unknown }
  close(): void
}
const Sqlite = createRequire(import.meta.url)("better-sqlite3") as new(filename: string) => Database

class Viewer extends Context.Tag("test/SubAgentViewer")<Viewer, { readonly url: string }>() {}

const intact = Tree.idsOf("plan")
const damaged = Tree.idsOf("plan-damaged")
/** Named like a child of `plan` (step 1, call `fake`), but `plan` never called it. */
const fake = "plan/1/fake"
/** A chain of sub-agents 10 levels deep: deeper than the tree reads. */
const deep = "deep"
/** A planner of 503 children: more than the tree reads. */
const wide = "wide"
/** Named like a child of a run that does not exist. */
const orphan = "nobody/0/x"

const dir = fs.mkdtempSync(path.join(os.tmpdir(), "polyloop-viewer-subagents-"))
const filename = path.join(dir, "runs.db")

const viewerLayer = Layer.scoped(
  Viewer,
  Effect.gen(function*() {
    yield* Effect.addFinalizer(() => Effect.sync(() => fs.rmSync(dir, { recursive: true, force: true })))
    yield* Tree.run(intact.root)
    yield* Tree.run(damaged.root)
    yield* Tree.runPlain(fake)
    yield* Tree.runPlain(orphan)
    yield* Tree.runChain(deep, 10)
    yield* Tree.runWide(wide, 503)
    // The damaged tree loses its second reader's log (its record in the parent stays).
    const db = new Sqlite(filename)
    db.prepare("DELETE FROM polyloop_records WHERE run_id = ?").run(damaged.readerB)
    db.prepare("DELETE FROM polyloop_runs WHERE run_id = ?").run(damaged.readerB)
    db.close()
    const bound = yield* Serve.serve({ port: 0, interval: Duration.millis(50), token, prices: Tree.prices })
    return { url: bound.baseUrl }
  })
).pipe(Layer.provide(Layer.merge(SqlRunLogStore.layerSqlite({ filename }), NodeContext.layer)))

interface Usage {
  readonly inputTokens: number
  readonly outputTokens: number
}
interface TreeNode {
  readonly runId: string
  readonly status: string
  readonly model: string | null
  readonly stopReasonLabel: string | null
  readonly steps: number
  readonly effectiveSteps: number
  readonly usage: Usage
  readonly cost?: number | null
  readonly truncated?: boolean
  readonly children: ReadonlyArray<TreeNode>
}
interface TreeDoc {
  readonly runId: string
  readonly parent?: string
  readonly tree: TreeNode
  readonly totals: { readonly runs: number; readonly steps: number; readonly usage: Usage; readonly cost?: { readonly currency: string; readonly amount: number; readonly unpriced: number } }
  readonly truncated: boolean
  readonly error?: { readonly _tag: string; readonly message: string }
}
interface RunsDoc {
  readonly total: number
  readonly pages: number
  readonly runs: ReadonlyArray<{ readonly runId: string; readonly parent?: string }>
}

const getJson = <Body>(url: string) =>
  Effect.promise(async () => {
    const response = await fetch(url, { headers: auth })
    return { status: response.status, body: (await response.json()) as Body }
  })

/** Every page of the runs list for `query`. */
const allRuns = (url: string, query: string) =>
  Effect.gen(function*() {
    const runs: Array<RunsDoc["runs"][number]> = []
    for (let page = 1, pages = 1; page <= pages; page++) {
      const { body } = yield* getJson<RunsDoc>(`${url}api/runs?pageSize=200&page=${page}&${query}`)
      runs.push(...body.runs)
      pages = body.pages
    }
    return runs
  })

const treeOf = (url: string, runId: string) => getJson<TreeDoc>(`${url}api/runs/${encodeURIComponent(runId)}/tree`)

/** What `usage` costs at `price` per million tokens. */
const priced = (usage: Usage, price: { readonly input: number; readonly output: number }) => (usage.inputTokens * price.input + usage.outputTokens * price.output) / 1_000_000

describe.sequential("polyloop serve: sub-agent runs (design 0412)", () => {
  layer(viewerLayer, { timeout: 120_000, excludeTestServices: true })((it) => {
    it.effect("GET /api/runs/<id>/tree: the children and the grandchild, each priced by its own model, with the descendants' totals", () =>
      Effect.gen(function*() {
        const { url } = yield* Viewer
        const { body, status } = yield* treeOf(url, intact.root)
        assert.strictEqual(status, 200, JSON.stringify(body))
        assert.strictEqual(body.runId, intact.root)
        assert.isUndefined(body.parent, "the planner has no parent")
        assert.isFalse(body.truncated)
        const root = body.tree
        assert.deepStrictEqual([root.runId, root.status, root.model, root.steps, root.stopReasonLabel], [intact.root, "finished", "big", 3, "Completed(Answer)"])
        assert.deepStrictEqual(root.usage, { inputTokens: 600, outputTokens: 150 })
        assert.closeTo(root.cost ?? -1, priced(root.usage, Tree.prices.models.big), 1e-12)
        assert.deepStrictEqual(root.children.map((c) => c.runId), [intact.readerA, intact.readerB])
        const [a, b] = root.children
        assert.deepStrictEqual([a!.status, a!.model, a!.stopReasonLabel, a!.steps, a!.effectiveSteps], ["finished", "small", "Completed(Answer)", 2, 1])
        assert.deepStrictEqual(a!.usage, { inputTokens: 200, outputTokens: 40 })
        assert.closeTo(a!.cost ?? -1, priced(a!.usage, Tree.prices.models.small), 1e-12)
        assert.deepStrictEqual([b!.status, b!.model, b!.steps, b!.usage.inputTokens + b!.usage.outputTokens, b!.children.length], ["finished", "small", 1, 60, 0])
        const [expert] = a!.children
        assert.deepStrictEqual([expert!.runId, expert!.status, expert!.model, expert!.steps, expert!.children.length], [intact.expert, "finished", "medium", 1, 0])
        assert.closeTo(expert!.cost ?? -1, priced(expert!.usage, Tree.prices.models.medium), 1e-12)
        assert.deepStrictEqual([body.totals.runs, body.totals.steps, body.totals.usage.inputTokens + body.totals.usage.outputTokens], [3, 4, 360])
        assert.closeTo(body.totals.cost?.amount ?? -1, (a!.cost ?? 0) + (b!.cost ?? 0) + (expert!.cost ?? 0), 1e-12)
        assert.strictEqual(body.totals.cost?.unpriced, 0)
      }))

    it.effect("a child's tree names its parent, verified in the parent's log; the grandchild's names the reader", () =>
      Effect.gen(function*() {
        const { url } = yield* Viewer
        const child = yield* treeOf(url, intact.readerA)
        assert.strictEqual(child.status, 200)
        assert.strictEqual(child.body.parent, intact.root)
        assert.deepStrictEqual(child.body.tree.children.map((c) => c.runId), [intact.expert])
        assert.deepStrictEqual([child.body.totals.runs, child.body.totals.steps], [1, 1])
        assert.strictEqual((yield* treeOf(url, intact.expert)).body.parent, intact.readerA)
      }))

    it.effect("a run merely named like a child gets no parent; an unknown run is a 404", () =>
      Effect.gen(function*() {
        const { url } = yield* Viewer
        const named = yield* treeOf(url, fake)
        assert.strictEqual(named.status, 200)
        assert.isUndefined(named.body.parent, "plan never called plan/1/fake")
        assert.deepStrictEqual(named.body.tree.children, [])
        assert.strictEqual(named.body.totals.runs, 0)
        const orphaned = yield* treeOf(url, orphan)
        assert.strictEqual(orphaned.status, 200)
        assert.isUndefined(orphaned.body.parent)
        const unknown = yield* treeOf(url, "no-such-run")
        assert.strictEqual(unknown.status, 404)
        assert.strictEqual(unknown.body.error?._tag, "RunNotFound")
      }))

    it.effect("a child whose log is gone is a node of status missing, from the parent's record; the endpoint still answers", () =>
      Effect.gen(function*() {
        const { url } = yield* Viewer
        const { body, status } = yield* treeOf(url, damaged.root)
        assert.strictEqual(status, 200)
        const [a, b] = body.tree.children
        assert.strictEqual(a!.status, "finished")
        assert.deepStrictEqual([b!.runId, b!.status, b!.model, b!.steps, b!.stopReasonLabel], [damaged.readerB, "missing", null, 1, "Completed(Answer)"])
        assert.deepStrictEqual(b!.usage, { inputTokens: 40, outputTokens: 20 })
        assert.isNull(b!.cost ?? null, "no model known: not priced")
        assert.strictEqual(body.totals.runs, 3)
        assert.strictEqual(body.totals.cost?.unpriced, 1)
        const gone = yield* treeOf(url, damaged.readerB)
        assert.strictEqual(gone.status, 404, "the missing child itself is an unknown root")
      }))

    it.effect("the tree is read 8 levels deep: the node at the bound is marked truncated, the document too", () =>
      Effect.gen(function*() {
        const { url } = yield* Viewer
        const { body, status } = yield* treeOf(url, deep)
        assert.strictEqual(status, 200)
        assert.isTrue(body.truncated)
        const chain: Array<TreeNode> = []
        for (let node = body.tree.children[0]; node !== undefined; node = node.children[0]) chain.push(node)
        assert.strictEqual(chain.length, 8)
        assert.deepStrictEqual(chain.map((node) => node.truncated ?? false), [false, false, false, false, false, false, false, true])
        assert.deepStrictEqual(chain.map((node) => node.steps), [2, 2, 2, 2, 2, 2, 2, 2])
        assert.strictEqual(body.totals.runs, 8)
        // From the bound down, the deepest child's own tree goes on.
        const below = yield* treeOf(url, chain[7]!.runId)
        assert.deepStrictEqual([below.body.parent, below.body.totals.runs, below.body.truncated], [chain[6]!.runId, 2, false])
      }))

    it.effect("the tree reads 500 runs at most: the node whose children were cut is marked truncated", () =>
      Effect.gen(function*() {
        const { url } = yield* Viewer
        const { body, status } = yield* treeOf(url, wide)
        assert.strictEqual(status, 200)
        assert.isTrue(body.truncated)
        assert.isTrue(body.tree.truncated)
        assert.strictEqual(body.tree.children.length, 500)
        assert.strictEqual(body.totals.runs, 500)
        assert.strictEqual(body.tree.children[499]!.runId, `${wide}/0/call_s0_499`)
      }))

    it.effect("GET /api/runs: a child run's row names its parent; children=hide leaves child runs out", () =>
      Effect.gen(function*() {
        const { url } = yield* Viewer
        const all = yield* allRuns(url, "")
        const parents = new Map(all.map((r) => [r.runId, r.parent]))
        assert.strictEqual(parents.get(intact.readerA), intact.root)
        assert.strictEqual(parents.get(intact.readerB), intact.root)
        assert.strictEqual(parents.get(intact.expert), intact.readerA)
        assert.strictEqual(parents.get(damaged.readerA), damaged.root)
        assert.isUndefined(parents.get(intact.root))
        assert.isUndefined(parents.get(fake), "named like a child, not one")
        assert.isUndefined(parents.get(orphan))
        assert.strictEqual(parents.get(`${wide}/0/call_s0_502`), wide, "the list's parents are not bounded by the tree's")
        const hidden = yield* getJson<RunsDoc>(`${url}api/runs?pageSize=200&children=hide`)
        assert.deepStrictEqual(new Set(hidden.body.runs.map((r) => r.runId)), new Set([intact.root, damaged.root, fake, orphan, deep, wide]))
        assert.strictEqual(hidden.body.total, 6)
        assert.strictEqual((yield* getJson<RunsDoc>(`${url}api/runs?children=nope`)).status, 400)
      }))
  })
})
