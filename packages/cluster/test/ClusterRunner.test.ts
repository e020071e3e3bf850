/**
 * `ClusterRunner.failoverBound` (design 0200, decision 5): detection is the sooner of the lock
 * expiration and a failed health check; then an assignment refresh, a lock refresh, the store's
 * lease and one busy retry. And the sharding configuration a runner and a client get.
 */
import { assert, describe, it } from "@effect/vitest"
import * as RunnerAddress from "@effect/cluster/RunnerAddress"
import * as ClusterRunner from "@polyloop/cluster/ClusterRunner"
import * as Duration from "effect/Duration"
import * as Option from "effect/Option"

const seconds = Duration.seconds

describe("ClusterRunner", () => {
  it("failoverBound: the lock expiration detects when it is sooner than a health check", () => {
    const bound = ClusterRunner.failoverBound(
      { shardLockExpiration: seconds(6), runnerHealthCheckInterval: seconds(30), refreshAssignmentsInterval: seconds(1), shardLockRefreshInterval: seconds(1) },
      { leaseDuration: seconds(3), busyRetryInterval: Duration.millis(250) }
    )
    assert.strictEqual(Duration.toMillis(bound), 6000 + 1000 + 1000 + 3000 + 250)
  })

  it("failoverBound: a health check (interval + ping timeout) detects when it is sooner", () => {
    const bound = ClusterRunner.failoverBound(
      { shardLockExpiration: seconds(60), runnerHealthCheckInterval: seconds(2), refreshAssignmentsInterval: seconds(1), shardLockRefreshInterval: seconds(1) },
      { leaseDuration: seconds(3) }
    )
    assert.strictEqual(Duration.toMillis(bound), 2000 + 6500 + 1000 + 1000 + 3000 + 500)
  })

  it("failoverBound: the defaults", () => {
    const bound = ClusterRunner.failoverBound({}, { leaseDuration: seconds(30) })
    // 10 s expiration (sooner than 5 s + 6.5 s), 2 s refresh, 2 s lock refresh, 30 s lease, 0.5 s retry.
    assert.strictEqual(Duration.toMillis(bound), 10_000 + 2000 + 2000 + 30_000 + 500)
  })

  it("shardingConfig: a runner has its address, a client none; the timings and shards per group are passed on", () => {
    const runner = ClusterRunner.shardingConfig(
      { shardsPerGroup: 60, timings: { shardLockExpiration: seconds(7) } },
      Option.some(RunnerAddress.make("127.0.0.1", 4000))
    )
    assert.deepStrictEqual(Option.map(runner.runnerAddress, (a) => `${a.host}:${a.port}`), Option.some("127.0.0.1:4000"))
    assert.strictEqual(runner.shardsPerGroup, 60)
    assert.deepStrictEqual(runner.shardLockExpiration, seconds(7))
    assert.deepStrictEqual(runner.refreshAssignmentsInterval, ClusterRunner.defaultTimings.refreshAssignmentsInterval)
    const client = ClusterRunner.shardingConfig({}, Option.none())
    assert.isTrue(Option.isNone(client.runnerAddress))
    assert.isFalse("shardsPerGroup" in client)
  })
})
