/**
 * What the cluster failover tests and their runner processes (`cluster-runner.ts`) share:
 * timings (short, so a dead runner's runs move on quickly), the payload schema and the table of
 * tool executions.
 */
import * as Duration from "effect/Duration"
import * as Schema from "effect/Schema"
import * as Os from "node:os"
import * as Path from "node:path"

/** Timings of the runners and the client; the same on every process. */
export const timings = {
  cluster: {
    shardLockExpiration: Duration.seconds(6),
    shardLockRefreshInterval: Duration.seconds(1),
    refreshAssignmentsInterval: Duration.seconds(1),
    runnerHealthCheckInterval: Duration.seconds(2),
    entityMessagePollInterval: Duration.seconds(1),
    entityTerminationTimeout: Duration.seconds(5)
  },
  leaseDuration: Duration.seconds(3),
  leaseHeartbeat: Duration.millis(500),
  busyRetryInterval: Duration.millis(250),
  maxConcurrentRuns: 16,
  shardsPerGroup: 60
} as const

/** The payload each submitted run carries. */
export const Payload = Schema.Struct({ n: Schema.Int })

/**
 * The table where `charge` records each execution (created by the parent). `token` is drawn once
 * per execution: the insert is retried across a database restart without ever counting one
 * execution twice or two executions once.
 */
/**
 * While this file exists, the runner of process `pid` stops for good in the `charge` tool right
 * after its side effect (`cluster-runner.ts`): a kill made then lands between a side effect and
 * its step's completion, an event, not a race with the tool's 40 ms.
 */
export const holdFileOf = (pid: number): string => Path.join(Os.tmpdir(), `polyloop-cluster-hold-${pid}`)

export const createExecutionsTable = `CREATE TABLE IF NOT EXISTS tool_executions (
  id bigserial PRIMARY KEY,
  run_id text NOT NULL,
  step integer NOT NULL,
  call_id text NOT NULL,
  worker text NOT NULL,
  token text NOT NULL UNIQUE
)`
