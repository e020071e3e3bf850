/**
 * The PostgreSQL schema history, for `Migrator.fromRecord`: the same versions as the SQLite
 * history (`sqlite.ts`), so one version number means one schema in every dialect. Keys are
 * `<id>_<name>`; ids only grow. A released migration is never edited: a change is a new migration.
 *
 * - 1: the append-only record table (primary key `(run_id, seq)`: the database rejects a
 *   duplicate sequence number) and the claim leases;
 * - 2: one summary row per run, kept up to date in the same transaction as each append, so
 *   `listRuns` is one query; existing runs are backfilled from their records;
 * - 3: nothing on PostgreSQL. SQLite's version 3 adds an append view whose trigger makes an append
 *   one statement; PostgreSQL does the same without a schema change, with data-modifying `WITH`
 *   clauses (`SqlRunLogStore`). The version is recorded so that one number means one store
 *   version in both dialects.
 * - 4: `polyloop_blobs` (content-addressed blobs) and `polyloop_refs` (per-run names of blobs), design 0330.
 * - 5: the summary row carries what the viewer's statistics, forks and prices read (design 0343):
 *   the snapshot's hash and model, the fork's parent, the replies' input tokens and the
 *   `RunFinished` counters; existing runs are backfilled from their records. The append
 *   statements write them (`pg.ts`).
 *
 * Records are stored as `text` (the exact JSON the record Schemas encode), not `jsonb`, so a log
 * reads back byte for byte. Epoch milliseconds are `bigint` (claims) or `double precision`
 * (timestamps that come from records, which are JSON numbers).
 *
 * @internal
 */
import * as SqlClient from "@effect/sql/SqlClient"
import type { SqlError } from "@effect/sql/SqlError"
import * as Effect from "effect/Effect"

const createRecords = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`CREATE TABLE polyloop_records (
  run_id text NOT NULL,
  seq integer NOT NULL,
  kind text NOT NULL,
  step integer,
  payload text NOT NULL,
  PRIMARY KEY (run_id, seq)
)`
  yield* sql`CREATE TABLE polyloop_claims (
  run_id text PRIMARY KEY,
  owner text NOT NULL,
  expires_at bigint NOT NULL
)`
})

