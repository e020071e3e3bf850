/**
 * `npm run bench` (`--quick` for a smoke run): runs the six benchmarks of issue 8 in one process,
 * writes `bench/results.json` and `bench/README.md` (the targets, the tables, the hand-written
 * `bench/HOW-TO-READ.md` and the machine; the optimisation history stays in `bench/NOTES.md`),
 * and prints the tables.
 *
 * Every figure is the median of several measured repetitions after warm-up; each ratio is
 * computed from two figures measured interleaved in this same process.
 */
import { execSync } from "node:child_process"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { fileURLToPath } from "node:url"
import { round } from "./lib/measure.js"
import * as Regression from "./lib/regression.js"
import * as Raw from "./lib/sqlite.js"
import * as Durable from "./sections/durable.js"
import * as History from "./sections/history.js"
import * as Loop from "./sections/loop.js"
import * as Many from "./sections/many.js"
import * as Storage from "./sections/storage.js"

const benchDir = path.dirname(fileURLToPath(import.meta.url))
const quick = process.argv.includes("--quick")
const started = Date.now()

const log = (message: string): void => {
  process.stderr.write(`[bench ${((Date.now() - started) / 1000).toFixed(1)}s] ${message}\n`)
}

const cpuModel = (): string => {
  try {
    const line = fs.readFileSync("/proc/cpuinfo", "utf8").split("\n").find((l) => l.startsWith("model name"))
    return line?.split(":")[1]?.trim() ?? os.cpus()[0]?.model ?? "unknown"
  } catch {
    return os.cpus()[0]?.model ?? "unknown"
  }
}

const nproc = (): string => {
  try {
    return execSync("nproc", { encoding: "utf8" }).trim()
  } catch {
    return String(os.availableParallelism())
  }
}

const commit = (): string => {
  try {
    const head = execSync("git rev-parse --short HEAD", { encoding: "utf8", cwd: benchDir }).trim()
    const dirty = execSync("git status --porcelain -- ../packages", { encoding: "utf8", cwd: benchDir }).trim() !== ""
    return dirty ? `${head} (work tree has uncommitted changes in packages/)` : head
  } catch {
    return "unknown"
  }
}

/** The hand-written part of README.md: how to read the figures. */
/** The committed `bench/results.json` (at HEAD), else the file on disk, else nothing. */
const committedResults = (): { readonly results: unknown; readonly label: string } | undefined => {
  try {
    const text = execSync("git show HEAD:bench/results.json", { encoding: "utf8", cwd: benchDir, stdio: ["ignore", "pipe", "ignore"] })
    const head = execSync("git rev-parse --short HEAD", { encoding: "utf8", cwd: benchDir }).trim()
    const parsed: unknown = JSON.parse(text)
    const measuredAt = (parsed as { machine?: { commit?: unknown } }).machine?.commit
    return { results: parsed, label: `bench/results.json at ${head}, measured at ${typeof measuredAt === "string" ? measuredAt : "?"}` }
  } catch {
    const file = path.join(benchDir, "results.json")
    return fs.existsSync(file) ? { results: JSON.parse(fs.readFileSync(file, "utf8")), label: "bench/results.json on disk" } : undefined
  }
}

const reading = (): string => {
  const file = path.join(benchDir, "HOW-TO-READ.md")
  return fs.existsSync(file) ? fs.readFileSync(file, "utf8") : ""
}

/** `--render`: rewrites README.md from results.json and HOW-TO-READ.md without measuring anything. */
const render = (): void => {
  const results = JSON.parse(fs.readFileSync(path.join(benchDir, "results.json"), "utf8")) as Results
  const table = renderTables(results)
  fs.writeFileSync(path.join(benchDir, "README.md"), renderReadme(results, table, reading()))
  process.stdout.write(`${table}\n\n${renderTargets(results)}\n`)
}

/**
 * Which build of the packages this process runs: `npm run bench` builds them (`tsc -b`) and
 * measures the compiled JavaScript in each `packages/<name>/dist`, what an application importing
 * `@polyloop/core` runs; under `--conditions=@polyloop/source` it is the TypeScript sources as
 * tsx transforms them (with esbuild's `keepNames`, a `defineProperty` per named closure made).
 */
const measuredCode = (): string => {
  const resolved = import.meta.resolve("@polyloop/core/Agent")
  return resolved.includes("/dist/") ? "compiled packages (packages/<name>/dist, tsc -b)" : "TypeScript sources through tsx (--conditions=@polyloop/source)"
}

