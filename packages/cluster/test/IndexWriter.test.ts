/**
 * The run index's writer (design 0350, decision 5): the transitions of many runs queued together
 * are one statement, each row by `RunIndex.transition`'s rules; a run named twice is written in
 * order; what is queued when the writer's scope closes is written, and later writes go alone.
 */
import { assert, describe, it } from "@effect/vitest"
import * as Statement from "@effect/sql/Statement"
import * as RunIndex from "@polyloop/cluster/RunIndex"
import * as SqlRunLogStore from "@polyloop/sql/SqlRunLogStore"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Option from "effect/Option"
import * as Scope from "effect/Scope"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import * as IndexWriter from "../src/internal/indexWriter.js"

const tempDb = Effect.acquireRelease(
  Effect.sync(() => fs.mkdtempSync(path.join(os.tmpdir(), "polyloop-index-writer-"))),
  (dir) => Effect.sync(() => fs.rmSync(dir, { recursive: true, force: true }))
).pipe(Effect.map((dir) => path.join(dir, "index.db")))

/** Runs `body` on a fresh migrated index, counting the index's upserts. */
const withIndex = <A, E>(body: (upserts: () => number) => Effect.Effect<A, E, import("@effect/sql/SqlClient").SqlClient | Scope.Scope>) =>
  Effect.gen(function*() {
    const filename = yield* tempDb
    let upserts = 0
    const counted = body(() => upserts).pipe(
      Statement.withTransformer((statement) =>
        Effect.sync(() => {
          if (statement.compile()[0].startsWith("INSERT INTO polyloop_cluster_runs")) upserts++
          return statement
        })
      )
    )
    return yield* Effect.zipRight(RunIndex.migrate, counted).pipe(Effect.provide(SqlRunLogStore.layerSqliteClient({ filename })))
  })

const item = (runId: string, change: RunIndex.Transition): RunIndex.RunTransition => ({ runId, payloadText: "{}", change })

describe("IndexWriter", () => {
  it("split: in order, no run twice in a group, at most max items a group", () => {
    const groups = IndexWriter.split(["a", "b", "a", "c", "d", "e"], (s) => s, 3)
    assert.deepStrictEqual(groups, [["a", "b"], ["a", "c", "d"], ["e"]])
  })

  it.scoped("30 runs' transitions queued together are written by far fewer statements, each row by the rules of transition", () =>
    withIndex((upserts) =>
      Effect.gen(function*() {
        const writer = yield* IndexWriter.make
        const runs = Array.from({ length: 30 }, (_, i) => `run-${i}`)
        yield* Effect.forEach(runs, (runId) => writer.write(item(runId, { status: "Running", attempt: true, runner: "r:1" })), {
          concurrency: "unbounded",
          discard: true
        })
        // One alone (the first finds nothing in flight), the others together: not one per run.
        assert.isAtMost(upserts(), 3)
        const before = upserts()
        yield* Effect.forEach(runs, (runId) => writer.write(item(runId, { status: "Finished" })), {
          concurrency: "unbounded",
          discard: true
        })
        assert.isAtMost(upserts() - before, 3)
        const rows = yield* RunIndex.list()
        assert.strictEqual(rows.length, 30)
        for (const row of rows) {
          assert.strictEqual(row.status, "Finished")
          assert.strictEqual(row.attempts, 1)
          assert.deepStrictEqual(row.runner, Option.some("r:1"))
        }
      })
    ))

  it.scoped("a run's transitions queued together are written in order", () =>
    withIndex(() =>
      Effect.gen(function*() {
        const writer = yield* IndexWriter.make
        yield* Effect.all([
          writer.write(item("run-a", { status: "Running", attempt: true })),
          writer.write(item("run-a", { status: "Retrying", failed: true, error: "boom" })),
          writer.write(item("run-a", { status: "Running", attempt: true })),
          writer.write(item("run-b", { status: "Running", attempt: true }))
        ], { concurrency: "unbounded", discard: true })
        const a = Option.getOrThrow(yield* RunIndex.entry("run-a"))
        assert.strictEqual(a.status, "Running")
        assert.strictEqual(a.attempts, 2)
        assert.strictEqual(a.failures, 1)
        assert.deepStrictEqual(a.error, Option.some("boom"))
        assert.strictEqual(Option.getOrThrow(yield* RunIndex.entry("run-b")).status, "Running")
      })
    ))

  it.scoped("made in an uninterruptible region, the writer still stops when its scope closes", () =>
    withIndex(() =>
      Effect.gen(function*() {
        const scope = yield* Scope.make()
        const writer = yield* Effect.uninterruptible(Scope.extend(IndexWriter.make, scope))
        yield* writer.write(item("run-a", { status: "Running", attempt: true }))
        // Without the writer's own `interruptible`, closing waits forever on its fiber (the test hangs).
        yield* Scope.close(scope, Exit.void)
        yield* writer.write(item("run-a", { status: "Finished" }))
        assert.strictEqual(Option.getOrThrow(yield* RunIndex.entry("run-a")).status, "Finished")
      })
    ))

  it.scoped("after the writer's scope closes, a transition is written by itself", () =>
    withIndex(() =>
      Effect.gen(function*() {
        const scope = yield* Scope.make()
        const writer = yield* Scope.extend(IndexWriter.make, scope)
        yield* writer.write(item("run-a", { status: "Running", attempt: true }))
        yield* Scope.close(scope, Exit.void)
        yield* writer.write(item("run-a", { status: "Finished" }))
        assert.strictEqual(Option.getOrThrow(yield* RunIndex.entry("run-a")).status, "Finished")
      })
    ))
})
