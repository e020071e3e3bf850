/**
 * The parts of a resume of a long run (issue 35), CPU ms each, medians of `--runs`, in one
 * process on one file: the raw read (select + `JSON.parse`), the store's `readLog`, and the whole
 * resume (`Agent.run` of the unfinished run: read, fold, fingerprint, one step, finish).
 *
 *   tsx --conditions=@polyloop/source bench/profile/resume-parts.ts [--runs 15] [--steps 10000]
 */
import { runId as makeRunId } from "@polyloop/core/Ids"
import * as RunLog from "@polyloop/core/RunLog"
import * as RunLogStore from "@polyloop/core/RunLogStore"
import * as Effect from "effect/Effect"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import * as F from "../lib/fixtures.js"
import { cpuMicros, median, option } from "../lib/measure.js"
import * as Raw from "../lib/sqlite.js"
import { withSqlite } from "../lib/store.js"

const RUNS = Number(option("--runs") ?? 15)
const STEPS = Number(option("--steps") ?? 10000)

const main = async (): Promise<void> => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "polyloop-resume-parts-"))
  const source = path.join(dir, "source.db")
  const runId = "resume-parts"
  await withSqlite(source, (store) =>
    Effect.gen(function*() {
      const outcome = yield* Effect.either(F.runOn(store, F.model(F.replies(STEPS + 1), { failAt: STEPS }), F.request(runId, STEPS + 1)))
      if (outcome._tag === "Right") throw new Error("profile: the run did not stop")
    }), "NORMAL")
  Raw.checkpoint(source)
  const script = F.replies(STEPS + 1)
  const parts: Record<string, Array<number>> = { raw: [], select: [], decodeLog: [], readLog: [], resume: [] }
  for (let i = 0; i < RUNS; i++) {
    const db = Raw.open(source)
    const select = db.prepare("SELECT payload FROM polyloop_records WHERE run_id = ? ORDER BY seq").pluck(true)
    let c0 = cpuMicros()
    const values: Array<unknown> = []
    for (const text of select.all(runId) as Array<string>) values.push(JSON.parse(text))
    parts.raw!.push((cpuMicros() - c0) / 1000)
    c0 = cpuMicros()
    const texts = select.all(runId) as Array<string>
    parts.select!.push((cpuMicros() - c0) / 1000)
    c0 = cpuMicros()
    Effect.runSync(RunLogStore.decodeLog(makeRunId(runId), texts))
    parts.decodeLog!.push((cpuMicros() - c0) / 1000)
    db.close()
    await withSqlite(source, (store) =>
      Effect.gen(function*() {
        const c1 = cpuMicros()
        const log = yield* store.readLog(makeRunId(runId))
        parts.readLog!.push((cpuMicros() - c1) / 1000)
        if (RunLog.size(log) === 0) throw new Error("profile: empty log")
      }))
    const file = path.join(dir, `copy-${i}.db`)
    fs.copyFileSync(source, file)
    await withSqlite(file, (store) =>
      Effect.gen(function*() {
        c0 = cpuMicros()
        const result = yield* F.runOn(store, F.model(script), F.request(runId, STEPS + 1))
        parts.resume!.push((cpuMicros() - c0) / 1000)
        if (result.steps !== STEPS + 1) throw new Error("profile: wrong step count")
      }))
    Raw.remove(file)
  }
  fs.rmSync(dir, { recursive: true, force: true })
  for (const [name, values] of Object.entries(parts)) process.stdout.write(`${name.padEnd(8)} CPU ms median ${median(values).toFixed(1)}\n`)
}

main().catch((e) => {
  process.stderr.write(`${String(e)}\n`)
  process.exit(1)
})
