/**
 * Short runs side by side with the AI SDK (issue 21, item 6): the cost per step of a whole run
 * built for itself, at 50 steps (a typical agent run, where the fixed cost of a run shows) and at
 * 1,000 steps (where the loop's per-step cost does).
 *
 *   npx tsx --conditions=@polyloop/source bench/peers.ts [--label <name>] [--quick] [--steps 50,1000]
 *
 * Each figure comes from new processes (three per figure, one with `--quick`), each doing one
 * unrecorded warm-up run and five measured runs; every run builds its services and a fresh store:
 *
 * - polyloop, memory: `Agent.run` with its five services and `RunLogStore.layerMemory` built for
 *   the run (the benchmark model answers every step with one call of the no-op tool);
 * - polyloop, SQLite: the same on `SqlRunLogStore.layerSqlite` on a new file per run (WAL,
 *   `synchronous=FULL`: every step is committed before the next);
 * - AI SDK (`ai`, pinned in the root devDependencies): `generateText` with `ai/test`'s
 *   `MockLanguageModelV3` answering every step with one call of a no-op tool, the tool loop
 *   stopped by `stopWhen: stepCountIs(steps)`; the model and the tool set are built for the run.
 *   It keeps nothing.
 * - ports floor (`bench/lib/portsFloor.ts`): the same ports called in the same order as a step of
 *   `Agent.run`, and nothing else — what the ports' Effect calls alone cost, so a per-step target
 *   can be set against what Effect itself costs. It keeps none of polyloop's promises.
 *   `ports-floor-no-context` is the same without providing the handler its `ToolContext`.
 *
 * The figure is CPU µs per step of the process (user + system: what the load of a shared machine
 * disturbs least), with wall µs beside it; the median over the measured runs of all processes.
 * Results are merged into `bench/results.startup.json` under `peers.<label>`.
 */
import * as Agent from "@polyloop/core/Agent"
import * as RunLogStore from "@polyloop/core/RunLogStore"
import * as SqlRunLogStore from "@polyloop/sql/SqlRunLogStore"
import { generateText, jsonSchema, stepCountIs, tool } from "ai"
import { MockLanguageModelV3 } from "ai/test"
import * as Effect from "effect/Effect"
import { spawnSync } from "node:child_process"
import * as fs from "node:fs"
import { createRequire } from "node:module"
import * as os from "node:os"
import * as path from "node:path"
import { fileURLToPath } from "node:url"
import * as F from "./lib/fixtures.js"
import * as Floor from "./lib/portsFloor.js"
import { argv, cpuMicros, now, option, round, stat } from "./lib/measure.js"
import * as Raw from "./lib/sqlite.js"

const self = fileURLToPath(import.meta.url)
const benchDir = path.dirname(self)

const systems = ["polyloop-memory", "polyloop-sqlite", "ai-sdk", "ports-floor", "ports-floor-no-context"] as const
type System = (typeof systems)[number]

let counter = 0
let sqliteDir: string | undefined
const fileFor = (name: string) => {
  sqliteDir ??= Raw.dataDir(benchDir)
  return path.join(sqliteDir, `${name}.db`)
}
const nextId = (prefix: string) => `${prefix}-${process.pid}-${counter++}`

/** One polyloop run of `steps` steps, its services and a fresh store built for it. */
const polyloopRun = (steps: number, store: "memory" | "sqlite"): Promise<unknown> => {
  if (store === "memory") {
    return Effect.runPromise(Agent.run(F.request(nextId("mem"), steps)).pipe(Effect.provide(F.servicesFor(RunLogStore.layerMemory, steps))))
  }
  const filename = fileFor(nextId("peer"))
  return Effect.runPromise(Agent.run(F.request(nextId("sql"), steps)).pipe(
    Effect.provide(F.servicesFor(SqlRunLogStore.layerSqlite({ filename }), steps))
  )).finally(() => Raw.remove(filename))
}

/** One AI SDK run of `steps` steps: a mock model that calls the no-op tool at every step, built for the run. */
const aiSdkRun = async (steps: number): Promise<unknown> => {
  let call = 0
  const model = new MockLanguageModelV3({
    doGenerate: async () => {
      const k = call++
      return {
        content: [{ type: "tool-call" as const, toolCallId: `call_${k}`, toolName: "noop", input: JSON.stringify({ n: k }) }],
        finishReason: { unified: "tool-calls" as const, raw: "tool_calls" },
        usage: {
          inputTokens: { total: 10, noCache: 10, cacheRead: undefined, cacheWrite: undefined },
          outputTokens: { total: 5, text: 5, reasoning: undefined }
        },
        warnings: []
      }
    }
  })
  const noop = tool({
    description: "Does nothing and says so.",
    inputSchema: jsonSchema<{ n: number }>({ type: "object", properties: { n: { type: "number" } }, required: ["n"] }),
    execute: async () => "ok"
  })
  const result = await generateText({
    model,
    system: "You are a benchmark. Call the noop tool.",
    prompt: "Call the noop tool until the budget runs out.",
    tools: { noop },
    stopWhen: stepCountIs(steps)
  })
  if (result.steps.length !== steps) throw new Error(`ai-sdk: ${result.steps.length} steps, expected ${steps}`)
  return result
}

const runOnce = (system: System, steps: number): Promise<unknown> => {
  switch (system) {
    case "ai-sdk":
      return aiSdkRun(steps)
    case "ports-floor":
      return Floor.run(nextId("floor"), steps)
    case "ports-floor-no-context":
      return Floor.run(nextId("floor"), steps, { toolContext: false })
    default:
      return polyloopRun(steps, system === "polyloop-memory" ? "memory" : "sqlite")
  }
}

