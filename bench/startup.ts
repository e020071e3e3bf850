/**
 * Short runs (issue 21): what a run costs before and after its steps, and how fast the
 * `polyloop` command starts.
 *
 *   npx tsx --conditions=@polyloop/source bench/startup.ts [--label <name>] [--out <file>] [--quick] [--cold-start]
 *
 * Measured in one warm process (a warm-up, then the median of several repetitions):
 *
 * - a 1-step run with its services built for the run (`Agent.layer`, a fresh in-memory store):
 *   wall ms per run; target ≤ 1 ms "in a warm process": measured after 20 runs, and again after
 *   3,000 more (`oneStepRunMemoryWarmMs`), when V8 has optimised the code;
 * - a 1-step run on an open SQLite store (`synchronous=FULL`; its commits included): wall ms;
 *   target ≤ 3 ms;
 * - opening an existing SQLite store (a file holding 200 finished runs: open, pragmas, schema
 *   check) and closing it: wall ms; target ≤ 10 ms;
 * - a 50-step run built per run (services and a fresh store for each run): CPU µs per step in
 *   memory, wall µs per step on SQLite against two raw better-sqlite3 commits per step at
 *   `synchronous=FULL` (target ≤ 2×);
 *   (`--runs`: these run figures only, without the cold start below);
 * - where the fixed cost of a run goes: building the services, the snapshot and its hash, the
 *   claim and its release, `RunStarted` and `RunFinished` (SQLite commits);
 * - `polyloop runs` cold start: a new `node` process running the launcher as shipped — since
 *   design 0213 the bundle, compiled from its code cache (written by the first, unrecorded
 *   start, in a cache directory of the bench's own); before it the compiled `dist/` (design
 *   0210), and before that tsx transpiling the source at every start — beside it the bundle
 *   without its cache, the unbundled `dist/` and the source through tsx: CPU ms, wall ms and
 *   peak RSS, on a demo store (one run; target ≤ 0.4 s), and the launcher on the store of 200
 *   runs. `--cold-start` measures only this part.
 *
 * Results are merged into `bench/results.startup.json` (or `--out`) under the label, with the
 * machine, its load and the time.
 */
import * as Agent from "@polyloop/core/Agent"
import * as Ids from "@polyloop/core/Ids"
import * as RunLog from "@polyloop/core/RunLog"
import * as RunLogStore from "@polyloop/core/RunLogStore"
import * as Snapshot from "@polyloop/core/Snapshot"
import * as SqlRunLogStore from "@polyloop/sql/SqlRunLogStore"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import { spawnSync } from "node:child_process"
import * as fs from "node:fs"
import { createRequire } from "node:module"
import * as os from "node:os"
import * as path from "node:path"
import { fileURLToPath } from "node:url"
import * as F from "./lib/fixtures.js"
import { argv, cpuMicros, now, option, round, stat } from "./lib/measure.js"
import * as Raw from "./lib/sqlite.js"

const benchDir = path.dirname(fileURLToPath(import.meta.url))
const root = path.resolve(benchDir, "..")
const label = option("--label") ?? "after"
const quick = argv.includes("--quick")
const coldStartOnly = argv.includes("--cold-start")
/** `--runs`: only the runs' figures, not the cold start (e.g. on an older tree, for the runs' "before"). */
const runsOnly = argv.includes("--runs")
const out = option("--out") ?? path.join(benchDir, "results.startup.json")
const reps = quick ? 20 : 200
const dir = Raw.dataDir(benchDir)

let counter = 0
const nextId = (prefix: string) => `${prefix}-${process.pid}-${counter++}`

/** A run of `steps` steps with its services (and a fresh in-memory store) built for it. */
const memoryRun = (steps: number) =>
  Agent.run(F.request(nextId("mem"), steps)).pipe(Effect.provide(F.servicesFor(RunLogStore.layerMemory, steps)))

/** A figure as wall ms and as CPU ms of this process (the CPU figure is what a loaded machine disturbs least). */
interface Timed {
  readonly wall: ReturnType<typeof stat>
  readonly cpu: ReturnType<typeof stat>
}

