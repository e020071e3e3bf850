/**
 * The run store's trust boundary (see `RunLogStore.ts`'s header): records checked and encoded
 * once, when written; logs parsed on read, checking only what holds a log together, or verified
 * with the full schemas; logs of older schema versions upgraded (design 0150).
 *
 * @internal
 */
import type * as Arr from "effect/Array"
import * as Effect from "effect/Effect"
import type * as Either from "effect/Either"
import * as Schema from "effect/Schema"
import { ConcurrentWriter, StoreError } from "../Errors.js"
import type { RunId } from "../Ids.js"
import * as ModelReply from "../ModelReply.js"
import * as RunLog from "../RunLog.js"
import { formatIssues } from "./issues.js"
import * as LogVersions from "./logVersions.js"
import * as RecordJson from "./recordJson.js"
import type { StoredRecord } from "./storeTypes.js"

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
export const outOfOrder = (runId: RunId, records: Arr.NonEmptyReadonlyArray<RunLog.RunRecord>): ConcurrentWriter | undefined => {
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
export const encodeAll = (
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
