/**
 * The in-memory backend (JSON texts in a map, claims in a set, blobs) and claims held in this
 * process's memory, for the memory store and users' in-process stores.
 *
 * @internal
 */
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import * as Scope from "effect/Scope"
import * as Blobs from "../Blobs.js"
import { ConcurrentWriter, RunBusy } from "../Errors.js"
import * as RunLog from "../RunLog.js"
import { applyQuery, searchedText, snippetOf, summarize } from "./storeSummaries.js"
import type { Backend, RunSummary, SearchHit } from "./storeTypes.js"

/**
 * Claims held in this process's memory: exclusive among the stores sharing the returned
 * function, released when the claim's scope closes (also by interruption). For backends whose
 * storage lives in one process (the memory store, a user's own in-process store).
 */
export const makeLocalClaims = (): Backend["claim"] => {
  const claimed = new Set<string>()
  // Taken and its release added in one uninterruptible region, as `acquireRelease` does, but
  // with `Scope.addFinalizer`: `acquireRelease`'s finalizer keeps a copy of the claimant's fiber
  // references for as long as the run holds the claim (design 0350); the release needs none.
  return (runId) =>
    Effect.flatMap(Effect.scope, (scope) =>
      Effect.uninterruptible(Effect.suspend(() => {
        if (claimed.has(runId)) return Effect.fail(new RunBusy({ runId, owner: "this process" }))
        claimed.add(runId)
        return Scope.addFinalizerExit(scope, () => Effect.sync(() => claimed.delete(runId)))
      })))
}

/** An in-memory backend: JSON texts in a map; claims in a set; blobs (design 0330). Each call makes a fresh store. */
export const makeMemoryBackend = (): Backend => {
  const logs = new Map<string, Array<string>>()
  const decoded = new Map<string, Array<RunLog.RunRecord>>()
  const claim = makeLocalClaims()
  return {
    blobs: Blobs.makeMemoryBackend(),
    read: (runId) => Effect.sync(() => logs.get(runId)?.slice() ?? []),
    append: (runId, records) =>
      Effect.suspend(() => {
        const texts = logs.get(runId) ?? []
        const first = records[0]
        if (first.seq !== texts.length) {
          return Effect.fail(new ConcurrentWriter({ runId, expectedSeq: texts.length, actualSeq: first.seq }))
        }
        if (texts.length === 0 && first.kind !== "RunStarted") {
          return Effect.fail(new ConcurrentWriter({ runId, expectedSeq: 0, actualSeq: first.seq }))
        }
        const values = decoded.get(runId) ?? []
        for (const r of records) {
          texts.push(r.json)
          values.push(r.record)
        }
        logs.set(runId, texts)
        decoded.set(runId, values)
        return Effect.void
      }),
    listRuns: (query) =>
      Effect.sync(() => {
        const summaries: Array<RunSummary> = []
        for (const values of decoded.values()) {
          const summary = summarize(RunLog.fromRecords(values))
          if (Option.isSome(summary)) summaries.push(summary.value)
        }
        return applyQuery(summaries, query)
      }),
    claim,
    search: (query) =>
      Effect.sync(() => {
        const wanted = query.text.toLowerCase()
        const order = new Map<string, RunSummary>()
        for (const values of decoded.values()) {
          const summary = summarize(RunLog.fromRecords(values))
          if (Option.isSome(summary)) order.set(summary.value.runId, summary.value)
        }
        const hits: Array<SearchHit> = []
        for (const summary of applyQuery([...order.values()], {})) {
          for (const record of decoded.get(summary.runId) ?? []) {
            const found = searchedText(record)
            if (found === undefined || !found[1].toLowerCase().includes(wanted)) continue
            hits.push({ runId: summary.runId, seq: record.seq, step: "step" in record ? record.step : null, field: found[0], snippet: snippetOf(found[1], query.text) })
          }
        }
        return hits.slice(query.offset, query.offset + query.limit)
      })
  }
}
