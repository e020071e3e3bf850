/**
 * The run store's data types (SPEC §7), shared by the public module (`RunLogStore.ts`, which
 * re-exports them) and the store's internal modules: the run summaries `listRuns` returns, the
 * queries, the search hits, and what a backend implements (design 0380).
 *
 * @internal
 */
import type * as Arr from "effect/Array"
import type * as Effect from "effect/Effect"
import * as Schema from "effect/Schema"
import type * as Scope from "effect/Scope"
import type * as Blobs from "../Blobs.js"
import type { ConcurrentWriter, RunBusy, StoreError } from "../Errors.js"
import type { RunId } from "../Ids.js"
import type * as RunLog from "../RunLog.js"
import { StopReason } from "../StopReason.js"

/**
 * Whether a run has finished; `Suspended`: unfinished and waiting for a person's decision on a
 * call (design 0160); `AwaitingMessage`: a conversation whose every message has had its turn,
 * waiting for the next (design 0300).
 */
export const RunStatus = Schema.Literal("Unfinished", "Suspended", "AwaitingMessage", "Finished")
/** @since 0.1.0 */
export type RunStatus = typeof RunStatus.Type

/** One line of `listRuns`. */
export const RunSummary = Schema.Struct({
  runId: Schema.String,
  agent: Schema.String,
  status: RunStatus,
  stopReason: Schema.OptionFromNullOr(StopReason),
  steps: Schema.NonNegativeInt,
  effectiveSteps: Schema.NonNegativeInt,
  tokens: Schema.NonNegativeInt,
  /** Epoch milliseconds. */
  startedAt: Schema.Number,
  finishedAt: Schema.OptionFromNullOr(Schema.Number),
  /** Milliseconds of step time (time spent crashed does not count). */
  elapsed: Schema.NonNegative,
  // Design 0343: the fields below are present when the store keeps them (the memory and SQL stores
  // do); a summary without them is what a store that does not keep them returns.
  /** The snapshot's hash (`RunStarted.snapshotHash`). */
  snapshotHash: Schema.optional(Schema.String),
  /** The snapshot's `agent.modelSettings.model` (null: the snapshot names none). */
  model: Schema.optional(Schema.NullOr(Schema.String)),
  /** The run this one is a fork of (`RunStarted.forkedFrom`, its differences counted); null: not a fork. */
  forkedFrom: Schema.optional(Schema.NullOr(Schema.Struct({
    runId: Schema.String,
    step: Schema.NonNegativeInt,
    differences: Schema.NonNegativeInt
  }))),
  /** The replies' input tokens (with `outputTokens`, the split of `tokens`). */
  inputTokens: Schema.optional(Schema.NonNegativeInt),
  outputTokens: Schema.optional(Schema.NonNegativeInt),
  /**
   * A conversation's turns (design 0300): finished turns, messages (its task included) and the
   * last finished turn's stop reason (null before the first). Absent for a single-task run.
   */
  conversation: Schema.optional(Schema.Struct({
    turns: Schema.NonNegativeInt,
    messages: Schema.NonNegativeInt,
    lastStopReason: Schema.NullOr(StopReason)
  })),
  /** A finished run's `RunFinished.counters` (what `Stats` reads); null: not finished. */
  counters: Schema.optional(Schema.NullOr(Schema.Struct({
    steps: Schema.NonNegativeInt,
    effectiveSteps: Schema.NonNegativeInt,
    inputTokens: Schema.NonNegativeInt,
    outputTokens: Schema.NonNegativeInt,
    resumedCount: Schema.NonNegativeInt
  })))
})
/** @since 0.1.0 */
export interface RunSummary extends Schema.Schema.Type<typeof RunSummary> {}

/** Which runs `listRuns` returns: newest first. */
export interface ListRunsQuery {
  readonly limit?: number
  readonly status?: RunStatus
}

/** A text search over runs (`searchRuns`, design 0341). */
export interface SearchQuery {
  /** The text to find (case-insensitive substring), 1 to 200 characters. */
  readonly text: string
  /** The most hits to return (1 to 100). */
  readonly limit: number
  /** How many hits to skip (paging). */
  readonly offset: number
}

/** Which field of a record a search hit is in. */
export type SearchField = "task" | "reply" | "observation"

/** One record whose task, reply text or observation holds the searched text. */
export interface SearchHit {
  readonly runId: string
  readonly seq: number
  /** The step of a reply or observation; null for the task. */
  readonly step: number | null
  readonly field: SearchField
  /** At most `snippetLength` characters of the field around the first match. */
  readonly snippet: string
}

/** How `readLog` reads. */
export interface ReadOptions {
  /**
   * Decode every record with its full schema instead of trusting the rows the store wrote
   * (see the module header); for logs a person or a tool inspects. Default false.
   */
  readonly verify?: boolean
}

/** A record ready for a backend: its sequence number, kind, JSON text, and the value itself. */
export interface StoredRecord {
  readonly seq: number
  readonly kind: RunLog.RecordKind
  readonly json: string
  readonly record: RunLog.RunRecord
}

/**
 * What a storage adapter implements. `append` writes all records of one call atomically and
 * rejects, with `ConcurrentWriter`, a first sequence number that is not the run's record count
 * (a duplicate or a gap) — enforced by the storage itself (a constraint), not by a prior read
 * alone. `read` returns a run's JSON texts in sequence order (none for an unknown run).
 */
export interface Backend {
  readonly read: (runId: RunId) => Effect.Effect<ReadonlyArray<string>, StoreError>
  readonly append: (
    runId: RunId,
    records: Arr.NonEmptyReadonlyArray<StoredRecord>
  ) => Effect.Effect<void, StoreError | ConcurrentWriter>
  readonly listRuns: (query: ListRunsQuery) => Effect.Effect<ReadonlyArray<RunSummary>, StoreError>
  readonly claim: (runId: RunId) => Effect.Effect<void, RunBusy | StoreError, Scope.Scope>
  /** `searchRuns` (design 0341); a backend without a query language may leave it out. */
  readonly search?: (query: SearchQuery) => Effect.Effect<ReadonlyArray<SearchHit>, StoreError>
  /** Content-addressed blobs and refs (design 0330); optional. */
  readonly blobs?: Blobs.Backend
}
