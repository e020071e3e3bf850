/**
 * Run logs as JSON-lines files (design 0170): what `polyloop export --format jsonl` writes —
 * each record as the store encodes it, one per line, runs one after another (each begins with
 * its `RunStarted`) — read back and written into a store. Every line is decoded with its
 * record schema and the sequence numbers checked before anything is written; each run is then
 * written with one atomic append, so export → import → export gives the same bytes, and a log
 * moves between stores (SQLite → PostgreSQL → SQLite) unchanged.
 *
 * @since 0.1.0
 */
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import * as Schema from "effect/Schema"
import type { ConcurrentWriter, RunBusy, StoreError } from "./Errors.js"
import type { RunId } from "./Ids.js"
import { formatIssues } from "./internal/issues.js"
import * as LogVersions from "./internal/logVersions.js"
import * as RunLog from "./RunLog.js"
import { encodeRecord, RunLogStore } from "./RunLogStore.js"

/** Why a log file was refused (nothing was written). */
export const InvalidLogFileReason = Schema.Literal("Empty", "NotARecord", "Sequence", "RunExists", "StoreCannotImport")
/** @since 0.1.0 */
export type InvalidLogFileReason = typeof InvalidLogFileReason.Type

/** A log file that cannot be imported; `line` is 1-based. Nothing was written. */
export class InvalidLogFile extends Schema.TaggedError<InvalidLogFile>()("InvalidLogFile", {
  reason: InvalidLogFileReason,
  line: Schema.optional(Schema.Int),
  message: Schema.String
}) {}

/** One run read from a file: its records in sequence order. */
export interface FileRun {
  readonly runId: RunId
  readonly records: ReadonlyArray<RunLog.RunRecord>
}

const parseLine = Schema.decodeUnknownEither(Schema.parseJson())
const decodeRecord = Schema.decodeUnknownEither(RunLog.RunRecord)

/**
 * The file's lines as JSON values, each run's version-1 records upgraded as a store's reader
 * upgrades them (design 0150, decision 7), so a log exported by an earlier version imports.
 */
const upgradedLines = (text: string): Array<{ readonly line: number; value: unknown }> | InvalidLogFile => {
  const lines: Array<{ readonly line: number; value: unknown }> = []
  const groups: Array<Array<number>> = []
  const rows = text.split("\n")
  for (let i = 0; i < rows.length; i++) {
    const row = rows[i]!.trim()
    if (row === "") continue
    const parsed = parseLine(row)
    if (parsed._tag === "Left") {
      return new InvalidLogFile({ reason: "NotARecord", line: i + 1, message: `line ${i + 1} is not a run record: ${formatIssues(parsed.left)}` })
    }
    const value = parsed.right
    const isStart = typeof value === "object" && value !== null && (value as { readonly _tag?: unknown })._tag === "RunStarted"
    if (isStart || groups.length === 0) groups.push([])
    groups[groups.length - 1]!.push(lines.length)
    lines.push({ line: i + 1, value })
  }
  for (const group of groups) {
    const records = group.map((index) => lines[index]!.value)
    const first = records[0]
    const isRecords = records.every((r) => typeof r === "object" && r !== null && !Array.isArray(r))
    if (!isRecords || (first as { readonly _tag?: unknown })._tag !== "RunStarted") continue
    if ((first as { readonly logVersion?: unknown }).logVersion !== undefined) continue
    const raw = records as Array<LogVersions.RawRecord>
    LogVersions.upgradeV1(raw)
    group.forEach((index, k) => {
      lines[index]!.value = raw[k]
    })
  }
  return lines
}

/** The JSON-lines text of a log: each record as the store encodes it, one per line. */
export const toJsonl = (log: RunLog.RunLog): string => RunLog.records(log).map((record) => `${encodeRecord(record)}\n`).join("")

