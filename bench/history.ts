/**
 * History policies (design 0300, issue 30): is a masking run's step cost flat along the run?
 * One 10,000-step run under `maskObservations({ keepLast: 5, every: 10 })`, one under that and
 * `fitTokens({ window: 32000, headroom: 4000 })` (steps dropped in blocks, each a record), and
 * one under the default (keep everything), on the in-memory store, each tool answering ~1 kB. The wall time
 * between consecutive `StepCompleted` events is taken around steps 10, 1,000 and 10,000
 * (medians of 40 steps); also the size of the last and the largest request (characters the model
 * reads) and, for the budget, the largest request's count (approximate tokens).
 *
 *   npx tsx --conditions=@polyloop/source bench/history.ts [--steps 10000] [--label <name>] [--out <file>]
 *
 * Results are merged into `bench/results.history.json` (or `--out`) under the label; the
 * summary is in `bench/HISTORY.md`.
 */
import * as Agent from "@polyloop/core/Agent"
import * as AgentDefinition from "@polyloop/core/AgentDefinition"
import * as EventSink from "@polyloop/core/EventSink"
import * as HistoryPolicy from "@polyloop/core/HistoryPolicy"
import * as Ids from "@polyloop/core/Ids"
import type * as Message from "@polyloop/core/Message"
import * as ModelClient from "@polyloop/core/ModelClient"
import * as ModelReply from "@polyloop/core/ModelReply"
import * as NativeToolCallParser from "@polyloop/core/NativeToolCallParser"
import * as RunLogStore from "@polyloop/core/RunLogStore"
import * as Tool from "@polyloop/core/Tool"
import * as ToolRegistry from "@polyloop/core/ToolRegistry"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Schema from "effect/Schema"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { fileURLToPath } from "node:url"
import { median, now, option, round } from "./lib/measure.js"

const benchDir = path.dirname(fileURLToPath(import.meta.url))
const label = option("--label") ?? "after"
const out = option("--out") ?? path.join(benchDir, "results.history.json")
const steps = Number(option("--steps") ?? 10_000)

const file = Array.from({ length: 25 }, (_, i) => `line ${String(i).padStart(3, "0")} of the file, some text`).join("\n")
const read = Tool.make({
  name: "read_file",
  description: "Reads a file.",
  parameters: Schema.Struct({ n: Schema.Number }),
  replayPolicy: "Always",
  handler: () => Effect.succeed(file)
})
const tools = ToolRegistry.make(read)

/** The model: one read per step (the step is the number of Assistant messages), the size of each request noted. */
const modelFor = (sizes: Array<number>): ModelClient.ModelClient.Service => {
  // Called once per step, in order: its own counter is the step (counting the request's
  // Assistant messages would cost the history's length per step, the model's cost, not the loop's).
  let step = 0
  return ModelClient.make((request) =>
    Effect.sync(() => {
      step++
      // Every 100th request is measured (measuring is O(request)), and the last.
      if (step % 100 === 0 || step === steps) sizes.push(characters(request.messages))
      // No input count reported: a budget is counted, not calibrated by a count of another request.
      return ModelReply.make({ text: "", toolCalls: [{ id: `c${step}`, name: "read_file", argumentsText: `{"n":${step}}` }], usage: { inputTokens: 0, outputTokens: 1 } })
    })
  )
}

const characters = (messages: ReadonlyArray<Message.Message>): number => {
  let n = 0
  for (const m of messages) n += m.text.length
  return n
}

const runOnce = async (history: HistoryPolicy.HistoryPolicy | undefined) => {
  const times: Array<number> = []
  const sizes: Array<number> = []
  const agent = AgentDefinition.make({ name: "reader", systemPrompt: "Read.", budget: { maxSteps: steps }, ...(history === undefined ? {} : { history }) })
  const sink = EventSink.layer((e) => (e._tag === "StepCompleted" ? Effect.sync(() => void times.push(now())) : Effect.void))
  const program = Effect.flatMap(RunLogStore.makeMemory, (store) =>
    Agent.run({ runId: Ids.runId("bench"), agent, task: "Read every file.", tools }).pipe(
      Effect.provide(Layer.mergeAll(
        Layer.succeed(ModelClient.ModelClient, modelFor(sizes)),
        NativeToolCallParser.layer(),
        Layer.orDie(ToolRegistry.layerExecutor(tools)),
        sink,
        Layer.succeed(RunLogStore.RunLogStore, store)
      ))
    ))
  await Effect.runPromise(program)
  const around = (step: number) => {
    const from = Math.max(1, Math.min(step - 20, times.length - 41))
    const gaps: Array<number> = []
    for (let i = from; i < from + 40 && i < times.length; i++) gaps.push((times[i]! - times[i - 1]!) * 1000)
    return round(median(gaps), 1)
  }
  return {
    microsPerStepAt: { 10: around(10), 1000: around(1000), [steps]: around(steps) },
    lastRequestCharacters: sizes.at(-1) ?? 0,
    largestRequestCharacters: Math.max(0, ...sizes)
  }
}

const main = async () => {
  // Warm-up: one short run of each.
  const masking = HistoryPolicy.maskObservations({ keepLast: 5, every: 10 })
  const budget = HistoryPolicy.compose(masking, HistoryPolicy.fitTokens({ window: 32_000, headroom: 4_000 }))
  const keepAll = await runOnce(undefined)
  const masked = await runOnce(masking)
  const fitted = await runOnce(budget)
  const result = {
    at: new Date().toISOString(),
    machine: `${os.cpus().length} cores, load ${os.loadavg().map((l) => l.toFixed(2)).join(" ")}`,
    steps,
    masking: { policy: masking, ...masked, flatness: round(masked.microsPerStepAt[steps]! / masked.microsPerStepAt[10]!, 2) },
    maskingAndBudget: { policy: budget, ...fitted, flatness: round(fitted.microsPerStepAt[steps]! / fitted.microsPerStepAt[10]!, 2) },
    keepAll: { ...keepAll, growth: round(keepAll.microsPerStepAt[steps]! / keepAll.microsPerStepAt[10]!, 2) }
  }
  const previous = fs.existsSync(out) ? (JSON.parse(fs.readFileSync(out, "utf8")) as Record<string, unknown>) : {}
  fs.writeFileSync(out, `${JSON.stringify({ ...previous, [label]: result }, null, 2)}\n`)
  console.log(JSON.stringify(result, null, 2))
}

void main()
