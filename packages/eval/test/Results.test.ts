/**
 * The statistics (design 0320, decision 6) against a published worked example — R's paired t-test
 * on Student's sleep data (fixtures/sleep-paired-t.json, with its source) — and the bootstrap's
 * determinism: the same seed gives the same bytes, another seed other draws.
 */
import { assert, describe, it } from "@effect/vitest"
import * as Results from "@polyloop/eval/Results"
import * as Effect from "effect/Effect"
import { readFileSync } from "node:fs"

const fixture = JSON.parse(readFileSync(new URL("./fixtures/sleep-paired-t.json", import.meta.url), "utf8")) as {
  readonly group1: ReadonlyArray<number>
  readonly group2: ReadonlyArray<number>
  readonly printed: { readonly t: number; readonly df: number; readonly meanOfTheDifferences: number; readonly confidenceInterval95: readonly [number, number] }
}
const differences = fixture.group2.map((b, i) => b - fixture.group1[i]!)

describe("Results statistics", () => {
  it.effect("the paired comparison gives R's mean difference, t statistic and standard error on the sleep data", () =>
    Effect.gen(function*() {
      const stats = yield* Results.seeded("sleep", Results.paired(differences, 4000))
      assert.closeTo(stats.difference, fixture.printed.meanOfTheDifferences, 1e-12)
      assert.closeTo(stats.t!, fixture.printed.t, 5e-5)
      // R's interval is mean ± t(0.975, 9) · se; t(0.975, 9) = 2.262157 (a t table).
      const [lower, upper] = fixture.printed.confidenceInterval95
      assert.closeTo(stats.stderr!, (upper - lower) / 2 / 2.262157, 1e-6)
      assert.closeTo(stats.stderr!, fixture.printed.meanOfTheDifferences / fixture.printed.t, 1e-5)
      // The percentile bootstrap is narrower than the t interval for n = 10, inside it, around the mean.
      const ci = stats.ci!
      assert.isTrue(lower < ci.lower && ci.lower < stats.difference && stats.difference < ci.upper && ci.upper < upper)
    }))

  it.effect("the clustered standard error is the standard error of the per-sample means", () =>
    Effect.gen(function*() {
      // Each sample's epochs are one cluster: with the epochs' means equal to the sleep
      // differences, the clustered stderr is the paired test's standard error.
      const clusters = differences.map((d) => [d - 0.5, d + 0.5])
      assert.closeTo(Results.clusteredStderr(clusters)!, fixture.printed.meanOfTheDifferences / fixture.printed.t, 1e-5)
      assert.closeTo(Results.overallMean(clusters), 1.58, 1e-12)
      assert.isNull(Results.clusteredStderr([[1, 0, 1]]))
      // Clusters, not observations, are resampled: identical clusters give a point interval.
      const point = yield* Results.seeded("x", Results.bootstrap([[1, 0], [1, 0], [0, 1]], (drawn) => drawn.flat().reduce((a, b) => a + b, 0) / drawn.flat().length, 500))
      assert.deepStrictEqual(point, { lower: 0.5, upper: 0.5 })
    }))

  it.effect("the bootstrap is a function of its seed: the same seed, the same bytes; another seed, other draws", () =>
    Effect.gen(function*() {
      const mean = (drawn: ReadonlyArray<number>) => drawn.reduce((a, b) => a + b, 0) / drawn.length
      const a = yield* Results.seeded("seed-1", Results.bootstrap(differences, mean, 2000))
      const b = yield* Results.seeded("seed-1", Results.bootstrap(differences, mean, 2000))
      const c = yield* Results.seeded("seed-2", Results.bootstrap(differences, mean, 2000))
      assert.strictEqual(JSON.stringify(a), JSON.stringify(b))
      assert.notStrictEqual(JSON.stringify(a), JSON.stringify(c))
    }))
})
