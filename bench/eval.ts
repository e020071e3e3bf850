/**
 * Resuming a large experiment (design 0320): an experiment of `--samples` samples (default
 * 10,000) × 1 epoch on a SQLite file, every run finished but one — the one whose model never
 * answers the first time (that start is interrupted once every other run is done, leaving it
 * started and unfinished). Then a new start of the same experiment, timed: from the call of
 * `Experiment.run` to the moment it has found the unfinished run and started it (its first
 * progress report with a run running), and to its end. The goal: under 5 s to find it.
 *
 *   npx tsx --conditions=@polyloop/source bench/eval.ts [--samples 10000]      (npm run bench:eval)
 *
 * Writes `bench/results.eval.json` and `bench/EVAL.md`. The database is built once per call
 * (SQLite, synchronous=NORMAL to build it faster; the timed start is the same either way).
 */
import * as NodeContext from "@effect/platform-node/NodeContext"
import * as AgentDefinition from "@polyloop/core/AgentDefinition"
import * as NativeToolCallParser from "@polyloop/core/NativeToolCallParser"
import * as ToolRegistry from "@polyloop/core/ToolRegistry"
import * as Dataset from "@polyloop/eval/Dataset"
import * as Experiment from "@polyloop/eval/Experiment"
import * as ExperimentStore from "@polyloop/eval/ExperimentStore"
import * as Scorer from "@polyloop/eval/Scorer"
import * as SqlRunLogStore from "@polyloop/sql/SqlRunLogStore"
import * as ScriptedModel from "@polyloop/testing/ScriptedModel"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as Layer from "effect/Layer"
import { execSync } from "node:child_process"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { fileURLToPath } from "node:url"
import { now, option, round } from "./lib/measure.js"

const benchDir = path.dirname(fileURLToPath(import.meta.url))
const SAMPLES = Number(option("--samples") ?? 10_000)
const log = (message: string) => process.stderr.write(`[bench eval] ${message}\n`)

const agent = AgentDefinition.make({ name: "echo", systemPrompt: "Repeat the task.", budget: { maxSteps: 2 } })
const tools = ToolRegistry.empty
const samples = Array.from({ length: SAMPLES }, (_, i) => ({ id: `s${String(i).padStart(6, "0")}`, input: `task ${i}`, target: `task ${i}` }))
const stuck = samples[Math.floor(SAMPLES / 2)]!.input

const experimentOn = (model: ScriptedModel.ScriptedModel) =>
  Experiment.make({
    name: "bench-resume",
    dataset: Dataset.fromIterable(samples),
    configurations: [{ name: "echo", agent, tools, services: Layer.mergeAll(model.layer, NativeToolCallParser.layer(), ToolRegistry.layerExecutor(tools)) }],
    epochs: 1,
    scorers: [Scorer.exactMatch(), Scorer.includes()],
    concurrency: 16
  })

const taskOf = (request: { readonly messages: ReadonlyArray<{ readonly _tag: string; readonly text?: string }> }) =>
  request.messages.find((m) => m._tag === "User")?.text ?? ""

const dir = fs.mkdtempSync(path.join(os.tmpdir(), "polyloop-bench-eval-"))
const db = path.join(dir, "eval.db")
const store = SqlRunLogStore.layerSqlite({ filename: db, synchronous: "NORMAL" })
const services = Layer.mergeAll(Layer.provideMerge(ExperimentStore.layer, store), NodeContext.layer)

const build = Effect.gen(function*() {
  // The first start: the stuck sample's model call never returns; once everything else is done, interrupt.
  const model = yield* ScriptedModel.make((request) => {
    const task = taskOf(request)
    return task === stuck ? Effect.never : Effect.succeed(ScriptedModel.text(task))
  })
  const allButOne = yield* Deferred.make<void>()
  const started = now()
  const fiber = yield* Effect.fork(Experiment.run(experimentOn(model), {
    onProgress: (p) => (p.done === p.total - 1 ? Deferred.succeed(allButOne, undefined) : Effect.void)
  }))
  yield* Deferred.await(allButOne)
  yield* Fiber.interrupt(fiber)
  return { buildSeconds: (now() - started) / 1000 }
})