const main = async (): Promise<void> => {
  if (process.argv.includes("--render")) return render()
  const dir = Raw.dataDir(benchDir)
  const load = os.loadavg()
  const machine = {
    node: process.version,
    nproc: nproc(),
    cpu: cpuModel(),
    memoryGiB: round(os.totalmem() / 2 ** 30, 1),
    dataDir: path.relative(path.dirname(benchDir), dir) || dir,
    dataFs: Raw.fsType(dir),
    loadAverageAtStart: load.map((l) => round(l, 2)),
    commit: commit(),
    code: measuredCode(),
    date: new Date().toISOString()
  }
  log(`machine: ${JSON.stringify(machine)}`)
  log(quick ? "quick run (smoke): fewer repetitions and smaller sizes, figures are rough" : "full run")

  const loopSizes = [50, 200, 1000]
  log("warm-up")
  await Loop.warmUp(quick ? 4_000 : 20_000)
  await Durable.warmUp(dir, quick ? 1_000 : 4_000)
  log("1/6 loop overhead")
  const loop = await Loop.run(loopSizes, (steps) =>
    quick ? { warmup: 1, reps: 3 } : { warmup: 3, reps: steps <= 50 ? 30 : steps <= 200 ? 15 : 9 })

  log("2/6 durable step cost")
  const durable = await Durable.run(dir, quick ? 50 : 200, quick ? { warmup: 1, reps: 3 } : { warmup: 2, reps: 15 })

  log("3/6 storage growth")
  const growthSizes = quick ? [100, 1000] : [100, 1000, 10_000]
  const growth = await Storage.growth(dir, growthSizes)

  log("4/6 resume cost")
  const resume = await Storage.resume(dir, growth.largest, quick ? { warmup: 1, reps: 3 } : { warmup: 2, reps: 15 })
  Raw.remove(growth.largest.file)

  log("5/6 many runs")
  const many = await Many.run(dir, quick
    ? { runs: 100, memorySteps: 20, sqliteSteps: 4, reps: { warmup: 1, reps: 2 }, sqliteReps: { warmup: 0, reps: 2 } }
    : { runs: 1000, memorySteps: 20, sqliteSteps: 4, reps: { warmup: 1, reps: 3 }, sqliteReps: { warmup: 1, reps: 3 } })

  log("6/6 history rendering")
  const history = await History.run(quick ? [10, 1000] : [10, 1000, 10_000], quick ? { warmup: 1, reps: 2 } : { warmup: 1, reps: 5 })

  fs.rmSync(dir, { recursive: true, force: true })

  const loop1000 = loop.find((row) => row.steps === 1000)!
  const loop50 = loop.find((row) => row.steps === 50)!
  const marginal = growth.rows.flatMap((row) => (row.marginalBytesPerStep === null ? [] : [row.marginalBytesPerStep]))
  const perStep = growth.rows.map((row) => row.bytesPerStep)
  const spread = (values: ReadonlyArray<number>): number => (Math.max(...values) - Math.min(...values)) / Math.min(...values)
  const historyFirst = history[0]!.cpuMicros.median
  const historyLast = history[history.length - 1]!.cpuMicros.median
  const targets = [
    {
      name: "in-memory loop overhead at 1,000 steps (CPU time)",
      value: `${round(loop1000.polyloopCpu.median)} µs/step (wall ${round(loop1000.polyloop.median)}); ${round(loop1000.ratio, 0)}× the bare loop`,
      target: "≤ 20 µs/step",
      met: loop1000.polyloopCpu.median <= 20
    },
    {
      name: "loop overhead does not grow with steps",
      value: `${round(loop50.polyloopCpu.median)} → ${round(loop1000.polyloopCpu.median)} µs/step CPU (50 → 1,000 steps)`,
      target: "1,000-step figure ≤ 1.1 × 50-step figure",
      met: loop1000.polyloopCpu.median <= 1.1 * loop50.polyloopCpu.median
    },
    {
      name: "durable step cost vs raw two-transaction limit",
      value: `${round(durable.ratio, 2)}×`,
      target: "< 1.3×",
      met: durable.ratio < 1.3
    },
    {
      name: "constant bytes per step",
      value: `${perStep.map((b) => round(b, 0)).join(" / ")} B/step (marginal ${marginal.map((b) => round(b, 0)).join(" / ")})`,
      target: "bytes/step within 10% across sizes",
      met: spread(marginal.length > 0 ? [...marginal, perStep[perStep.length - 1]!] : perStep) <= 0.1
    },
    {
      name: "resume vs raw read",
      value: `${round(resume.ratio, 2)}×`,
      target: "< 2×",
      met: resume.ratio < 2
    },
    {
      name: "step cost flat along the history",
      value: `${round(historyFirst)} → ${round(historyLast)} µs/step CPU (step ${history[0]!.atStep} → ${history[history.length - 1]!.atStep})`,
      target: "last ≤ 1.5 × first",
      met: historyLast <= 1.5 * historyFirst
    }
  ]

  const before = committedResults()
  const verdicts = before === undefined ? [] : Regression.compare(Regression.figuresOf(before.results), Regression.figuresOf({ loop, durable, growth: growth.rows, resume, many, history }))
  const regression = { against: before?.label ?? "nothing committed", verdicts }

  const results = {
    quick,
    machine,
    loadAverageAtEnd: os.loadavg().map((l) => round(l, 2)),
    durationSeconds: round((Date.now() - started) / 1000, 1),
    loop,
    durable,
    growth: growth.rows,
    resume,
    many,
    history,
    targets,
    regression
  }
  const resultsFile = path.join(benchDir, quick ? "results.quick.json" : "results.json")
  fs.writeFileSync(resultsFile, `${JSON.stringify(results, null, 2)}\n`)

  const table = renderTables(results)
  if (!quick) fs.writeFileSync(path.join(benchDir, "README.md"), renderReadme(results, table, reading()))
  process.stdout.write(`${table}\n\n${renderTargets(results)}\n\n${Regression.render(verdicts, regression.against)}\n`)
  const missed = verdicts.filter((v) => v.missed)
  if (missed.length > 0) {
    process.stdout.write(`\nMISSED: ${missed.length} figure(s) regressed beyond their noise: ${missed.map((v) => v.name).join("; ")}\n`)
    // A quick run's figures are rough: it reports, a full run fails.
    if (!quick) process.exitCode = 1
  }
  log(`done in ${results.durationSeconds}s; wrote ${path.relative(process.cwd(), resultsFile)}${quick ? " (quick: README.md not rewritten)" : " and bench/README.md"}`)
}

