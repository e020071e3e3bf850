/**
 * The run log store port (SPEC §7), split into the loop-facing service and a small backend
 * that adapters implement. `make(backend)` adds record encoding, decoding and the sequence
 * checks once, for every backend.
 *
 * Contract:
 * - `readLog` of a run that does not exist returns the empty log, never an error;
 * - every record carries the run's next sequence number; a duplicate or a gap is rejected with
 *   `ConcurrentWriter`;
 * - `appendResults` writes a step's finished results (design 0150: each action's result is
 *   durable before the next action starts); `completeStep` writes the step's last results and
 *   its `StepCompleted` atomically: after a crash either all are visible or none;
 * - prefix durability: once a write returns it survives a crash; a crash only loses writes
 *   that had not returned;
 * - `claim` (scoped) gives one owner at a time; a second claimant fails with `RunBusy`; the
 *   claim is released when its scope closes, including by interruption;
 * - failures are `StoreError`s; nothing already written is lost.
 *
 * Trust boundary. Validation happens once, when a record is written: `encodeRecord` refuses
 * (`StoreError { reason: "Encode" }`, nothing written) every record that does not satisfy its
 * schema or whose JSON would not read back as the record (numbers that are not finite,
 * `bigint`, cycles, `undefined` in arrays, non-plain objects where a JSON value is expected).
 * Reading trusts the rows the store wrote: `readLog` parses each text with `JSON.parse` and
 * checks only what holds the log together — each row is an object with a known `_tag`, the
 * sequence numbers run 0, 1, 2, … (a gap or a duplicate is `Corrupt`), and the first record is
 * `RunStarted`; it does not run the record schemas again. So a row changed behind the store's
 * back (edited in the database, written by another program) whose JSON still has that shape
 * is returned as it is. Where a person or a tool inspects a log, read it with
 * `readLog(runId, { verify: true })` (or `verifyLog` on the texts): every record is decoded
 * with its full schema and anything that does not decode is `StoreError { reason: "Decode" }`.
 *
 * Schema versions (design 0150). Both readers read logs written by every log schema version:
 * version-1 records (one action per step) are upgraded on read (`internal/logVersions.ts`); a
 * log naming a version newer than `RunLog.logVersion` is `StoreError { reason: "SchemaVersion" }`.
 *
 * @since 0.1.0
 */
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import type * as Arr from "effect/Array"
import * as Layer from "effect/Layer"
import type * as Scope from "effect/Scope"
import * as Blobs from "./Blobs.js"
import type { ConcurrentWriter, RunBusy } from "./Errors.js"
import { StoreError } from "./Errors.js"
import type { RunId } from "./Ids.js"
import { makeMemoryBackend } from "./internal/memoryStore.js"
import { decodeLog, encodeAll, outOfOrder, verifyLog } from "./internal/storeCodec.js"
import type { Backend, ListRunsQuery, ReadOptions, RunSummary, SearchHit, SearchQuery } from "./internal/storeTypes.js"
import type * as RunLog from "./RunLog.js"

// Where things are (design 0380): the data types in `internal/storeTypes.ts`, the trust boundary
// (encoding, reading, verifying) in `internal/storeCodec.ts`, summaries and search for backends
// without a query language in `internal/storeSummaries.ts`, the memory backend in
// `internal/memoryStore.ts`; this module is the port, `make` and the layers, and re-exports them.
export { makeLocalClaims, makeMemoryBackend } from "./internal/memoryStore.js"
export { decodeLog, encodeRecord, toStored, verifyLog } from "./internal/storeCodec.js"
export { applyQuery, modelOf, searchedText, snippetLength, snippetOf, summarize } from "./internal/storeSummaries.js"
export {
  type Backend,
  type ListRunsQuery,
  type ReadOptions,
  RunStatus,
  RunSummary,
  type SearchField,
  type SearchHit,
  type SearchQuery,
  type StoredRecord
} from "./internal/storeTypes.js"

/** The loop-facing store. */
export class RunLogStore extends Context.Tag("@polyloop/core/RunLogStore")<RunLogStore, RunLogStore.Service>() {}

