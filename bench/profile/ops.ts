/**
 * Effect operations per step (issue 35, design 0350): counted by a `Supervisor` under
 * `OpSupervision`, by operation kind, on the memory store and on SQLite, for one run alone and
 * for `--runs` concurrent runs; the per-step figure is the difference of two run lengths.
 *   tsx --conditions=@polyloop/source bench/profile/ops.ts [--runs 100]
 */
import * as RunLogStore from "@polyloop/core/RunLogStore"
import * as Effect from "effect/Effect"
import * as RuntimeFlags from "effect/RuntimeFlags"
import * as RuntimeFlagsPatch from "effect/RuntimeFlagsPatch"
import * as Supervisor from "effect/Supervisor"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import * as F from "../lib/fixtures.js"
import { option } from "../lib/measure.js"
import { withSqlite } from "../lib/store.js"

const RUNS = Number(option("--runs") ?? 100)
let ops = 0
const byOp = new Map<string, number>()
class Counter extends Supervisor.AbstractSupervisor<void> {
  get value() {
    return Effect.void
  }
  override onEffect(_fiber: unknown, effect: unknown) {
    ops++
    const tag = (effect as { readonly _op?: string })._op ?? "?"
    byOp.set(tag, (byOp.get(tag) ?? 0) + 1)
  }
}
let batch = 0
const count = (store: RunLogStore.RunLogStore.Service, runs: number, steps: number) =>
  Effect.gen(function*() {
    ops = 0
    byOp.clear()
    const b = ++batch
    yield* Effect.forEach(Array.from({ length: runs }, (_, i) => i), (i) => F.runOn(store, F.model(F.replies(steps)), F.request(`ops-${b}-${i}`, steps)), { concurrency: "unbounded", discard: true }).pipe(
      Effect.supervised(new Counter()),
      Effect.withRuntimeFlagsPatch(RuntimeFlagsPatch.enable(RuntimeFlags.OpSupervision))
    )
    return { ops, byOp: new Map(byOp) }
  })
const perStep = (store: RunLogStore.RunLogStore.Service, runs: number) =>
  Effect.gen(function*() {
    yield* count(store, runs, 4)
    const a = yield* count(store, runs, 4)
    const b = yield* count(store, runs, 8)
    const per = (b.ops - a.ops) / (4 * runs)
    const kinds = [...b.byOp].map(([k, v]) => [k, (v - (a.byOp.get(k) ?? 0)) / (4 * runs)] as const).filter(([, v]) => v >= 0.5).sort((x, y) => y[1] - x[1])
    return `${per.toFixed(1)} per step, ${((a.ops - 4 * runs * per) / runs).toFixed(0)} per run besides | ${kinds.map(([k, v]) => `${k} ${v.toFixed(1)}`).join(", ")}`
  })
const main = async () => {
  for (const runs of [1, RUNS]) {
    const memory = await Effect.runPromise(Effect.flatMap(RunLogStore.makeMemory, (store) => perStep(store, runs)))
    process.stdout.write(`memory, ${runs} run(s): ${memory}\n`)
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), "polyloop-ops-"))
    const sqlite = await withSqlite(path.join(dir, "runs.db"), (store) => perStep(store, runs))
    fs.rmSync(dir, { recursive: true, force: true })
    process.stdout.write(`sqlite, ${runs} run(s): ${sqlite}\n`)
  }
}
main().catch((e) => {
  process.stderr.write(`${String(e)}\n`)
  process.exit(1)
})
