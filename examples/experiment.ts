// An experiment (design 0320): 20 multiplication questions (experiment.jsonl) × 3 epochs through two
// configurations of one agent — `tool` multiplies with a tool, `guess` answers at once and is
// sometimes wrong — scored by a numeric match, with the mean, clustered standard error and
// bootstrap 95% CI of each, and the paired comparison. Every run is an ordinary durable run
// (`polyloop show multiplication/tool/q01/1`); run it again and nothing runs twice.
//
//   npx tsx examples/experiment.ts              (runs on ./experiment.db, prints the results)
//   polyloop eval examples/experiment.ts --db experiment.db   (the same through the command)
import { NodeContext, NodeRuntime } from "@effect/platform-node"
import { AgentDefinition, NativeToolCallParser, Tool, ToolRegistry } from "@polyloop/core"
import { Dataset, Experiment, ExperimentStore, Results, Scorer } from "@polyloop/eval"
import { SqlRunLogStore } from "@polyloop/sql"
import * as ScriptedModel from "@polyloop/testing/ScriptedModel"
import { Console, Effect, Layer, Schema } from "effect"
import * as path from "node:path"
import { fileURLToPath } from "node:url"

const multiply = Tool.make({
  name: "multiply",
  description: "Multiplies two numbers.",
  parameters: Schema.Struct({ a: Schema.Number, b: Schema.Number }),
  replayPolicy: "Always",
  handler: ({ a, b }) => Effect.succeed(String(a * b))
})
const tools = ToolRegistry.make(multiply)
const agent = AgentDefinition.make({ name: "multiplier", systemPrompt: "Answer the question with the number only.", budget: { maxSteps: 3 } })

/** The question's two numbers, read from the task the model is sent. */
const operands = (messages: ReadonlyArray<{ readonly _tag: string; readonly text?: string }>) => {
  const [a, b] = (messages.find((m) => m._tag === "User")?.text ?? "").match(/\d+/g)!.map(Number)
  return { a: a!, b: b! }
}

// Scripted models stand in for real ones (OpenAiCompatible.layerConfig() from @polyloop/ai is one).
const usage = { inputTokens: 40, outputTokens: 8 }
const toolModel = ScriptedModel.layer((request, call) => {
  const { a, b } = operands(request.messages)
  return call.step === 0 ? ScriptedModel.toolCall("multiply", { a, b }, { usage }) : ScriptedModel.text(String(a * b), usage)
})
const guessModel = ScriptedModel.layer((request) => {
  const { a, b } = operands(request.messages)
  return ScriptedModel.text(String(a * b + (a % 4 === 0 ? 10 : 0)), usage) // off on a quarter of the questions
})

const configuration = (name: string, model: Layer.Layer<import("@polyloop/core").ModelClient.ModelClient>): Experiment.Configuration => ({
  name,
  agent,
  tools,
  services: Layer.mergeAll(model, NativeToolCallParser.layer(), ToolRegistry.layerExecutor(tools))
})

export const experiment = Experiment.make({
  name: "multiplication",
  dataset: Dataset.fromJsonl(fileURLToPath(new URL("./experiment.jsonl", import.meta.url))),
  configurations: [configuration("tool", toolModel), configuration("guess", guessModel)],
  epochs: 3,
  scorers: [Scorer.numeric(), Scorer.custom("short", "1", ({ answer }) => (answer.trim().length <= 4 ? 1 : 0))],
  concurrency: 4
})

const main = Effect.gen(function*() {
  const summary = yield* Experiment.run(experiment)
  yield* Console.log(`ran ${summary.ran} runs, ${summary.skipped} already finished, ${summary.failed} failed`)
  const results = yield* Results.compute(experiment.name)
  for (const c of results.configurations) {
    for (const s of c.scores) {
      yield* Console.log(`${c.configuration} ${s.scorer}: mean ${s.mean.toFixed(3)} ± ${(s.stderr ?? 0).toFixed(3)} (95% CI ${s.ci?.lower.toFixed(3)}–${s.ci?.upper.toFixed(3)})`)
    }
  }
  const diff = yield* Results.compare(experiment.name, "tool", "guess", { scorer: "numeric" })
  yield* Console.log(`guess − tool on ${diff.samples} samples: ${diff.difference.toFixed(3)} (95% CI ${diff.ci?.lower.toFixed(3)}–${diff.ci?.upper.toFixed(3)})`)
})

const store = SqlRunLogStore.layerSqlite({ filename: "experiment.db" })
if (process.argv[1] !== undefined && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  NodeRuntime.runMain(main.pipe(Effect.provide(Layer.mergeAll(Layer.provideMerge(ExperimentStore.layer, store), NodeContext.layer))))
}
