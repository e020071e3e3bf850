/**
 * Several tool calls in one reply (design 0150): what a step costs with one call, and what a
 * step with three calls costs against three one-call steps — on the in-memory store (CPU µs per
 * step: the loop's own work) and on the SQLite store with `synchronous=FULL` (wall µs per step:
 * what a durable step costs, fsyncs included).
 *
 *   npx tsx bench/batch.ts [--label <name>] [--one-call-only] [--out <file>]
 *
 * Results are merged into `bench/results.batch.json` (or `--out`) under the label, with the
 * machine and the time. The one-call figures compare code versions: run this same file on the
 * code before design 0150 (`--one-call-only`, which uses nothing that code lacks) and on the
 * code after it, alternately, on one machine.
 */
import * as ModelClient from "@polyloop/core/ModelClient"
import * as ModelReply from "@polyloop/core/ModelReply"
import * as RunLogStore from "@polyloop/core/RunLogStore"
import * as Effect from "effect/Effect"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { fileURLToPath } from "node:url"
import * as F from "./lib/fixtures.js"
import { argv, cpuMicros, interleave, now, option, round, stat } from "./lib/measure.js"
import { withSqlite } from "./lib/store.js"

const benchDir = path.dirname(fileURLToPath(import.meta.url))
const label = option("--label") ?? "after"
const oneCallOnly = argv.includes("--one-call-only")
const out = option("--out") ?? path.join(benchDir, "results.batch.json")

/** A reply calling the no-op tool `calls` times (ids set, as a provider sends them). */
const replyOf = (step: number, calls: number): ModelReply.ModelReply =>
  ModelReply.make({
    text: "",
    toolCalls: Array.from({ length: calls }, (_, i) => ({ id: `call_${step}_${i}`, name: "noop", argumentsText: JSON.stringify({ n: step }) })),
    usage: { inputTokens: 10, outputTokens: 5 }
  })

/** The model: the reply of a step read off the history length (two messages to start, 1 + calls per step). */
const modelOf = (calls: number): ModelClient.ModelClient.Service => {
  const script = new Map<number, ModelReply.ModelReply>()
  return ModelClient.make((request) => {
    const step = (request.messages.length - 2) / (1 + calls)
    let reply = script.get(step)
    if (reply === undefined) {
      reply = replyOf(step, calls)
      script.set(step, reply)
    }
    return Effect.succeed(reply)
  })
}

let counter = 0

/** One run of `steps` steps of `calls` calls each on a store: [wall µs per step, CPU µs per step]. */
const runSteps = async (store: RunLogStore.RunLogStore.Service, calls: number, steps: number): Promise<readonly [number, number]> => {
  const program = F.runOn(store, modelOf(calls), F.request(`batch-${calls}-${++counter}`, steps))
  const t0 = now()
  const c0 = cpuMicros()
  const result = await Effect.runPromise(program)
  const c1 = cpuMicros()
  const t1 = now()
  if (result.steps !== steps) throw new Error(`batch bench: ${result.steps} steps instead of ${steps}`)
  if (result.effectiveSteps !== steps) throw new Error(`batch bench: ${result.effectiveSteps} effective steps: the calls did not run`)
  return [((t1 - t0) * 1000) / steps, (c1 - c0) / steps]
}

const memory = (calls: number, steps: number) => runSteps(Effect.runSync(RunLogStore.makeMemory), calls, steps)

const dir = fs.mkdtempSync(path.join(os.tmpdir(), "polyloop-bench-batch-"))
const sqlite = (calls: number, steps: number) =>
  withSqlite(path.join(dir, `b-${calls}-${++counter}.db`), (store) => Effect.promise(() => runSteps(store, calls, steps)))

const main = async () => {
  const started = Date.now()
  const kinds = oneCallOnly ? [1] : [1, 3]
  // Warm-up: JIT tiers and inline caches, both kinds of step.
  for (let i = 0; i < 10; i++) for (const calls of kinds) await memory(calls, 200)
  for (const calls of kinds) await sqlite(calls, 20)

  const memSteps = 500
  const cpu: Record<string, Array<number>> = { one: [], three: [] }
  const memCase = (calls: number, into: Array<number>) => async () => {
    const [wall, c] = await memory(calls, memSteps)
    into.push(c)
    return wall
  }
  const memCases: Record<string, () => Promise<number>> = { one: memCase(1, cpu.one!) }
  if (!oneCallOnly) memCases["three"] = memCase(3, cpu.three!)
  const memWall: Record<string, Array<number>> = await interleave({ warmup: 2, reps: 9 }, memCases)
  const sqlSteps = 60
  const sqlCases: Record<string, () => Promise<number>> = { one: async () => (await sqlite(1, sqlSteps))[0] }
  if (!oneCallOnly) sqlCases["three"] = async () => (await sqlite(3, sqlSteps))[0]
  const sqlWall: Record<string, Array<number>> = await interleave({ warmup: 1, reps: 5 }, sqlCases)
  const figure = (samples: ReadonlyArray<number>) => {
    const s = stat(samples)
    return { median: round(s.median), min: round(s.min), max: round(s.max) }
  }
  const oneCpu = figure(cpu.one!.slice(2))
  const oneSql = figure(sqlWall.one ?? [])
  const result: Record<string, unknown> = {
    at: new Date().toISOString(),
    node: process.version,
    cpus: os.cpus().length,
    loadAverage: os.loadavg().map((l) => round(l, 2)),
    durationSeconds: Math.round((Date.now() - started) / 1000),
    oneCallStep: {
      memoryCpuMicros: oneCpu,
      memoryWallMicros: figure(memWall.one ?? []),
      sqliteWallMicros: oneSql
    }
  }
  if (!oneCallOnly) {
    const threeCpu = figure(cpu.three!.slice(2))
    const threeSql = figure(sqlWall.three ?? [])
    result["threeCallStep"] = {
      memoryCpuMicros: threeCpu,
      memoryWallMicros: figure(memWall.three ?? []),
      sqliteWallMicros: threeSql,
      /** A three-call step against three one-call steps (below 1: cheaper). */
      againstThreeOneCallSteps: {
        memoryCpu: round(threeCpu.median / (3 * oneCpu.median), 3),
        sqliteWall: round(threeSql.median / (3 * oneSql.median), 3)
      }
    }
  }
  const existing = fs.existsSync(out) ? (JSON.parse(fs.readFileSync(out, "utf8")) as { runs?: Record<string, Array<unknown>> }) : {}
  const runs = existing.runs ?? {}
  runs[label] = [...(runs[label] ?? []), result]
  fs.writeFileSync(out, `${JSON.stringify({ ...existing, runs }, null, 2)}\n`)
  fs.rmSync(dir, { recursive: true, force: true })
  process.stdout.write(`${label}: ${JSON.stringify(result)}\n`)
}

await main()
