/**
 * 6. History rendering: the cost of a step must not grow with the history (rendering appends
 * to one message array; the request the model gets is that array, so building it is linear in
 * the history over the whole run). One run on the in-memory store; every step is timed from
 * one model call to the next; the figure is the median step time in a window of 100 steps
 * starting at step 10, 1,000 and 10,000.
 */
import * as RunLogStore from "@polyloop/core/RunLogStore"
import * as Effect from "effect/Effect"
import * as F from "../lib/fixtures.js"
import { cpuMicros, median, now, type Reps, stat, type Stat } from "../lib/measure.js"

/** One line of the history table. */
export interface HistoryRow {
  readonly atStep: number
  /** Messages in the request at that step. */
  readonly messages: number
  /** µs per step, wall clock (median over the window, median over runs). */
  readonly micros: Stat
  /** µs per step, CPU time of the process (same medians). */
  readonly cpuMicros: Stat
}

const window = 100

/** Runs the section. */
export const run = async (points: ReadonlyArray<number>, reps: Reps): Promise<ReadonlyArray<HistoryRow>> => {
  const steps = Math.max(...points) + window + 1
  const script = F.replies(steps)
  const perPoint: Array<Array<number>> = points.map(() => [])
  const perPointCpu: Array<Array<number>> = points.map(() => [])
  for (let r = 0; r < reps.warmup + reps.reps; r++) {
    const times = new Float64Array(steps)
    const cpu = new Float64Array(steps)
    const model = F.model(script, {
      onCall: (step) =>
        Effect.sync(() => {
          times[step] = now()
          cpu[step] = cpuMicros()
        })
    })
    const store = Effect.runSync(RunLogStore.makeMemory)
    const result = await Effect.runPromise(F.runOn(store, model, F.request(`history-${r}`, steps)))
    if (result.steps !== steps) throw new Error("history bench: wrong step count")
    if (r < reps.warmup) continue
    points.forEach((point, i) => {
      const deltas: Array<number> = []
      const cpuDeltas: Array<number> = []
      for (let k = point; k < point + window; k++) {
        deltas.push((times[k + 1]! - times[k]!) * 1000)
        cpuDeltas.push(cpu[k + 1]! - cpu[k]!)
      }
      perPoint[i]!.push(median(deltas))
      perPointCpu[i]!.push(median(cpuDeltas))
    })
  }
  return points.map((atStep, i) => ({ atStep, messages: 2 + 2 * atStep, micros: stat(perPoint[i]!), cpuMicros: stat(perPointCpu[i]!) }))
}
