/**
 * The run's summary row (`polyloop_runs`), shared by both dialects: what each record adds to it
 * (written atomically with every append, so `listRuns` is one query and costs constant work per
 * step), the record columns derived from a record (`step`, the agent's name), and how a row is
 * read back into a `RunLogStore.RunSummary`.
 *
 * @internal
 */
import { StoreError } from "@polyloop/core/Errors"
import type { RunId } from "@polyloop/core/Ids"
import { totalTokens } from "@polyloop/core/ModelReply"
import * as RunLog from "@polyloop/core/RunLog"
import * as RunLogStore from "@polyloop/core/RunLogStore"
import { StopReason } from "@polyloop/core/StopReason"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import * as ParseResult from "effect/ParseResult"
import * as Schema from "effect/Schema"

/** The `step` column of a record's row (null for records outside a step). */
export const stepOf = (record: RunLog.RunRecord): number | null => {
  switch (record._tag) {
    case "ModelReplied":
    case "ActionResulted":
    case "StepCompleted":
      return record.step
    case "RunResumed":
      return record.fromStep
    default:
      return null
  }
}

/** What one record adds to the run's summary row (`finished`: the record ends the run). */
export interface RecordDelta {
  steps: number
  effectiveSteps: number
  tokens: number
  /** The replies' input tokens (design 0343). */
  inputTokens: number
  elapsed: number
  finished: RunLog.RunFinished | undefined
}

/** Adds what `record` contributes to the run's summary row to `delta`. */
export const addDelta = (delta: RecordDelta, record: RunLog.RunRecord): RecordDelta => {
  switch (record._tag) {
    case "ModelReplied":
      delta.tokens += totalTokens(record.reply.usage)
      delta.inputTokens += record.reply.usage.inputTokens
      break
    case "HistoryCompacted":
      // A summary's model call (design 0300) counts in the run's tokens.
      if (record.usage !== undefined) {
        delta.tokens += totalTokens(record.usage)
        delta.inputTokens += record.usage.inputTokens
      }
      break
    case "StepCompleted":
      // A step is effective when one of its actions was Executed (design 0150): the step
      // record says so, as the results of a step may be written in several appends.
      delta.steps++
      if (record.effective) delta.effectiveSteps++
      delta.elapsed += record.elapsed
      break
    case "RunFinished":
      delta.finished = record
      break
    default:
      break
  }
  return delta
}

/** A delta that adds nothing. */
export const emptyDelta = (): RecordDelta => ({ steps: 0, effectiveSteps: 0, tokens: 0, inputTokens: 0, elapsed: 0, finished: undefined })

/** What an append adds to the run's summary row. */
export const summaryDelta = (records: ReadonlyArray<RunLogStore.StoredRecord>): RecordDelta => {
  const delta = emptyDelta()
  for (const { record } of records) addDelta(delta, record)
  return delta
}

/** The `RunStarted` columns of the summary row (design 0343), in the order of `startedColumns`. */
export const startedColumns = "snapshot_hash, model, forked_from, fork_step, fork_differences"

/** The values of `startedColumns` for a `RunStarted` record. */
export const startedValues = (record: RunLog.RunStarted): ReadonlyArray<string | number | null> => [
  record.snapshotHash,
  RunLogStore.modelOf(record.snapshot),
  record.forkedFrom?.runId ?? null,
  record.forkedFrom?.step ?? null,
  record.forkedFrom === undefined ? null : record.forkedFrom.differences.length
]

/** The `RunFinished` counters of the summary row (design 0343): steps, effective steps, input and output tokens, resumes. */
export const finishedValues = (record: RunLog.RunFinished): ReadonlyArray<number> => [
  record.counters.steps,
  record.counters.effectiveSteps,
  record.counters.usage.inputTokens,
  record.counters.usage.outputTokens,
  record.counters.resumedCount
]

/** The agent's name a `RunStarted` record carries, for the summary row ("?" if it has none). */
export const agentOf = (record: RunLog.RunRecord): string =>
  Option.match(RunLogStore.summarize(RunLog.fromRecords([record])), { onNone: () => "?", onSome: (s) => s.agent })

const encodeStopReasonSync = Schema.encodeEither(Schema.parseJson(StopReason))

