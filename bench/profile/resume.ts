/**
 * Profiles the resume of a long run (issue 35): writes one unfinished run of `--steps` steps to
 * a SQLite file once, then resumes copies of it `--runs` times (each resume takes one more step).
 * With `--profile <file>`, V8's profiler (through `node:inspector`) records the resumes only, not
 * the writing, into `<file>` (a `.cpuprofile` for `summarise.mjs` / `inclusive.mjs`).
 *
 *   tsx --conditions=@polyloop/source bench/profile/resume.ts [--runs 20] [--steps 10000] [--profile f]
 */
import * as Effect from "effect/Effect"
import * as fs from "node:fs"
import * as inspector from "node:inspector/promises"
import * as os from "node:os"
import * as path from "node:path"
import * as F from "../lib/fixtures.js"
import { cpuMicros, option } from "../lib/measure.js"
import * as Raw from "../lib/sqlite.js"
import { withSqlite } from "../lib/store.js"

const RUNS = Number(option("--runs") ?? 20)
const STEPS = Number(option("--steps") ?? 10000)

const main = async (): Promise<void> => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "polyloop-resume-prof-"))
  const source = path.join(dir, "source.db")
  const runId = "resume-prof"
  await withSqlite(source, (store) =>
    Effect.gen(function*() {
      const outcome = yield* Effect.either(F.runOn(store, F.model(F.replies(STEPS + 1), { failAt: STEPS }), F.request(runId, STEPS + 1)))
      if (outcome._tag === "Right") throw new Error("profile: the run did not stop")
    }), "NORMAL")
  Raw.checkpoint(source)
  const script = F.replies(STEPS + 1)
  const profileFile = option("--profile")
  const session = new inspector.Session()
  if (profileFile !== undefined) {
    session.connect()
    await session.post("Profiler.enable")
    await session.post("Profiler.start")
  }
  const figures: Array<number> = []
  for (let i = 0; i < RUNS; i++) {
    const file = path.join(dir, `copy-${i}.db`)
    fs.copyFileSync(source, file)
    const millis = await withSqlite(file, (store) =>
      Effect.gen(function*() {
        const c0 = cpuMicros()
        const result = yield* F.runOn(store, F.model(script), F.request(runId, STEPS + 1))
        if (result.steps !== STEPS + 1) throw new Error("profile: wrong step count")
        return (cpuMicros() - c0) / 1000
      }))
    figures.push(millis)
    Raw.remove(file)
  }
  if (profileFile !== undefined) {
    const { profile } = await session.post("Profiler.stop")
    fs.writeFileSync(profileFile, JSON.stringify(profile))
    session.disconnect()
  }
  fs.rmSync(dir, { recursive: true, force: true })
  figures.sort((a, b) => a - b)
  process.stdout.write(`resume CPU ms: median ${figures[Math.floor(figures.length / 2)]!.toFixed(1)} min ${figures[0]!.toFixed(1)}\n`)
}

main().catch((e) => {
  process.stderr.write(`${String(e)}\n`)
  process.exit(1)
})
