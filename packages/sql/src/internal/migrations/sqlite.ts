/**
 * The SQLite schema history, for `Migrator.fromRecord`. Keys are `<id>_<name>`; ids only grow.
 * A released migration is never edited: a change is a new migration.
 *
 * - 1: the append-only record table (one row per record, primary key `(run_id, seq)` so a
 *   duplicate sequence number is rejected by the database) and the claim leases;
 * - 2: one summary row per run, kept up to date in the same transaction as each append, so
 *   `listRuns` is one query; existing runs are backfilled from their records;
 * - 3: the append view `polyloop_append` and its `INSTEAD OF INSERT` trigger: an append is one
 *   `INSERT` into the view (one row per record, carrying the summary's delta and the writer's
 *   lease owner), and the trigger does per row what the store's transaction did statement by
 *   statement — creates the summary row with `RunStarted`, checks the sequence number and the
 *   lease, inserts the record, updates the summary. One statement is atomic by itself, so the
 *   append needs no `BEGIN`/`COMMIT` of its own. No data changes.
 * - 4: `polyloop_blobs` (content-addressed blobs) and `polyloop_refs` (per-run names of blobs), design 0330.
 * - 5: the summary row carries what the viewer's statistics, forks and prices read (design 0343):
 *   the snapshot's hash and model, the fork's parent, the replies' input tokens and the
 *   `RunFinished` counters; existing runs are backfilled from their records. The append view
 *   and its trigger are made again: the view carries the replies' input tokens, and the trigger
 *   takes the rest from the `RunStarted` and `RunFinished` rows' JSON (once per run each).
 *
 * @internal
 */
import * as SqlClient from "@effect/sql/SqlClient"
import type { SqlError } from "@effect/sql/SqlError"
import * as Effect from "effect/Effect"

const createRecords = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`CREATE TABLE polyloop_records (
  run_id TEXT NOT NULL,
  seq INTEGER NOT NULL,
  kind TEXT NOT NULL,
  step INTEGER,
  payload TEXT NOT NULL,
  PRIMARY KEY (run_id, seq)
)`
  yield* sql`CREATE TABLE polyloop_claims (
  run_id TEXT PRIMARY KEY NOT NULL,
  owner TEXT NOT NULL,
  expires_at INTEGER NOT NULL
)`
})

const runSummaries = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`CREATE TABLE polyloop_runs (
  run_id TEXT PRIMARY KEY NOT NULL,
  agent TEXT NOT NULL,
  status TEXT NOT NULL,
  stop_reason TEXT,
  steps INTEGER NOT NULL,
  effective_steps INTEGER NOT NULL,
  tokens INTEGER NOT NULL,
  started_at REAL NOT NULL,
  finished_at REAL,
  elapsed REAL NOT NULL,
  next_seq INTEGER NOT NULL
)`
  yield* sql`CREATE INDEX polyloop_runs_started_at ON polyloop_runs (started_at)`
  // Backfill the runs written under schema 1 from their records (the encoded JSON of
  // `@polyloop/core/RunLog`), with the same rules as `RunLogStore.summarize`.
  yield* sql`INSERT INTO polyloop_runs
  (run_id, agent, status, stop_reason, steps, effective_steps, tokens, started_at, finished_at, elapsed, next_seq)
SELECT
  s.run_id,
  CASE WHEN json_type(s.payload, '$.snapshot.agent.name') = 'text'
    THEN json_extract(s.payload, '$.snapshot.agent.name') ELSE '?' END,
  CASE WHEN f.payload IS NULL THEN 'Unfinished' ELSE 'Finished' END,
  json_extract(f.payload, '$.stopReason'),
  (SELECT count(*) FROM polyloop_records r WHERE r.run_id = s.run_id AND r.kind = 'StepCompleted'),
  (SELECT count(*) FROM polyloop_records r WHERE r.run_id = s.run_id AND r.kind = 'ActionResulted'
    AND json_extract(r.payload, '$.outcome.status') = 'Executed'),
  (SELECT coalesce(sum(json_extract(r.payload, '$.reply.usage.inputTokens')
      + json_extract(r.payload, '$.reply.usage.outputTokens')), 0)
    FROM polyloop_records r WHERE r.run_id = s.run_id AND r.kind = 'ModelReplied'),
  json_extract(s.payload, '$.startedAt'),
  json_extract(f.payload, '$.finishedAt'),
  (SELECT coalesce(sum(json_extract(r.payload, '$.elapsed')), 0)
    FROM polyloop_records r WHERE r.run_id = s.run_id AND r.kind = 'StepCompleted'),
  (SELECT count(*) FROM polyloop_records r WHERE r.run_id = s.run_id)
FROM polyloop_records s
LEFT JOIN polyloop_records f ON f.run_id = s.run_id AND f.kind = 'RunFinished'
WHERE s.kind = 'RunStarted'`
})