/** `n` evaluations of `effect` after `n / 10` unrecorded ones: wall and CPU ms of each. */
const wallMs = async <A, E>(n: number, effect: () => Effect.Effect<A, E>): Promise<Timed> => {
  const walls: Array<number> = []
  const cpus: Array<number> = []
  for (let i = 0; i < n + Math.ceil(n / 10); i++) {
    const started = now()
    const cpu = cpuMicros()
    await Effect.runPromise(effect())
    if (i >= Math.ceil(n / 10)) {
      walls.push(now() - started)
      cpus.push((cpuMicros() - cpu) / 1000)
    }
  }
  return { wall: stat(walls), cpu: stat(cpus) }
}

const summary = (s: ReturnType<typeof stat> | Timed, digits = 3) =>
  "wall" in s
    ? { wallMedian: round(s.wall.median, digits), wallMin: round(s.wall.min, digits), cpuMedian: round(s.cpu.median, digits), cpuMin: round(s.cpu.min, digits) }
    : { median: round(s.median, digits), min: round(s.min, digits), max: round(s.max, digits) }

/** Fills a SQLite store with `runs` finished 3-step runs, then closes it. */
const fill = (filename: string, runs: number) =>
  Effect.runPromise(Effect.scoped(Effect.flatMap(Layer.build(SqlRunLogStore.layerSqlite({ filename, synchronous: "NORMAL" })), (context) => {
    const store = Context.get(context, RunLogStore.RunLogStore)
    return Effect.forEach(Array.from({ length: runs }, (_, i) => i), (i) => F.runOn(store, F.model(F.replies(3)), F.request(`filled-${i}`, 3)), { discard: true })
  })))

const withOpenSqlite = <A>(filename: string, use: (store: RunLogStore.RunLogStore.Service) => Promise<A>): Promise<A> =>
  Effect.runPromise(Effect.scoped(Effect.flatMap(Layer.build(SqlRunLogStore.layerSqlite({ filename })), (context) =>
    Effect.promise(() => use(Context.get(context, RunLogStore.RunLogStore))))))

/** The fixed cost's parts, each measured alone on `store`. */
const parts = async (store: RunLogStore.RunLogStore.Service, n: number) => {
  const request = F.request("parts", 1)
  const buildServices = await wallMs(n, () => Effect.scoped(Layer.build(F.servicesFor(RunLogStore.layerMemory, 1))))
  const snapshotHash = await wallMs(n, () => Effect.sync(() => Snapshot.hash(Agent.snapshotOf(request, "native-tool-calls"))))
  const claim = await wallMs(n, () => Effect.scoped(store.claim(Ids.runId(nextId("claim")))))
  const startedFinished = await wallMs(n, () => {
    const runId = Ids.runId(nextId("records"))
    const snapshot = Agent.snapshotOf(request, "native-tool-calls")
    const started = RunLog.RunStarted.make({ seq: 0, runId, task: request.task, snapshot, snapshotHash: Snapshot.hash(snapshot), startedAt: 0 })
    return Effect.scoped(Effect.zipRight(
      store.claim(runId),
      Effect.zipRight(
        store.start(started),
        store.readLog(runId).pipe(Effect.map((log) => Option.isSome(log.started)))
      )
    ))
  })
  return { buildServices: summary(buildServices), snapshotHash: summary(snapshotHash), claim: summary(claim), runStartedAppendAndRead: summary(startedFinished) }
}

/** Two raw commits per step (the reply, then the result) at `synchronous=FULL`: wall µs per step. */
const rawCommits = (filename: string, steps: number): number => {
  const db = Raw.open(filename)
  Raw.createRecordsTable(db)
  const insert = db.prepare("INSERT INTO polyloop_records (run_id, seq, kind, step, payload) VALUES (?, ?, ?, ?, ?)")
  const payload = JSON.stringify(F.replyFor(0))
  const started = now()
  let seq = 0
  for (let step = 0; step < steps; step++) {
    db.transaction(() => insert.run("raw", seq++, "ModelReplied", step, payload))()
    db.transaction(() => insert.run("raw", seq++, "ActionResulted", step, payload))()
  }
  const micros = ((now() - started) * 1000) / steps
  db.close()
  return micros
}

/** How `polyloop runs` is started: the launcher as shipped, or one build of the command directly. */
type Start = "launcher" | "bundleWithoutCache" | "unbundledDist" | "sourceThroughTsx"

