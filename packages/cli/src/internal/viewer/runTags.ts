/**
 * The tags and scores the runs list filters by (design 0395): a run's tags are its experiment
 * memberships — `<experiment>` and `<experiment>/<configuration>` for a run whose derived id
 * (design 0320, decision 1) starts with `<experiment>/<configuration>/` of a recorded experiment —
 * and its scores are its experiment's stored scores, by scorer. Read from the run store's blobs
 * (`ExperimentStore.fromBlobs`); a store without blobs has neither.
 *
 * @internal
 */
import type * as Blobs from "@polyloop/core/Blobs"
import type { StoreError } from "@polyloop/core/Errors"
import type * as RunLogStore from "@polyloop/core/RunLogStore"
import * as ExperimentStore from "@polyloop/eval/ExperimentStore"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"

/** What the runs list knows of the store's experiments for one request. */
export interface Annotations {
  /** A run's tags (none: not an experiment's run). */
  readonly tagsOf: (runId: string) => ReadonlyArray<string>
  /** Every tag of the store, sorted. */
  readonly tags: ReadonlyArray<string>
  /** Every scorer the experiments' definitions name, sorted. */
  readonly scorers: ReadonlyArray<string>
  /** With a scorer asked for: each scored run's score by it. */
  readonly scores: ReadonlyMap<string, number> | undefined
}

/** No experiments: no tags, no scores. */
export const none: Annotations = { tagsOf: () => [], tags: [], scorers: [], scores: undefined }

/** The most score blobs kept by hash; past it the cache starts over. */
const maxCachedScores = 100_000

/** An index of the store's experiments, its score blobs cached by hash (a hash's content never changes). */
export interface Index {
  /** The annotations of the store now; with `scorer`, that scorer's scores too. */
  readonly annotations: (store: RunLogStore.RunLogStore.Service, scorer: string | undefined) => Effect.Effect<Annotations, StoreError>
}

export const make = (): Index => {
  const scoreByHash = new Map<Blobs.BlobHash, number>()
  const annotations = (store: RunLogStore.RunLogStore.Service, scorer: string | undefined): Effect.Effect<Annotations, StoreError> => {
    if (store.blobs === undefined) return Effect.succeed(none)
    const records = ExperimentStore.fromBlobs(store.blobs)
    return Effect.gen(function*() {
      const names = yield* records.list
      /** `<experiment>/<configuration>/` → the run's tags. */
      const byPrefix = new Map<string, ReadonlyArray<string>>()
      const tags = new Set<string>()
      const scorers = new Set<string>()
      const scores = scorer === undefined ? undefined : new Map<string, number>()
      for (const name of names) {
        const definition = yield* records.definition(name)
        if (Option.isNone(definition)) continue
        for (const configuration of definition.value.configurations) {
          const tag = `${name}/${configuration.name}`
          byPrefix.set(`${tag}/`, [name, tag])
          tags.add(name).add(tag)
        }
        for (const s of definition.value.scorers) scorers.add(s.name)
        if (scores === undefined || scorer === undefined) continue
        const index = yield* records.index(name)
        const wanted = `${scorer}|`
        for (const [key, hash] of index.scores) {
          if (!key.startsWith(wanted)) continue
          let value = scoreByHash.get(hash)
          if (value === undefined) {
            value = (yield* records.score(hash)).score.value
            if (scoreByHash.size >= maxCachedScores) scoreByHash.clear()
            scoreByHash.set(hash, value)
          }
          scores.set(`${name}/${key.slice(wanted.length)}`, value)
        }
      }
      const tagsOf = (runId: string): ReadonlyArray<string> => {
        // The prefix up to the second slash: `<experiment>/<configuration>/`.
        const first = runId.indexOf("/")
        const second = first < 0 ? -1 : runId.indexOf("/", first + 1)
        return second < 0 ? [] : byPrefix.get(runId.slice(0, second + 1)) ?? []
      }
      return { tagsOf, tags: [...tags].sort(), scorers: [...scorers].sort(), scores }
    })
  }
  return { annotations }
}
