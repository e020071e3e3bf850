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

/** The SQLite migrations, keyed `<id>_<name>`. */
export const migrations: Record<string, Effect.Effect<void, SqlError, SqlClient.SqlClient>> = {
  "1_create_records": createRecords,
  "2_run_summaries": runSummaries,
  "3_append_view": appendView,
  "4_blobs": blobs
}