/** The JSON text of a log: `{ runId, records }`, the records as the store encodes them, indented. */
export const toJson = (log: RunLog.RunLog): string => {
  const runId = Option.match(log.started, { onNone: () => "", onSome: (started) => started.runId })
  return `${JSON.stringify({ runId, records: RunLog.records(log).map((record) => JSON.parse(encodeRecord(record)) as unknown) }, null, 2)}\n`
}

/** Reads a JSON-lines file's runs (blank lines are skipped); fails on the first line that does not fit. */
export const parse = (text: string): Effect.Effect<ReadonlyArray<FileRun>, InvalidLogFile> =>
  Effect.suspend(() => {
    const runs: Array<{ runId: RunId; records: Array<RunLog.RunRecord> }> = []
    const lines = upgradedLines(text)
    if (lines instanceof InvalidLogFile) return Effect.fail(lines)
    for (const { line, value } of lines) {
      const i = line - 1
      const decoded = decodeRecord(value)
      if (decoded._tag === "Left") {
        return Effect.fail(new InvalidLogFile({ reason: "NotARecord", line: i + 1, message: `line ${i + 1} is not a run record: ${formatIssues(decoded.left)}` }))
      }
      const record = decoded.right
      if (record._tag === "RunStarted") {
        if (record.seq !== 0) {
          return Effect.fail(new InvalidLogFile({ reason: "Sequence", line: i + 1, message: `line ${i + 1}: RunStarted carries sequence number ${record.seq}, not 0` }))
        }
        runs.push({ runId: record.runId, records: [record] })
        continue
      }
      const current = runs[runs.length - 1]
      if (current === undefined) {
        return Effect.fail(new InvalidLogFile({ reason: "Sequence", line: i + 1, message: `line ${i + 1}: a ${record._tag} record before any RunStarted` }))
      }
      if (record.seq !== current.records.length) {
        return Effect.fail(
          new InvalidLogFile({
            reason: "Sequence",
            line: i + 1,
            message: `line ${i + 1}: run ${current.runId} expects sequence number ${current.records.length}, the record carries ${record.seq}`
          })
        )
      }
      current.records.push(record)
    }
    if (runs.length === 0) return Effect.fail(new InvalidLogFile({ reason: "Empty", message: "the file holds no run" }))
    const ids = new Set<string>()
    for (const run of runs) {
      if (ids.has(run.runId)) return Effect.fail(new InvalidLogFile({ reason: "RunExists", message: `run ${run.runId} appears twice in the file` }))
      ids.add(run.runId)
    }
    return Effect.succeed(runs)
  })

/**
 * Writes runs into the store in context, each with one atomic append. Refuses (nothing
 * written) when a run id already exists in the store or the store cannot append records.
 */
export const write = (
  runs: ReadonlyArray<FileRun>
): Effect.Effect<void, InvalidLogFile | StoreError | ConcurrentWriter | RunBusy, RunLogStore> =>
  Effect.gen(function*() {
    const store = yield* RunLogStore
    const appendRecords = store.appendRecords
    if (appendRecords === undefined) {
      return yield* new InvalidLogFile({ reason: "StoreCannotImport", message: "the store has no appendRecords (build it with RunLogStore.make)" })
    }
    for (const run of runs) {
      const existing = yield* store.readLog(run.runId)
      if (Option.isSome(existing.started)) {
        return yield* new InvalidLogFile({ reason: "RunExists", message: `run ${run.runId} already exists in the store; nothing was imported` })
      }
    }
    for (const run of runs) {
      const [first, ...rest] = run.records
      if (first === undefined) continue
      yield* Effect.scoped(Effect.zipRight(store.claim(run.runId), appendRecords(run.runId, [first, ...rest])))
    }
  }).pipe(Effect.withSpan("LogFile.write"))

/** `parse` then `write`: imports a JSON-lines text; returns the imported run ids. */
export const importText = (text: string) => Effect.flatMap(parse(text), (runs) => Effect.as(write(runs), runs.map((run) => run.runId)))