const resume = Effect.gen(function*() {
  const model = yield* ScriptedModel.make((request) => ScriptedModel.text(taskOf(request)))
  let foundAt: number | undefined
  const started = now()
  const summary = yield* Experiment.run(experimentOn(model), {
    onProgress: (p) => Effect.sync(() => {
      if (foundAt === undefined && p.running > 0) foundAt = now()
    })
  })
  const ended = now()
  return { findMillis: foundAt! - started, totalMillis: ended - started, ran: summary.ran, skipped: summary.skipped, calls: yield* model.calls }
})

const main = Effect.gen(function*() {
  log(`building an experiment of ${SAMPLES} samples on ${db}`)
  const built = yield* build
  log(`built in ${round(built.buildSeconds, 1)} s; resuming`)
  const first = yield* resume
  log(`found the unfinished run after ${round(first.findMillis, 0)} ms; done after ${round(first.totalMillis, 0)} ms (ran ${first.ran}, skipped ${first.skipped})`)
  // A second resume: nothing unfinished (the scan alone).
  const second = yield* resume
  return { built, first, second }
}).pipe(Effect.provide(services))

const { built, first, second } = await Effect.runPromise(main)
const commit = (() => {
  try {
    return execSync("git rev-parse --short HEAD", { cwd: benchDir }).toString().trim()
  } catch {
    return "unknown"
  }
})()
const load = os.loadavg()[0]!.toFixed(1)
const result = {
  commit,
  at: new Date().toISOString(),
  samples: SAMPLES,
  loadAverage: Number(load),
  buildSeconds: round(built.buildSeconds, 1),
  resume: { findMillis: round(first.findMillis, 0), totalMillis: round(first.totalMillis, 0), ran: first.ran, skipped: first.skipped, modelCalls: first.calls },
  resumeNothingLeft: { totalMillis: round(second.totalMillis, 0), ran: second.ran, skipped: second.skipped, modelCalls: second.calls },
  goalMillis: 5000,
  met: first.findMillis < 5000 && first.ran === 1 && first.calls === 1
}
fs.writeFileSync(path.join(benchDir, "results.eval.json"), JSON.stringify(result, null, 2) + "\n")
fs.writeFileSync(
  path.join(benchDir, "EVAL.md"),
  `# Resuming a large experiment (design 0320)

\`npm run bench:eval\` (\`bench/eval.ts\`): an experiment of ${SAMPLES.toLocaleString("en")} samples × 1 epoch on a SQLite file, every
run finished and scored (two scorers) but one, which was started and left unfinished (its first start
interrupted while its model call hung). A new start of the same experiment is timed from the call of
\`Experiment.run\` to the moment it has found the unfinished run and started it, and to its end; then
a start with nothing left. Measured at ${commit} on the shared 2-core machine (load average ${load}).

| figure | measured | goal | met |
|---|---:|---:|:---:|
| find the one unfinished run among ${SAMPLES.toLocaleString("en")} | ${result.resume.findMillis} ms | < 5,000 ms | ${result.met ? "yes" : "no"} |
| that start to its end (the run finished and scored) | ${result.resume.totalMillis} ms | | |
| runs it ran / model calls it made | ${result.resume.ran} / ${result.resume.modelCalls} | 1 / 1 | ${result.resume.ran === 1 && result.resume.modelCalls === 1 ? "yes" : "no"} |
| a start with nothing left | ${result.resumeNothingLeft.totalMillis} ms (ran ${result.resumeNothingLeft.ran}, ${result.resumeNothingLeft.modelCalls} model calls) | | |
| building the database (${SAMPLES.toLocaleString("en")} runs, first start) | ${result.buildSeconds} s | | |

What the start does before it runs anything: loads and checks the dataset (hashing it), builds the
configuration's services and its snapshot hash, reads the recorded definition, and reads every
record *name* of the experiment in one \`listRefs\` (one outcome and two scores per run: ${(3 * SAMPLES).toLocaleString("en")} names);
no run's log and no blob is read for a run that is finished and scored.
`
)
log(`wrote bench/results.eval.json and bench/EVAL.md`)
fs.rmSync(dir, { recursive: true, force: true })
