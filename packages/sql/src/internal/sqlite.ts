/**
 * How an append reaches SQLite.
 *
 * 1. `RunLogStore.make` (core) has validated and encoded the records once (`StoredRecord`: the
 *    sequence number, kind, JSON text); `backend.ts` checks that sequence 0 is `RunStarted`.
 * 2. `append` below turns each record into one row of the append view `polyloop_append`
 *    (migration 3, `migrations/sqlite.ts`): the record's columns, its summary delta
 *    (`summary.ts`) and the writer's lease owner when this store holds the run's claim.
 * 3. The rows go in as ONE statement, `INSERT INTO polyloop_append VALUES (…), (…)`. The view
 *    has no rows; its `INSTEAD OF INSERT` trigger is the append — per row it creates the summary
 *    row (`RunStarted`), refuses a gap or a lost lease (`RAISE(ABORT)`), inserts the record and
 *    updates the summary. A duplicate is the primary key's refusal. A statement is atomic and,
 *    in autocommit, its own transaction: one commit (one `fsync` at `synchronous=FULL`), no
 *    `BEGIN`/`COMMIT` statements (`docs/design/0001-sqlite-append-view.md`).
 * 4. While more than one run is claimed on the store, the statement is shared with the other
 *    runs' appends that reach the store together (`groupCommit.ts`); with one run it is written
 *    at once.
 * 5. It runs on the connection the store holds for its life (`backendOwningClient`, for the
 *    client `layerSqlite` opens for the store alone), or on one reserved per operation when the
 *    client is shared (`docs/design/0003-holding-the-sqlite-connection.md`).
 * 6. A refusal comes back as a `SqlError` (the trigger's `RAISE` or the unique violation), which
 *    `backend.ts` turns into `ConcurrentWriter`; any other failure is a `StoreError` with the
 *    path (`errors.ts`).
 *
 * An append of more than 1,000 records (a fork's or an import's whole log) is one statement too,
 * its rows in one JSON parameter, past SQLite's limit of 32,766 parameters a statement
 * (`docs/design/0396-appends-past-the-parameter-limit.md`); it is never grouped.
 *
 * With a fault hook (tests) the same rows go in one by one inside `BEGIN IMMEDIATE … COMMIT`
 * (`transaction.ts`), so that the hook runs between them and on a reserved connection.
 *
 * @internal
 */
import type * as SqlClient from "@effect/sql/SqlClient"
import type { SqlError } from "@effect/sql/SqlError"
import { StoreError } from "@polyloop/core/Errors"
import type * as RunLogStore from "@polyloop/core/RunLogStore"
import * as Effect from "effect/Effect"
import type * as Scope from "effect/Scope"
import type { Options } from "./options.js"
import * as Backend from "./backend.js"
import { storeError } from "./errors.js"
import * as GroupCommit from "./groupCommit.js"
import type * as Lease from "./lease.js"
import { reserve } from "./reserve.js"
import * as Statements from "./statements.js"
import { addDelta, agentOf, emptyDelta, stepOf, stopReasonJson } from "./summary.js"

/** The columns of SQLite's append view (`migrations/sqlite.ts`, version 3; `input_tokens` since version 5), in order. */
const appendViewColumns =
  "run_id, seq, kind, step, payload, owner, agent, started_at, steps, effective_steps, tokens, elapsed, stop_reason, finished_at, input_tokens"

const appendViewText = (rows: number): string =>
  `INSERT INTO polyloop_append (${appendViewColumns}) VALUES ${Array.from({ length: rows }, () => "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)").join(", ")}`

/** Texts of the statements of small appends and groups, made once (larger groups' texts are made when needed). */
const appendViewSql: ReadonlyArray<string> = Array.from({ length: 33 }, (_, rows) => appendViewText(rows))

/** The one statement of a SQLite append (or group of appends) of `rows` records; the driver prepares each text once. */
const appendViewFor = (rows: number): string => appendViewSql[rows] ?? appendViewText(rows)

/** Parameters of one append-view row. */
const appendViewWidth = 15

/**
 * Records an append binds one parameter per column at most; a larger append passes its rows in
 * one JSON parameter (`appendViewJson`). SQLite allows 32,766 parameters a statement (2,184 rows).
 */
const maxBoundRows = GroupCommit.maxGroupRows

/**
 * The one statement of an append of any number of records (design 0396): the same rows as
 * `appendViewText` binds, as one JSON array of 15-value arrays, read back in order by `jsonb_each`
 * (SQLite 3.45 or later; better-sqlite3 bundles 3.51).
 */
const appendViewJson = `INSERT INTO polyloop_append (${appendViewColumns}) SELECT ${
  Array.from({ length: appendViewWidth }, (_, i) => `value ->> ${i}`).join(", ")
} FROM jsonb_each(?) ORDER BY key`