/** The stop reason's JSON for the summary row, or a typed `Encode` failure. */
export const stopReasonJson = (runId: RunId, finished: RunLog.RunFinished): Effect.Effect<string, StoreError> | string => {
  const encoded = encodeStopReasonSync(finished.stopReason)
  return encoded._tag === "Right"
    ? encoded.right
    : Effect.fail(
      new StoreError({ reason: "Encode", runId, message: `run ${runId}: the stop reason does not encode`, cause: encoded.left })
    )
}

const Numeric = Schema.Union(Schema.Number, Schema.NumberFromString)

const SummaryRow = Schema.Struct({
  run_id: Schema.String,
  agent: Schema.String,
  status: RunLogStore.RunStatus,
  stop_reason: Schema.NullOr(Schema.parseJson(StopReason)),
  steps: Numeric,
  effective_steps: Numeric,
  tokens: Numeric,
  started_at: Numeric,
  finished_at: Schema.NullOr(Numeric),
  elapsed: Numeric,
  // Version 5 (design 0343); null in a row written before it and not backfilled (never, after the migration).
  snapshot_hash: Schema.NullOr(Schema.String),
  model: Schema.NullOr(Schema.String),
  forked_from: Schema.NullOr(Schema.String),
  fork_step: Schema.NullOr(Numeric),
  fork_differences: Schema.NullOr(Numeric),
  input_tokens: Numeric,
  fin_steps: Schema.NullOr(Numeric),
  fin_effective_steps: Schema.NullOr(Numeric),
  fin_input_tokens: Schema.NullOr(Numeric),
  fin_output_tokens: Schema.NullOr(Numeric),
  fin_resumed: Schema.NullOr(Numeric),
  // Computed when listing (design 0300, `approvals.ts`): null but for an unfinished conversation.
  conv_turns: Schema.NullOr(Numeric),
  conv_messages: Schema.NullOr(Numeric),
  conv_last: Schema.NullOr(Schema.parseJson(StopReason))
})

/** The columns `decodeSummaries` reads, for a `SELECT` from `polyloop_runs` aliased `r` (the status apart). */
export const selectedColumns =
  "r.run_id, r.agent, r.stop_reason, r.steps, r.effective_steps, r.tokens, r.started_at, r.finished_at, r.elapsed, " +
  "r.snapshot_hash, r.model, r.forked_from, r.fork_step, r.fork_differences, r.input_tokens, " +
  "r.fin_steps, r.fin_effective_steps, r.fin_input_tokens, r.fin_output_tokens, r.fin_resumed"

const decodeSummaryRows = Schema.decodeUnknown(Schema.Array(SummaryRow))

type Row = typeof SummaryRow.Type

const toSummary = (row: Row): RunLogStore.RunSummary => ({
  runId: row.run_id,
  agent: row.agent,
  status: row.status,
  stopReason: Option.fromNullable(row.stop_reason),
  steps: row.steps,
  effectiveSteps: row.effective_steps,
  tokens: row.tokens,
  startedAt: row.started_at,
  finishedAt: Option.fromNullable(row.finished_at),
  elapsed: row.elapsed,
  ...(row.conv_turns === null ? {} : {
    conversation: { turns: row.conv_turns, messages: (row.conv_messages ?? 0) + 1, lastStopReason: row.conv_last }
  }),
  ...(row.snapshot_hash === null ? {} : {
    snapshotHash: row.snapshot_hash,
    model: row.model,
    forkedFrom: row.forked_from === null
      ? null
      : { runId: row.forked_from, step: row.fork_step ?? 0, differences: row.fork_differences ?? 0 },
    inputTokens: row.input_tokens,
    outputTokens: row.tokens - row.input_tokens,
    counters: row.fin_steps === null
      ? null
      : {
        steps: row.fin_steps,
        effectiveSteps: row.fin_effective_steps ?? 0,
        inputTokens: row.fin_input_tokens ?? 0,
        outputTokens: row.fin_output_tokens ?? 0,
        resumedCount: row.fin_resumed ?? 0
      }
  })
})

/** A numeric column as `Numeric` reads it (a number, or the text of one: PostgreSQL's `bigint`); undefined otherwise. */
const numeric = (value: unknown): number | undefined => {
  if (typeof value === "number") return value
  if (typeof value !== "string" || value.trim() === "") return undefined
  const n = Number(value)
  return Number.isNaN(n) ? undefined : n
}

