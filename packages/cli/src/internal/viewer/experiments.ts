/**
 * The viewer's experiments (design 0320): `GET /api/experiments` lists the experiments of the
 * store; `GET /api/experiments/<name>?scorer=` is one experiment's results (what `polyloop eval
 * results --json` prints) and its per-sample grid — for one scorer, each configuration's score of
 * each sample in each epoch, with the run id to link to (null where the run has no score yet).
 * Read from the run store's blobs (`ExperimentStore.fromBlobs`); a store without blobs has none.
 *
 * @internal
 */
import type { StoreError } from "@polyloop/core/Errors"
import type * as RunLogStore from "@polyloop/core/RunLogStore"
import type { ExperimentNotFound } from "@polyloop/eval/Experiment"
import * as ExperimentStore from "@polyloop/eval/ExperimentStore"
import * as Results from "@polyloop/eval/Results"
import * as Effect from "effect/Effect"
import * as Schema from "effect/Schema"

/** The query of one experiment's page. */
export const ExperimentQuery = Schema.Struct({ scorer: Schema.optional(Schema.String) })

/** One cell of the grid: a run and its score (null: not scored, or not finished). */
export interface Cell {
  readonly runId: string
  readonly score: number | null
}

/** The grid: samples (rows) × configurations × epochs. */
export interface Grid {
  readonly scorer: string
  readonly scorers: ReadonlyArray<string>
  readonly samples: ReadonlyArray<string>
  readonly configurations: ReadonlyArray<string>
  readonly epochs: number
  /** `cells[configuration][sample][epoch - 1]`. */
  readonly cells: Readonly<Record<string, Readonly<Record<string, ReadonlyArray<Cell>>>>>
}

const encodeResults = Schema.encodeSync(Results.Results)

/** The experiments of the store, by name. */
export const list = (store: RunLogStore.RunLogStore.Service): Effect.Effect<ReadonlyArray<string>, StoreError> =>
  store.blobs === undefined ? Effect.succeed([]) : ExperimentStore.fromBlobs(store.blobs).list

/** One experiment's results and grid. */
export const document = (
  store: RunLogStore.RunLogStore.Service,
  name: string,
  scorer: string | undefined
): Effect.Effect<{ readonly results: unknown; readonly grid: Grid } | undefined, StoreError | ExperimentNotFound> => {
  if (store.blobs === undefined) return Effect.succeed(undefined)
  const records = ExperimentStore.fromBlobs(store.blobs)
  return Effect.gen(function*() {
    const results = yield* Results.compute(name)
    const loaded = yield* Results.load(name)
    const scorers = [...new Set([...loaded.definition.scorers.map((s) => s.name), ...loaded.scores.map((s) => s.scorer)])].sort()
    const chosen = scorer !== undefined && scorers.includes(scorer) ? scorer : scorers[0] ?? ""
    const scoreOf = new Map<string, number>()
    for (const s of loaded.scores) if (s.scorer === chosen) scoreOf.set(s.key, s.score.value)
    const finished = new Set(loaded.outcomes.map((o) => o.key))
    const sampleIds = [...new Set(loaded.outcomes.map((o) => o.sampleId))].sort()
    const cells: Record<string, Record<string, Array<Cell>>> = {}
    for (const c of loaded.definition.configurations) {
      const row: Record<string, Array<Cell>> = {}
      for (const sample of sampleIds) {
        row[sample] = Array.from({ length: loaded.definition.epochs }, (_, i) => {
          const key = `${c.name}/${sample}/${i + 1}`
          return { runId: `${name}/${key}`, score: finished.has(key) ? scoreOf.get(key) ?? null : null }
        })
      }
      cells[c.name] = row
    }
    return {
      results: encodeResults(results),
      grid: {
        scorer: chosen,
        scorers,
        samples: sampleIds,
        configurations: loaded.definition.configurations.map((c) => c.name),
        epochs: loaded.definition.epochs,
        cells
      }
    }
  }).pipe(Effect.provideService(ExperimentStore.ExperimentStore, records))
}