/** What the append trigger's `RAISE(ABORT, …)` says when the sequence number is not the run's next one. */
export const appendSeqRefused = "polyloop_append: the sequence number is not the run's next one"
/** What the append trigger's `RAISE(ABORT, …)` says when the writer's lease on the run is gone. */
export const appendLeaseRefused = "polyloop_append: the writer's lease on the run is gone"

const appendView = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  // The view is never read (it has no rows); its columns are what an append carries per record.
  yield* sql`CREATE VIEW polyloop_append (
  run_id, seq, kind, step, payload, owner, agent, started_at, steps, effective_steps, tokens, elapsed, stop_reason, finished_at
) AS SELECT run_id, seq, kind, step, payload, NULL, NULL, NULL, 0, 0, 0, 0, NULL, NULL FROM polyloop_records WHERE 0`
  // Per row, in the order of the INSERT's VALUES. RAISE(ABORT) undoes the whole statement:
  // every record of the append or none. A second RunStarted, or a record whose sequence number
  // is taken, is the primary key's unique violation; a gap (or a run never started) and a lost
  // lease are the two RAISEs. The messages are matched by the store (keep them in step).
  yield* sql.unsafe(`CREATE TRIGGER polyloop_append_insert INSTEAD OF INSERT ON polyloop_append
BEGIN
  INSERT INTO polyloop_runs (run_id, agent, status, stop_reason, steps, effective_steps, tokens, started_at, finished_at, elapsed, next_seq)
    SELECT NEW.run_id, NEW.agent, 'Unfinished', NULL, 0, 0, 0, NEW.started_at, NULL, 0, 0 WHERE NEW.kind = 'RunStarted';
  SELECT RAISE(ABORT, '${appendSeqRefused.replace(/'/g, "''")}')
    WHERE NOT EXISTS (SELECT 1 FROM polyloop_runs WHERE run_id = NEW.run_id AND next_seq = NEW.seq);
  SELECT RAISE(ABORT, '${appendLeaseRefused.replace(/'/g, "''")}')
    WHERE NEW.owner IS NOT NULL AND NOT EXISTS (SELECT 1 FROM polyloop_claims WHERE run_id = NEW.run_id AND owner = NEW.owner);
  INSERT INTO polyloop_records (run_id, seq, kind, step, payload) VALUES (NEW.run_id, NEW.seq, NEW.kind, NEW.step, NEW.payload);
  UPDATE polyloop_runs SET
    next_seq = NEW.seq + 1,
    steps = steps + NEW.steps,
    effective_steps = effective_steps + NEW.effective_steps,
    tokens = tokens + NEW.tokens,
    elapsed = elapsed + NEW.elapsed,
    status = CASE WHEN NEW.kind = 'RunFinished' THEN 'Finished' ELSE status END,
    stop_reason = CASE WHEN NEW.kind = 'RunFinished' THEN NEW.stop_reason ELSE stop_reason END,
    finished_at = CASE WHEN NEW.kind = 'RunFinished' THEN NEW.finished_at ELSE finished_at END
  WHERE run_id = NEW.run_id;
END`)
})

