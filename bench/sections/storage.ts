/**
 * 3. Storage growth: database bytes per step after runs of 100, 1,000 and 10,000 steps.
 * 4. Resume cost: resuming the largest of those runs (read the log, rebuild history and
 *    counters, take the next step) against reading the same rows raw (better-sqlite3 select +
 *    `JSON.parse`).
 *
 * Each run is left unfinished the way a crash leaves it: its budget allows one more step, and
 * the model call of that step fails, so the log ends with a completed step.
 */
import * as Effect from "effect/Effect"
import * as fs from "node:fs"
import * as path from "node:path"
import * as F from "../lib/fixtures.js"
import { interleave, now, type Reps, stat, type Stat } from "../lib/measure.js"
import * as Raw from "../lib/sqlite.js"
import { withSqlite } from "../lib/store.js"

/** One line of the growth table. */
export interface GrowthRow {
  readonly steps: number
  readonly bytes: number
  /** (bytes − bytes of the empty store) / steps. */
  readonly bytesPerStep: number
  /** Bytes per step added since the previous, smaller run (null for the first). */
  readonly marginalBytesPerStep: number | null
  /** Seconds it took to write the run (FULL sync), for information. */
  readonly writeSeconds: number
}

/** The resume figures. */
export interface ResumeResult {
  readonly steps: number
  readonly records: number
  /** ms to resume and take the next step. */
  readonly polyloop: Stat
  /** ms to select the rows and `JSON.parse` them. */
  readonly raw: Stat
  readonly ratio: number
}

/** Writes an unfinished run of `steps` completed steps into a fresh store at `file`. */
const writeRun = async (file: string, runId: string, steps: number): Promise<number> => {
  const script = F.replies(steps + 1)
  const t0 = now()
  await withSqlite(file, (store) =>
    Effect.gen(function*() {
      const outcome = yield* Effect.either(F.runOn(store, F.model(script, { failAt: steps }), F.request(runId, steps + 1)))
      if (outcome._tag === "Right" || outcome.left._tag !== "ModelError") throw new Error(`storage bench: the run did not stop at step ${steps}`)
    }))
  return (now() - t0) / 1000
}

/** Runs the growth section; returns its rows and the file of the largest run (for resume). */
export const growth = async (dir: string, sizes: ReadonlyArray<number>): Promise<{ readonly rows: ReadonlyArray<GrowthRow>; readonly largest: { readonly file: string; readonly runId: string; readonly steps: number } }> => {
  const emptyFile = path.join(dir, "growth-empty.db")
  await withSqlite(emptyFile, () => Effect.void)
  const empty = Raw.usedBytes(emptyFile)
  Raw.remove(emptyFile)
  const rows: Array<GrowthRow> = []
  let largest = { file: "", runId: "", steps: 0 }
  let previous: { readonly steps: number; readonly bytes: number } | undefined
  for (const steps of sizes) {
    const file = path.join(dir, `growth-${steps}.db`)
    const runId = `growth-${steps}`
    const writeSeconds = await writeRun(file, runId, steps)
    const bytes = Raw.usedBytes(file)
    rows.push({
      steps,
      bytes,
      bytesPerStep: (bytes - empty) / steps,
      marginalBytesPerStep: previous === undefined ? null : (bytes - previous.bytes) / (steps - previous.steps),
      writeSeconds
    })
    previous = { steps, bytes }
    if (steps >= largest.steps) {
      if (largest.file !== "") Raw.remove(largest.file)
      largest = { file, runId, steps }
    } else {
      Raw.remove(file)
    }
  }
  return { rows, largest }
}

/** Runs the resume section on an unfinished run written by `growth`. */
export const resume = async (dir: string, source: { readonly file: string; readonly runId: string; readonly steps: number }, reps: Reps): Promise<ResumeResult> => {
  const steps = source.steps
  const script = F.replies(steps + 1)
  let counter = 0
  let records = 0
  const copy = (): string => {
    const file = path.join(dir, `resume-${++counter}.db`)
    fs.copyFileSync(source.file, file)
    return file
  }
  const polyloopOnce = async (): Promise<number> => {
    const file = copy()
    const millis = await withSqlite(file, (store) =>
      Effect.gen(function*() {
        const t0 = now()
        const result = yield* F.runOn(store, F.model(script), F.request(source.runId, steps + 1))
        const t1 = now()
        if (result.steps !== steps + 1 || result.resumedCount !== 1) throw new Error(`resume bench: ${result.steps} steps, ${result.resumedCount} resumes`)
        return t1 - t0
      }))
    Raw.remove(file)
    return millis
  }
  const rawOnce = async (): Promise<number> => {
    const file = copy()
    const db = Raw.open(file)
    const select = db.prepare("SELECT payload FROM polyloop_records WHERE run_id = ? ORDER BY seq").pluck(true)
    const t0 = now()
    const texts = select.all(source.runId) as Array<string>
    const values: Array<unknown> = []
    for (const text of texts) values.push(JSON.parse(text))
    const t1 = now()
    records = values.length
    db.close()
    Raw.remove(file)
    return t1 - t0
  }
  const samples = await interleave(reps, { polyloop: polyloopOnce, raw: rawOnce })
  const polyloop = stat(samples.polyloop)
  const raw = stat(samples.raw)
  return { steps, records, polyloop, raw, ratio: polyloop.median / raw.median }
}
