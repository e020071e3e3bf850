/**
 * The output collector (`internal/driver.ts`): however the bytes are split into chunks — a
 * multi-byte character or the boundary token cut between two — the first `limit` characters are
 * kept, the rest counted, and the action's output ends exactly at its boundary.
 */
import { assert, describe, it } from "@effect/vitest"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as FastCheck from "effect/FastCheck"
import { Output } from "../src/internal/driver.js"

const boundary = "\u0000polyloop-end-0123456789abcdef\u0000"

describe("Output", () => {
  it.effect.prop(
    "kept + counted = the output, cut at the boundary, for any chunking",
    [FastCheck.string({ unit: "binary", maxLength: 300 }), FastCheck.integer({ min: 0, max: 120 }), FastCheck.array(FastCheck.integer({ min: 1, max: 40 }), { minLength: 1, maxLength: 30 })],
    ([text, limit, cuts]) =>
      Effect.gen(function*() {
        const done = yield* Deferred.make<void>()
        const output = new Output(limit)
        output.begin(boundary, done)
        const bytes = Buffer.from(`${text}${boundary}after the boundary`, "utf8")
        let at = 0
        for (let i = 0; at < bytes.length; i++) {
          const size = cuts[i % cuts.length]!
          output.feed(bytes.subarray(at, at + size))
          at += size
        }
        assert.isTrue(yield* Deferred.isDone(done), "the boundary was found")
        const result = output.result()
        assert.strictEqual(result.text, text.slice(0, limit))
        assert.strictEqual(result.truncated, Math.max(0, text.length - limit))
      })
  )
})
