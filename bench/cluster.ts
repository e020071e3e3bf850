/**
 * Runs per second through `@polyloop/cluster` (design 0200) with 1 and 3 runner processes on
 * this machine, against the SQLite store in one process — the same workload: `--runs` runs
 * (default 300) of `--steps` steps (default 5) each, the benchmarks' no-op tool and precomputed
 * replies (so what is measured is polyloop and its storage, not a model).
 *
 *   npm run bench:cluster -- [--runs 300] [--steps 5] [--pg <url>] [--pin] [--render] [--only store,1,floor]
 *
 * Each figure also reads the CPU time per step of this process, the runner processes and the
 * PostgreSQL server (when the bench started it) from /proc. `--pin` measures the cost model's check
 * (runners and client on CPU 0, PostgreSQL on CPU 1; `results.cluster.pinned.json`); `--render`
 * rewrites CLUSTER.md (figures, cost model, `CLUSTER-NOTES.md`) without measuring.
 *
 * The cluster figures run on PostgreSQL: `--pg` names a server (a database is created and
 * dropped per figure), else a private one is started as the tests do (`test/support/pg-server.ts`).
 * A figure is timed from the first `submit` to the last run's `Finished` row, after the runners
 * are up and their shards settled. Writes `bench/results.cluster.json` and `bench/CLUSTER.md`.
 */
import * as Reactivity from "@effect/experimental/Reactivity"
import * as SqlClient from "@effect/sql/SqlClient"
import * as PgClient from "@effect/sql-pg/PgClient"
import * as Cluster from "@polyloop/cluster/Cluster"
import * as SqlRunLogStore from "@polyloop/sql/SqlRunLogStore"
import * as RunLogStore from "@polyloop/core/RunLogStore"
import * as Context from "effect/Context"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Redacted from "effect/Redacted"
import * as Schedule from "effect/Schedule"
import { type ChildProcess, spawn } from "node:child_process"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { fileURLToPath, pathToFileURL } from "node:url"
import { clusterTimings, maxConcurrentRuns, shardsPerGroup } from "./lib/cluster-settings.js"
import * as CostModel from "./lib/costModel.js"
import * as Cpu from "./lib/cpu.js"
import * as F from "./lib/fixtures.js"
import { now, option, round } from "./lib/measure.js"
import { withSqlite } from "./lib/store.js"

const benchDir = path.dirname(fileURLToPath(import.meta.url))
const repoRoot = path.resolve(benchDir, "..")
const RUNS = Number(option("--runs") ?? 300)
const STEPS = Number(option("--steps") ?? 5)
/** `--only store,1,3,floor,sqlite`: measure only these figures (a quick comparison: printed, no results file written). */
const ONLY = option("--only")?.split(",")
const wanted = (figure: string) => ONLY === undefined || ONLY.includes(figure)
const log = (message: string) => process.stderr.write(`[bench cluster] ${message}\n`)

interface Figure {
  readonly setup: string
  readonly runs: number
  readonly seconds: number
  readonly runsPerSecond: number
  /** How long submitting every run took (cluster figures). */
  readonly submitSeconds?: number
  /** CPU milliseconds per step: this process (the client, or the store's process), the runner processes, the PostgreSQL server. */
  readonly cpuMsPerStep?: { readonly client: number; readonly runners: number; readonly postgres: number | null }
  /** The CPUs each part was pinned to (`--pin`). */
  readonly pinned?: string
}

/** Where the PostgreSQL server's processes are (for their CPU time), when this bench started it. */
let postmaster: number | undefined

/** What a figure's processes used, from `start()` to the returned `stop()`. */
const cpuMeter = (runnerPids: ReadonlyArray<number>) => {
  const client0 = process.cpuUsage()
  const runners0 = runnerPids.reduce((sum, pid) => sum + Cpu.treeCpuMs(pid), 0)
  const pg0 = postmaster === undefined ? 0 : Cpu.treeCpuMs(postmaster)
  return (steps: number) => {
    const client = process.cpuUsage(client0)
    const runners = runnerPids.reduce((sum, pid) => sum + Cpu.treeCpuMs(pid), 0) - runners0
    const pg = postmaster === undefined ? null : Cpu.treeCpuMs(postmaster) - pg0
    return {
      client: round((client.user + client.system) / 1000 / steps, 3),
      runners: round(runners / steps, 3),
      postgres: pg === null ? null : round(pg / steps, 3)
    }
  }
}

