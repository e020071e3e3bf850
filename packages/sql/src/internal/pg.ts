/**
 * How an append reaches PostgreSQL.
 *
 * After `RunStarted`, an append is one statement, one round trip
 * (`docs/design/0004-single-statement-pg-append.md`): `WITH upd AS (UPDATE polyloop_runs …
 * WHERE next_seq = $n [AND EXISTS (the lease row, locked FOR SHARE)] RETURNING …), ins AS
 * (INSERT INTO polyloop_records … WHERE EXISTS (SELECT 1 FROM upd))`. No row updated means a
 * gap or a lost lease (`SeqConflict`, which `backend.ts` tells apart), and nothing is inserted; a
 * duplicate is the primary key's unique violation; a takeover waits for the lease row's lock. A
 * statement is its own transaction: all of it is written, or none.
 *
 * The `RunStarted` append (which creates the summary row) is one statement too (design 0350):
 * `WITH run AS (INSERT INTO polyloop_runs … SELECT … [WHERE EXISTS (the lease row, FOR SHARE)]
 * RETURNING 1), ins AS (INSERT INTO polyloop_records … WHERE EXISTS (SELECT 1 FROM run))` — an
 * existing run is the primary key's unique violation, a lost lease inserts nothing. A
 * `RunStarted` append that also finishes the run (an imported log) and appends with a fault
 * hook run as `BEGIN`, one `INSERT` per record, the summary `UPDATE … RETURNING`
 * (compare-and-set on `next_seq`), the lease `SELECT … FOR SHARE`, `COMMIT` (`transaction.ts`).
 *
 * An append of more than 1,000 records (a fork's or an import's whole log) would pass
 * PostgreSQL's 65,535 parameters a statement in the one-statement forms: it takes the
 * transaction, its records inserted 1,000 at a time; grouped statements close before the limit
 * (`docs/design/0396-appends-past-the-parameter-limit.md`).
 *
 * Every operation reserves a pooled connection (`reserve.ts`: its wait shielded from
 * interruption, which would lose the connection in `@effect/sql-pg` 0.53).
 *
 * @internal
 */
import type * as SqlClient from "@effect/sql/SqlClient"
import type { Connection } from "@effect/sql/SqlConnection"
import type { SqlError } from "@effect/sql/SqlError"
import type { StoreError } from "@polyloop/core/Errors"
import type * as RunLogStore from "@polyloop/core/RunLogStore"
import * as Effect from "effect/Effect"
import type { Options } from "./options.js"
import * as Backend from "./backend.js"
import * as GroupCommit from "./groupCommit.js"
import type * as Lease from "./lease.js"
import * as Statements from "./statements.js"
import { agentOf, finishedValues, startedColumns, startedValues, stepOf, stopReasonJson, summaryDelta } from "./summary.js"

/**
 * The text of the one-statement append of `rows` records after `RunStarted`: the summary's
 * compare-and-set `UPDATE` (for a claim holder, only while the lease row still names it, locked
 * `FOR SHARE` until the statement commits, so a takeover waits) and, only if it updated the
 * row, the records' `INSERT`. It returns `updated` = 0 for a gap or a lost lease.
 */
const oneStatementText = (rows: number, finishing: boolean, fenced: boolean): string => {
  // $1 next_seq, $2..$6 deltas, [$7..$14 finishing], then run_id, expected seq, [owner], records.
  let n = 6
  const finish = finishing
    ? `, status = $${++n}, stop_reason = $${++n}, finished_at = $${++n}, fin_steps = $${++n}, fin_effective_steps = $${++n}, fin_input_tokens = $${++n}, fin_output_tokens = $${++n}, fin_resumed = $${++n}`
    : ""
  const run = ++n
  const expected = ++n
  const lease = fenced
    ? ` AND EXISTS (SELECT 1 FROM polyloop_claims WHERE run_id = $${run} AND owner = $${++n} FOR SHARE)`
    : ""
  const values: Array<string> = []
  for (let i = 0; i < rows; i++) values.push(`($${++n}::integer, $${++n}::text, $${++n}::integer, $${++n}::text)`)
  return `WITH upd AS (
  UPDATE polyloop_runs SET next_seq = $1, steps = steps + $2, effective_steps = effective_steps + $3, tokens = tokens + $4, input_tokens = input_tokens + $5, elapsed = elapsed + $6${finish}
  WHERE run_id = $${run} AND next_seq = $${expected}${lease}
  RETURNING next_seq
), ins AS (
  INSERT INTO polyloop_records (run_id, seq, kind, step, payload)
  SELECT $${run}, v.seq, v.kind, v.step, v.payload FROM (VALUES ${values.join(", ")}) AS v (seq, kind, step, payload)
  WHERE EXISTS (SELECT 1 FROM upd)
  RETURNING 1
)
SELECT (SELECT count(*) FROM upd) AS updated, (SELECT count(*) FROM ins) AS inserted`
}

