/**
 * A deterministic tool-calling agent for the research tests (replay, fork, export, stats):
 * tools whose observations are pure functions of their arguments, and a scripted model whose
 * reply at step k is a function of k only — so two runs of one configuration write the same
 * log apart from ids and timestamps. The script mixes executed calls, an unknown tool (a
 * NotExecuted step), a reply without a call (NoAction) and a completing `submit`.
 */
import * as Agent from "@polyloop/core/Agent"
import * as AgentDefinition from "@polyloop/core/AgentDefinition"
import * as EventSink from "@polyloop/core/EventSink"
import * as Ids from "@polyloop/core/Ids"
import type * as ModelClient from "@polyloop/core/ModelClient"
import * as ModelReply from "@polyloop/core/ModelReply"
import * as NativeToolCallParser from "@polyloop/core/NativeToolCallParser"
import * as Tool from "@polyloop/core/Tool"
import * as ToolRegistry from "@polyloop/core/ToolRegistry"
import * as ScriptedModel from "@polyloop/testing/ScriptedModel"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Schema from "effect/Schema"

export const add = Tool.make({
  name: "add",
  description: "Adds two integers.",
  parameters: Schema.Struct({ a: Schema.Int, b: Schema.Int }),
  replayPolicy: "Always",
  handler: ({ a, b }) => Effect.succeed(`${a} + ${b} = ${a + b}`)
})

export const note = Tool.make({
  name: "note",
  description: "Writes a note.",
  parameters: Schema.Struct({ text: Schema.String }),
  handler: ({ text }) => Effect.succeed(`noted: ${text}`)
})

export const submit = Tool.make({
  name: "submit",
  description: "Submits the answer and ends the run.",
  parameters: Schema.Struct({ answer: Schema.String }),
  completesRun: true,
  handler: ({ answer }) => Effect.succeed(`submitted ${answer}`)
})

export const tools = ToolRegistry.make(add, note, submit)

export interface AgentOptions {
  readonly name?: string
  readonly systemPrompt?: string
  readonly maxSteps?: number
  readonly temperature?: number
}

export const systemPrompt = "You add numbers with tools. Call exactly one tool per reply."

export const agent = (options: AgentOptions = {}) =>
  AgentDefinition.make({
    name: options.name ?? "adder",
    systemPrompt: options.systemPrompt ?? systemPrompt,
    budget: { maxSteps: options.maxSteps ?? 40 },
    modelSettings: { model: "scripted-1", temperature: options.temperature ?? 0 },
    modelRetry: { maxAttempts: 1, baseDelay: Duration.millis(1), maxDelay: Duration.millis(1) }
  })

export const task = "Add the numbers 0 to 17, taking notes, then submit the total."

const usage = (step: number): ModelReply.Usage => ({ inputTokens: 100 + 10 * step, outputTokens: 5 + (step % 3) })

/** The reply of step `step` in a run of `steps` steps (the last one submits). */
export const replyAt = (step: number, steps: number): ModelReply.ModelReply => {
  const id = `call_${step}`
  if (step === steps - 1) return ScriptedModel.toolCall("submit", { answer: "153" }, { id, usage: usage(step) })
  if (step === 5) return ScriptedModel.toolCall("multiply", { a: 2, b: 3 }, { id, usage: usage(step) })
  if (step === 7) return ModelReply.make({ text: "Let me think about the next number.", usage: usage(step) })
  if (step % 4 === 3) return ScriptedModel.toolCall("note", { text: `step ${step}` }, { id, text: "Taking a note.", usage: usage(step) })
  return ScriptedModel.toolCall("add", { a: step, b: step + 1 }, { id, usage: usage(step) })
}

/** A scripted model whose run has `steps` steps. */
export const model = (steps: number): Layer.Layer<ModelClient.ModelClient> =>
  ScriptedModel.layer((_request, call) => replyAt(call.step, steps))

/** The parser: a reply without a tool call is no action (so step 7 is a NoAction step). */
export const parser = NativeToolCallParser.layer({ onText: "NoAction" })

/** Parser, executor and a silent sink (the model and the store come from the test). */
export const servicesFor = (registry: ToolRegistry.ToolRegistry<never>) =>
  Layer.mergeAll(parser, Layer.orDie(ToolRegistry.layerExecutor(registry)), EventSink.layerNoop)

/** Parser, executor and a silent sink for the standard tools. */
export const services = servicesFor(tools)

export const request = (runId: string, options: AgentOptions = {}, registry = tools): Agent.RunRequest => ({
  runId: Ids.runId(runId),
  agent: agent(options),
  task,
  tools: registry
})
