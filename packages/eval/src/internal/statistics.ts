/**
 * The statistics of an experiment's results (design 0320, decision 6): the standard error of the
 * mean clustered by sample, the 95% percentile bootstrap over clusters drawing from Effect's
 * `Random` (run under `seeded` for the same bytes every time), and the paired comparison's
 * numbers. Formulas from simple-statistics. `Results.ts` re-exports them (design 0390).
 *
 * @internal
 */
import * as Effect from "effect/Effect"
import * as Random from "effect/Random"
import * as Schema from "effect/Schema"
import { mean, quantileSorted, sampleStandardDeviation } from "simple-statistics"

/** A confidence interval. */
export const Interval = Schema.Struct({ lower: Schema.Number, upper: Schema.Number })
/** @since 0.1.0 */
export interface Interval extends Schema.Schema.Type<typeof Interval> {}

/** Values grouped by cluster, in cluster order. */
export type Clusters = ReadonlyArray<ReadonlyArray<number>>

/** The standard error of the mean of per-cluster means: sample standard deviation / √n. */
export const clusteredStderr = (clusters: Clusters): number | null => {
  if (clusters.length < 2) return null
  const means = clusters.map((c) => mean(c))
  return sampleStandardDeviation(means) / Math.sqrt(means.length)
}

/** The mean over every observation. */
export const overallMean = (clusters: Clusters): number => mean(clusters.flat())

/**
 * The 95% percentile bootstrap interval of `statistic` over clusters: `resamples` times, draw as
 * many clusters as there are with replacement (from `Random`), compute the statistic; the 2.5%
 * and 97.5% quantiles. Null with fewer than two clusters.
 */
export const bootstrap = <A>(
  clusters: ReadonlyArray<A>,
  statistic: (drawn: ReadonlyArray<A>) => number,
  resamples: number
): Effect.Effect<Interval | null> =>
  Effect.gen(function*() {
    const n = clusters.length
    if (n < 2) return null
    const values = new Array<number>(resamples)
    const drawn = new Array<A>(n)
    for (let r = 0; r < resamples; r++) {
      for (let i = 0; i < n; i++) drawn[i] = clusters[yield* Random.nextIntBetween(0, n)]!
      values[r] = statistic(drawn)
    }
    values.sort((x, y) => x - y)
    return { lower: quantileSorted(values, 0.025), upper: quantileSorted(values, 0.975) }
  })

/** The mean of every value of the drawn clusters together (the bootstrap's statistic of a configuration's score). */
export const pooledMean = (drawn: ReadonlyArray<ReadonlyArray<number>>): number => {
  let sum = 0
  let count = 0
  for (const c of drawn) for (const v of c) (sum += v, count++)
  return sum / count
}

/** Runs `effect` with `Random` seeded from `seed`. */
export const seeded = <A, E, R>(seed: string, effect: Effect.Effect<A, E, R>): Effect.Effect<A, E, R> =>
  Effect.withRandom(effect, Random.make(seed))

/**
 * The paired comparison of per-sample mean differences (B − A): mean, standard error, Student's
 * paired t statistic (mean / standard error, n − 1 in the deviation) and a 95% percentile bootstrap.
 */
export const paired = (differences: ReadonlyArray<number>, resamples: number): Effect.Effect<{
  readonly difference: number
  readonly stderr: number | null
  readonly t: number | null
  readonly ci: Interval | null
}> =>
  Effect.gen(function*() {
    const difference = mean(differences)
    if (differences.length < 2) return { difference, stderr: null, t: null, ci: null }
    // Student's t with the sample standard deviation (n − 1): simple-statistics' `tTest` divides
    // by the population one, which gives 4.28 instead of R's 4.0621 on the sleep data.
    const stderr = sampleStandardDeviation(differences) / Math.sqrt(differences.length)
    const ci = yield* bootstrap(differences, (drawn) => mean(drawn), resamples)
    return { difference, stderr, t: stderr === 0 ? null : difference / stderr, ci }
  })