type Results = {
  readonly quick: boolean
  readonly machine: Record<string, unknown>
  readonly loadAverageAtEnd: ReadonlyArray<number>
  readonly durationSeconds: number
  readonly loop: ReadonlyArray<Loop.LoopRow>
  readonly durable: Durable.DurableResult
  readonly growth: ReadonlyArray<Storage.GrowthRow>
  readonly resume: Storage.ResumeResult
  readonly many: ReadonlyArray<Many.ManyRow>
  readonly history: ReadonlyArray<History.HistoryRow>
  readonly targets: ReadonlyArray<{ readonly name: string; readonly value: string; readonly target: string; readonly met: boolean }>
  readonly regression?: { readonly against: string; readonly verdicts: ReadonlyArray<Regression.Verdict> }
}

const n = (value: number, digits = 1): string => round(value, digits).toLocaleString("en-US")
const range = (s: { readonly min: number; readonly max: number }, digits = 1): string => `${n(s.min, digits)}–${n(s.max, digits)}`

const renderTables = (r: Results): string => {
  const lines: Array<string> = []
  lines.push("### 1. Loop overhead (in-memory store, precomputed tool-call replies, no-op tool)", "")
  lines.push("| steps | polyloop µs/step (CPU) | range | bare loop µs/step (CPU) | ratio (CPU) | polyloop µs/step (wall) | bare (wall) | ratio (wall) |")
  lines.push("|---:|---:|---:|---:|---:|---:|---:|---:|")
  for (const row of r.loop) {
    lines.push(`| ${n(row.steps, 0)} | ${n(row.polyloopCpu.median)} | ${range(row.polyloopCpu)} | ${n(row.bareCpu.median, 2)} | ${n(row.ratio, 0)}× | ${n(row.polyloop.median)} | ${n(row.bare.median, 2)} | ${n(row.ratioWall, 0)}× |`)
  }
  const d = r.durable
  lines.push("", `### 2. Durable step cost (SQLite, WAL, synchronous=FULL, ${n(d.steps, 0)}-step runs)`, "")
  lines.push("| figure | µs/step (median) | range |", "|---|---:|---:|")
  lines.push(`| polyloop \`Agent.run\` on \`layerSqlite\` | ${n(d.polyloop.median, 0)} | ${range(d.polyloop, 0)} |`)
  lines.push(`| raw better-sqlite3: 2 transactions, same rows | ${n(d.raw.median, 0)} | ${range(d.raw, 0)} |`)
  lines.push(`| (for scale) one raw one-row commit | ${n(d.rawCommit.median, 0)} | ${range(d.rawCommit, 0)} |`)
  lines.push(`| **ratio polyloop / raw** | **${n(d.ratio, 2)}×** | |`)
  lines.push("", `JSON written per step: ${n(d.payloadBytesPerStep, 0)} bytes (reply + result + step).`)
  lines.push("", "### 3. Storage growth (SQLite file after a checkpoint, free pages excluded)", "")
  lines.push("| steps | bytes | bytes/step | marginal bytes/step | write time (s) |", "|---:|---:|---:|---:|---:|")
  for (const row of r.growth) {
    lines.push(`| ${n(row.steps, 0)} | ${n(row.bytes, 0)} | ${n(row.bytesPerStep, 0)} | ${row.marginalBytesPerStep === null ? "—" : n(row.marginalBytesPerStep, 0)} | ${n(row.writeSeconds, 1)} |`)
  }
  const res = r.resume
  lines.push("", `### 4. Resume cost (${n(res.steps, 0)}-step run, ${n(res.records, 0)} records)`, "")
  lines.push("| figure | ms (median) | range |", "|---|---:|---:|")
  lines.push(`| polyloop: resume + next step + finish | ${n(res.polyloop.median)} | ${range(res.polyloop)} |`)
  lines.push(`| raw: select rows + JSON.parse | ${n(res.raw.median)} | ${range(res.raw)} |`)
  lines.push(`| **ratio** | **${n(res.ratio, 2)}×** | |`)
  lines.push("", "### 5. Many concurrent runs in one process", "")
  lines.push("| store | runs | steps/run | steps/s (median) | range | heap bytes per run in flight | range |", "|---|---:|---:|---:|---:|---:|---:|")
  for (const row of r.many) {
    lines.push(`| ${row.store} | ${n(row.runs, 0)} | ${row.stepsPerRun} | ${n(row.stepsPerSecond.median, 0)} | ${range(row.stepsPerSecond, 0)} | ${n(row.bytesPerRun.median, 0)} | ${range(row.bytesPerRun, 0)} |`)
  }
  lines.push("", "### 6. History rendering: step cost along one run (in-memory store)", "")
  lines.push("| at step | messages in the request | µs/step CPU (median of 100 steps) | range over runs | µs/step wall | range over runs |", "|---:|---:|---:|---:|---:|---:|")
  for (const row of r.history) {
    lines.push(`| ${n(row.atStep, 0)} | ${n(row.messages, 0)} | ${n(row.cpuMicros.median)} | ${range(row.cpuMicros)} | ${n(row.micros.median)} | ${range(row.micros)} |`)
  }
  return lines.join("\n")
}