/** Appends (of any runs) written by one grouped statement at most. */
const maxGroupedAppends = 200

/**
 * Records one statement binds at most (design 0396): PostgreSQL allows 65,535 parameters a
 * statement. A larger append takes the transaction, its records inserted this many at a time.
 */
const maxBoundRows = 1_000

/** Parameters a grouped statement binds at most: 9 a run, 5 a record (PostgreSQL's limit is 65,535). */
const maxGroupedParams = 65_535

/** The text of one `INSERT` of `rows` records (run_id, seq, kind, step, payload each) inside the transaction. */
const insertRecordsText = (rows: number): string => {
  const values: Array<string> = []
  let n = 0
  for (let i = 0; i < rows; i++) values.push(`($${++n}, $${++n}, $${++n}, $${++n}, $${++n})`)
  return `INSERT INTO polyloop_records (run_id, seq, kind, step, payload) VALUES ${values.join(", ")}`
}

/**
 * The text of the grouped append of `appends` appends of different runs, `rows` records in all
 * (design 0350): one compare-and-set `UPDATE … FROM (VALUES …)` of every run's summary — for a
 * claim holder only while its lease row names it, locked `FOR SHARE` — and the records of the
 * runs it updated. It returns the run ids it wrote; an append whose run is not among them had a
 * gap or lost its lease.
 */
const groupedText = (appends: number, rows: number): string => {
  let n = 0
  const runs: Array<string> = []
  for (let i = 0; i < appends; i++) {
    runs.push(`($${++n}::text, $${++n}::integer, $${++n}::integer, $${++n}::integer, $${++n}::bigint, $${++n}::bigint, $${++n}::double precision, $${++n}::integer, $${++n}::text)`)
  }
  const records: Array<string> = []
  for (let i = 0; i < rows; i++) records.push(`($${++n}::text, $${++n}::integer, $${++n}::text, $${++n}::integer, $${++n}::text)`)
  return `WITH v (run_id, next_seq, d_steps, d_effective, d_tokens, d_input, d_elapsed, expected, owner) AS (VALUES ${runs.join(", ")}),
upd AS (
  UPDATE polyloop_runs r SET next_seq = v.next_seq, steps = r.steps + v.d_steps, effective_steps = r.effective_steps + v.d_effective, tokens = r.tokens + v.d_tokens, input_tokens = r.input_tokens + v.d_input, elapsed = r.elapsed + v.d_elapsed
  FROM v
  WHERE r.run_id = v.run_id AND r.next_seq = v.expected
    AND (v.owner IS NULL OR EXISTS (SELECT 1 FROM polyloop_claims c WHERE c.run_id = v.run_id AND c.owner = v.owner FOR SHARE))
  RETURNING r.run_id
), ins AS (
  INSERT INTO polyloop_records (run_id, seq, kind, step, payload)
  SELECT w.run_id, w.seq, w.kind, w.step, w.payload FROM (VALUES ${records.join(", ")}) AS w (run_id, seq, kind, step, payload)
  WHERE w.run_id IN (SELECT run_id FROM upd)
  RETURNING 1
)
SELECT run_id FROM upd`
}

/** One append waiting to be grouped: its run, the summary's parameters, its records' parameters. */
interface Grouped {
  readonly runId: string
  /** run_id, next_seq, the five deltas, expected seq, owner (or null). */
  readonly run: ReadonlyArray<Statements.Param>
  /** Per record: run_id, seq, kind, step, payload. */
  readonly records: ReadonlyArray<Statements.Param>
  readonly rows: number
  /** The append alone (its one statement), when the group's statement fails. */
  readonly alone: Effect.Effect<boolean, SqlError>
}

