/**
 * `runs` concurrent runs of `steps` steps on one SQLite file (synchronous=FULL), three times:
 * steps per second and the process's user and system CPU per step (issue 35, design 0350). With
 * 1 and 9 steps a run, the difference separates what a run costs from what a step costs.
 * `MEMORY=1`: the same on the in-memory store (the many-runs section's other line); `REPS=n`: n
 * repetitions in one process.
 *   tsx --conditions=@polyloop/source bench/profile/many-sqlite.ts [runs=1000] [steps=4]
 */
import * as RunLogStore from "@polyloop/core/RunLogStore"
import * as Effect from "effect/Effect"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import * as F from "../lib/fixtures.js"
import { withSqlite } from "../lib/store.js"

const RUNS = Number(process.argv[2] ?? 1000)
const STEPS = Number(process.argv[3] ?? 4)
const dir = fs.mkdtempSync(path.join(os.tmpdir(), "polyloop-many-sqlite-"))
for (let rep = 0; rep < Number(process.env["REPS"] ?? 3); rep++) {
  const t0 = performance.now()
  const c0 = process.cpuUsage()
  const all = (store: RunLogStore.RunLogStore.Service) =>
    F.runAllOn(store, F.model(F.replies(STEPS)), Array.from({ length: RUNS }, (_, i) => F.request(`m-${rep}-${i}`, STEPS)))
  if (process.env["MEMORY"] === "1") await Effect.runPromise(Effect.flatMap(RunLogStore.makeMemory, all))
  else await withSqlite(path.join(dir, `r${rep}.db`), all)
  const seconds = (performance.now() - t0) / 1000
  const cpu = process.cpuUsage(c0)
  const steps = RUNS * STEPS
  process.stdout.write(`steps/s ${(steps / seconds).toFixed(0)}  user µs/step ${(cpu.user / steps).toFixed(0)}  system µs/step ${(cpu.system / steps).toFixed(0)}\n`)
}
fs.rmSync(dir, { recursive: true, force: true })
