/** What `bench/cluster.ts` and its runner processes share. */
import * as Duration from "effect/Duration"

/** Runs at once per runner (and the SQLite figure's concurrency per runner it stands for). */
export const maxConcurrentRuns = 16
/** Shards per group, the same on every runner and the client. */
export const shardsPerGroup = 60
/** The cluster's timings (short: runners join quickly). */
export const clusterTimings = {
  shardLockRefreshInterval: Duration.seconds(1),
  refreshAssignmentsInterval: Duration.seconds(1),
  entityMessagePollInterval: Duration.seconds(1)
}