/** `polyloop runs` in a new process, `n` times after one unrecorded start: CPU ms, wall ms and peak RSS (MiB). */
const coldStart = (db: string, start: Start, n: number, cache: string) => {
  const cli = path.join(root, "packages", "cli")
  const launcher = path.join(cli, "bin", "polyloop.js")
  const tsx = createRequire(import.meta.url).resolve("tsx")
  const env: NodeJS.ProcessEnv = { ...process.env, XDG_CACHE_HOME: cache }
  delete env.NODE_OPTIONS
  delete env.NODE_DISABLE_COMPILE_CACHE
  if (start === "bundleWithoutCache") env.NODE_DISABLE_COMPILE_CACHE = "1"
  const command = ["runs", "--db", db]
  const args = start === "sourceThroughTsx"
    ? ["--conditions=@polyloop/source", `--import=${tsx}`, launcher, ...command]
    : start === "unbundledDist"
    ? [path.join(cli, "dist", "bin.js"), ...command]
    : [launcher, ...command]
  const walls: Array<number> = []
  const cpus: Array<number> = []
  const rss: Array<number> = []
  for (let i = 0; i < n + 1; i++) {
    const started = now()
    const result = spawnSync("/usr/bin/time", ["-f", "%M %U %S", process.execPath, ...args], { env, encoding: "utf8" })
    const wall = now() - started
    if (result.status !== 0) throw new Error(`polyloop runs failed: ${result.stderr}`)
    if (i === 0) continue // the first start reads the files into the page cache (and writes the code cache)
    const [maxRss, user, system] = (result.stderr.trim().split("\n").pop() ?? "").split(" ").map(Number)
    walls.push(wall)
    cpus.push((user! + system!) * 1000)
    rss.push(maxRss! / 1024)
  }
  return { cpuMs: summary(stat(cpus), 1), wallMs: summary(stat(walls), 1), peakRssMiB: summary(stat(rss), 1) }
}

/**
 * The cold start of `polyloop runs`, each way the command can be started on this code, on a demo
 * store (one finished run, made by `polyloop demo`: the target); the launcher also on
 * `filled` (200 finished runs: `runs` checks every listed run's log).
 */
const coldStarts = (filled: string) => {
  const cli = path.join(root, "packages", "cli")
  const cache = path.join(dir, "compile-cache")
  const has = (file: string) => fs.existsSync(path.join(cli, file))
  const demo = path.join(dir, "demo.db")
  const env: NodeJS.ProcessEnv = { ...process.env, XDG_CACHE_HOME: cache }
  delete env.NODE_OPTIONS
  const made = spawnSync(process.execPath, [path.join(cli, "bin", "polyloop.js"), "demo", "--db", demo], { env, encoding: "utf8" })
  if (made.status !== 0) throw new Error(`polyloop demo failed: ${made.stderr}`)
  // The launcher as the code of this checkout ships it; the builds it can choose, where present.
  const conditioned = fs.readFileSync(path.join(cli, "package.json"), "utf8").includes("@polyloop/source")
  const bundled = has("bundle/polyloop.cjs")
  return {
    launcher: coldStart(demo, "launcher", quick ? 3 : 9, cache),
    ...(bundled ? { bundleWithoutCache: coldStart(demo, "bundleWithoutCache", quick ? 3 : 7, cache) } : {}),
    ...(bundled && has("dist/bin.js") ? { unbundledDist: coldStart(demo, "unbundledDist", quick ? 3 : 7, cache) } : {}),
    ...(conditioned ? { sourceThroughTsx: coldStart(demo, "sourceThroughTsx", quick ? 2 : 3, cache) } : {}),
    launcherOn200Runs: coldStart(filled, "launcher", quick ? 3 : 7, cache)
  }
}

const machine = () => {
  const load = os.loadavg()
  return { node: process.version, cpus: os.cpus().length, cpu: os.cpus()[0]?.model ?? "unknown", loadAverage: load.map((l) => round(l, 2)) }
}

const save = (results: unknown) => {
  const all = fs.existsSync(out) ? (JSON.parse(fs.readFileSync(out, "utf8")) as Record<string, Array<unknown>>) : {}
  all[label] = [...(all[label] ?? []), results]
  fs.writeFileSync(out, `${JSON.stringify(all, null, 2)}\n`)
  fs.rmSync(dir, { recursive: true, force: true })
  process.stdout.write(`${JSON.stringify(results, null, 2)}\n`)
}