/** In a child process: one warm-up run, then five measured runs; CPU and wall µs per step of each. */
const child = async (system: System, steps: number) => {
  const cpu: Array<number> = []
  const wall: Array<number> = []
  for (let i = 0; i < 6; i++) {
    const c = cpuMicros()
    const w = now()
    await runOnce(system, steps)
    if (i > 0) {
      cpu.push((cpuMicros() - c) / steps)
      wall.push(((now() - w) * 1000) / steps)
    }
  }
  if (sqliteDir !== undefined) fs.rmSync(sqliteDir, { recursive: true, force: true })
  process.stdout.write(`${JSON.stringify({ cpu, wall })}\n`)
}

/** Runs `processes` child processes for one figure and pools their measured runs. */
const figure = (system: System, steps: number, processes: number) => {
  const tsx = createRequire(import.meta.url).resolve("tsx")
  const env: NodeJS.ProcessEnv = { ...process.env }
  delete env.NODE_OPTIONS
  const cpu: Array<number> = []
  const wall: Array<number> = []
  for (let p = 0; p < processes; p++) {
    const result = spawnSync(process.execPath, ["--conditions=@polyloop/source", `--import=${tsx}`, self, "--child", system, String(steps)], {
      env,
      encoding: "utf8",
      maxBuffer: 1 << 24
    })
    if (result.status !== 0) throw new Error(`${system} ${steps}: ${result.stderr}`)
    const samples = JSON.parse(result.stdout.trim().split("\n").pop() ?? "{}") as { cpu: Array<number>; wall: Array<number> }
    cpu.push(...samples.cpu)
    wall.push(...samples.wall)
  }
  const c = stat(cpu)
  const w = stat(wall)
  return { cpuMicrosPerStep: { median: round(c.median, 1), min: round(c.min, 1), max: round(c.max, 1) }, wallMicrosPerStep: { median: round(w.median, 1), min: round(w.min, 1), max: round(w.max, 1) } }
}

const main = async () => {
  const label = option("--label") ?? "after"
  const quick = argv.includes("--quick")
  const out = option("--out") ?? path.join(benchDir, "results.startup.json")
  const processes = quick ? 1 : 3
  const loadBefore = os.loadavg()
  const bySteps: Record<string, Record<System, ReturnType<typeof figure>>> = {}
  const ratios: Record<string, Record<string, number>> = {}
  const stepCounts = (option("--steps") ?? "50,1000").split(",").map(Number)
  for (const steps of stepCounts) {
    const row = {} as Record<System, ReturnType<typeof figure>>
    for (const system of systems) {
      process.stderr.write(`[peers] ${system}, ${steps} steps\n`)
      row[system] = figure(system, steps, processes)
    }
    bySteps[String(steps)] = row
    const ai = row["ai-sdk"].cpuMicrosPerStep.median
    ratios[String(steps)] = {
      aiSdkOverPolyloopMemory: round(ai / row["polyloop-memory"].cpuMicrosPerStep.median, 2),
      aiSdkOverPolyloopSqlite: round(ai / row["polyloop-sqlite"].cpuMicrosPerStep.median, 2),
      aiSdkWallOverPolyloopSqliteWall: round(row["ai-sdk"].wallMicrosPerStep.median / row["polyloop-sqlite"].wallMicrosPerStep.median, 2),
      // The most any loop on these ports could reach, measured the same way (bench/lib/portsFloor.ts).
      aiSdkOverPortsFloor: round(ai / row["ports-floor"].cpuMicrosPerStep.median, 2),
      aiSdkOverPortsFloorWithoutToolContext: round(ai / row["ports-floor-no-context"].cpuMicrosPerStep.median, 2),
      polyloopMemoryOverPortsFloor: round(row["polyloop-memory"].cpuMicrosPerStep.median / row["ports-floor"].cpuMicrosPerStep.median, 2)
    }
  }
  const aiVersion = (JSON.parse(fs.readFileSync(createRequire(import.meta.url).resolve("ai/package.json"), "utf8")) as { version: string }).version
  const results = {
    at: new Date().toISOString(),
    machine: {
      node: process.version,
      cpus: os.cpus().length,
      cpu: os.cpus()[0]?.model ?? "unknown",
      loadAverageBefore: loadBefore.map((l) => round(l, 2)),
      loadAverageAfter: os.loadavg().map((l) => round(l, 2))
    },
    aiSdkVersion: aiVersion,
    processesPerFigure: processes,
    runsPerProcess: "1 warm-up + 5 measured",
    perStep: bySteps,
    ratios
  }
  const all = fs.existsSync(out) ? (JSON.parse(fs.readFileSync(out, "utf8")) as Record<string, unknown>) : {}
  const peers = (all["peers"] ?? {}) as Record<string, Array<unknown>>
  peers[label] = [...(peers[label] ?? []), results]
  all["peers"] = peers
  fs.writeFileSync(out, `${JSON.stringify(all, null, 2)}\n`)
  process.stdout.write(`${JSON.stringify(results, null, 2)}\n`)
}

const childAt = argv.indexOf("--child")
const done = childAt >= 0 ? child(argv[childAt + 1] as System, Number(argv[childAt + 2])) : main()
done.catch((error: unknown) => {
  process.stderr.write(`${String(error instanceof Error ? error.stack : error)}\n`)
  process.exit(1)
})
