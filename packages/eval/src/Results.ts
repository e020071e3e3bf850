/**
 * An experiment's results (design 0320, decision 6): per configuration and scorer the mean score,
 * its standard error clustered by sample (the standard error of the per-sample means across
 * epochs), a 95% confidence interval by the percentile bootstrap over samples (each resample
 * draws samples with their epochs), stop-reason counts, steps and tokens; and the paired
 * comparison of two configurations on the samples both have. Formulas from simple-statistics; the
 * bootstrap draws from Effect's `Random` seeded with a fixed seed, in sample-id order, so the
 * same records give the same bytes every time.
 *
 * The formulas are in `internal/statistics.ts`; this module loads the records, computes, compares
 * and encodes the results, and re-exports the formulas (design 0390).
 *
 * @since 0.1.0
 */
import type { StoreError } from "@polyloop/core/Errors"
import * as RunLogStore from "@polyloop/core/RunLogStore"
import * as StopReason from "@polyloop/core/StopReason"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import * as Schema from "effect/Schema"
import { mean } from "simple-statistics"
import { ExperimentNotFound } from "./Experiment.js"
import * as ExperimentStore from "./ExperimentStore.js"
import { bootstrap, clusteredStderr, Interval, overallMean, paired, pooledMean, seeded } from "./internal/statistics.js"

export { bootstrap, type Clusters, clusteredStderr, Interval, overallMean, paired, seeded } from "./internal/statistics.js"

/** One scorer's statistics over one configuration. */
export const ScoreStats = Schema.Struct({
  scorer: Schema.String,
  /** Scored runs. */
  runs: Schema.Number,
  /** Samples with at least one scored run (the clusters). */
  samples: Schema.Number,
  mean: Schema.Number,
  /** Clustered by sample; null with fewer than two samples. */
  stderr: Schema.NullOr(Schema.Number),
  /** 95% percentile bootstrap over samples; null with fewer than two samples. */
  ci: Schema.NullOr(Interval)
})
/** @since 0.1.0 */
export interface ScoreStats extends Schema.Schema.Type<typeof ScoreStats> {}

/** One configuration's results. */
export const ConfigurationResults = Schema.Struct({
  configuration: Schema.String,
  /** Runs planned (samples × epochs). */
  planned: Schema.Number,
  finished: Schema.Number,
  /** Runs with a failed attempt recorded and no outcome. */
  failed: Schema.Number,
  /** Finished runs per stop reason (`StopReason.format`). */
  stopReasons: Schema.Record({ key: Schema.String, value: Schema.Number }),
  steps: Schema.Struct({ total: Schema.Number, mean: Schema.Number }),
  tokens: Schema.Struct({ input: Schema.Number, output: Schema.Number, mean: Schema.Number }),
  /** Failed attempts of runs that finished in the end. */
  retriedAttempts: Schema.Number,
  scores: Schema.Array(ScoreStats)
})
/** @since 0.1.0 */
export interface ConfigurationResults extends Schema.Schema.Type<typeof ConfigurationResults> {}

/** An experiment's results. */
export const Results = Schema.Struct({
  experiment: Schema.String,
  datasetHash: Schema.String,
  samples: Schema.Number,
  epochs: Schema.Number,
  seed: Schema.String,
  resamples: Schema.Number,
  configurations: Schema.Array(ConfigurationResults)
})
/** @since 0.1.0 */
export interface Results extends Schema.Schema.Type<typeof Results> {}

/**
 * A configuration or a scorer an experiment does not have (issue 44): a typo in `compare` is an
 * error naming the names it has, never an empty comparison.
 */
export class UnknownName extends Schema.TaggedError<UnknownName>()("UnknownName", {
  experiment: Schema.String,
  kind: Schema.Literal("configuration", "scorer"),
  name: Schema.String,
  known: Schema.Array(Schema.String)
}) {
  override get message(): string {
    return `experiment ${this.experiment} has no ${this.kind} ${JSON.stringify(this.name)}; its ${this.kind}s: ${this.known.join(", ") || "none"}`
  }
}

