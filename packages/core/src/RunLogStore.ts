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
import type * as Either from "effect/Either"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Schema from "effect/Schema"
import * as Scope from "effect/Scope"
import type * as Arr from "effect/Array"
import * as Blobs from "./Blobs.js"
import { ConcurrentWriter, RunBusy, StoreError } from "./Errors.js"
import type { RunId } from "./Ids.js"
import * as Approvals from "./internal/approvals.js"
import { formatIssues } from "./internal/issues.js"
import * as LogVersions from "./internal/logVersions.js"
import * as RecordJson from "./internal/recordJson.js"
import * as ModelReply from "./ModelReply.js"
import * as RunLog from "./RunLog.js"
import { StopReason } from "./StopReason.js"

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

/** The longest snippet of a search hit. */
export const snippetLength = 240

/** The field of a record that searches look into, if any. */
export const searchedText = (record: RunLog.RunRecord): readonly [SearchField, string] | undefined => {
  switch (record._tag) {
    case "RunStarted":
      return ["task", record.task]
    case "ModelReplied":
      return ["reply", record.reply.text]
    case "ActionResulted":
      return ["observation", record.outcome.observation]
    default:
      return undefined
  }
}

/** At most `snippetLength` characters of `text` around the first case-insensitive match of `query`. */
export const snippetOf = (text: string, query: string): string => {
  if (text.length <= snippetLength) return text
  const at = Math.max(0, text.toLowerCase().indexOf(query.toLowerCase()))
  const start = Math.max(0, Math.min(at - Math.floor((snippetLength - query.length) / 2), text.length - snippetLength))
  return text.slice(start, start + snippetLength)
}

/** How `readLog` reads. */
export interface ReadOptions {
  /**
   * Decode every record with its full schema instead of trusting the rows the store wrote
   * (see the module header); for logs a person or a tool inspects. Default false.
   */
  readonly verify?: boolean
}

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

const encodeRecordEither = RecordJson.makeEncoder(RunLog.RunRecord)
const decodeRecord = Schema.decodeUnknownEither(RunLog.RunRecord)

/**
 * Encodes a record to the JSON text stored for it: the text of `Schema.encodeSync(RunRecord)`,
 * without running Schema on records that are already exactly typed (see the module header).
 * Throws `StoreError { reason: "Encode" }` for a record that would not read back as written.
 */
export const encodeRecord = (record: RunLog.RunRecord): string => {
  const encoded = encodeRecordEither(record)
  if (encoded._tag === "Left") {
    throw new StoreError({ reason: "Encode", message: `${record._tag} record ${record.seq} cannot be written: ${encoded.left}` })
  }
  return encoded.right
}

/** Prepares a record for a backend (throws as `encodeRecord` does). */
export const toStored = (record: RunLog.RunRecord): StoredRecord => ({
  seq: record.seq,
  kind: record._tag,
  json: encodeRecord(record),
  record
})

const knownKinds: ReadonlySet<unknown> = new Set<unknown>(RunLog.recordKinds)

const notDecodable = (runId: RunId, index: number, problem: string) =>
  Effect.fail(new StoreError({ reason: "Decode", runId, message: `run ${runId}: record ${index} does not decode: ${problem}` }))

const outOfSequence = (runId: RunId, index: number, seq: unknown) =>
  Effect.fail(
    new StoreError({ reason: "Corrupt", runId, message: `run ${runId}: record ${index} carries sequence number ${String(seq)}` })
  )

const firstNotStarted = (runId: RunId) =>
  Effect.fail(new StoreError({ reason: "Corrupt", runId, message: `run ${runId}: the first record is not RunStarted` }))

const newerVersion = (runId: RunId, index: number, version: number | undefined) =>
  Effect.fail(
    new StoreError({
      reason: "SchemaVersion",
      runId,
      message: `run ${runId}: record ${index} was written with log schema version ${version}, newer than this polyloop reads (version ${RunLog.logVersion}); upgrade polyloop to read it`
    })
  )

/** A stored `ModelReplied` whose reply may be in the pre-0140 shape (a raw finish reason): read as today's. */
const storedReplied = (value: object): object => {
  const reply = (value as { readonly reply?: unknown }).reply
  if (typeof reply !== "object" || reply === null) return value
  const read = ModelReply.fromStored(reply as { readonly finishReason?: unknown })
  return read === reply ? value : { ...value, reply: read }
}

/**
 * Parses stored texts into raw records: each must parse to an object with a known `_tag` (else
 * `Decode`) and carry its index as `seq` (else `Corrupt`); the first must be `RunStarted`; no
 * record may name a newer log schema version (`SchemaVersion`). A log started by version 1 is
 * upgraded (`internal/logVersions.ts`).
 */