/**
 * The text of the one-statement `RunStarted` append of `rows` records (design 0350): the summary
 * row inserted with the records' counters — for a claim holder only while its lease row exists,
 * locked `FOR SHARE` until the statement commits — and, only if it was, the records. It returns
 * `updated` = 0 when the lease is gone.
 */
const startStatementText = (rows: number, fenced: boolean): string => {
  // $1 run_id, $2 agent, $3 started_at, $4..$8 counters, $9 next_seq, $10..$14 the started
  // columns, [$15 owner], then each record's (seq, kind, step, payload).
  let n = 14
  const lease = fenced ? `\n  WHERE EXISTS (SELECT 1 FROM polyloop_claims WHERE run_id = $1 AND owner = $${++n} FOR SHARE)` : ""
  const values: Array<string> = []
  for (let i = 0; i < rows; i++) values.push(`($${++n}::integer, $${++n}::text, $${++n}::integer, $${++n}::text)`)
  return `WITH run AS (
  INSERT INTO polyloop_runs (run_id, agent, status, stop_reason, steps, effective_steps, tokens, input_tokens, started_at, finished_at, elapsed, next_seq, ${startedColumns})
  SELECT $1::text, $2::text, 'Unfinished', NULL, $4::integer, $5::integer, $6::bigint, $7::bigint, $3::double precision, NULL, $8::double precision, $9::integer, $10::text, $11::text, $12::text, $13::integer, $14::integer${lease}
  RETURNING 1
), ins AS (
  INSERT INTO polyloop_records (run_id, seq, kind, step, payload)
  SELECT $1, v.seq, v.kind, v.step, v.payload FROM (VALUES ${values.join(", ")}) AS v (seq, kind, step, payload)
  WHERE EXISTS (SELECT 1 FROM run)
  RETURNING 1
)
SELECT (SELECT count(*) FROM run) AS updated, (SELECT count(*) FROM ins) AS inserted`
}

