/**
 * The killed-writer check's own schedule: a writer to be killed holds after its last write
 * instead of ending, so the kill lands however fast the store or slow the machine; a kill that
 * comes after a run's last write is then made on a fresh run, as soon as that writer has opened
 * the store.
 */
import { assert, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as KilledWriter from "../src/internal/killedWriterCheck.js"

const module = new URL("./fixtures/file-stores.ts", import.meta.url)

it.live("the killed-writer check: a kill the writer outran is made on a fresh run, and both runs are checked", () =>
  Effect.gen(function*() {
    // After more acknowledgements than any run has writes: the first writer always finishes.
    const outran = { acks: 1_000_000, delay: 0 }
    const outcome = yield* Effect.either(KilledWriter.check({ module }, 7, [outran, { acks: 2, delay: 0.5 }]))
    assert.strictEqual(outcome._tag, "Right", outcome._tag === "Left" ? outcome.left.message : "")
  }), 120_000)
