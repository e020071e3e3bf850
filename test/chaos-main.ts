/**
 * `npm run chaos`: the full enumerated crash suite (`support/chaos.ts`). Every crash point of the
 * scripted run, `CHAOS_ROUNDS` rounds with different seeds (default enough for 10,000
 * scenarios), two scenarios at a time; prints each failure and the totals, and writes them to
 * `chaos-summary.json` (or `CHAOS_SUMMARY`). Exits 1 when any invariant failed.
 *
 *   npm run chaos                       # the full suite
 *   CHAOS_ID=s13-p17-r4 npm run chaos   # replay one scenario by its id
 *   CHAOS_ROUNDS=2 npm run chaos        # fewer rounds
 */
import * as Fs from "node:fs"
import * as Chaos from "./support/chaos.js"

const steps = Number(process.env["CHAOS_STEPS"] ?? 13)
const seed = Number(process.env["CHAOS_SEED"] ?? 1)
const concurrency = Number(process.env["CHAOS_CONCURRENCY"] ?? 2)
const summaryFile = process.env["CHAOS_SUMMARY"] ?? "chaos-summary.json"
const replay = process.env["CHAOS_ID"]

const main = async () => {
  if (replay !== undefined) {
    const { point, seed, steps } = Chaos.parseId(replay)
    const script = await Chaos.childScript()
    const ref = await Chaos.reference(script, steps)
    const outcome = await Chaos.runScenario(script, ref, point, seed)
    console.log(JSON.stringify(outcome, null, 2))
    if (outcome.failures.length > 0) process.exitCode = 1
    return
  }
  const target = Number(process.env["CHAOS_SCENARIOS"] ?? 10_000)
  // One round is every crash point once; the rounds needed for the target follow from the count.
  const probe = await Chaos.reference(await Chaos.childScript(), steps)
  const rounds = Number(process.env["CHAOS_ROUNDS"] ?? Math.ceil(target / probe.points.length))
  console.log(`${probe.points.length} crash points in a run of ${steps} steps; ${rounds} rounds (seeds ${seed}..${seed + rounds - 1}), ${concurrency} at a time`)
  let done = 0
  const summary = await Chaos.runAll({
    steps,
    seed,
    rounds,
    concurrency,
    onOutcome: (outcome) => {
      done++
      for (const failure of outcome.failures) console.log(`FAIL ${failure}`)
      if (done % 100 === 0) console.log(`${done} scenarios`)
    }
  })
  const { reference: _reference, ...totals } = summary
  const written = { steps, seed, rounds, crashPoints: probe.points.length, ...totals }
  Fs.writeFileSync(summaryFile, JSON.stringify(written, null, 2) + "\n")
  console.log(
    `${totals.scenarios} scenarios, ${totals.processDeaths} process deaths, ${totals.invariantsChecked} invariants checked, ${totals.failures.length} failures in ${totals.seconds.toFixed(0)} s (${summaryFile})`
  )
  if (totals.failures.length > 0) process.exitCode = 1
}

main().catch((error: unknown) => {
  console.error(error)
  process.exitCode = 1
})