/** `--cold-start`: only the command's start, on a store of 200 finished runs. */
const coldStartMain = async () => {
  const at = new Date().toISOString()
  const before = machine()
  const file = path.join(dir, "existing.db")
  process.stderr.write("[startup] filling a SQLite store with 200 finished runs\n")
  await fill(file, quick ? 20 : 200)
  process.stderr.write("[startup] polyloop runs, cold start\n")
  const cold = coldStarts(file)
  save({ at, machine: { ...before, loadAverageAfter: machine().loadAverage }, polyloopRunsColdStart: cold })
}

const main = async () => {
  const load = os.loadavg()
  const log = (message: string) => process.stderr.write(`[startup] ${message}\n`)

  log("1-step run, memory, services built per run")
  const memory1 = await wallMs(reps, () => memoryRun(1))
  // "In a warm process": the same run after the process has run it a few thousand times, so
  // that V8 has optimised its code (the figure above starts after 20 runs: mostly unoptimised).
  await wallMs(quick ? 100 : 3000, () => memoryRun(1))
  const memory1Warm = await wallMs(quick ? 100 : 1000, () => memoryRun(1))

  const file = path.join(dir, "existing.db")
  log("filling a SQLite store with 200 finished runs")
  await fill(file, quick ? 20 : 200)

  log("opening an existing SQLite store")
  const open = await wallMs(quick ? 10 : 50, () => Effect.scoped(Layer.build(SqlRunLogStore.layerSqlite({ filename: file }))))

  log("1-step run on an open SQLite store; the fixed cost's parts")
  const { sqlite1, sqliteParts } = await withOpenSqlite(file, async (store) => {
    const sqlite1 = await wallMs(quick ? 20 : 100, () => F.runOn(store, F.model(F.replies(1)), F.request(nextId("sql1"), 1)))
    return { sqlite1, sqliteParts: await parts(store, quick ? 20 : 100) }
  })
  const memoryParts = await Effect.runPromise(Effect.flatMap(RunLogStore.makeMemory, (store) => Effect.promise(() => parts(store, reps))))

  log("50-step runs built per run")
  const steps = 50
  const memory50: Array<number> = []
  for (let i = 0; i < (quick ? 5 : 30); i++) {
    const cpu = cpuMicros()
    await Effect.runPromise(memoryRun(steps))
    if (i > 0) memory50.push((cpuMicros() - cpu) / steps)
  }
  const sqlite50: Array<number> = []
  const sqlite50Cpu: Array<number> = []
  const raw50: Array<number> = []
  for (let i = 0; i < (quick ? 3 : 6); i++) {
    const fresh = path.join(dir, `fresh-${i}.db`)
    const started = now()
    const cpu = cpuMicros()
    await Effect.runPromise(Agent.run(F.request(nextId("sql50"), steps)).pipe(
      Effect.provide(F.servicesFor(SqlRunLogStore.layerSqlite({ filename: fresh }), steps))
    ))
    sqlite50.push(((now() - started) * 1000) / steps)
    sqlite50Cpu.push((cpuMicros() - cpu) / steps)
    const raw = path.join(dir, `raw-${i}.db`)
    raw50.push(rawCommits(raw, steps))
    Raw.remove(fresh)
    Raw.remove(raw)
  }

  const cold = runsOnly ? undefined : (log("polyloop runs, cold start"), coldStarts(file))

  const results = {
    at: new Date().toISOString(),
    machine: { ...machine(), loadAverage: load.map((l) => round(l, 2)) },
    oneStepRunMemoryMs: summary(memory1),
    oneStepRunMemoryWarmMs: summary(memory1Warm),
    oneStepRunOpenSqliteMs: summary(sqlite1),
    openExistingSqliteMs: summary(open),
    fixedCostPartsMs: { memory: memoryParts, sqlite: sqliteParts },
    fiftyStepRun: {
      memoryCpuMicrosPerStep: summary(stat(memory50), 1),
      sqliteWallMicrosPerStep: summary(stat(sqlite50), 1),
      sqliteCpuMicrosPerStep: summary(stat(sqlite50Cpu), 1),
      rawTwoCommitsWallMicrosPerStep: summary(stat(raw50), 1),
      sqliteOverRaw: round(stat(sqlite50).median / stat(raw50).median, 2)
    },
    ...(cold === undefined ? {} : { polyloopRunsColdStart: cold })
  }
  save(results)
}

;(coldStartOnly ? coldStartMain() : main()).catch((error: unknown) => {
  process.stderr.write(`${String(error)}\n`)
  process.exit(1)
})