/** PostgreSQL's append: one statement after `RunStarted`, a transaction for `RunStarted` and with a fault hook. */
const makeAppend = (statements: Statements.Statements, options: Options, leases: Lease.Leases): Backend.Append => {
  const { compiled, exec, faultIn, query, sql, transaction } = statements
  const insertRecordSql = compiled(
    sql`INSERT INTO polyloop_records (run_id, seq, kind, step, payload) VALUES (${""}, ${0}, ${""}, ${0}, ${""})`
  )
  const insertRunSql = compiled(
    sql`INSERT INTO polyloop_runs (run_id, agent, status, stop_reason, steps, effective_steps, tokens, started_at, finished_at, elapsed, next_seq, ${sql.literal(startedColumns)}) VALUES (${""}, ${""}, ${"Unfinished"}, NULL, 0, 0, 0, ${0}, NULL, 0, 0, ${""}, ${""}, ${""}, ${0}, ${0})`
  )
  // Compare-and-set on the run's next sequence number: a gap (or a record for a run that was
  // never started) updates no row and returns nothing.
  const updateRunSql = (finishing: boolean): string =>
    compiled(
      sql`UPDATE polyloop_runs SET next_seq = ${0}, steps = steps + ${0}, effective_steps = effective_steps + ${0}, tokens = tokens + ${0}, input_tokens = input_tokens + ${0}, elapsed = elapsed + ${0}${
        finishing
          ? sql`, status = ${"Finished"}, stop_reason = ${""}, finished_at = ${0}, fin_steps = ${0}, fin_effective_steps = ${0}, fin_input_tokens = ${0}, fin_output_tokens = ${0}, fin_resumed = ${0}`
          : sql``
      } WHERE run_id = ${""} AND next_seq = ${0} RETURNING next_seq`
    )
  const updateRun = { plain: updateRunSql(false), finishing: updateRunSql(true) }
  // Lock the lease row until commit, so a takeover waits for the append to finish.
  const leaseOwnerSql = compiled(sql`SELECT owner FROM polyloop_claims WHERE run_id = ${""} FOR SHARE`)
  /** One-statement texts by shape (`kind:rows:finishing:fenced`), made once each. */
  const oneStatementSql = new Map<string, string>()
  const textFor = (key: string, make: () => string): string => {
    const cached = oneStatementSql.get(key)
    if (cached !== undefined) return cached
    const text = make()
    oneStatementSql.set(key, text)
    return text
  }
  const oneStatementFor = (rows: number, finishing: boolean, fenced: boolean): string =>
    textFor(`append:${rows}:${finishing}:${fenced}`, () => oneStatementText(rows, finishing, fenced))
  const startStatementFor = (rows: number, fenced: boolean): string => textFor(`start:${rows}:${fenced}`, () => startStatementText(rows, fenced))
  /** `updated` = 1: the statement wrote; 0: a gap or a lost lease, which `backend.ts` tells apart. */
  const updated = (rows: ReadonlyArray<unknown>) => Number((rows[0] as { readonly updated?: unknown } | undefined)?.updated ?? 0) === 1
  const wrote = (rows: ReadonlyArray<unknown>) => updated(rows) ? Effect.void : Effect.fail(new Backend.SeqConflict())
  const groupedSql = new Map<string, string>()
  /**
   * Appends of many runs that reach the store together, while it holds several claims, share
   * one statement (design 0350); each gets whether its run was written. A failed statement (a
   * duplicate's unique violation undoes all of it) is made again one append at a time.
   */
  const group = GroupCommit.batcher<Grouped, boolean, SqlError>({
    group: (appends) => {
      const params: Array<Statements.Param> = []
      let rows = 0
      for (const a of appends) for (const p of a.run) params.push(p)
      for (const a of appends) {
        for (const p of a.records) params.push(p)
        rows += a.rows
      }
      const key = `${appends.length}:${rows}`
      let text = groupedSql.get(key)
      if (text === undefined) {
        text = groupedText(appends.length, rows)
        // Texts of many shapes would each be prepared by the server: keep the common ones.
        if (groupedSql.size < 256) groupedSql.set(key, text)
      }
      return Effect.map(query(text, params), (result) => {
        const written = new Set((result as ReadonlyArray<{ readonly run_id: string }>).map((row) => row.run_id))
        return appends.map((a) => written.has(a.runId))
      })
    },
    alone: (a) => a.alone,
    maxBatch: maxGroupedAppends,
    weight: (a) => a.run.length + a.records.length,
    maxWeight: maxGroupedParams,
    inFlight: GroupCommit.pgBatchesInFlight
  })

  return (runId, records, owner) => {
    const first = records[0]
    const delta = summaryDelta(records)
    const end = first.seq + records.length
    const fenced = owner !== undefined
    const finished = delta.finished
    const update: Array<Statements.Param> = [end, delta.steps, delta.effectiveSteps, delta.tokens, delta.inputTokens, delta.elapsed]
    if (finished !== undefined) {
      const json = stopReasonJson(runId, finished)
      if (typeof json !== "string") return json
      update.push("Finished", json, finished.finishedAt, ...finishedValues(finished))
    }
    update.push(runId, first.seq)
    const updateSql = finished === undefined ? updateRun.plain : updateRun.finishing
    const startedRecord = first.record._tag === "RunStarted" ? first.record : undefined
    const agent = startedRecord === undefined ? undefined : agentOf(startedRecord)

    // Past `maxBoundRows` records the one-statement forms would pass PostgreSQL's parameter
    // limit: such an append takes the transaction below (design 0396).
    const bound = records.length <= maxBoundRows
    if (options.faultPoint === undefined && agent === undefined && bound) {
      // One statement, one round trip: its parameters are the summary UPDATE's, the lease
      // owner when fenced, then each record's (seq, kind, step, payload).
      const params: Array<Statements.Param> = update
      if (fenced) params.push(owner)
      for (const stored of records) params.push(stored.seq, stored.kind, stepOf(stored.record), stored.json)
      const alone = query(oneStatementFor(records.length, finished !== undefined, fenced), params)
      if (finished !== undefined || leases.held.size <= 1) return Effect.flatMap(alone, wrote)
      const recordParams: Array<Statements.Param> = []
      for (const stored of records) recordParams.push(runId, stored.seq, stored.kind, stepOf(stored.record), stored.json)
      return Effect.flatMap(
        group.submit({
          runId,
          run: [runId, end, delta.steps, delta.effectiveSteps, delta.tokens, delta.inputTokens, delta.elapsed, first.seq, owner ?? null],
          records: recordParams,
          rows: records.length,
          alone: Effect.map(alone, updated)
        }),
        (ok) => (ok ? Effect.void : Effect.fail(new Backend.SeqConflict()))
      )
    }
    if (options.faultPoint === undefined && startedRecord !== undefined && agent !== undefined && finished === undefined && bound) {
      const params: Array<Statements.Param> = [
        runId,
        agent,
        startedRecord.startedAt,
        delta.steps,
        delta.effectiveSteps,
        delta.tokens,
        delta.inputTokens,
        delta.elapsed,
        end,
        ...startedValues(startedRecord)
      ]
      if (fenced) params.push(owner)
      for (const stored of records) params.push(stored.seq, stored.kind, stepOf(stored.record), stored.json)
      return Effect.flatMap(query(startStatementFor(records.length, fenced), params), wrote)
    }

    // One chain of statements on the transaction's connection (built, not run, here).
    const writes = (conn: Connection): Effect.Effect<void, SqlError | Backend.SeqConflict | Backend.LeaseLost | StoreError> => {
      let chain: Effect.Effect<unknown, SqlError | StoreError> = Effect.void
      if (options.faultPoint !== undefined) {
        // Record by record, the fault hook's point before each.
        for (let i = 0; i < records.length; i++) {
          const stored = records[i]!
          chain = Effect.zipRight(chain, faultIn(conn, { stage: "BeforeRecord", runId, seq: stored.seq, index: i }))
          chain = Effect.zipRight(chain, exec(conn, insertRecordSql, [runId, stored.seq, stored.kind, stepOf(stored.record), stored.json]))
        }
      } else {
        // At most `maxBoundRows` records a statement.
        for (let from = 0; from < records.length; from += maxBoundRows) {
          const chunk = records.slice(from, from + maxBoundRows)
          const params: Array<Statements.Param> = []
          for (const stored of chunk) params.push(runId, stored.seq, stored.kind, stepOf(stored.record), stored.json)
          const text = chunk.length === maxBoundRows ? textFor(`insert:${maxBoundRows}`, () => insertRecordsText(maxBoundRows)) : insertRecordsText(chunk.length)
          chain = Effect.zipRight(chain, exec(conn, text, params))
        }
      }
      if (agent !== undefined && startedRecord !== undefined) {
        chain = Effect.zipRight(chain, exec(conn, insertRunSql, [runId, agent, "Unfinished", startedRecord.startedAt, ...startedValues(startedRecord)]))
      }
      const checked = Effect.flatMap(
        Effect.zipRight(chain, exec(conn, updateSql, update)),
        // No row: the sequence number is not the run's next one.
        (rows): Effect.Effect<void, SqlError | Backend.LeaseLost | Backend.SeqConflict> =>
          rows.length !== 1
            ? Effect.fail(new Backend.SeqConflict())
            : fenced
            ? Effect.flatMap(exec(conn, leaseOwnerSql, [runId]), (lease) => {
              const holder = (lease[0] as { readonly owner?: string } | undefined)?.owner
              return holder === owner ? Effect.void : Effect.fail(new Backend.LeaseLost({ holder: holder ?? "" }))
            })
            : Effect.void
      )
      return options.faultPoint === undefined
        ? checked
        : Effect.zipRight(checked, faultIn(conn, { stage: "BeforeCommit", runId, seq: end - 1, index: records.length }))
    }
    return transaction(writes)
  }
}

/** The PostgreSQL backend over `sql` (every operation reserves a pooled connection through `connect`). */
export const backend = (sql: SqlClient.SqlClient, options: Options, connect: Statements.Connect): Effect.Effect<RunLogStore.Backend> =>
  Backend.make(sql, options, connect, (statements, leases) => makeAppend(statements, options, leases))