/** The rows of `params` (15 values each, one after another) as one JSON array, or a `StoreError` if no string can hold it. */
const rowsJson = (params: ReadonlyArray<Statements.Param>, rows: number, runId: string, path: string | undefined): string | StoreError => {
  const parts: Array<string> = []
  for (let i = 0; i < rows; i++) parts.push(JSON.stringify(params.slice(i * appendViewWidth, (i + 1) * appendViewWidth)))
  try {
    return `[${parts.join(",")}]`
  } catch (cause) {
    // V8's longest string (~512 M characters): the append is larger than one statement carries.
    return new StoreError({
      reason: "Encode",
      runId,
      ...(path === undefined ? {} : { path }),
      message: `run ${runId}: an append of ${rows} records is larger than one SQLite statement carries; nothing was written`,
      cause
    })
  }
}

/** SQLite's append: one `INSERT` into the append view (grouped with other runs' appends while several are claimed). */
const makeAppend = (statements: Statements.Statements, options: Options, leases: Lease.Leases): Backend.Append => {
  const { exec, faultIn, query, transaction } = statements
  const write = (params: ReadonlyArray<Statements.Param>, rows: number): Effect.Effect<void, SqlError> =>
    Effect.asVoid(query(appendViewFor(rows), params))
  const group = GroupCommit.make(write)
  const writeAppend = (params: ReadonlyArray<Statements.Param>, rows: number, runId: string): Effect.Effect<void, SqlError | StoreError> => {
    if (rows > maxBoundRows) {
      const json = rowsJson(params, rows, runId, statements.path)
      return typeof json === "string" ? Effect.asVoid(query(appendViewJson, [json])) : Effect.fail(json)
    }
    return leases.held.size <= 1 ? write(params, rows) : group.submit(params, rows)
  }

  return (runId, records, owner) => {
    const params: Array<Statements.Param> = []
    for (const stored of records) {
      const record = stored.record
      const delta = addDelta(emptyDelta(), record)
      let stopReason: string | null = null
      if (delta.finished !== undefined) {
        const json = stopReasonJson(runId, delta.finished)
        if (typeof json !== "string") return json
        stopReason = json
      }
      const started = record._tag === "RunStarted"
      params.push(
        runId,
        stored.seq,
        stored.kind,
        stepOf(record),
        stored.json,
        owner ?? null,
        started ? agentOf(record) : null,
        started ? record.startedAt : null,
        delta.steps,
        delta.effectiveSteps,
        delta.tokens,
        delta.elapsed,
        stopReason,
        delta.finished === undefined ? null : delta.finished.finishedAt,
        delta.inputTokens
      )
    }
    if (options.faultPoint === undefined) return writeAppend(params, records.length, runId)
    const width = appendViewWidth
    return transaction((conn) => {
      let chain: Effect.Effect<unknown, SqlError | StoreError> = Effect.void
      for (let i = 0; i < records.length; i++) {
        const row = params.slice(i * width, (i + 1) * width)
        chain = Effect.zipRight(chain, faultIn(conn, { stage: "BeforeRecord", runId, seq: records[i]!.seq, index: i }))
        chain = Effect.zipRight(chain, exec(conn, appendViewFor(1), row))
      }
      const end = records[records.length - 1]!.seq
      return Effect.zipRight(chain, faultIn(conn, { stage: "BeforeCommit", runId, seq: end, index: records.length }))
    })
  }
}

/** The SQLite backend over `sql`, each operation's connection from `connect`. */
export const backend = (sql: SqlClient.SqlClient, options: Options, connect: Statements.Connect): Effect.Effect<RunLogStore.Backend> =>
  Backend.make(sql, options, connect, (statements, leases) => makeAppend(statements, options, leases))

/**
 * The backend on a SQLite client that nothing else uses — the client `layerSqlite` opens for
 * the store alone: the client's one connection is reserved once, for the life of the scope, and
 * every operation runs on it without a reservation of its own (which costs more CPU than the
 * append's statement). Safe because, in this mode, every operation of the store is one
 * statement (an append is one `INSERT` into the append view, a claim a compare-and-set upsert;
 * no transaction stays open across statements), and better-sqlite3 runs each statement
 * synchronously, whole. With a fault hook (whose point is inside an open transaction) it
 * reserves per operation, as a shared client does. Any other user of the client would wait for
 * the connection forever, so the client must be private to the store.
 */
export const backendOwningClient = (
  sql: SqlClient.SqlClient,
  options: Options
): Effect.Effect<RunLogStore.Backend, StoreError, Scope.Scope> =>
  options.faultPoint !== undefined
    ? backend(sql, options, Statements.reservePerOperation(sql))
    : Effect.flatMap(
      Effect.mapError(reserve(sql), (error) => storeError(error, { operation: "opening the store", path: options.path })),
      (conn) => backend(sql, options, (use) => use(conn))
    )

/** Is `sql` a SQLite client? */
export const isSqlite = (sql: SqlClient.SqlClient): boolean => sql.onDialectOrElse({ sqlite: () => true, orElse: () => false })