/** @since 0.1.0 */
export declare namespace RunLogStore {
  /** @since 0.1.0 */
  export interface Service {
    /** The run's log; `{ verify: true }` decodes every record with its full schema (stores built by `make`). */
    readonly readLog: (runId: RunId, options?: ReadOptions) => Effect.Effect<RunLog.RunLog, StoreError>
    readonly start: (record: RunLog.RunStarted) => Effect.Effect<void, StoreError | ConcurrentWriter>
    readonly appendReply: (runId: RunId, record: RunLog.ModelReplied) => Effect.Effect<void, StoreError | ConcurrentWriter>
    /** Writes results of a step that is not complete yet, atomically (durable on return). */
    readonly appendResults: (
      runId: RunId,
      results: Arr.NonEmptyReadonlyArray<RunLog.ActionResulted>
    ) => Effect.Effect<void, StoreError | ConcurrentWriter>
    /**
     * Writes the step's remaining results (none: a step with no action, or whose results are all
     * written) and its completion atomically.
     */
    readonly completeStep: (
      runId: RunId,
      results: ReadonlyArray<RunLog.ActionResulted>,
      step: RunLog.StepCompleted
    ) => Effect.Effect<void, StoreError | ConcurrentWriter>
    readonly appendResume: (runId: RunId, record: RunLog.RunResumed) => Effect.Effect<void, StoreError | ConcurrentWriter>
    readonly finish: (runId: RunId, record: RunLog.RunFinished) => Effect.Effect<void, StoreError | ConcurrentWriter>
    /**
     * Writes records of any kinds atomically (all or none), checked and sequenced like every
     * append: a fork's copied log, an imported log (design 0170). Stores built by `make` have
     * it; a hand-written store without it cannot take forks or imports.
     */
    readonly appendRecords?: (
      runId: RunId,
      records: Arr.NonEmptyReadonlyArray<RunLog.RunRecord>
    ) => Effect.Effect<void, StoreError | ConcurrentWriter>
    /** Approval requests of a step (all at once, atomically) or one decision (design 0160). */
    readonly appendApprovals: (
      runId: RunId,
      records: Arr.NonEmptyReadonlyArray<RunLog.ApprovalRecord>
    ) => Effect.Effect<void, StoreError | ConcurrentWriter>
    /** A history compaction (design 0300), before the request that uses it. */
    readonly appendCompaction: (runId: RunId, record: RunLog.HistoryCompacted) => Effect.Effect<void, StoreError | ConcurrentWriter>
    /** A conversation's message or the end of one of its turns (design 0300). */
    readonly appendTurn: (runId: RunId, record: RunLog.TurnRecord) => Effect.Effect<void, StoreError | ConcurrentWriter>
    readonly listRuns: (query?: ListRunsQuery) => Effect.Effect<ReadonlyArray<RunSummary>, StoreError>
    /** Exclusive ownership of a run for the life of the scope. */
    readonly claim: (runId: RunId) => Effect.Effect<void, RunBusy | StoreError, Scope.Scope>
    /**
     * Finds a text in runs' tasks, replies and observations, newest run first, then in log order
     * (design 0341): run by the store itself (one query in the SQL store), a page at a time.
     * Stores built by `make` over a backend with `search` have it.
     */
    readonly searchRuns?: (query: SearchQuery) => Effect.Effect<ReadonlyArray<SearchHit>, StoreError>
    /**
     * Content-addressed blobs and per-run refs in the same store (design 0330), when the backend
     * has them (stores built by `make` over the memory or SQL backends do).
     */
    readonly blobs?: Blobs.Service
  }
}

/** Builds the loop-facing service over a backend. */
export const make = (backend: Backend): RunLogStore.Service => {
  // Checked and encoded before the backend sees anything: a refused append writes nothing.
  const append = (runId: RunId, records: Arr.NonEmptyReadonlyArray<RunLog.RunRecord>) =>
    Effect.suspend(() => {
      const conflict = outOfOrder(runId, records)
      if (conflict !== undefined) return Effect.fail(conflict)
      const stored = encodeAll(runId, records)
      return stored instanceof StoreError ? Effect.fail(stored) : backend.append(runId, stored)
    })
  return {
    readLog: (runId, options) =>
      Effect.flatMap(backend.read(runId), (texts) => options?.verify === true ? verifyLog(runId, texts) : decodeLog(runId, texts)),
    start: (record) => append(record.runId, [record]),
    appendReply: (runId, record) => append(runId, [record]),
    appendResults: (runId, results) => append(runId, results),
    completeStep: (runId, results, step) => append(runId, results.length === 0 ? [step] : [...results, step] as unknown as Arr.NonEmptyReadonlyArray<RunLog.RunRecord>),
    appendResume: (runId, record) => append(runId, [record]),
    finish: (runId, record) => append(runId, [record]),
    appendRecords: append,
    appendApprovals: (runId, records) => append(runId, records),
    appendCompaction: (runId, record) => append(runId, [record]),
    appendTurn: (runId, record) => append(runId, [record]),
    listRuns: (query) => backend.listRuns(query ?? {}),
    claim: (runId) => backend.claim(runId),
    ...(backend.search === undefined ? {} : { searchRuns: backend.search }),
    ...(backend.blobs === undefined ? {} : { blobs: Blobs.make(backend.blobs) })
  }
}

/** A fresh in-memory store. */
export const makeMemory: Effect.Effect<RunLogStore.Service> = Effect.sync(() => make(makeMemoryBackend()))

/**
 * One in-memory store, made now, as a layer: every `Effect.provide` of the returned layer sees the
 * same runs, so a run started under one provide resumes under the next. The store for tests and
 * examples (design 0211).
 */
export const inMemory = (): Layer.Layer<RunLogStore> => Layer.succeed(RunLogStore, make(makeMemoryBackend()))

/**
 * A NEW, EMPTY in-memory store each time the layer is built — each `Effect.provide` of it, each
 * `it.layer` — so a resume under a second provide starts a new run. Use `inMemory()` to keep the
 * runs across provides; this one is for isolating tests from each other.
 */
export const layerMemory: Layer.Layer<RunLogStore> = Layer.effect(RunLogStore, makeMemory)

/** A layer over a backend built by an effect. */
export const layerBackend = <E, R>(backend: Effect.Effect<Backend, E, R>): Layer.Layer<RunLogStore, E, R> =>
  Layer.effect(RunLogStore, Effect.map(backend, make))
