/**
 * The SQLite schema history, for `Migrator.fromRecord`. Keys are `<id>_<name>`; ids only grow.
 * A released migration is never edited: a change is a new migration.
 *
 * - 1: the append-only record table (one row per record, primary key `(run_id, seq)` so a
 *   duplicate sequence number is rejected by the database) and the claim leases;
 * - 2: one summary row per run, kept up to date in the same transaction as each append, so
 *   `listRuns` is one query; existing runs are backfilled from their records.
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

/** The SQLite migrations, keyed `<id>_<name>`. */
export const migrations: Record<string, Effect.Effect<void, SqlError, SqlClient.SqlClient>> = {
  "1_create_records": createRecords,
  "2_run_summaries": runSummaries
}