const parseRecords = (runId: RunId, texts: ReadonlyArray<string>): Effect.Effect<Array<LogVersions.RawRecord>, StoreError> =>
  Effect.suspend(() => {
    const records: Array<LogVersions.RawRecord> = new Array(texts.length)
    for (let i = 0; i < texts.length; i++) {
      let value: unknown
      try {
        value = JSON.parse(texts[i]!)
      } catch (error) {
        return notDecodable(runId, i, `it is not JSON (${error instanceof Error ? error.message : String(error)})`)
      }
      if (typeof value !== "object" || value === null || Array.isArray(value)) {
        return notDecodable(runId, i, "it is not a JSON object")
      }
      const record = value as LogVersions.RawRecord
      const tag = record._tag
      if (!knownKinds.has(tag)) {
        return notDecodable(runId, i, `${JSON.stringify(tag) ?? "a missing _tag"} is not a record kind`)
      }
      if (record.seq !== i) return outOfSequence(runId, i, record.seq)
      if (tag === "RunStarted" || tag === "RunResumed") {
        const version = LogVersions.versionOf(record)
        if (LogVersions.isNewer(version)) return newerVersion(runId, i, version)
      }
      records[i] = (tag === "ModelReplied" ? storedReplied(record) : record) as LogVersions.RawRecord
    }
    const first = records[0]
    if (first !== undefined && first._tag !== "RunStarted") return firstNotStarted(runId)
    if (first !== undefined && first.logVersion === undefined) LogVersions.upgradeV1(records)
    return Effect.succeed(records)
  })

/**
 * Reads stored JSON texts into a log, trusting what the store wrote (see the module header):
 * each text must parse to an object with a known `_tag` (else `Decode`), sequence numbers must
 * run 0, 1, 2, … and the first record must be `RunStarted` (else `Corrupt`), and no record may
 * name a newer log schema version (`SchemaVersion`). Version-1 records are upgraded. The record
 * schemas are not run; `verifyLog` runs them.
 */
export const decodeLog = (runId: RunId, texts: ReadonlyArray<string>): Effect.Effect<RunLog.RunLog, StoreError> =>
  Effect.map(parseRecords(runId, texts), (records) => RunLog.fromRecords(records as unknown as ReadonlyArray<RunLog.RunRecord>))

const inconsistent = (runId: RunId, message: string) =>
  Effect.fail(new StoreError({ reason: "Corrupt", runId, message: `run ${runId}: ${message}` }))

/**
 * Reads stored JSON texts into a log, decoding every record with its full schema (after the
 * upgrade of version-1 records): anything that does not decode is `StoreError { reason:
 * "Decode" }`; sequence numbers, the first record and versions are checked as by `decodeLog`;
 * each `StepCompleted` must name results of its own step, and its `effective` must say whether
 * one of them is `Executed` (else `Corrupt`). For logs a person or a tool inspects.
 */
export const verifyLog = (runId: RunId, texts: ReadonlyArray<string>): Effect.Effect<RunLog.RunLog, StoreError> =>
  Effect.flatMap(parseRecords(runId, texts), (raw) => {
    const records: Array<RunLog.RunRecord> = []
    for (let i = 0; i < raw.length; i++) {
      const decoded = decodeRecord(raw[i])
      if (decoded._tag === "Left") return notDecodable(runId, i, formatIssues(decoded.left))
      records.push(decoded.right)
    }
    const log = RunLog.fromRecords(records)
    const results = new Map<string, RunLog.ActionResulted>()
    for (const result of log.results) results.set(result.resultId, result)
    for (const step of log.steps) {
      let effective = false
      for (const id of step.resultIds) {
        const result = results.get(id)
        if (result === undefined || result.step !== step.step) {
          return inconsistent(runId, `step ${step.step} names result ${id}, which is not a result of that step`)
        }
        if (result.outcome.status === "Executed") effective = true
      }
      if (step.effective !== effective) {
        return inconsistent(runId, `step ${step.step} is recorded ${step.effective ? "effective" : "not effective"}, but its results say otherwise`)
      }
    }
    return Effect.succeed(log)
  })

/** The first record out of sequence within one append, if any. */
const outOfOrder = (runId: RunId, records: Arr.NonEmptyReadonlyArray<RunLog.RunRecord>): ConcurrentWriter | undefined => {
  for (let i = 1; i < records.length; i++) {
    const prev = records[i - 1]!
    const cur = records[i]!
    if (cur.seq !== prev.seq + 1) return new ConcurrentWriter({ runId, expectedSeq: prev.seq + 1, actualSeq: cur.seq })
  }
  return undefined
}

