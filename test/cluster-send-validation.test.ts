/**
 * `Cluster.send` refuses a message no conversation can take before anything is written (issue
 * 44, design 0360): an empty message id or an empty text is `RunFailed { reason: "Request" }`,
 * with no run index row and no message for a runner (whose refusal would have marked the
 * conversation failed).
 */
import { assert, describe, it } from "@effect/vitest"
import * as Cluster from "@polyloop/cluster/Cluster"
import * as RunIndex from "@polyloop/cluster/RunIndex"
import * as SqlRunLogStore from "@polyloop/sql/SqlRunLogStore"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Redacted from "effect/Redacted"
import { timings } from "./support/cluster-fixture.js"
import * as PgServer from "./support/pg-server.js"

describe.sequential("Cluster.send with a message no conversation can take", () => {
  it.scopedLive("is refused before anything is written", () =>
    Effect.gen(function*() {
      const server = yield* Effect.acquireRelease(
        Effect.promise(() => PgServer.start({ database: "send_validation", log: () => {} })),
        (s) => Effect.sync(() => s.stop())
      )
      yield* Effect.gen(function*() {
        for (const message of [{ messageId: "", text: "hello" }, { messageId: "m1", text: "  \n" }]) {
          const refused = yield* Effect.flip(Cluster.send("chat-1", message, { n: 1 }))
          assert.strictEqual(refused._tag, "RunFailed")
          if (refused._tag === "RunFailed") {
            assert.strictEqual(refused.reason, "Request")
            assert.include(refused.error, "invalid message")
          }
        }
        assert.deepStrictEqual(yield* RunIndex.list(), [])
      }).pipe(
        Effect.provide(
          Cluster.layerClient({ timings: timings.cluster, shardsPerGroup: timings.shardsPerGroup }).pipe(
            Layer.provideMerge(SqlRunLogStore.layerPgClient({ url: Redacted.make(server.url), maxConnections: 4 }))
          )
        )
      )
    }), 120_000)
})