/** `--pin`: the client and runners on CPU 0, PostgreSQL on CPU 1. */
const PIN = process.argv.includes("--pin")

/** The SQLite store in this process: `RUNS` runs, `concurrency` at a time. */
const sqliteFigure = async (concurrency: number): Promise<Figure> => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "polyloop-bench-cluster-"))
  try {
    const model = F.model(F.replies(STEPS))
    const seconds = await withSqlite(path.join(dir, "runs.db"), (store) =>
      Effect.gen(function*() {
        const start = now()
        yield* Effect.forEach(
          Array.from({ length: RUNS }, (_, i) => `run-${i}`),
          (id) => F.runOn(store, model, F.request(id, STEPS)),
          { concurrency, discard: true }
        )
        return (now() - start) / 1000
      }))
    return { setup: `SQLite, one process, ${concurrency} runs at once`, runs: RUNS, seconds: round(seconds, 2), runsPerSecond: round(RUNS / seconds) }
  } finally {
    fs.rmSync(dir, { recursive: true, force: true })
  }
}

const freePort = async (): Promise<number> => {
  const net = await import("node:net")
  return new Promise((resolve, reject) => {
    const server = net.createServer()
    server.on("error", reject)
    server.listen(0, "127.0.0.1", () => {
      const address = server.address()
      const port = typeof address === "object" && address !== null ? address.port : 0
      server.close(() => resolve(port))
    })
  })
}

const spawnRunner = (url: string, id: string, port: number, floor: boolean): { child: ChildProcess; ready: Promise<void>; exited: Promise<void> } => {
  // `POLYLOOP_BENCH_RUNNER_ARGS`: extra node arguments for the runners (e.g. `--cpu-prof --cpu-prof-dir=/tmp/p`).
  const extra = (process.env["POLYLOOP_BENCH_RUNNER_ARGS"] ?? "").split(" ").filter((a) => a !== "")
  const child = spawn(process.execPath, [...extra, "--conditions=@polyloop/source", "--import", "tsx", path.join(benchDir, "lib", "cluster-runner.ts"), url, id, String(port), String(STEPS)], {
    cwd: repoRoot,
    env: { ...process.env, POLYLOOP_BENCH_CLUSTER_FLOOR: floor ? "1" : "0" },
    stdio: ["ignore", "pipe", "inherit"]
  })
  const exited = new Promise<void>((resolve) => child.on("close", () => resolve()))
  const ready = new Promise<void>((resolve, reject) => {
    let out = ""
    child.stdout?.setEncoding("utf8")
    child.stdout?.on("data", (chunk: string) => {
      out += chunk
      if (out.includes(`ready ${id}\n`)) resolve()
    })
    void exited.then(() => reject(new Error(`runner ${id} exited before it was ready`)))
  })
  return { child, ready, exited }
}

const admin = (url: string) => PgClient.make({ url: Redacted.make(url), maxConnections: 1 }).pipe(Effect.provide(Reactivity.layer))