const renderTargets = (r: Results): string => {
  const lines = ["| target | measured | goal | met |", "|---|---|---|:---:|"]
  for (const t of r.targets) lines.push(`| ${t.name} | ${t.value} | ${t.target} | ${t.met ? "yes" : "**no**"} |`)
  return lines.join("\n")
}

const renderReadme = (r: Results, table: string, reading: string): string => {
  const m = r.machine
  return [
    "# polyloop benchmarks",
    "",
    "What a step of the loop costs, in memory and durably on SQLite, and whether any of it grows with the run.",
    "`npm run bench` runs everything below in one process (about " + `${Math.ceil(r.durationSeconds / 60)} min here) and rewrites this file and \`bench/results.json\`;`,
    "`npm run bench -- --quick` is a smoke run (writes `bench/results.quick.json` only); `npm run bench -- --render` rewrites",
    "this file from `results.json` and `HOW-TO-READ.md` without measuring. Figures are medians of repetitions after warm-up.",
    "These are benchmarks, not tests: nothing here fails a build, but a full run exits non-zero and prints MISSED when a",
    "figure regressed beyond its noise against the committed `results.json` (below). The optimisation history is in `NOTES.md`.",
    "",
    "## Targets",
    "",
    renderTargets(r),
    "",
    ...(r.regression === undefined ? [] : ["## Against the committed figures", "", Regression.render(r.regression.verdicts, r.regression.against), ""]),
    "## Results",
    "",
    table,
    "",
    reading.trim(),
    "",
    "## Machine of the recorded run",
    "",
    `- node ${String(m.node)}, nproc ${String(m.nproc)}, CPU: ${String(m.cpu)}, ${String(m.memoryGiB)} GiB; databases on ${String(m.dataFs)} (fsync reaches the virtual disk)`,
    `- load average at start ${JSON.stringify(m.loadAverageAtStart)}, at end ${JSON.stringify(r.loadAverageAtEnd)} — **the machine is shared with other engineers' test runs**`,
    `- commit ${String(m.commit)}, ${String(m.date)}, run took ${r.durationSeconds} s`,
    `- code measured: ${m.code === undefined ? "TypeScript sources through tsx (--conditions=@polyloop/source)" : String(m.code)}`,
    ""
  ].join("\n")
}

main().catch((error: unknown) => {
  process.stderr.write(`bench failed: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`)
  process.exit(1)
})
