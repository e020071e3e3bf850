/**
 * The blob contract (design 0330) against the memory store, and proof that it catches a store
 * without the capability and one that loses refs.
 */
import { assert, describe, it } from "@effect/vitest"
import * as RunLogStore from "@polyloop/core/RunLogStore"
import * as BlobsContract from "@polyloop/testing/BlobsContract"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"

BlobsContract.suite("RunLogStore.layerMemory", RunLogStore.layerMemory)

describe("BlobsContract catches broken stores", () => {
  it.live("a store without blobs fails every property", () =>
    Effect.gen(function*() {
      const { blobs: _, ...rest } = RunLogStore.make(RunLogStore.makeMemoryBackend())
      const props = BlobsContract.properties(Layer.succeed(RunLogStore.RunLogStore, rest))
      const report = yield* BlobsContract.check(props.roundTrip!, { numRuns: 2 })
      assert.isFalse(report.passed)
      assert.include(report.error, "no blobs capability")
    }))

  it.live("a store whose refs of one run show in another's fails `refs`", () =>
    Effect.gen(function*() {
      const backend = RunLogStore.makeMemoryBackend()
      const inner = backend.blobs!
      const leaky = RunLogStore.make({ ...backend, blobs: { ...inner, setRef: (_runId, name, hash) => inner.setRef("shared", name, hash), listRefs: (_runId, prefix) => inner.listRefs("shared", prefix) } })
      const props = BlobsContract.properties(Layer.succeed(RunLogStore.RunLogStore, leaky))
      const report = yield* BlobsContract.check(props.refs!, { numRuns: 50 })
      assert.isFalse(report.passed)
    }))
})