/** A paired comparison of two configurations under one scorer. */
export const Comparison = Schema.Struct({
  experiment: Schema.String,
  scorer: Schema.String,
  a: Schema.String,
  b: Schema.String,
  /** Samples both configurations have scores for. */
  samples: Schema.Number,
  meanA: Schema.Number,
  meanB: Schema.Number,
  /** Mean over samples of (B's per-sample mean − A's). */
  difference: Schema.Number,
  stderr: Schema.NullOr(Schema.Number),
  /** Student's paired t statistic; null when undefined (fewer than two samples, or no variation). */
  t: Schema.NullOr(Schema.Number),
  ci: Schema.NullOr(Interval)
})
/** @since 0.1.0 */
export interface Comparison extends Schema.Schema.Type<typeof Comparison> {}

/** Options of the statistics. */
export interface Options {
  /** The bootstrap's seed (default: the experiment's name). */
  readonly seed?: string
  /** Bootstrap resamples (default 2000). */
  readonly resamples?: number
}

interface Loaded {
  readonly definition: ExperimentStore.Definition
  readonly outcomes: ReadonlyArray<ExperimentStore.Outcome>
  readonly scores: ReadonlyArray<ExperimentStore.StoredScore>
  readonly index: ExperimentStore.Index
}

const compareText = (a: string, b: string) => (a < b ? -1 : a > b ? 1 : 0)

/** Reads an experiment's records (every outcome and score blob). */
export const load = (experiment: string): Effect.Effect<Loaded, StoreError | ExperimentNotFound, ExperimentStore.ExperimentStore> =>
  Effect.gen(function*() {
    const records = yield* ExperimentStore.ExperimentStore
    const definition = yield* records.definition(experiment)
    if (Option.isNone(definition)) return yield* new ExperimentNotFound({ experiment })
    const index = yield* records.index(experiment)
    const outcomes = yield* Effect.forEach([...index.outcomes.values()], records.outcome)
    const scores = yield* Effect.forEach([...index.scores.values()], records.score)
    return { definition: definition.value, outcomes, scores, index }
  })

/** Per sample (sorted by id), the scores of one configuration under one scorer, by epoch. */
const clustersOf = (loaded: Loaded, configuration: string, scorer: string): ReadonlyMap<string, ReadonlyArray<number>> => {
  const outcomes = new Map(loaded.outcomes.map((o) => [o.key, o]))
  const bySample = new Map<string, Array<readonly [number, number]>>()
  for (const s of loaded.scores) {
    if (s.scorer !== scorer) continue
    const outcome = outcomes.get(s.key)
    if (outcome === undefined || outcome.configuration !== configuration) continue
    let list = bySample.get(outcome.sampleId)
    if (list === undefined) bySample.set(outcome.sampleId, list = [])
    list.push([outcome.epoch, s.score.value])
  }
  const sorted = new Map<string, ReadonlyArray<number>>()
  for (const id of [...bySample.keys()].sort(compareText)) {
    sorted.set(id, bySample.get(id)!.sort((x, y) => x[0] - y[0]).map(([, v]) => v))
  }
  return sorted
}

const scorerNames = (loaded: Loaded): ReadonlyArray<string> => {
  const names = new Set(loaded.definition.scorers.map((s) => s.name))
  for (const s of loaded.scores) names.add(s.scorer)
  return [...names].sort(compareText)
}

