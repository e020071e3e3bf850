/**
 * What a run costs besides its steps (issue 35): the many-runs section's runs have 20 steps, so
 * a run's fixed cost (claim, snapshot, `RunStarted`, the finish) is a large share of its steps'
 * figure there. `--runs` runs of `--steps` steps, one after another, on one memory store, the
 * runs' services provided once (`runAllOn` with concurrency 1 would be the same); prints CPU µs per
 * run. Profile it with `node --cpu-prof` (after `tsc -b`, without `--conditions=@polyloop/source`).
 *   tsx bench/profile/run-fixed.ts [--runs 3000] [--steps 1]
 */
import * as Agent from "@polyloop/core/Agent"
import * as RunLogStore from "@polyloop/core/RunLogStore"
import * as Effect from "effect/Effect"
import * as F from "../lib/fixtures.js"
import { cpuMicros, option } from "../lib/measure.js"

const RUNS = Number(option("--runs") ?? 3000)
const STEPS = Number(option("--steps") ?? 1)

const store = Effect.runSync(RunLogStore.makeMemory)
const context = F.contextOf(store, F.model(F.replies(STEPS)))
const batch = (label: string, n: number) =>
  Effect.runPromise(
    Effect.forEach(Array.from({ length: n }, (_, i) => F.request(`${label}-${i}`, STEPS)), Agent.run, { discard: true }).pipe(Effect.provide(context))
  )
await batch("warm", 500)
const c0 = cpuMicros()
await batch("measured", RUNS)
process.stdout.write(`${STEPS}-step runs: ${((cpuMicros() - c0) / RUNS).toFixed(1)} CPU µs per run\n`)
