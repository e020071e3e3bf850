/**
 * The regression check of `npm run bench` (issue 35): every figure of the run is compared with
 * the same figure of the committed `bench/results.json`, and a figure that is worse than the
 * committed one by more than its noise is printed as **MISSED** (and the bench exits non-zero).
 *
 * A figure's noise is the relative spread of its repetitions, (max − min) / median, the larger of
 * the committed run's and this run's, never below `floor` (machine-to-machine and load
 * differences that a single run's spread does not show: 10 % for timings, 2 % for sizes, which
 * do not depend on the machine's load). A figure present only on one side is not compared.
 */

/** Which direction is better for a figure. */
export type Better = "lower" | "higher"

/** A measured figure: its median and the spread of its repetitions. */
export interface Measured {
  readonly median: number
  readonly min: number
  readonly max: number
}

/** One figure of a bench run, by a stable name. */
export interface Figure {
  readonly name: string
  readonly unit: string
  readonly better: Better
  readonly value: Measured
  /** The least noise assumed, as a fraction of the median. */
  readonly floor: number
}

/** The verdict on one figure. */
export interface Verdict {
  readonly name: string
  readonly unit: string
  readonly committed: number
  readonly now: number
  /** How much worse (positive) or better (negative) this run is, as a fraction of the committed figure. */
  readonly worseBy: number
  /** The noise allowed, as a fraction. */
  readonly noise: number
  readonly missed: boolean
}

const spread = (m: Measured): number => (m.median > 0 && Number.isFinite(m.max - m.min) ? (m.max - m.min) / m.median : 0)

/** Compares this run's figures with the committed ones, by name. */
export const compare = (committed: ReadonlyArray<Figure>, current: ReadonlyArray<Figure>): ReadonlyArray<Verdict> => {
  const before = new Map(committed.map((f) => [f.name, f]))
  const verdicts: Array<Verdict> = []
  for (const figure of current) {
    const old = before.get(figure.name)
    if (old === undefined || old.value.median <= 0) continue
    const noise = Math.max(figure.floor, spread(old.value), spread(figure.value))
    const change = (figure.value.median - old.value.median) / old.value.median
    const worseBy = figure.better === "lower" ? change : -change
    verdicts.push({
      name: figure.name,
      unit: figure.unit,
      committed: old.value.median,
      now: figure.value.median,
      worseBy,
      noise,
      missed: worseBy > noise
    })
  }
  return verdicts
}

/** A single number as a figure without spread (sizes, ratios). */
export const exact = (median: number): Measured => ({ median, min: median, max: median })

/** The figures of a `bench/results.json` (any version of it that has the sections). */
export const figuresOf = (results: unknown): ReadonlyArray<Figure> => {
  const figures: Array<Figure> = []
  if (typeof results !== "object" || results === null) return figures
  const r = results as Record<string, unknown>
  const stat = (value: unknown): Measured | undefined => {
    if (typeof value !== "object" || value === null) return undefined
    const v = value as Record<string, unknown>
    return typeof v.median === "number" && typeof v.min === "number" && typeof v.max === "number"
      ? { median: v.median, min: v.min, max: v.max }
      : undefined
  }
  const rows = (key: string): ReadonlyArray<Record<string, unknown>> =>
    Array.isArray(r[key]) ? (r[key] as ReadonlyArray<unknown>).filter((x): x is Record<string, unknown> => typeof x === "object" && x !== null) : []
  const push = (name: string, unit: string, better: Better, value: Measured | undefined, floor = 0.1) => {
    if (value !== undefined) figures.push({ name, unit, better, value, floor })
  }
  for (const row of rows("loop")) push(`loop, ${String(row.steps)} steps: CPU per step`, "µs", "lower", stat(row.polyloopCpu))
  const durable = r.durable as Record<string, unknown> | undefined
  if (durable !== undefined) {
    push("durable step on SQLite", "µs", "lower", stat(durable.polyloop))
    const p = stat(durable.polyloop)
    const raw = stat(durable.raw)
    if (p !== undefined && raw !== undefined && typeof durable.ratio === "number") {
      // A ratio of two medians: its noise is the two figures' spreads together.
      const noise = spread(p) + spread(raw)
      push("durable step / raw two transactions", "×", "lower", { median: durable.ratio, min: durable.ratio * (1 - noise / 2), max: durable.ratio * (1 + noise / 2) })
    }
  }
  for (const row of rows("growth")) {
    if (typeof row.bytesPerStep === "number") push(`storage, ${String(row.steps)} steps: bytes per step`, "B", "lower", exact(row.bytesPerStep), 0.02)
  }
  const resume = r.resume as Record<string, unknown> | undefined
  if (resume !== undefined) push("resume of the long run", "ms", "lower", stat(resume.polyloop))
  for (const row of rows("many")) {
    const label = `${String(row.runs)} concurrent runs, ${String(row.store)}`
    push(`${label}: steps per second`, "steps/s", "higher", stat(row.stepsPerSecond))
    push(`${label}: heap per run in flight`, "B", "lower", stat(row.bytesPerRun))
  }
  for (const row of rows("history")) push(`history, at step ${String(row.atStep)}: CPU per step`, "µs", "lower", stat(row.cpuMicros))
  return figures
}

const fmt = (value: number): string => (Math.abs(value) >= 100 ? Math.round(value).toLocaleString("en-US") : (Math.round(value * 10) / 10).toString())

/** The check as a Markdown table, with MISSED on each regressed figure. */
export const render = (verdicts: ReadonlyArray<Verdict>, against: string): string => {
  const lines = [
    `Against the committed figures (${against}): a figure worse by more than its noise is **MISSED**.`,
    "",
    "| figure | committed | now | change | noise | verdict |",
    "|---|---:|---:|---:|---:|:---:|"
  ]
  for (const v of verdicts) {
    const sign = v.worseBy > 0 ? "worse" : "better"
    lines.push(`| ${v.name} | ${fmt(v.committed)} ${v.unit} | ${fmt(v.now)} ${v.unit} | ${Math.round(Math.abs(v.worseBy) * 100)} % ${sign} | ±${Math.round(v.noise * 100)} % | ${v.missed ? "**MISSED**" : "ok"} |`)
  }
  return lines.join("\n")
}