/** The results of an experiment from its records. */
export const compute = (experiment: string, options: Options = {}): Effect.Effect<Results, StoreError | ExperimentNotFound, ExperimentStore.ExperimentStore> =>
  Effect.gen(function*() {
    const loaded = yield* load(experiment)
    const seed = options.seed ?? experiment
    const resamples = options.resamples ?? 2000
    const definition = loaded.definition
    const configurations: Array<ConfigurationResults> = []
    for (const c of definition.configurations) {
      const outcomes = loaded.outcomes.filter((o) => o.configuration === c.name).sort((x, y) => compareText(x.key, y.key))
      const stopReasons: Record<string, number> = {}
      let steps = 0
      let input = 0
      let output = 0
      let retried = 0
      for (const o of outcomes) {
        const reason = StopReason.format(o.result.stopReason)
        stopReasons[reason] = (stopReasons[reason] ?? 0) + 1
        steps += o.result.steps
        input += o.result.usage.inputTokens
        output += o.result.usage.outputTokens
        retried += o.failedAttempts
      }
      let failed = 0
      for (const key of loaded.index.attempts.keys()) if (key.startsWith(`${c.name}/`) && !loaded.index.outcomes.has(key)) failed++
      const scores: Array<ScoreStats> = []
      for (const scorer of scorerNames(loaded)) {
        const clusters = [...clustersOf(loaded, c.name, scorer).values()]
        if (clusters.length === 0) continue
        const ci = yield* seeded(`${seed}/${c.name}/${scorer}`, bootstrap(clusters, pooledMean, resamples))
        scores.push({ scorer, runs: clusters.flat().length, samples: clusters.length, mean: overallMean(clusters), stderr: clusteredStderr(clusters), ci })
      }
      const n = outcomes.length
      configurations.push({
        configuration: c.name,
        planned: definition.dataset.samples * definition.epochs,
        finished: n,
        failed,
        stopReasons: Object.fromEntries(Object.entries(stopReasons).sort(([a], [b]) => compareText(a, b))),
        steps: { total: steps, mean: n === 0 ? 0 : steps / n },
        tokens: { input, output, mean: n === 0 ? 0 : (input + output) / n },
        retriedAttempts: retried,
        scores
      })
    }
    return {
      experiment,
      datasetHash: definition.dataset.hash,
      samples: definition.dataset.samples,
      epochs: definition.epochs,
      seed,
      resamples,
      configurations
    }
  }).pipe(Effect.withSpan("Results.compute", { attributes: { "polyloop.experiment": experiment } }))

/** Compares configurations `a` and `b` of an experiment under `scorer` (default: the first scorer) on the samples both have. */
export const compare = (
  experiment: string,
  a: string,
  b: string,
  options: Options & { readonly scorer?: string } = {}
): Effect.Effect<Comparison, StoreError | ExperimentNotFound | UnknownName, ExperimentStore.ExperimentStore> =>
  Effect.gen(function*() {
    const loaded = yield* load(experiment)
    const configurations = loaded.definition.configurations.map((c) => c.name)
    for (const name of [a, b]) {
      if (!configurations.includes(name)) return yield* new UnknownName({ experiment, kind: "configuration", name, known: configurations })
    }
    const scorers = scorerNames(loaded)
    if (options.scorer !== undefined && !scorers.includes(options.scorer)) {
      return yield* new UnknownName({ experiment, kind: "scorer", name: options.scorer, known: scorers })
    }
    const scorer = options.scorer ?? scorers[0] ?? ""
    const left = clustersOf(loaded, a, scorer)
    const right = clustersOf(loaded, b, scorer)
    const common = [...left.keys()].filter((id) => right.has(id))
    const meansA = common.map((id) => mean(left.get(id)!))
    const meansB = common.map((id) => mean(right.get(id)!))
    const differences = common.map((_, i) => meansB[i]! - meansA[i]!)
    const resamples = options.resamples ?? 2000
    const stats = common.length === 0
      ? { difference: 0, stderr: null, t: null, ci: null }
      : yield* seeded(`${options.seed ?? experiment}/${a}/${b}/${scorer}`, paired(differences, resamples))
    return {
      experiment,
      scorer,
      a,
      b,
      samples: common.length,
      meanA: common.length === 0 ? 0 : mean(meansA),
      meanB: common.length === 0 ? 0 : mean(meansB),
      ...stats
    }
  }).pipe(Effect.withSpan("Results.compare", { attributes: { "polyloop.experiment": experiment } }))

