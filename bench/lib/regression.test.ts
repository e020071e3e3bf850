/**
 * The bench's regression check (issue 35, `bench/lib/regression.ts`): a figure worse than the
 * committed one by more than its noise is MISSED; within the noise, or better, it is not. Checked
 * on the committed `bench/results.json` itself and on copies of it with figures moved.
 */
import { describe, expect, it } from "@effect/vitest"
import * as fs from "node:fs"
import * as path from "node:path"
import { fileURLToPath } from "node:url"
import * as Regression from "./regression.js"

const committed: unknown = JSON.parse(fs.readFileSync(path.join(path.dirname(fileURLToPath(import.meta.url)), "..", "results.json"), "utf8"))

/** A copy of the results with `f` applied to the 1,000-step loop row's CPU figure. */
const withLoop1000 = (f: (median: number) => number): unknown => {
  const copy = structuredClone(committed) as { loop: Array<{ steps: number; polyloopCpu: { median: number; min: number; max: number } }> }
  const row = copy.loop.find((r) => r.steps === 1000)!
  // A tight spread (±2 %), whatever the committed run's was: the verdicts below are about the
  // change, not about how noisy the machine was when the committed figures were measured.
  const median = f(row.polyloopCpu.median)
  row.polyloopCpu = { median, min: median * 0.98, max: median * 1.02 }
  return copy
}

describe("bench regression check", () => {
  it("reads every section of the committed results, and the same run against itself misses nothing", () => {
    const figures = Regression.figuresOf(committed)
    const names = figures.map((f) => f.name)
    expect(names).toContain("loop, 1000 steps: CPU per step")
    expect(names).toContain("durable step / raw two transactions")
    expect(names).toContain("1000 concurrent runs, sqlite: steps per second")
    expect(names).toContain("1000 concurrent runs, memory: heap per run in flight")
    expect(names.some((n) => n.startsWith("storage,"))).toBe(true)
    expect(names.some((n) => n.startsWith("history,"))).toBe(true)
    const verdicts = Regression.compare(figures, figures)
    expect(verdicts.length).toBe(figures.length)
    expect(verdicts.filter((v) => v.missed)).toEqual([])
  })

  it("a step 50 % slower than committed is MISSED; 3 % slower is noise; twice as fast is not a regression", () => {
    const base = Regression.figuresOf(withLoop1000((m) => m))
    const slower = Regression.compare(base, Regression.figuresOf(withLoop1000((m) => m * 1.5)))
    const missed = slower.filter((v) => v.missed)
    expect(missed.map((v) => v.name)).toEqual(["loop, 1000 steps: CPU per step"])
    expect(missed[0]!.worseBy).toBeCloseTo(0.5, 6)
    expect(Regression.render(slower, "test")).toContain("**MISSED**")
    expect(Regression.compare(base, Regression.figuresOf(withLoop1000((m) => m * 1.03))).filter((v) => v.missed)).toEqual([])
    const faster = Regression.compare(base, Regression.figuresOf(withLoop1000((m) => m / 2)))
    expect(faster.filter((v) => v.missed)).toEqual([])
    expect(faster.find((v) => v.name === "loop, 1000 steps: CPU per step")!.worseBy).toBeCloseTo(-0.5, 6)
  })

  it("throughput is better higher: fewer steps per second beyond the noise is MISSED", () => {
    const figure = (median: number, spread: number): Regression.Figure => ({
      name: "runs",
      unit: "steps/s",
      better: "higher",
      value: { median, min: median * (1 - spread / 2), max: median * (1 + spread / 2) },
      floor: 0.1
    })
    expect(Regression.compare([figure(1000, 0.05)], [figure(700, 0.05)])[0]!.missed).toBe(true)
    expect(Regression.compare([figure(1000, 0.05)], [figure(950, 0.05)])[0]!.missed).toBe(false)
    // A noisy committed figure widens the band: 40 % spread allows 30 % less.
    expect(Regression.compare([figure(1000, 0.4)], [figure(700, 0.05)])[0]!.missed).toBe(false)
    expect(Regression.compare([figure(1000, 0.05)], [figure(2000, 0.05)])[0]!.missed).toBe(false)
  })

  it("a figure only one side has is not compared", () => {
    const only: Regression.Figure = { name: "new", unit: "µs", better: "lower", value: Regression.exact(5), floor: 0.1 }
    expect(Regression.compare([], [only])).toEqual([])
  })
})