const nullableNumeric = (value: unknown): number | null | undefined => value === null ? null : numeric(value)
const nullableText = (value: unknown): string | null | undefined => value === null || typeof value === "string" ? value : undefined
const statuses: ReadonlySet<unknown> = new Set<unknown>(RunLogStore.RunStatus.literals)
const decodeStopReason = Schema.decodeUnknownEither(Schema.parseJson(StopReason))

/**
 * The rows decoded without running `SummaryRow` on each (a listing is thousands of rows, and
 * Schema's decoding was most of its time): each column checked as `SummaryRow` checks it, each
 * distinct stop reason's JSON decoded once. Undefined at the first row that does not pass, so the
 * caller decodes with the schema and reports what is wrong.
 */
const decodeFast = (rows: ReadonlyArray<unknown>): Array<RunLogStore.RunSummary> | undefined => {
  const reasons = new Map<string, StopReason>()
  const out: Array<RunLogStore.RunSummary> = new Array(rows.length)
  for (let i = 0; i < rows.length; i++) {
    const r = rows[i] as Record<string, unknown> | null
    if (typeof r !== "object" || r === null) return undefined
    const reasonOf = (text: unknown): StopReason | null | undefined => {
      if (text === null || text === undefined) return text === null ? null : undefined
      if (typeof text !== "string") return undefined
      const known = reasons.get(text)
      if (known !== undefined) return known
      const decoded = decodeStopReason(text)
      if (decoded._tag === "Left") return undefined
      reasons.set(text, decoded.right)
      return decoded.right
    }
    const stopReason = reasonOf(r["stop_reason"])
    const convLast = reasonOf(r["conv_last"])
    const row = {
      run_id: r["run_id"],
      agent: r["agent"],
      status: r["status"],
      stop_reason: stopReason,
      steps: numeric(r["steps"]),
      effective_steps: numeric(r["effective_steps"]),
      tokens: numeric(r["tokens"]),
      started_at: numeric(r["started_at"]),
      finished_at: nullableNumeric(r["finished_at"]),
      elapsed: numeric(r["elapsed"]),
      snapshot_hash: nullableText(r["snapshot_hash"]),
      model: nullableText(r["model"]),
      forked_from: nullableText(r["forked_from"]),
      fork_step: nullableNumeric(r["fork_step"]),
      fork_differences: nullableNumeric(r["fork_differences"]),
      input_tokens: numeric(r["input_tokens"]),
      fin_steps: nullableNumeric(r["fin_steps"]),
      fin_effective_steps: nullableNumeric(r["fin_effective_steps"]),
      fin_input_tokens: nullableNumeric(r["fin_input_tokens"]),
      fin_output_tokens: nullableNumeric(r["fin_output_tokens"]),
      fin_resumed: nullableNumeric(r["fin_resumed"]),
      conv_turns: nullableNumeric(r["conv_turns"]),
      conv_messages: nullableNumeric(r["conv_messages"]),
      conv_last: convLast
    }
    if (typeof row.run_id !== "string" || typeof row.agent !== "string" || !statuses.has(row.status)) return undefined
    for (const value of Object.values(row)) if (value === undefined) return undefined
    out[i] = toSummary(row as Row)
  }
  return out
}

/** Rows of `polyloop_runs` (all the summary's columns) as `RunSummary`s; a row that does not decode is `StoreError { reason: "Decode" }`. */
export const decodeSummaries = (
  rows: ReadonlyArray<unknown>,
  path: string | undefined
): Effect.Effect<ReadonlyArray<RunLogStore.RunSummary>, StoreError> =>
  Effect.suspend(() => {
    const fast = decodeFast(rows)
    if (fast !== undefined) return Effect.succeed(fast)
    return decodeSummaryRows(rows).pipe(
      Effect.mapError((error) =>
        new StoreError({
          reason: "Decode",
          ...(path === undefined ? {} : { path }),
          message: `a run summary does not decode: ${ParseResult.TreeFormatter.formatErrorSync(error)}`
        })
      ),
      Effect.map((decoded) => decoded.map(toSummary))
    )
  })