const cannotWrite = (runId: RunId, record: RunLog.RunRecord, problem: string, cause?: unknown) =>
  new StoreError({
    reason: "Encode",
    runId,
    message: `run ${runId}: ${record._tag} record ${record.seq} cannot be written: ${problem}`,
    ...(cause === undefined ? {} : { cause })
  })

/** Encodes the records of one append; the first that cannot be written fails the whole append. */
const encodeAll = (
  runId: RunId,
  records: Arr.NonEmptyReadonlyArray<RunLog.RunRecord>
): Arr.NonEmptyReadonlyArray<StoredRecord> | StoreError => {
  const stored: Array<StoredRecord> = []
  for (const record of records) {
    let encoded: Either.Either<string, string>
    try {
      encoded = encodeRecordEither(record)
    } catch (cause) {
      // A getter or proxy in a record that throws while it is read.
      return cannotWrite(runId, record, "reading it threw", cause)
    }
    if (encoded._tag === "Left") return cannotWrite(runId, record, encoded.left)
    stored.push({ seq: record.seq, kind: record._tag, json: encoded.right, record })
  }
  return stored as unknown as Arr.NonEmptyReadonlyArray<StoredRecord>
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

/** The summary of a run from its log (none for the empty log); backends without a query language use it. */
export const summarize = (log: RunLog.RunLog): Option.Option<RunSummary> =>
  Option.map(log.started, (started): RunSummary => {
    const finished = log.finished
    const snapshot = started.snapshot as { readonly agent?: { readonly name?: unknown } } | null
    const agent = typeof snapshot?.agent?.name === "string" ? snapshot.agent.name : "?"
    let inputTokens = 0
    let outputTokens = 0
    for (const reply of log.replies) {
      inputTokens += reply.reply.usage.inputTokens
      outputTokens += reply.reply.usage.outputTokens
    }
    // A summary's model call (design 0300) counts in the run's tokens.
    for (const compaction of log.compactions) {
      if (compaction.usage === undefined) continue
      inputTokens += compaction.usage.inputTokens
      outputTokens += compaction.usage.outputTokens
    }
    const tokens = inputTokens + outputTokens
    let elapsed = 0
    for (const step of log.steps) elapsed += step.elapsed
    let effectiveSteps = 0
    for (const step of log.steps) if (step.effective) effectiveSteps++
    return {
      runId: started.runId,
      agent,
      status: Option.isSome(finished)
        ? "Finished"
        : Approvals.isSuspended(log)
        ? "Suspended"
        : RunLog.awaitsMessage(log)
        ? "AwaitingMessage"
        : "Unfinished",
      stopReason: Option.map(finished, (f) => f.stopReason),
      steps: log.steps.length,
      effectiveSteps,
      tokens,
      startedAt: started.startedAt,
      finishedAt: Option.map(finished, (f) => f.finishedAt),
      elapsed,
      snapshotHash: started.snapshotHash,
      model: modelOf(started.snapshot),
      forkedFrom: started.forkedFrom === undefined
        ? null
        : { runId: started.forkedFrom.runId, step: started.forkedFrom.step, differences: started.forkedFrom.differences.length },
      inputTokens,
      outputTokens,
      ...(started.conversation === undefined ? {} : {
        conversation: {
          turns: log.turns.length,
          messages: log.userMessages.length + 1,
          lastStopReason: log.turns.length === 0 ? null : log.turns[log.turns.length - 1]!.stopReason
        }
      }),
      counters: Option.match(finished, {
        onNone: () => null,
        onSome: ({ counters }) => ({
          steps: counters.steps,
          effectiveSteps: counters.effectiveSteps,
          inputTokens: counters.usage.inputTokens,
          outputTokens: counters.usage.outputTokens,
          resumedCount: counters.resumedCount
        })
      })
    }
  })

/** The model a snapshot names (`agent.modelSettings.model`), null if none (design 0343). */
export const modelOf = (snapshot: unknown): string | null => {
  if (typeof snapshot !== "object" || snapshot === null || !("agent" in snapshot)) return null
  const agent = snapshot.agent
  if (typeof agent !== "object" || agent === null || !("modelSettings" in agent)) return null
  const settings = agent.modelSettings
  if (typeof settings !== "object" || settings === null || !("model" in settings)) return null
  return typeof settings.model === "string" ? settings.model : null
}

/** Applies a query to summaries: status filter, newest first, limit. */
export const applyQuery = (summaries: ReadonlyArray<RunSummary>, query: ListRunsQuery): ReadonlyArray<RunSummary> => {
  const filtered = summaries
    .filter((s) => query.status === undefined || s.status === query.status)
    .sort((a, b) => b.startedAt - a.startedAt || (a.runId < b.runId ? -1 : a.runId > b.runId ? 1 : 0))
  return query.limit === undefined ? filtered : filtered.slice(0, query.limit)
}

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
