/**
 * The slice of the enumerated crash suite (`support/chaos.ts`) that runs in `npm test`: every
 * crash point of a short scripted run (a "Never" write, an "Always" echo, the completing submit)
 * on SQLite, each one a child killed exactly there and resumed (sometimes killed again) until
 * the run finishes, every invariant checked. `npm run chaos` runs the full suite.
 */
import { assert, describe, it } from "@effect/vitest"
import * as Chaos from "./support/chaos.js"

describe.sequential("enumerated crash suite (slice)", () => {
  it("every crash point of a three-step run: the log verifies, nothing acknowledged is lost, no \"Never\" call twice, the history is the uncrashed run's", async () => {
    const failures: Array<string> = []
    const summary = await Chaos.runAll({
      steps: 3,
      seed: 1,
      rounds: 1,
      concurrency: 2,
      onOutcome: (outcome) => failures.push(...outcome.failures)
    })
    console.log(
      `crash suite slice: ${summary.scenarios} scenarios over ${summary.reference.points.length} crash points, ${summary.processDeaths} process deaths, ${summary.invariantsChecked} invariants checked, ${summary.failures.length} failures, ${summary.seconds.toFixed(0)} s`
    )
    assert.deepStrictEqual(failures, [])
    assert.strictEqual(summary.scenarios, summary.reference.points.length, "one scenario per crash point")
    assert.isAtLeast(summary.processDeaths, summary.scenarios, "every scenario killed its first child")
    for (const kind of ["before claim", "after claim", "before start", "after start", "in transaction BeforeCommit", "before write effect", "after write effect", "before finish"]) {
      assert.isTrue(summary.reference.points.some((p) => p.startsWith(kind)), `the run passes a crash point "${kind}"`)
    }
  }, 900_000)
})
