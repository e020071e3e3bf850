/**
 * The part of the SQL backend (`RunLogStore.Backend`) both dialects share: reading a log,
 * listing runs from the summary rows, claims (`lease.ts`), and the front of an append — the
 * check that sequence 0 is `RunStarted` and nothing else, the dialect's write, and how a
 * refused write becomes `ConcurrentWriter` (with the lease's new holder when the writer's claim
 * was taken over). How the records reach the database is the dialect's: `sqlite.ts`, `pg.ts`.
 *
 * Storage (see `migrations/`):
 * - `polyloop_records(run_id, seq, kind, step, payload)`: append-only, one row per record, the
 *   record's JSON as `RunLogStore.encodeRecord` writes it. `PRIMARY KEY (run_id, seq)` makes the
 *   database reject a duplicate sequence number; a gap is rejected by a check of the run's
 *   `next_seq` in the same statement or transaction. Either becomes `ConcurrentWriter`.
 * - `polyloop_runs`: one summary row per run, inserted with `RunStarted` and updated with each
 *   append, atomically with it (`summary.ts`), so `listRuns` is one query.
 * - `polyloop_claims(run_id, owner, expires_at)`: leases (`lease.ts`).
 * - `polyloop_blobs`, `polyloop_refs`: content-addressed blobs and per-run refs (`blobs.ts`, design 0330).
 *
 * @internal
 */
import type * as SqlClient from "@effect/sql/SqlClient"
import type { SqlError } from "@effect/sql/SqlError"
import { ConcurrentWriter, StoreError } from "@polyloop/core/Errors"
import type { RunId } from "@polyloop/core/Ids"
import * as RunLogStore from "@polyloop/core/RunLogStore"
import type * as Arr from "effect/Array"
import * as Data from "effect/Data"
import * as Effect from "effect/Effect"
import type { Options } from "./options.js"
import * as Approvals from "./approvals.js"
import * as Blobs from "./blobs.js"
import { isAppendRefused, isUniqueViolation } from "./errors.js"
import * as Lease from "./lease.js"
import * as Statements from "./statements.js"
import { decodeSummaries, selectedColumns } from "./summary.js"

/** A dialect's write found that the append's first sequence number is not the run's next one. */
export class SeqConflict extends Data.TaggedError("SeqConflict")<{}> {}

/** The append's writer held a claim on the run, and the lease row now names another owner (or none). */
export class LeaseLost extends Data.TaggedError("LeaseLost")<{ readonly holder: string }> {}

/**
 * How a dialect writes an append's records (`owner`: the writer's lease owner when this store
 * holds the run's claim, so the write must be fenced by it). A duplicate sequence number is
 * the primary key's unique violation; a gap or a lost lease is `SeqConflict`, `LeaseLost` or
 * (SQLite) the append trigger's refusal.
 */
export type Append = (
  runId: RunId,
  records: Arr.NonEmptyReadonlyArray<RunLogStore.StoredRecord>,
  owner: string | undefined
) => Effect.Effect<void, SqlError | SeqConflict | LeaseLost | StoreError>

/** Effect's built-in tracer (spans kept in memory, seen by nobody). */

/**
 * The backend over `sql` (each operation's connection from `connect`), appending with the
 * dialect's `append`, which is given the store's statement runner and leases.
 */
export const make = (
  sql: SqlClient.SqlClient,
  options: Options,
  connect: Statements.Connect,
  dialect: (statements: Statements.Statements, leases: Lease.Leases) => Append
): Effect.Effect<RunLogStore.Backend> => Effect.sync(() => makeSync(Statements.make(sql, options, connect), options, dialect))