/** A configuration's wall time: the step time of its finished runs (time spent crashed does not count). */
export interface WallTime {
  readonly configuration: string
  readonly runs: number
  readonly totalMillis: number
  readonly meanMillis: number
}

/**
 * Each configuration's wall time, from the run store's summaries (one `listRuns`). Kept out of
 * `Results`: it is measured, so it differs from one execution of the same experiment to another,
 * while the results are byte-identical.
 */
export const wallTimes = (experiment: string): Effect.Effect<ReadonlyArray<WallTime>, StoreError | ExperimentNotFound, ExperimentStore.ExperimentStore | RunLogStore.RunLogStore> =>
  Effect.gen(function*() {
    const records = yield* ExperimentStore.ExperimentStore
    const definition = yield* records.definition(experiment)
    if (Option.isNone(definition)) return yield* new ExperimentNotFound({ experiment })
    const store = yield* RunLogStore.RunLogStore
    const finished = yield* store.listRuns({ status: "Finished" })
    const prefix = `${experiment}/`
    return definition.value.configurations.map((c) => {
      const mine = finished.filter((run) => run.runId.startsWith(`${prefix}${c.name}/`))
      const total = mine.reduce((sum, run) => sum + run.elapsed, 0)
      return { configuration: c.name, runs: mine.length, totalMillis: total, meanMillis: mine.length === 0 ? 0 : total / mine.length }
    })
  })

const encodeResults = Schema.encodeSync(Results)
const encodeComparison = Schema.encodeSync(Comparison)

/** The results as JSON (two-space indented): the same records give the same bytes. */
export const toJson = (results: Results): string => JSON.stringify(encodeResults(results), null, 2)

/** A comparison as JSON. */
export const comparisonToJson = (comparison: Comparison): string => JSON.stringify(encodeComparison(comparison), null, 2)

const csvField = (value: string | number | null): string => {
  const text = value === null ? "" : String(value)
  return /[",\n]/.test(text) ? `"${text.replaceAll("\"", "\"\"")}"` : text
}

/** The results as CSV: one row per (configuration, scorer). */
export const toCsv = (results: Results): string => {
  const header = ["experiment", "configuration", "scorer", "runs", "samples", "mean", "stderr", "ci_lower", "ci_upper", "finished", "failed", "steps_mean", "tokens_mean"]
  const rows = results.configurations.flatMap((c) =>
    c.scores.map((s) => [results.experiment, c.configuration, s.scorer, s.runs, s.samples, s.mean, s.stderr, s.ci?.lower ?? null, s.ci?.upper ?? null, c.finished, c.failed, c.steps.mean, c.tokens.mean])
  )
  return [header, ...rows].map((row) => row.map(csvField).join(",")).join("\n") + "\n"
}

/** Per run, as CSV: configuration, sample, epoch, run id, stop reason, steps, tokens and each scorer's value. */
export const runsCsv = (experiment: string): Effect.Effect<string, StoreError | ExperimentNotFound, ExperimentStore.ExperimentStore> =>
  Effect.map(load(experiment), (loaded) => {
    const scorers = scorerNames(loaded)
    const byKey = new Map<string, Map<string, number>>()
    for (const s of loaded.scores) {
      let m = byKey.get(s.key)
      if (m === undefined) byKey.set(s.key, m = new Map())
      m.set(s.scorer, s.score.value)
    }
    const header = ["configuration", "sample", "epoch", "run_id", "stop_reason", "steps", "tokens", ...scorers]
    const rows = [...loaded.outcomes].sort((x, y) => compareText(x.key, y.key)).map((o) => [
      o.configuration,
      o.sampleId,
      o.epoch,
      o.runId,
      StopReason.format(o.result.stopReason),
      o.result.steps,
      o.result.usage.inputTokens + o.result.usage.outputTokens,
      ...scorers.map((s) => byKey.get(o.key)?.get(s) ?? null)
    ])
    return [header, ...rows].map((row) => row.map(csvField).join(",")).join("\n") + "\n"
  })
