/**
 * The slice of the enumerated crash suite (`support/chaos.ts`, design 0220) that runs in
 * `npm test`: every variant (tool calls, several calls per reply, code actions, approvals; on
 * SQLite and on the test run's PostgreSQL server; appends through the fault hook and without
 * it; three runs at once whose appends are grouped; the migration of a fresh PostgreSQL
 * database; a planner with two sub-agent children) is enumerated, and an evenly spaced sample of
 * more than 500 of its crash points, with every point of a grouped append and every point around a
 * sub-agent child's start and result (on both stores), is run — each a pooled child killed exactly there, resumed
 * (sometimes killed again) until the run finishes, every invariant checked. `npm run chaos` runs
 * every point, over several seeds, for 10,000 scenarios and more.
 */
import { assert, describe, it } from "@effect/vitest"
import * as Chaos from "./support/chaos.js"
import { testPgUrl } from "./support/pg-url.js"

/**
 * The crash points around a sub-agent child (`subagents` script, design 0405): the child's start
 * and finish (its writes carry its call id), its "Never" write's effect, and the parent's writes
 * of step 0, which record the children's results.
 */
const childPoint = /^(before|after) ((start|finish) \[call_s0_\d\]|write effect|(results|completion) 0)$/

/** Evenly spaced items of `items`, `count` of them (all when there are fewer). */
const sample = <A>(items: ReadonlyArray<A>, count: number): ReadonlyArray<A> => {
  if (items.length <= count) return items
  const stride = items.length / count
  return Array.from({ length: count }, (_, i) => items[Math.floor(i * stride)]!)
}

describe.sequential("enumerated crash suite (slice)", () => {
  it("SQLite and PostgreSQL, every script: the log verifies, nothing acknowledged is lost, no \"Never\" call twice, the history is the uncrashed run's", async () => {
    const env = await Chaos.makeEnv({ poolSize: 4, pgUrl: testPgUrl() })
    try {
      const refs = await Chaos.references(env, Chaos.suiteVariants({ pg: true }))
      const all = Chaos.enumerate(refs, 1, 1)
      // Every point of a grouped append (several runs' appends in one statement, design 0350)
      // too, whether the even sample has it or not: there are few, and they are the group's.
      const sampled = sample(all, 520)
      const grouped = all.filter((w) => w.ref.keys[w.point - 1]!.name.includes("grouped append") && !sampled.includes(w))
      // And the points around a sub-agent child's start and result (design 0405): its start and
      // finish, its "Never" write, and its parent's writes of step 0 that record it.
      const aroundChildren = all.filter((w) => w.ref.variant.script === "subagents" && childPoint.test(w.ref.keys[w.point - 1]!.name) && !sampled.includes(w))
      const work = [...sampled, ...grouped, ...aroundChildren]
      const failures: Array<string> = []
      const summary = await Chaos.runWork(env, work, { concurrency: 2, onOutcome: (outcome) => failures.push(...outcome.failures) })
      console.log(
        `crash suite slice: ${summary.scenarios} of ${all.length} crash points over ${refs.length} variants (${aroundChildren.length} around sub-agent children added to the sample), ${summary.processDeaths} process deaths, ${summary.invariantsChecked} invariants checked, ${summary.failures.length} failures, ${summary.unreached} timed points unreached, ${summary.seconds.toFixed(0)} s (${summary.scenariosPerSecond.toFixed(2)} scenarios/s, children from ${env.pool.start.snapshot ? "a start-up snapshot" : "their bundle"})`
      )
      assert.deepStrictEqual(failures, [])
      assert.isAtLeast(summary.scenarios, 500)
      // A life whose crash point is a renewal holds its claim until the renewal came: every
      // point is reached, however loaded the machine (no count of what a timer managed).
      assert.strictEqual(summary.unreached, 0, "every timed point is reached")
      assert.isAtLeast(summary.processDeaths, summary.scenarios, "every scenario killed its first child")
      // Every variant is in the sample, on both stores.
      const variants = new Set(work.map((w) => Chaos.variantId(w.ref.variant)))
      assert.strictEqual(variants.size, refs.length)
      // The runs pass every kind of crash point the suite promises.
      const names = refs.flatMap((ref) => ref.keys.map((k) => k.name))
      for (
        const kind of [
          "before claim", "after claim", "before claim upsert", "after claim read", "before renew", "after renew",
          "before open: ", "before start", "after start", "before reply", "after completion", "before results", "before approvals",
          "in transaction BeforeRecord", "in transaction BeforeCommit", "before begin", "after commit", "before append statement",
          "before write effect", "after write effect", "before echo effect", "before code effect", "after refund effect",
          "before submit effect", "before resume", "before finish", "after release", "before grouped append", "after grouped append"
        ]
      ) {
        assert.isTrue(names.some((name) => name.startsWith(kind)), `the runs pass a crash point "${kind}"`)
      }
      // A child's start and finish, and its parent recording it, are each a scenario, on both stores.
      for (const store of ["sqlite", "pg"]) {
        const names = work.filter((w) => w.ref.variant.script === "subagents" && w.ref.variant.store === store).map((w) => w.ref.keys[w.point - 1]!.name)
        for (const name of ["before start [call_s0_0]", "after start [call_s0_1]", "before finish [call_s0_0]", "after finish [call_s0_1]", "before write effect", "after write effect"]) {
          assert.include(names, name, `a sub-agent scenario on ${store} at "${name}"`)
        }
        assert.isTrue(names.some((name) => /^(before|after) (results|completion) 0$/.test(name)), `the parent's record of its children, on ${store}`)
      }
      assert.isAtLeast(grouped.length + sampled.filter((w) => w.ref.keys[w.point - 1]!.name.includes("grouped append")).length, 8, "a grouped append's points")
      assert.isTrue(work.some((w) => w.ref.variant.runs > 1 && w.ref.variant.store === "sqlite"), "several runs at once on SQLite")
      for (const store of ["sqlite", "pg", "pgfresh"]) {
        assert.isTrue(work.some((w) => w.ref.variant.store === store), `scenarios on ${store}`)
      }
      assert.isTrue(
        refs.some((ref) => ref.variant.store === "pgfresh" && ref.keys.some((k) => /CREATE TABLE/i.test(k.name))),
        "a fresh PostgreSQL database's migration has crash points"
      )
      assert.isTrue(
        refs.some((ref) => ref.variant.store === "sqlite" && ref.keys.some((k) => /open: CREATE TABLE/i.test(k.name))),
        "a fresh SQLite file's migration has crash points"
      )
    } finally {
      await Chaos.closeEnv(env)
    }
  }, 1_800_000)
})