/** The PostgreSQL store in this process, no cluster: `RUNS` runs, `concurrency` at a time, on a fresh database. */
const pgFigure = (serverUrl: string, concurrency: number): Effect.Effect<Figure, unknown> =>
  Effect.scoped(Effect.gen(function*() {
    const name = `bench_pg_${Date.now().toString(36)}`
    const pg = yield* admin(serverUrl)
    yield* Effect.acquireRelease(pg.unsafe(`CREATE DATABASE ${name}`), () => pg.unsafe(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`).pipe(Effect.ignore))
    const parsed = new URL(serverUrl)
    parsed.pathname = `/${name}`
    const store = yield* Layer.build(SqlRunLogStore.layerPg({ url: Redacted.make(parsed.toString()), maxConnections: concurrency + 4 })).pipe(
      Effect.map((context) => Context.get(context, RunLogStore.RunLogStore))
    )
    const model = F.model(F.replies(STEPS))
    const meter = cpuMeter([])
    const start = now()
    yield* Effect.forEach(Array.from({ length: RUNS }, (_, i) => `run-${i}`), (id) => F.runOn(store, model, F.request(id, STEPS)), {
      concurrency,
      discard: true
    })
    const seconds = (now() - start) / 1000
    return {
      setup: `PostgreSQL store, one process, no cluster, ${concurrency} runs at once`,
      runs: RUNS,
      seconds: round(seconds, 2),
      runsPerSecond: round(RUNS / seconds),
      cpuMsPerStep: meter(RUNS * STEPS),
      ...(PIN ? { pinned: "store process CPU 0, PostgreSQL CPU 1" } : {})
    }
  }))

/**
 * `RUNS` runs through a cluster of `runners` runner processes on a fresh database. `floor`: the
 * entity runs nothing (`cluster-runner.ts`): `@effect/cluster`'s own cost of a run's message.
 */
const clusterFigure = (serverUrl: string, runners: number, floor = false): Effect.Effect<Figure, unknown> =>
  Effect.scoped(Effect.gen(function*() {
    const name = `bench_cluster_${runners}_${Date.now().toString(36)}`
    const pg = yield* admin(serverUrl)
    yield* Effect.acquireRelease(pg.unsafe(`CREATE DATABASE ${name}`), () => pg.unsafe(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`).pipe(Effect.ignore))
    const parsed = new URL(serverUrl)
    parsed.pathname = `/${name}`
    const url = parsed.toString()
    const procs = yield* Effect.forEach(Array.from({ length: runners }, (_, i) => i), (i) =>
      Effect.acquireRelease(
        Effect.promise(() => freePort()).pipe(Effect.map((port) => spawnRunner(url, `runner-${i}`, port, floor))),
        (runner) => Effect.promise(() => {
          runner.child.kill("SIGTERM")
          return runner.exited
        })
      ))
    yield* Effect.promise(() => Promise.all(procs.map((p) => p.ready)))
    if (PIN) for (const p of procs) if (p.child.pid !== undefined) Cpu.pinTree(p.child.pid, "0")
    const runnerPids = procs.flatMap((p) => (p.child.pid === undefined ? [] : [p.child.pid]))
    return yield* Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      // The shards settled: every shard's advisory lock held, by every runner.
      yield* sql<{ locks: number | string; holders: number | string }>`SELECT count(*) AS locks, count(DISTINCT pid) AS holders
        FROM pg_locks WHERE locktype = 'advisory' AND granted AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`.pipe(
        Effect.filterOrFail(([row]) => Number(row?.locks) === shardsPerGroup && Number(row?.holders) === runners),
        Effect.retry(Schedule.spaced(Duration.millis(200))),
        Effect.timeout(Duration.minutes(2))
      )
      const meter = cpuMeter(runnerPids)
      const start = now()
      yield* Effect.forEach(Array.from({ length: RUNS }, (_, i) => `run-${i}`), (id) => Cluster.submit(id, {}), { concurrency: 16, discard: true })
      const submitted = (now() - start) / 1000
      // A count, not the rows: the check shares the two cores with what it measures.
      yield* sql<{ finished: number | string }>`SELECT count(*) AS finished FROM polyloop_cluster_runs WHERE status = 'Finished'`.pipe(
        Effect.filterOrFail(([row]) => Number(row?.finished) === RUNS),
        Effect.retry(Schedule.spaced(Duration.millis(50))),
        Effect.timeout(Duration.minutes(10))
      )
      const seconds = (now() - start) / 1000
      return {
        setup: floor
          ? `cluster floor, ${runners} runner process${runners === 1 ? "" : "es"}: the entity runs nothing, records Finished and replies`
          : `cluster, ${runners} runner process${runners === 1 ? "" : "es"} (${maxConcurrentRuns} runs at once each), PostgreSQL`,
        runs: RUNS,
        seconds: round(seconds, 2),
        runsPerSecond: round(RUNS / seconds),
        submitSeconds: round(submitted, 2),
        cpuMsPerStep: meter(RUNS * STEPS),
        ...(PIN ? { pinned: `runner${runners === 1 ? "" : "s"} and client CPU 0, PostgreSQL CPU 1` } : {})
      } satisfies Figure
    }).pipe(
      Effect.provide(
        Cluster.layerClient({ timings: clusterTimings, shardsPerGroup }).pipe(
          Layer.provideMerge(SqlRunLogStore.layerPgClient({ url: Redacted.make(url), maxConnections: 8 }))
        )
      )
    )
  }))

