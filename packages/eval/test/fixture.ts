/**
 * The arithmetic experiment the tests run: sample `n` asks for `a + b`; the scripted agent calls
 * the `add` tool at step 0 and answers with the tool's result at step 1 (two model calls a run).
 * Configuration `careful` always answers right; `sloppy` is off by one on samples whose id hash
 * says so (a function of the sample and epoch, so every run of a sample answers the same way
 * however often it is resumed).
 */
import * as AgentDefinition from "@polyloop/core/AgentDefinition"
import * as NativeToolCallParser from "@polyloop/core/NativeToolCallParser"
import * as Tool from "@polyloop/core/Tool"
import * as ToolRegistry from "@polyloop/core/ToolRegistry"
import * as Dataset from "@polyloop/eval/Dataset"
import * as Experiment from "@polyloop/eval/Experiment"
import * as Scorer from "@polyloop/eval/Scorer"
import * as ScriptedModel from "@polyloop/testing/ScriptedModel"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Schema from "effect/Schema"

export const add = Tool.make({
  name: "add",
  description: "Adds two numbers.",
  parameters: Schema.Struct({ a: Schema.Number, b: Schema.Number }),
  replayPolicy: "Always",
  handler: ({ a, b }) => Effect.succeed(String(a + b))
})
export const tools = ToolRegistry.make(add)

export const agent = AgentDefinition.make({ name: "adder", systemPrompt: "Add with the tool, then answer with the sum.", budget: { maxSteps: 4 } })

/** The samples: `a + b` with their sums as targets. */
export const samples = (n: number) =>
  Array.from({ length: n }, (_, i) => ({ id: `s${String(i).padStart(4, "0")}`, input: `${i} + ${2 * i + 1}`, target: String(3 * i + 1) }))

const taskOf = (messages: ReadonlyArray<{ readonly _tag: string; readonly text?: string }>): string => {
  const user = messages.find((m) => m._tag === "User")
  return user?.text ?? ""
}

/** A deterministic "is this run wrong" from the task and the epoch-independent id. */
const wrong = (task: string, rate: number): boolean => {
  let h = 2166136261
  for (let i = 0; i < task.length; i++) h = Math.imul(h ^ task.charCodeAt(i), 16777619) >>> 0
  return (h % 1000) / 1000 < rate
}

/** The script of a configuration that errs on a share `errorRate` of the samples. */
export const script = (errorRate: number): ScriptedModel.Script => (request, call) => {
  const task = taskOf(request.messages)
  const [a, b] = task.split(" + ").map(Number)
  if (call.step === 0) return ScriptedModel.toolCall("add", { a, b }, { usage: { inputTokens: 10, outputTokens: 5 } })
  const sum = a! + b! + (wrong(task, errorRate) ? 1 : 0)
  return ScriptedModel.text(`The sum is ${sum}.`, { inputTokens: 20, outputTokens: 6 })
}

/** A configuration on a given model layer. */
export const configuration = (name: string, model: Layer.Layer<import("@polyloop/core/ModelClient").ModelClient>): Experiment.Configuration => ({
  name,
  agent,
  tools,
  services: Layer.mergeAll(model, NativeToolCallParser.layer(), ToolRegistry.layerExecutor(tools))
})

/** The experiment: `n` samples, `epochs`, the two configurations on the given models. */
export const experiment = (options: {
  readonly name: string
  readonly n: number
  readonly epochs: number
  readonly careful: Layer.Layer<import("@polyloop/core/ModelClient").ModelClient>
  readonly sloppy?: Layer.Layer<import("@polyloop/core/ModelClient").ModelClient>
  readonly concurrency?: number
  readonly attempts?: number
}) =>
  Experiment.make({
    name: options.name,
    dataset: Dataset.fromIterable(samples(options.n)),
    configurations: [
      configuration("careful", options.careful),
      ...(options.sloppy === undefined ? [] : [configuration("sloppy", options.sloppy)])
    ],
    epochs: options.epochs,
    scorers: [Scorer.numeric(), Scorer.includes()],
    ...(options.concurrency === undefined ? {} : { concurrency: options.concurrency }),
    ...(options.attempts === undefined ? {} : { attempts: options.attempts })
  })
