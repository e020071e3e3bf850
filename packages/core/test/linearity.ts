/**
 * A check that a function's running time grows linearly with its input, robust on a loaded
 * machine: no wall-clock limit, only a generous ratio between sizes. The time at a small base
 * size (the best of several runs, after warm-up) sets the rate; at each larger size (doubling
 * up to `maxSize`) one run must take at most `slack` times the linear extrapolation from the
 * base. A run over the bound is measured again (best of three) before it counts as a failure,
 * so a pause of the machine does not fail the check, while a quadratic function fails at the
 * first size where its ratio passes `slack` times the linear one (with the defaults, 256 KiB),
 * without running it at 1 MiB.
 *
 * Not collected by vitest on its own.
 */

/** What a failed check reports. */
export interface Growth {
  readonly size: number
  readonly baseSize: number
  readonly baseMillis: number
  readonly millis: number
  readonly ratio: number
  readonly bound: number
}

/** Options: the base size, the largest size, and how far above linear a size may go. */
export interface Options {
  readonly baseSize?: number
  readonly maxSize?: number
  readonly slack?: number
}

/**
 * The CPU time of one run, in milliseconds: on a loaded machine the wall clock also counts the
 * time this process waited for a core, which grows with the length of a run (a short run may
 * fit in one time slice, a long one is preempted again and again), and would make a linear
 * function look superlinear.
 */
const time = (run: () => void): number => {
  const start = process.cpuUsage()
  run()
  const used = process.cpuUsage(start)
  return (used.user + used.system) / 1000
}

/** The best of `count` runs (more while they total under 1 ms, at most 50). */
const best = (run: () => void, count: number): number => {
  let min = Number.POSITIVE_INFINITY
  let total = 0
  for (let i = 0; i < 50 && (i < count || total < 1); i++) {
    const t = time(run)
    total += t
    if (t < min) min = t
  }
  return min
}

/**
 * Runs `run(input(size))` at sizes from `baseSize` doubling to `maxSize`; returns the first size
 * whose time is more than `slack` times the linear extrapolation, or undefined when every size
 * is within. `input(size)` must return an input of about `size` characters.
 */
export const superlinearGrowth = <I>(
  input: (size: number) => I,
  run: (input: I) => void,
  options: Options = {}
): Growth | undefined => {
  const baseSize = options.baseSize ?? 16 * 1024
  const maxSize = options.maxSize ?? 1024 * 1024
  const slack = options.slack ?? 12
  const base = input(baseSize)
  best(() => run(base), 5) // warm-up (JIT)
  // A floor of 0.05 ms keeps a base run too fast for the timer from making every ratio huge.
  const baseMillis = Math.max(best(() => run(base), 7), 0.05)
  for (let size = baseSize * 2; size <= maxSize; size *= 2) {
    const sample = input(size)
    const bound = slack * (size / baseSize)
    let millis = time(() => run(sample))
    if (millis / baseMillis > bound) millis = Math.min(millis, best(() => run(sample), 3))
    if (millis / baseMillis > bound) {
      return { size, baseSize, baseMillis, millis, ratio: millis / baseMillis, bound }
    }
  }
  return undefined
}

/** Repeats `unit` to about `size` characters (at least once). */
export const repeatTo = (unit: string, size: number): string => unit.repeat(Math.max(1, Math.ceil(size / Math.max(1, unit.length))))

/** A readable description of a failed check. */
export const describe = (name: string, growth: Growth): string =>
  `${name}: ${growth.size} characters took ${growth.millis.toFixed(1)} ms, ${growth.ratio.toFixed(0)} times the ` +
  `${growth.baseSize} characters' ${growth.baseMillis.toFixed(2)} ms; linear growth allows at most ${growth.bound.toFixed(0)} times`