interface PgServerModule {
  readonly start: (options?: { readonly database?: string }) => Promise<{ readonly url: string; readonly dataDir: string; readonly stop: () => void }>
}

const main = async () => {
  // `--render`: CLUSTER.md again from the results files and CLUSTER-NOTES.md, nothing measured.
  if (process.argv.includes("--render")) return writeClusterMd()
  let serverUrl = option("--pg")
  let stop = () => {}
  if (serverUrl === undefined) {
    const PgServer = (await import(pathToFileURL(path.join(repoRoot, "test", "support", "pg-server.ts")).href)) as PgServerModule
    const server = await PgServer.start({ database: "bench" })
    serverUrl = server.url
    stop = server.stop
    postmaster = Cpu.postmasterPid(server.dataDir)
    if (PIN) {
      Cpu.pinTree(postmaster, "1")
      Cpu.pinTree(process.pid, "0")
    }
  }
  try {
    const figures: Array<Figure> = []
    if (!PIN && wanted("sqlite")) {
      log(`SQLite, ${RUNS} runs of ${STEPS} steps`)
      await sqliteFigure(16) // warm-up
      figures.push(await sqliteFigure(maxConcurrentRuns))
      figures.push(await sqliteFigure(maxConcurrentRuns * 3))
    }
    if (wanted("store")) {
      log("PostgreSQL store in one process")
      await Effect.runPromise(pgFigure(serverUrl, maxConcurrentRuns)) // warm-up
      figures.push(await Effect.runPromise(pgFigure(serverUrl, maxConcurrentRuns)))
    }
    for (const runners of (PIN ? [1, 2] : [1, 3]).filter((n) => wanted(String(n)))) {
      log(`cluster with ${runners} runner(s)`)
      figures.push(await Effect.runPromise(clusterFigure(serverUrl, runners)))
    }
    if (!PIN && wanted("floor")) {
      log("cluster floor (1 runner, no runs)")
      figures.push(await Effect.runPromise(clusterFigure(serverUrl, 1, true)))
    }
    const load = os.loadavg().map((l) => l.toFixed(1)).join(" / ")
    const machine = `${os.cpus()[0]?.model ?? "unknown"}, ${os.availableParallelism()} cores, Node ${process.version}, load average at the end ${load} (1/5/15 min)`
    const result = { date: new Date().toISOString(), machine, runs: RUNS, steps: STEPS, pinned: PIN, figures }
    const table = renderTable(figures)
    // The pinned run is the cost model's check: its own file; CLUSTER.md is rewritten from both.
    // `--only` measures a part: printed, not written over the full results.
    if (ONLY === undefined) {
      fs.writeFileSync(path.join(benchDir, PIN ? "results.cluster.pinned.json" : "results.cluster.json"), JSON.stringify(result, null, 2) + "\n")
      writeClusterMd()
    }
    process.stdout.write(`${table}\n`)
  } finally {
    stop()
  }
}