const runSummaries = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`CREATE TABLE polyloop_runs (
  run_id text PRIMARY KEY,
  agent text NOT NULL,
  status text NOT NULL,
  stop_reason text,
  steps integer NOT NULL,
  effective_steps integer NOT NULL,
  tokens bigint NOT NULL,
  started_at double precision NOT NULL,
  finished_at double precision,
  elapsed double precision NOT NULL,
  next_seq integer NOT NULL
)`
  yield* sql`CREATE INDEX polyloop_runs_started_at ON polyloop_runs (started_at)`
  // Backfill the runs written under schema 1 from their records (the encoded JSON of
  // `@polyloop/core/RunLog`), with the same rules as `RunLogStore.summarize`.
  yield* sql`INSERT INTO polyloop_runs
  (run_id, agent, status, stop_reason, steps, effective_steps, tokens, started_at, finished_at, elapsed, next_seq)
SELECT
  s.run_id,
  CASE WHEN jsonb_typeof(s.payload::jsonb #> '{snapshot,agent,name}') = 'string'
    THEN s.payload::jsonb #>> '{snapshot,agent,name}' ELSE '?' END,
  CASE WHEN f.payload IS NULL THEN 'Unfinished' ELSE 'Finished' END,
  (f.payload::jsonb -> 'stopReason')::text,
  (SELECT count(*) FROM polyloop_records r WHERE r.run_id = s.run_id AND r.kind = 'StepCompleted'),
  (SELECT count(*) FROM polyloop_records r WHERE r.run_id = s.run_id AND r.kind = 'ActionResulted'
    AND r.payload::jsonb #>> '{outcome,status}' = 'Executed'),
  (SELECT coalesce(sum((r.payload::jsonb #>> '{reply,usage,inputTokens}')::bigint
      + (r.payload::jsonb #>> '{reply,usage,outputTokens}')::bigint), 0)
    FROM polyloop_records r WHERE r.run_id = s.run_id AND r.kind = 'ModelReplied'),
  (s.payload::jsonb ->> 'startedAt')::double precision,
  (f.payload::jsonb ->> 'finishedAt')::double precision,
  (SELECT coalesce(sum((r.payload::jsonb ->> 'elapsed')::double precision), 0)
    FROM polyloop_records r WHERE r.run_id = s.run_id AND r.kind = 'StepCompleted'),
  (SELECT count(*) FROM polyloop_records r WHERE r.run_id = s.run_id)
FROM polyloop_records s
LEFT JOIN polyloop_records f ON f.run_id = s.run_id AND f.kind = 'RunFinished'
WHERE s.kind = 'RunStarted'`
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
  data BYTEA NOT NULL
)`
  yield* sql`CREATE TABLE polyloop_refs (
  run_id TEXT NOT NULL,
  name TEXT NOT NULL,
  hash TEXT NOT NULL,
  PRIMARY KEY (run_id, name)
)`
})

/**
 * Version 5 (design 0343): the summary's details, backfilled with the same rules as
 * `RunLogStore.summarize` (and SQLite's version 5).
 */
const summaryDetails = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`ALTER TABLE polyloop_runs
  ADD COLUMN snapshot_hash text,
  ADD COLUMN model text,
  ADD COLUMN forked_from text,
  ADD COLUMN fork_step integer,
  ADD COLUMN fork_differences integer,
  ADD COLUMN input_tokens bigint NOT NULL DEFAULT 0,
  ADD COLUMN fin_steps integer,
  ADD COLUMN fin_effective_steps integer,
  ADD COLUMN fin_input_tokens bigint,
  ADD COLUMN fin_output_tokens bigint,
  ADD COLUMN fin_resumed integer`
  yield* sql`UPDATE polyloop_runs u SET
  snapshot_hash = s.p ->> 'snapshotHash',
  model = CASE WHEN jsonb_typeof(s.p #> '{snapshot,agent,modelSettings,model}') = 'string'
    THEN s.p #>> '{snapshot,agent,modelSettings,model}' END,
  forked_from = s.p #>> '{forkedFrom,runId}',
  fork_step = (s.p #>> '{forkedFrom,step}')::integer,
  fork_differences = CASE WHEN jsonb_typeof(s.p -> 'forkedFrom') = 'object'
    THEN coalesce(jsonb_array_length(s.p #> '{forkedFrom,differences}'), 0) END,
  fin_steps = (f.p #>> '{counters,steps}')::integer,
  fin_effective_steps = (f.p #>> '{counters,effectiveSteps}')::integer,
  fin_input_tokens = (f.p #>> '{counters,usage,inputTokens}')::bigint,
  fin_output_tokens = (f.p #>> '{counters,usage,outputTokens}')::bigint,
  fin_resumed = (f.p #>> '{counters,resumedCount}')::integer,
  input_tokens = (SELECT coalesce(sum((r.payload::jsonb #>> '{reply,usage,inputTokens}')::bigint), 0)
    FROM polyloop_records r WHERE r.run_id = u.run_id AND r.kind = 'ModelReplied')
FROM (SELECT run_id, payload::jsonb AS p FROM polyloop_records WHERE seq = 0 AND kind = 'RunStarted') s
LEFT JOIN (SELECT run_id, payload::jsonb AS p FROM polyloop_records WHERE kind = 'RunFinished') f ON f.run_id = s.run_id
WHERE s.run_id = u.run_id`
})

/** The PostgreSQL migrations, keyed `<id>_<name>` (the same versions as SQLite's). */
export const migrations: Record<string, Effect.Effect<void, SqlError, SqlClient.SqlClient>> = {
  "1_create_records": createRecords,
  "2_run_summaries": runSummaries,
  "3_append_view": Effect.void,
  "4_blobs": blobs,
  "5_summary_details": summaryDetails
}