const makeSync = (
  statements: Statements.Statements,
  options: Options,
  dialect: (statements: Statements.Statements, leases: Lease.Leases) => Append
): RunLogStore.Backend => {
  const { compiled, connect, failWith, path, query, sql } = statements
  const leases = Lease.make(statements, options)
  const held = leases.held
  const write = dialect(statements, leases)

  const nextSeqSql = compiled(sql`SELECT next_seq FROM polyloop_runs WHERE run_id = ${""}`)
  const readSql = compiled(sql`SELECT payload FROM polyloop_records WHERE run_id = ${""} ORDER BY seq`)

  const nextSeq = (runId: RunId) =>
    query(nextSeqSql, [runId]).pipe(
      Effect.map((rows) => Number((rows[0] as { readonly next_seq?: unknown } | undefined)?.next_seq ?? 0)),
      Effect.mapError(failWith("reading the run's next sequence number", runId))
    )

  const conflict = (runId: RunId, actualSeq: number) =>
    Effect.flatMap(nextSeq(runId), (expectedSeq) => Effect.fail(new ConcurrentWriter({ runId, expectedSeq, actualSeq })))

  /** A rejected append by a claim holder whose lease is gone names the lease's new holder ("" for none). */
  const fencedConflict = (runId: RunId, actualSeq: number, holder?: string) =>
    Effect.gen(function*() {
      const owner = held.get(runId)
      if (owner === undefined) return yield* conflict(runId, actualSeq)
      const current = holder ?? (yield* leases.holder(runId).pipe(Effect.mapError(failWith("reading the run's claim", runId))))
      if (current === owner) return yield* conflict(runId, actualSeq)
      const expectedSeq = yield* nextSeq(runId)
      return yield* new ConcurrentWriter({ runId, expectedSeq, actualSeq, leaseHolder: current })
    })

  const read: RunLogStore.Backend["read"] = (runId) =>
    query(readSql, [runId]).pipe(
      Effect.mapError(failWith("reading the log", runId)),
      Effect.flatMap((rows) => {
        const texts: Array<string> = []
        for (const row of rows as ReadonlyArray<{ readonly payload?: unknown }>) {
          if (typeof row.payload !== "string") {
            return Effect.fail(
              new StoreError({
                reason: "Corrupt",
                runId,
                ...(path === undefined ? {} : { path }),
                message: `run ${runId}: record ${texts.length} is not stored as text`
              })
            )
          }
          texts.push(row.payload)
        }
        return Effect.succeed(texts)
      }),
      Statements.withSpanIfTraced("SqlRunLogStore.read", () => ({ runId }))
    )

  const append: RunLogStore.Backend["append"] = (runId, records) =>
    Effect.suspend(() => {
      const first = records[0]
      // Sequence 0 is the RunStarted record and nothing else.
      if ((first.seq === 0) !== (first.kind === "RunStarted")) return conflict(runId, first.seq)
      return write(runId, records, held.get(runId)).pipe(
        Effect.catchTags({
          SeqConflict: () => fencedConflict(runId, first.seq),
          LeaseLost: (lost) => fencedConflict(runId, first.seq, lost.holder),
          // A duplicate sequence number (the primary key) or, on SQLite, the append trigger's
          // refusal (a gap, a lost lease): `fencedConflict` tells which it was.
          SqlError: (error) =>
            isUniqueViolation(error) || isAppendRefused(error)
              ? fencedConflict(runId, first.seq)
              : Effect.fail(failWith("appending to the log", runId)(error))
        })
      )
    }).pipe(Statements.withSpanIfTraced("SqlRunLogStore.append", () => ({ runId, records: records.length })))

  const listRuns: RunLogStore.Backend["listRuns"] = (query) =>
    Effect.gen(function*() {
      // `Suspended` is computed from the run's approval records (design 0160, `approvals.ts`).
      const where = query.status === undefined ? sql`` : sql.literal(`WHERE ${Approvals.statusFilter("r", query.status)}`)
      const limit = query.limit === undefined ? sql`` : sql`LIMIT ${Math.max(0, Math.floor(query.limit))}`
      const status = sql.literal(Approvals.statusColumn("r"))
      const conversation = sql.literal(Approvals.conversationColumns("r", sql.onDialectOrElse({ pg: () => "pg" as const, orElse: () => "sqlite" as const })))
      const [text, params] = sql`SELECT ${sql.literal(selectedColumns)}, ${conversation}, ${status} AS status FROM polyloop_runs r ${where} ORDER BY r.started_at DESC, r.run_id ASC ${limit}`
        .compile()
      const rows = yield* connect((conn) => conn.execute(text, params, undefined)).pipe(Effect.mapError(failWith("listing runs")))
      return yield* decodeSummaries(rows, path)
    }).pipe(Effect.withSpan("SqlRunLogStore.listRuns"))

  // Search (design 0341): the searched field out of each record's JSON, matched case-insensitively
  // (`LIKE` is so for ASCII letters on SQLite; `ILIKE` on PostgreSQL), newest run first.
  const field = sql.onDialectOrElse({
    pg: () => ({
      task: Approvals.pgJson("x.payload", (j) => `(${j} ->> 'task')`, "NULL"),
      reply: Approvals.pgJson("x.payload", (j) => `(${j} -> 'reply' ->> 'text')`, "NULL"),
      observation: Approvals.pgJson("x.payload", (j) => `(${j} -> 'outcome' ->> 'observation')`, "NULL"),
      like: "ILIKE"
    }),
    orElse: () => ({
      task: "json_extract(x.payload, '$.task')",
      reply: "json_extract(x.payload, '$.reply.text')",
      observation: "json_extract(x.payload, '$.outcome.observation')",
      like: "LIKE"
    })
  })
  const searched = `CASE x.kind WHEN 'RunStarted' THEN ${field.task} WHEN 'ModelReplied' THEN ${field.reply} ELSE ${field.observation} END`
  const searchSql = compiled(
    sql`SELECT x.run_id, x.seq, x.kind, x.step, ${sql.literal(searched)} AS found FROM polyloop_records x JOIN polyloop_runs r ON r.run_id = x.run_id WHERE x.kind IN ('RunStarted', 'ModelReplied', 'ActionResulted') AND ${
      sql.literal(searched)
    } ${sql.literal(field.like)} ${""} ESCAPE '!' ORDER BY r.started_at DESC, x.run_id ASC, x.seq ASC LIMIT ${0} OFFSET ${0}`
  )
  const kinds: Record<string, RunLogStore.SearchField> = { RunStarted: "task", ModelReplied: "reply", ActionResulted: "observation" }
  const search: NonNullable<RunLogStore.Backend["search"]> = (wanted) =>
    query(searchSql, [`%${wanted.text.replace(/[!%_]/g, (c) => `!${c}`)}%`, Math.max(1, Math.floor(wanted.limit)), Math.max(0, Math.floor(wanted.offset))]).pipe(
      Effect.mapError(failWith("searching the runs")),
      Effect.map((rows) =>
        (rows as ReadonlyArray<{ readonly run_id: string; readonly seq: unknown; readonly kind: string; readonly step: unknown; readonly found: unknown }>).map((row) => ({
          runId: row.run_id,
          seq: Number(row.seq),
          step: row.step === null || row.step === undefined || row.kind === "RunStarted" ? null : Number(row.step),
          field: kinds[row.kind] ?? "observation",
          snippet: RunLogStore.snippetOf(typeof row.found === "string" ? row.found : "", wanted.text)
        }))
      ),
      Effect.withSpan("SqlRunLogStore.search")
    )

  return { read, append, listRuns, claim: leases.claim, search, blobs: Blobs.make(statements) }
}