/** The figures as a Markdown table (setup, throughput, CPU per step by part). */
const renderTable = (figures: ReadonlyArray<Figure>): string => {
  const cpu = (f: Figure, key: "client" | "runners" | "postgres") => {
    const v = f.cpuMsPerStep?.[key]
    return v === undefined || v === null ? "—" : v.toFixed(2)
  }
  return [
    "| setup | runs | seconds | runs/s | of which submitting (s) | CPU ms/step: client | runners | PostgreSQL |",
    "|---|---:|---:|---:|---:|---:|---:|---:|",
    ...figures.map((f) =>
      `| ${f.setup}${f.pinned === undefined ? "" : ` (${f.pinned})`} | ${f.runs} | ${f.seconds} | ${f.runsPerSecond} | ${f.submitSeconds ?? "—"} | ${cpu(f, "client")} | ${cpu(f, "runners")} | ${cpu(f, "postgres")} |`
    )
  ].join("\n")
}

const readJson = (file: string): unknown => (fs.existsSync(file) ? JSON.parse(fs.readFileSync(file, "utf8")) : undefined)

/** `bench/CLUSTER.md` from `results.cluster.json`, the cost model, and the pinned check if measured. */
const writeClusterMd = () => {
  const result = readJson(path.join(benchDir, "results.cluster.json")) as
    | { readonly date: string; readonly machine: string; readonly runs: number; readonly steps: number; readonly figures: ReadonlyArray<Figure> }
    | undefined
  if (result === undefined) return
  const pinned = readJson(path.join(benchDir, "results.cluster.pinned.json")) as { readonly steps: number; readonly figures: ReadonlyArray<Figure> } | undefined
  const { figures, machine, runs: RUNS_, steps: STEPS_ } = result
  const table = renderTable(figures)
  const store = figures.find((f) => f.setup.startsWith("PostgreSQL store"))
  const one = figures.find((f) => f.setup.startsWith("cluster, 1 runner process "))
  const floor = figures.find((f) => f.setup.startsWith("cluster floor, 1 runner"))
  const perRun = (f: Figure) => (f.cpuMsPerStep === undefined ? undefined : (f.cpuMsPerStep.runners + (f.cpuMsPerStep.postgres ?? 0)) * STEPS_)
  const floorText = floor === undefined || store === undefined || perRun(floor) === undefined
    ? ""
    : ` The floor under that: with the entity running nothing (it records \`Finished\` and replies), a run's message costs the runner and PostgreSQL **${perRun(floor)!.toFixed(1)} CPU ms**, against **${((store.cpuMsPerStep!.client + (store.cpuMsPerStep!.postgres ?? 0)) * STEPS_).toFixed(1)} ms** for the whole ${STEPS_}-step run on the store alone (its process and PostgreSQL) and **${one === undefined || perRun(one) === undefined ? "?" : perRun(one)!.toFixed(1)} ms** through the cluster.`
  const overhead = store !== undefined && one !== undefined ? `\n\nA run through the cluster (1 runner) costs **${(store.runsPerSecond / one.runsPerSecond).toFixed(2)}×** a run of the PostgreSQL store alone in one process (runs/s of the two figures).${floorText}` : ""
  const notes = path.join(benchDir, "CLUSTER-NOTES.md")
  fs.writeFileSync(
    path.join(benchDir, "CLUSTER.md"),
    `# Runs per second through the cluster (design 0200)\n\n` +
      `\`npm run bench:cluster\` — ${RUNS_} runs of ${STEPS_} steps each (the no-op tool, precomputed replies), ` +
      `${result.date}, ${machine}. A cluster figure is timed from the first \`submit\` to the last \`Finished\` row ` +
      `(runners already up, shards settled); runners, client and PostgreSQL share this machine. CPU per step is read from \`/proc\` ` +
      `(this process, the runner processes, the PostgreSQL server's processes).\n\n${table}${overhead}\n\n` +
      `${CostModel.render(result, pinned)}\n` +
      (fs.existsSync(notes) ? `\n${fs.readFileSync(notes, "utf8")}` : "")
  )
}

void main().catch((error) => {
  process.stderr.write(`${error instanceof Error ? error.stack : String(error)}\n`)
  process.exitCode = 1
})
