/**
 * Scoring a finished run (design 0320): the scores it lacks (or, with `regrade`, every
 * model-graded one again), each scorer's return value checked before it reaches the store.
 * Used by `Experiment.run` and `Experiment.rescore` (design 0390).
 *
 * @internal
 */
import * as Effect from "effect/Effect"
import * as Schema from "effect/Schema"
import type * as Dataset from "../Dataset.js"
import * as ExperimentStore from "../ExperimentStore.js"
import * as Scorer from "../Scorer.js"

/**
 * Scores the runs of `outcomes` that lack a score of any of `scorers` (or, with `regrade`, every
 * model-graded score again); returns how many it wrote.
 */
export const scoreMissing = <R>(
  experiment: string,
  samples: ReadonlyMap<string, Dataset.Sample>,
  scorers: ReadonlyArray<Scorer.Scorer<R>>,
  outcome: ExperimentStore.Outcome,
  index: ExperimentStore.Index,
  regrade: boolean
) =>
  Effect.gen(function*() {
    const records = yield* ExperimentStore.ExperimentStore
    const sample = samples.get(outcome.sampleId)
    if (sample === undefined) return 0
    let written = 0
    for (const scorer of scorers) {
      const present = index.scores.has(ExperimentStore.scoreKey(scorer.name, outcome.key))
      if (present && !(regrade && scorer.graded)) continue
      const score = yield* Effect.flatMap(
        scorer.score({
          sample,
          answer: outcome.answer,
          result: outcome.result,
          runId: outcome.runId,
          configuration: outcome.configuration,
          epoch: outcome.epoch
        }),
        (returned) => checkedScore(scorer.name, outcome, returned)
      )
      yield* records.putScore(experiment, { key: outcome.key, scorer: scorer.name, version: scorer.version, score })
      written++
    }
    return written
  })

const decodeScore = Schema.decodeUnknownEither(Scorer.Score)

/**
 * What a scorer returned, as a score (issue 44): a `Score` whose value is a finite number; else
 * `ScorerError` naming the scorer, the run and its sample — a scorer written in JavaScript (or
 * cast) can return anything, and it must not reach the store as a record that cannot be written.
 */
const checkedScore = (scorer: string, outcome: ExperimentStore.Outcome, returned: unknown): Effect.Effect<Scorer.Score, Scorer.ScorerError> => {
  const decoded = decodeScore(returned)
  if (decoded._tag === "Right" && Number.isFinite(decoded.right.value)) return Effect.succeed(decoded.right)
  const shown = typeof returned === "number" ? String(returned) : JSON.stringify(returned) ?? String(returned)
  return Effect.fail(
    new Scorer.ScorerError({
      scorer,
      runId: outcome.runId,
      detail: `returned ${shown.length > 80 ? `${shown.slice(0, 80)}…` : shown} for sample ${outcome.sampleId}, not a score (a finite number, or { value: <finite number> })`
    })
  )
}
