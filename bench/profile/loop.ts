/**
 * `npm run bench:profile` — runs the loop bench's 1,000-step in-memory run many times under
 * V8's sampling profiler (`node --cpu-prof`), then prints where the CPU went: self time per
 * function and per source file (our packages vs effect vs node). Used for issue 35.
 *
 *   tsx --conditions=@polyloop/source bench/profile/loop.ts [--runs 60] [--steps 1000]
 */
import * as RunLogStore from "@polyloop/core/RunLogStore"
import * as Effect from "effect/Effect"
import * as F from "../lib/fixtures.js"
import { cpuMicros, option } from "../lib/measure.js"

const RUNS = Number(option("--runs") ?? 60)
const STEPS = Number(option("--steps") ?? 1000)

const main = async (): Promise<void> => {
  const script = F.replies(STEPS)
  const once = async (i: number): Promise<number> => {
    const store = Effect.runSync(RunLogStore.makeMemory)
    const c0 = cpuMicros()
    const result = await Effect.runPromise(F.runOn(store, F.model(script), F.request(`prof-${i}`, STEPS)))
    if (result.steps !== STEPS) throw new Error("profile: wrong step count")
    return (cpuMicros() - c0) / STEPS
  }
  for (let i = 0; i < 10; i++) await once(-i - 1)
  const figures: Array<number> = []
  for (let i = 0; i < RUNS; i++) figures.push(await once(i))
  figures.sort((a, b) => a - b)
  process.stdout.write(`µs/step CPU: median ${figures[Math.floor(figures.length / 2)]!.toFixed(1)} min ${figures[0]!.toFixed(1)}\n`)
}

main().catch((e) => {
  process.stderr.write(`${String(e)}\n`)
  process.exit(1)
})