/**
 * Version 4 (design 0330): content-addressed blobs (`hash` the SHA-256 of `data`, stored once) and
 * per-run refs naming a blob. No existing data changes.
 */
const blobs = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`CREATE TABLE polyloop_blobs (
  hash TEXT PRIMARY KEY NOT NULL,
  size BIGINT NOT NULL,
  data BLOB NOT NULL
)`
  yield* sql`CREATE TABLE polyloop_refs (
  run_id TEXT NOT NULL,
  name TEXT NOT NULL,
  hash TEXT NOT NULL,
  PRIMARY KEY (run_id, name)
)`
})

/** The columns version 5 adds to `polyloop_runs` (design 0343). */
const summaryColumns = [
  "snapshot_hash TEXT",
  "model TEXT",
  "forked_from TEXT",
  "fork_step INTEGER",
  "fork_differences INTEGER",
  "input_tokens INTEGER NOT NULL DEFAULT 0",
  "fin_steps INTEGER",
  "fin_effective_steps INTEGER",
  "fin_input_tokens INTEGER",
  "fin_output_tokens INTEGER",
  "fin_resumed INTEGER"
]

/** The `RunStarted` columns of version 5 from the record's JSON `p` (the same rules as `RunLogStore.summarize`). */
const startedColumns = (p: string) => ({
  snapshot_hash: `json_extract(${p}, '$.snapshotHash')`,
  model: `CASE WHEN json_type(${p}, '$.snapshot.agent.modelSettings.model') = 'text' THEN json_extract(${p}, '$.snapshot.agent.modelSettings.model') END`,
  forked_from: `json_extract(${p}, '$.forkedFrom.runId')`,
  fork_step: `json_extract(${p}, '$.forkedFrom.step')`,
  fork_differences: `CASE WHEN json_type(${p}, '$.forkedFrom') = 'object' THEN coalesce(json_array_length(${p}, '$.forkedFrom.differences'), 0) END`
})

/** The `RunFinished` columns of version 5 from the record's JSON `p`. */
const finishedColumns = (p: string) => ({
  fin_steps: `json_extract(${p}, '$.counters.steps')`,
  fin_effective_steps: `json_extract(${p}, '$.counters.effectiveSteps')`,
  fin_input_tokens: `json_extract(${p}, '$.counters.usage.inputTokens')`,
  fin_output_tokens: `json_extract(${p}, '$.counters.usage.outputTokens')`,
  fin_resumed: `json_extract(${p}, '$.counters.resumedCount')`
})

const assignments = (columns: Record<string, string>, wrap: (expression: string, column: string) => string): string =>
  Object.entries(columns).map(([column, expression]) => `${column} = ${wrap(expression, column)}`).join(",\n    ")

