/**
 * A user's own run log store, checked by the contract kit (`custom-store.test.ts`).
 *
 * The store keeps each run's records in a `KeyValueStore` from `@effect/platform` (in memory
 * here; `KeyValueStore.layerFileSystem(dir)` gives a store that survives restarts): one key per
 * run holding the JSON texts of its records, and an index key listing the runs. It implements
 * only the small `RunLogStore.Backend` interface; `RunLogStore.make` adds encoding, decoding and
 * the sequence checks. The one rule a backend must keep itself: `append` writes all records of a
 * call at once and rejects a first sequence number that is not the run's record count.
 *
 *   npx tsx examples/custom-store.ts      (writes a run and reads it back)
 */
import * as KeyValueStore from "@effect/platform/KeyValueStore"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Schema from "effect/Schema"
import { ConcurrentWriter, StoreError } from "@polyloop/core/Errors"
import { runId as makeRunId, type RunId } from "@polyloop/core/Ids"
import * as RunLog from "@polyloop/core/RunLog"
import * as RunLogStore from "@polyloop/core/RunLogStore"

const Texts = Schema.parseJson(Schema.Array(Schema.String))

const unavailable = (runId: string | undefined) => (cause: unknown) =>
  new StoreError({ reason: "Unavailable", message: "the key-value store failed", cause, ...(runId === undefined ? {} : { runId }) })

/** A backend over a `KeyValueStore`. Claims are held in this process only. */
export const makeBackend = (kv: KeyValueStore.KeyValueStore): Effect.Effect<RunLogStore.Backend> =>
  Effect.gen(function*() {
    const runs = kv.forSchema(Texts)
    const lock = yield* Effect.makeSemaphore(1)
    const claim = RunLogStore.makeLocalClaims()
    const read = (runId: RunId) =>
      runs.get(`run:${runId}`).pipe(Effect.map(Option.getOrElse(() => [])), Effect.mapError(unavailable(runId)))
    return {
      read,
      // One writer at a time, so the count checked is the count written after.
      append: (runId, records) =>
        lock.withPermits(1)(
          Effect.gen(function*() {
            const texts = yield* read(runId)
            const first = records[0]
            if (first.seq !== texts.length) {
              return yield* new ConcurrentWriter({ runId, expectedSeq: texts.length, actualSeq: first.seq })
            }
            if (texts.length === 0) {
              const index = yield* runs.get("runs").pipe(Effect.map(Option.getOrElse(() => [])), Effect.mapError(unavailable(runId)))
              yield* runs.set("runs", [...index, runId]).pipe(Effect.mapError(unavailable(runId)))
            }
            // One `set` of the whole log: the records of a call are written together or not at all.
            yield* runs.set(`run:${runId}`, [...texts, ...records.map((r) => r.json)]).pipe(Effect.mapError(unavailable(runId)))
          })
        ),
      listRuns: (query) =>
        Effect.gen(function*() {
          const index = yield* runs.get("runs").pipe(Effect.map(Option.getOrElse(() => [])), Effect.mapError(unavailable(undefined)))
          const summaries: Array<RunLogStore.RunSummary> = []
          for (const id of index) {
            const runId = makeRunId(id)
            const log = yield* Effect.flatMap(read(runId), (texts) => RunLogStore.decodeLog(runId, texts))
            Option.map(RunLogStore.summarize(log), (summary) => summaries.push(summary))
          }
          return RunLogStore.applyQuery(summaries, query)
        }),
      claim
    }
  })

/** The store over the `KeyValueStore` in context. */
export const layer: Layer.Layer<RunLogStore.RunLogStore, never, KeyValueStore.KeyValueStore> = RunLogStore.layerBackend(
  Effect.flatMap(KeyValueStore.KeyValueStore, makeBackend)
)

const main = Effect.gen(function*() {
  const store = yield* RunLogStore.RunLogStore
  const id = makeRunId("demo")
  yield* store.start({ _tag: "RunStarted", seq: 0, runId: id, task: "say hi", snapshot: {}, snapshotHash: "", startedAt: 0 })
  const log = yield* store.readLog(id)
  yield* Effect.log(`run ${id}: ${RunLog.size(log)} record(s), started: ${Option.isSome(log.started)}`)
}).pipe(Effect.provide(layer.pipe(Layer.provide(KeyValueStore.layerMemory))))

if (import.meta.url === `file://${process.argv[1]}`) Effect.runPromise(main)
