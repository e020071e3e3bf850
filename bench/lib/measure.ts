/**
 * Timing helpers: medians of several measured repetitions after warm-up, wall and CPU time,
 * and a forced garbage collection for memory figures.
 */
import * as v8 from "node:v8"
import * as vm from "node:vm"

/** Wall-clock milliseconds (monotonic, sub-microsecond resolution). */
export const now = (): number => performance.now()

/** CPU microseconds used by this process so far (user + system, all threads). */
export const cpuMicros = (): number => {
  const usage = process.cpuUsage()
  return usage.user + usage.system
}

/** The median of a non-empty list. */
export const median = (values: ReadonlyArray<number>): number => {
  if (values.length === 0) return Number.NaN
  const sorted = [...values].sort((a, b) => a - b)
  const mid = sorted.length >> 1
  return sorted.length % 2 === 1 ? sorted[mid]! : (sorted[mid - 1]! + sorted[mid]!) / 2
}

/** A figure measured several times: its median and spread. */
export interface Stat {
  readonly median: number
  readonly min: number
  readonly max: number
  readonly samples: ReadonlyArray<number>
}

/** Summarises samples. */
export const stat = (samples: ReadonlyArray<number>): Stat => ({
  median: median(samples),
  min: Math.min(...samples),
  max: Math.max(...samples),
  samples
})

/** Warm-up and measured repetition counts. */
export interface Reps {
  readonly warmup: number
  readonly reps: number
}

/**
 * Runs the given cases interleaved (A, B, A, B, …) so that every case sees the same machine
 * load, `warmup` rounds unrecorded, then `reps` recorded rounds; each case returns its sample.
 */
export const interleave = async <K extends string>(
  reps: Reps,
  cases: Record<K, () => Promise<number>>
): Promise<Record<K, Array<number>>> => {
  const keys = Object.keys(cases) as Array<K>
  const out = Object.fromEntries(keys.map((k) => [k, [] as Array<number>])) as Record<K, Array<number>>
  for (let round = 0; round < reps.warmup + reps.reps; round++) {
    for (const key of keys) {
      const value = await cases[key]()
      if (round >= reps.warmup) out[key].push(value)
    }
  }
  return out
}

let gcFn: (() => void) | undefined

/** A full garbage collection (exposes `gc` at run time if node was not started with it). */
export const gc = (): void => {
  if (gcFn === undefined) {
    const global = globalThis as { gc?: () => void }
    if (typeof global.gc === "function") {
      gcFn = global.gc
    } else {
      v8.setFlagsFromString("--expose-gc")
      gcFn = vm.runInNewContext("gc") as () => void
    }
  }
  gcFn()
  gcFn()
}

/** Heap bytes in use after a full collection. */
export const heapUsed = (): number => {
  gc()
  return process.memoryUsage().heapUsed
}

/**
 * The heap after a full collection once what the last work left has gone: collected every 20
 * ms until it stops shrinking (by less than 0.5 %, at most 20 times). Right after many runs
 * ended, their store could still be reachable for some tens of milliseconds (no timer of ours
 * is pending then: somewhere in Effect's scheduler or V8), so a `heapUsed` taken at once counted
 * it — measured 61.7 MB at once and after a `setImmediate`, 25.8 MB 100 ms later.
 */
export const settledHeapUsed = async (): Promise<number> => {
  let last = heapUsed()
  for (let i = 0; i < 20; i++) {
    await new Promise<void>((resolve) => setTimeout(resolve, 20))
    const next = heapUsed()
    if (next > last * 0.995) return Math.min(next, last)
    last = next
  }
  return last
}

/** Rounds for display. */
export const round = (value: number, digits = 1): number => {
  const f = 10 ** digits
  return Math.round(value * f) / f
}

/** The benchmark's command-line arguments (after the script). */
export const argv: ReadonlyArray<string> = process.argv.slice(2)

/** The value after `name` on the command line (`--label after`), if given. */
export const option = (name: string): string | undefined => {
  const i = argv.indexOf(name)
  return i < 0 ? undefined : argv[i + 1]
}