const summaryDetails = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  for (const column of summaryColumns) yield* sql.unsafe(`ALTER TABLE polyloop_runs ADD COLUMN ${column}`)
  // Backfill every run from its records (each RunStarted and RunFinished read once per column).
  const started = (expression: string) =>
    `(SELECT ${expression} FROM polyloop_records s WHERE s.run_id = polyloop_runs.run_id AND s.seq = 0 AND s.kind = 'RunStarted')`
  const finished = (expression: string) =>
    `(SELECT ${expression} FROM polyloop_records f WHERE f.run_id = polyloop_runs.run_id AND f.kind = 'RunFinished')`
  yield* sql.unsafe(`UPDATE polyloop_runs SET
    ${assignments(startedColumns("s.payload"), started)},
    ${assignments(finishedColumns("f.payload"), finished)},
    input_tokens = (SELECT coalesce(sum(json_extract(r.payload, '$.reply.usage.inputTokens')), 0)
      FROM polyloop_records r WHERE r.run_id = polyloop_runs.run_id AND r.kind = 'ModelReplied')`)
  yield* sql`DROP TRIGGER polyloop_append_insert`
  yield* sql`DROP VIEW polyloop_append`
  yield* sql`CREATE VIEW polyloop_append (
  run_id, seq, kind, step, payload, owner, agent, started_at, steps, effective_steps, tokens, elapsed, stop_reason, finished_at, input_tokens
) AS SELECT run_id, seq, kind, step, payload, NULL, NULL, NULL, 0, 0, 0, 0, NULL, NULL, 0 FROM polyloop_records WHERE 0`
  // Version 3's trigger, with the new columns: the RunStarted row's insert takes them from its
  // JSON; the RunFinished row's update takes the counters from its JSON.
  const onStarted = startedColumns("NEW.payload")
  const onFinished = finishedColumns("NEW.payload")
  yield* sql.unsafe(`CREATE TRIGGER polyloop_append_insert INSTEAD OF INSERT ON polyloop_append
BEGIN
  INSERT INTO polyloop_runs (run_id, agent, status, stop_reason, steps, effective_steps, tokens, started_at, finished_at, elapsed, next_seq, ${Object.keys(onStarted).join(", ")})
    SELECT NEW.run_id, NEW.agent, 'Unfinished', NULL, 0, 0, 0, NEW.started_at, NULL, 0, 0, ${Object.values(onStarted).join(", ")} WHERE NEW.kind = 'RunStarted';
  SELECT RAISE(ABORT, '${appendSeqRefused.replace(/'/g, "''")}')
    WHERE NOT EXISTS (SELECT 1 FROM polyloop_runs WHERE run_id = NEW.run_id AND next_seq = NEW.seq);
  SELECT RAISE(ABORT, '${appendLeaseRefused.replace(/'/g, "''")}')
    WHERE NEW.owner IS NOT NULL AND NOT EXISTS (SELECT 1 FROM polyloop_claims WHERE run_id = NEW.run_id AND owner = NEW.owner);
  INSERT INTO polyloop_records (run_id, seq, kind, step, payload) VALUES (NEW.run_id, NEW.seq, NEW.kind, NEW.step, NEW.payload);
  UPDATE polyloop_runs SET
    next_seq = NEW.seq + 1,
    steps = steps + NEW.steps,
    effective_steps = effective_steps + NEW.effective_steps,
    tokens = tokens + NEW.tokens,
    input_tokens = input_tokens + NEW.input_tokens,
    elapsed = elapsed + NEW.elapsed,
    status = CASE WHEN NEW.kind = 'RunFinished' THEN 'Finished' ELSE status END,
    stop_reason = CASE WHEN NEW.kind = 'RunFinished' THEN NEW.stop_reason ELSE stop_reason END,
    finished_at = CASE WHEN NEW.kind = 'RunFinished' THEN NEW.finished_at ELSE finished_at END,
    ${assignments(onFinished, (e, column) => `CASE WHEN NEW.kind = 'RunFinished' THEN ${e} ELSE ${column} END`)}
  WHERE run_id = NEW.run_id;
END`)
})

/**
 * A migration whose failing statement may have ended the migrations' transaction: on a full disk
 * SQLite rolls the whole transaction back itself for some statements (`CREATE TRIGGER`), and the
 * `Migrator`'s own `ROLLBACK` then fails ("no transaction is active"), hiding the full disk. After
 * a failure, `BEGIN` opens a transaction again when there is none (it fails, and is ignored, when
 * there is one), so the rollback that follows succeeds and the statement's own error is the one
 * reported. Nothing of the migration stays in either case.
 */
const reportingItsOwnFailure = <A>(migration: Effect.Effect<A, SqlError, SqlClient.SqlClient>) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) => Effect.tapError(migration, () => Effect.ignore(sql.unsafe("BEGIN"))))

/** The SQLite migrations, keyed `<id>_<name>`. */
export const migrations: Record<string, Effect.Effect<void, SqlError, SqlClient.SqlClient>> = {
  "1_create_records": createRecords,
  "2_run_summaries": runSummaries,
  "3_append_view": appendView,
  "4_blobs": blobs,
  "5_summary_details": reportingItsOwnFailure(summaryDetails)
}
