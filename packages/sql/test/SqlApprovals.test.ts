/**
 * Approvals on the SQL stores (design 0160), SQLite and PostgreSQL: `listRuns` reports a run
 * waiting for a decision as `Suspended` (computed from its approval records), filters by it,
 * and agrees with `RunLogStore.summarize` at every point of a run's life; `Agent.decide` works
 * through the SQL store and, with several deciders at once, records exactly one decision.
 */
import { assert, describe, it } from "@effect/vitest"
import * as Agent from "@polyloop/core/Agent"
import * as Approval from "@polyloop/core/Approval"
import type * as Ids from "@polyloop/core/Ids"
import * as ModelReply from "@polyloop/core/ModelReply"
import type * as RunLog from "@polyloop/core/RunLog"
import * as RunLogStore from "@polyloop/core/RunLogStore"
import * as SqlRunLogStore from "@polyloop/sql/SqlRunLogStore"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Redacted from "effect/Redacted"
import * as path from "node:path"
import * as F from "./fixtures.js"
import { freshSchemaUrl } from "./PgSupport.js"

const stores: ReadonlyArray<readonly [string, () => Layer.Layer<RunLogStore.RunLogStore, unknown>]> = [
  ["SQLite", () => Layer.unwrapScoped(Effect.map(F.tempDir("polyloop-approvals-"), (dir) => SqlRunLogStore.layerSqlite({ filename: path.join(dir, "runs.db") })))],
  ["PostgreSQL", () => Layer.unwrapScoped(Effect.map(freshSchemaUrl, (url) => SqlRunLogStore.layerPg({ url: Redacted.make(url), maxConnections: 4 })))]
]

const call = (id: string): RunLog.ApprovalRequested["action"] => ({ _tag: "ToolCall", id, name: "refund", arguments: { orderId: 7, amount: 250 } })

/** Writes a run suspended at step 0 on `calls`; returns the next sequence number. */
const suspend = (store: RunLogStore.RunLogStore.Service, runId: Ids.RunId, calls: ReadonlyArray<string>, startedAt: number) =>
  Effect.gen(function*() {
    yield* store.start(F.started(runId, { agent: "desk", startedAt }))
    yield* store.appendReply(runId, { _tag: "ModelReplied", seq: 1, step: 0 as Ids.StepIndex, reply: ModelReply.make({ text: "" }) })
    const requests = calls.map((id, i): RunLog.ApprovalRequested => ({
      _tag: "ApprovalRequested",
      seq: 2 + i,
      step: 0 as Ids.StepIndex,
      callId: id,
      action: call(id),
      actionHash: Approval.actionHash(runId, 0, id, call(id)),
      at: startedAt
    }))
    yield* store.appendApprovals(runId, requests as [RunLog.ApprovalRequested, ...Array<RunLog.ApprovalRequested>])
    return 2 + calls.length
  })

for (const [name, layer] of stores) {
  describe(`approvals on ${name}`, () => {
    it.effect("listRuns: Suspended while a call waits, Unfinished once all are decided, Finished at the end; filters agree with summarize", () =>
      Effect.gen(function*() {
        const store = yield* RunLogStore.RunLogStore
        const a = F.rid("appr-a")
        const b = F.rid("appr-b")
        const c = F.rid("appr-c")
        yield* suspend(store, a, ["c1", "c2"], 5_000_000_000_000)
        yield* suspend(store, b, ["c1"], 5_000_000_000_100)
        yield* store.start(F.started(c, { agent: "desk", startedAt: 5_000_000_000_200 }))
        const check = Effect.gen(function*() {
          const summaries: Array<RunLogStore.RunSummary> = []
          for (const id of [a, b, c]) summaries.push(Option.getOrThrow(RunLogStore.summarize(yield* store.readLog(id))))
          for (const query of [{}, { status: "Suspended" as const }, { status: "Unfinished" as const }, { status: "Finished" as const }]) {
            assert.deepStrictEqual(yield* store.listRuns(query), RunLogStore.applyQuery(summaries, query))
          }
          return new Map(summaries.map((s) => [s.runId, s.status]))
        })
        assert.deepStrictEqual([...(yield* check).values()], ["Suspended", "Suspended", "Unfinished"])
        yield* Agent.decide({ runId: a, callId: "c1", decision: Approval.approve, by: "ana" })
        assert.deepStrictEqual([...(yield* check).values()], ["Suspended", "Suspended", "Unfinished"])
        yield* Agent.decide({ runId: a, callId: "c2", decision: Approval.reject("no"), by: "ana" })
        yield* Agent.decide({ runId: b, callId: "c1", decision: Approval.approve, by: "ana" })
        assert.deepStrictEqual([...(yield* check).values()], ["Unfinished", "Unfinished", "Unfinished"])
        yield* store.finish(b, F.finished(4, { _tag: "Completed", by: "Answer", answer: "" }, 5_000_000_000_500))
        assert.deepStrictEqual([...(yield* check).values()], ["Unfinished", "Finished", "Unfinished"])
      }).pipe(Effect.provide(layer())), 60_000)

    it.effect("several people deciding one call at once through the store: one decision is recorded, the others are told", () =>
      Effect.gen(function*() {
        const store = yield* RunLogStore.RunLogStore
        const runId = F.rid("appr-race")
        yield* suspend(store, runId, ["c1"], 5_000_000_000_000)
        const results = yield* Effect.all(
          ["ana", "ben", "cy", "dee", "eve"].map((by) => Effect.either(Agent.decide({ runId, callId: "c1", decision: Approval.approve, by }))),
          { concurrency: "unbounded" }
        )
        assert.strictEqual(results.filter((r) => r._tag === "Right").length, 1)
        for (const r of results) if (r._tag === "Left") assert.strictEqual(r.left._tag, "AlreadyDecided")
        const log = yield* store.readLog(runId, { verify: true })
        assert.strictEqual(log.approvals.filter((r) => r._tag === "ApprovalDecided").length, 1)
      }).pipe(Effect.provide(layer())), 60_000)
  })
}
