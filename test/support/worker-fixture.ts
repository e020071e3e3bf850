/**
 * What the multi-worker test and its worker processes share: timings (short leases, so a dead
 * worker's runs move on quickly), the payload schema and the table of tool executions.
 */
import * as Duration from "effect/Duration"
import * as Schema from "effect/Schema"

/** Timings of the workers. */
export const timings = {
  leaseDuration: Duration.millis(1000),
  leaseHeartbeat: Duration.millis(250),
  queueHeartbeat: Duration.millis(250),
  staleAfter: Duration.millis(1500),
  pollInterval: Duration.millis(50),
  retryDelay: Duration.millis(250),
  concurrency: 4
} as const

/** The payload each queued run carries. */
export const Payload = Schema.Struct({ n: Schema.Int })

/** The table where `charge` records each execution (created by the parent). */
export const createExecutionsTable = `CREATE TABLE IF NOT EXISTS tool_executions (
  id bigserial PRIMARY KEY,
  run_id text NOT NULL,
  step integer NOT NULL,
  call_id text NOT NULL,
  worker text NOT NULL
)`

