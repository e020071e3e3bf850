/**
 * A run's forks (design 0170), for `GET /api/runs/<id>/forks`. A fork names its parent in its
 * own `RunStarted` record, which a store that keeps the summary's details carries in each run's
 * summary (`forkedFrom`, design 0343): a request is then one `listRuns` query. For a summary
 * without it (a store that does not keep it) the viewer reads the run's log once, into an index
 * from each run to its parent: a run's `RunStarted` never changes, so an entry never goes stale.
 *
 * @internal
 */
import type { StoreError } from "@polyloop/core/Errors"
import type { RunId } from "@polyloop/core/Ids"
import * as RunLogStore from "@polyloop/core/RunLogStore"
import * as StopReason from "@polyloop/core/StopReason"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"

/** A fork as the API lists it. */
export interface ForkRow {
  readonly runId: string
  /** The parent's step the fork starts at. */
  readonly step: number
  readonly status: RunLogStore.RunStatus
  readonly stopReasonLabel: string | null
  readonly startedAt: number
  readonly differences: number
}

/** The index: `forksOf(runId)` lists the run's forks, oldest first (none: no such run in the store). */
export interface Index {
  readonly forksOf: (runId: RunId) => Effect.Effect<Option.Option<ReadonlyArray<ForkRow>>, StoreError, RunLogStore.RunLogStore>
}

interface Parent {
  readonly runId: string
  readonly step: number
  readonly differences: number
}

/** A new, empty index (one per server). */
export const make = (): Index => {
  const parents = new Map<string, Parent | null>()
  return {
    forksOf: (runId) =>
      Effect.gen(function*() {
        const store = yield* RunLogStore.RunLogStore
        const all = yield* store.listRuns()
        if (!all.some((summary) => summary.runId === runId)) return Option.none()
        const parentOf = (summary: RunLogStore.RunSummary): Parent | null | undefined =>
          summary.forkedFrom !== undefined ? summary.forkedFrom : parents.get(summary.runId)
        const unseen = all.filter((summary) => summary.forkedFrom === undefined && !parents.has(summary.runId))
        yield* Effect.forEach(
          unseen,
          (summary) =>
            store.readLog(summary.runId as RunId).pipe(
              Effect.map((log) =>
                parents.set(
                  summary.runId,
                  Option.match(Option.flatMap(log.started, (started) => Option.fromNullable(started.forkedFrom)), {
                    onNone: () => null,
                    onSome: (from) => ({ runId: from.runId, step: from.step, differences: from.differences.length })
                  })
                )
              )
            ),
          { concurrency: 4, discard: true }
        )
        return Option.some(all
          .flatMap((summary) => {
            const parent = parentOf(summary)
            if (parent === undefined || parent === null || parent.runId !== runId) return []
            return [{
              runId: summary.runId,
              step: parent.step,
              status: summary.status,
              stopReasonLabel: Option.getOrNull(Option.map(summary.stopReason, StopReason.format)),
              startedAt: summary.startedAt,
              differences: parent.differences
            }]
          })
          .sort((a, b) => a.startedAt - b.startedAt))
      })
  }
}
