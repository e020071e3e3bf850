/**
 * 2. Durable step cost: µs per step of `Agent.run` on the SQLite store (WAL, `synchronous=FULL`)
 * against the physical limit measured in the same process: per step, two raw better-sqlite3
 * transactions on a file with the same settings and the same rows — the write-ahead reply, then
 * the result and the step together.
 */
import * as Effect from "effect/Effect"
import * as path from "node:path"
import * as F from "../lib/fixtures.js"
import { interleave, now, type Reps, stat, type Stat } from "../lib/measure.js"
import * as Raw from "../lib/sqlite.js"
import { withSqlite } from "../lib/store.js"

/** The section's figures. */
export interface DurableResult {
  readonly steps: number
  /** µs per step of `Agent.run` on the SQLite store. */
  readonly polyloop: Stat
  /** µs per step of the two raw transactions. */
  readonly raw: Stat
  /** µs of one raw commit (an empty-ish one-row transaction), for scale. */
  readonly rawCommit: Stat
  readonly ratio: number
  /** Bytes of JSON per step written (reply + result + step). */
  readonly payloadBytesPerStep: number
}

/**
 * Brings the SQLite store's code path (the `@effect/sql` client, the backend, the store front)
 * to steady state before anything is measured, as `Loop.warmUp` does for the loop: `steps`
 * steps in 500-step runs on a throw-away file with `synchronous=NORMAL` (no fsync, so it is
 * quick). Without it the first measured repetitions still ran partly unoptimized code.
 */
export const warmUp = async (dir: string, steps: number): Promise<void> => {
  const script = F.replies(500)
  for (let done = 0, n = 0; done < steps; done += 500, n++) {
    const file = path.join(dir, `warm-${n}.db`)
    await withSqlite(file, (store) => Effect.asVoid(F.runOn(store, F.model(script), F.request(`warm-${n}`, 500))), "NORMAL")
    Raw.remove(file)
  }
}

/** Runs the section. */
export const run = async (dir: string, steps: number, reps: Reps): Promise<DurableResult> => {
  const script = F.replies(steps)
  let counter = 0
  let rows: ReadonlyArray<Raw.Row> = []
  const polyloopOnce = async (): Promise<number> => {
    const file = path.join(dir, `durable-${++counter}.db`)
    const runId = `durable-${counter}`
    const micros = await withSqlite(file, (store) =>
      Effect.gen(function*() {
        const t0 = now()
        const result = yield* F.runOn(store, F.model(script), F.request(runId, steps))
        const t1 = now()
        if (result.steps !== steps) throw new Error(`durable bench: ${result.steps} steps`)
        return ((t1 - t0) * 1000) / steps
      }))
    const db = Raw.open(file)
    rows = Raw.readRows(db, runId)
    db.close()
    Raw.remove(file)
    return micros
  }
  await polyloopOnce()
  const stepRows = (): ReadonlyArray<readonly [Raw.Row, Raw.Row, Raw.Row]> => {
    const out: Array<readonly [Raw.Row, Raw.Row, Raw.Row]> = []
    for (let i = 1; i + 2 < rows.length; i += 3) {
      const [a, b, c] = [rows[i]!, rows[i + 1]!, rows[i + 2]!]
      if (a.kind !== "ModelReplied" || b.kind !== "ActionResulted" || c.kind !== "StepCompleted") throw new Error("durable bench: unexpected rows")
      out.push([a, b, c])
    }
    return out
  }
  const perStep = stepRows()
  const payloadBytesPerStep = perStep.reduce((n, [a, b, c]) => n + Buffer.byteLength(a.payload) + Buffer.byteLength(b.payload) + Buffer.byteLength(c.payload), 0) / perStep.length

  const rawOnce = async (): Promise<number> => {
    const file = path.join(dir, `raw-${++counter}.db`)
    const db = Raw.open(file)
    Raw.createRecordsTable(db)
    const insert = db.prepare("INSERT INTO polyloop_records (run_id, seq, kind, step, payload) VALUES (?, ?, ?, ?, ?)")
    const one = db.transaction((row: Raw.Row) => {
      insert.run("raw", row.seq, row.kind, row.step, row.payload)
    })
    const two = db.transaction((a: Raw.Row, b: Raw.Row) => {
      insert.run("raw", a.seq, a.kind, a.step, a.payload)
      insert.run("raw", b.seq, b.kind, b.step, b.payload)
    })
    const t0 = now()
    for (const [reply, result, step] of perStep) {
      one(reply)
      two(result, step)
    }
    const t1 = now()
    db.close()
    Raw.remove(file)
    return ((t1 - t0) * 1000) / perStep.length
  }

  const commitOnce = async (): Promise<number> => {
    const file = path.join(dir, `commit-${++counter}.db`)
    const db = Raw.open(file)
    db.exec("CREATE TABLE t (x INTEGER)")
    const insert = db.prepare("INSERT INTO t (x) VALUES (?)")
    const n = 200
    const t0 = now()
    for (let i = 0; i < n; i++) insert.run(i)
    const t1 = now()
    db.close()
    Raw.remove(file)
    return ((t1 - t0) * 1000) / n
  }

  const samples = await interleave(reps, { polyloop: polyloopOnce, raw: rawOnce, rawCommit: commitOnce })
  const polyloop = stat(samples.polyloop)
  const raw = stat(samples.raw)
  return { steps, polyloop, raw, rawCommit: stat(samples.rawCommit), ratio: polyloop.median / raw.median, payloadBytesPerStep }
}
