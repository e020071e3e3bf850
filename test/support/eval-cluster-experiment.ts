/**
 * The experiment of the cluster experiment test (`eval-cluster.test.ts`), shared by the test and
 * its runner processes (`eval-cluster-runner.ts`): 30 sums × 2 epochs through one configuration
 * whose scripted model adds with a tool and answers, wrong on about a quarter of the samples.
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

const add = Tool.make({
  name: "add",
  description: "Adds two numbers.",
  parameters: Schema.Struct({ a: Schema.Number, b: Schema.Number }),
  replayPolicy: "Always",
  handler: ({ a, b }) => Effect.succeed(String(a + b))
})
const tools = ToolRegistry.make(add)
const agent = AgentDefinition.make({ name: "cluster-adder", systemPrompt: "Add with the tool, then answer.", budget: { maxSteps: 4 } })

/** The model every process uses (the runners serve it to every run). */
export const model = ScriptedModel.layer((request, call) => {
  const task = request.messages.find((m) => m._tag === "User")
  const [a, b] = (task?._tag === "User" ? task.text : "").split(" + ").map(Number)
  if (call.step === 0) return ScriptedModel.toolCall("add", { a, b }, { usage: { inputTokens: 10, outputTokens: 4 } })
  return ScriptedModel.text(`The sum is ${a! + b! + (a! % 4 === 1 ? 1 : 0)}.`, { inputTokens: 20, outputTokens: 6 })
})

export const experiment = Experiment.make({
  name: "on-cluster",
  dataset: Dataset.fromIterable(Array.from({ length: 30 }, (_, i) => ({ id: `s${i}`, input: `${i} + ${i * 3}`, target: String(i * 4) }))),
  configurations: [{ name: "adder", agent, tools, services: Layer.mergeAll(model, NativeToolCallParser.layer(), ToolRegistry.layerExecutor(tools)) }],
  epochs: 2,
  scorers: [Scorer.numeric(), Scorer.includes()],
  concurrency: 8
})
