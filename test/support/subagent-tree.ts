/**
 * A run tree for the viewer's sub-agent tests (design 0412): a planner (model `big`) whose `read`
 * tool runs a reader (model `small`) as a child run, twice — once at step 0 for `a.md`, once at
 * step 1 for `b.md` — and whose reader for `a.md` asks an expert (model `medium`) through its own
 * `ask` sub-agent: a grandchild. The model is scripted with fixed usage per reply, so every figure
 * the viewer shows follows from this file:
 *
 * - expert (grandchild): 1 step, 50 in + 10 out = 60 tokens;
 * - reader of a.md: 2 steps, 2 × (100 in + 20 out) = 240 tokens; its children 1 run, 1 step, 60 tokens;
 * - reader of b.md: 1 step, 40 in + 20 out = 60 tokens;
 * - planner: 3 steps, 3 × (200 in + 50 out) = 750 tokens; its sub-agents 3 runs, 4 steps, 360 tokens.
 */
import * as Agent from "@polyloop/core/Agent"
import * as AgentDefinition from "@polyloop/core/AgentDefinition"
import * as EventSink from "@polyloop/core/EventSink"
import * as Ids from "@polyloop/core/Ids"
import type * as ModelClient from "@polyloop/core/ModelClient"
import * as ModelReply from "@polyloop/core/ModelReply"
import * as NativeToolCallParser from "@polyloop/core/NativeToolCallParser"
import * as RunLogStore from "@polyloop/core/RunLogStore"
import * as SubAgent from "@polyloop/core/SubAgent"
import * as ToolRegistry from "@polyloop/core/ToolRegistry"
import * as ScriptedModel from "@polyloop/testing/ScriptedModel"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Schema from "effect/Schema"

/** The price table the tests serve with: per million tokens, by model. */
export const prices = {
  currency: "USD",
  models: { big: { input: 10, output: 30 }, small: { input: 1, output: 2 }, medium: { input: 3, output: 6 } }
}

const expert = AgentDefinition.make({ name: "expert", systemPrompt: "You are the expert.", modelSettings: { model: "medium" }, budget: { maxSteps: 3 } })
const ask = SubAgent.tool({
  name: "ask",
  description: "Asks an expert.",
  parameters: Schema.Struct({ question: Schema.String }),
  agent: expert,
  tools: ToolRegistry.empty,
  task: ({ question }) => question
})
const reader = AgentDefinition.make({ name: "reader", systemPrompt: "You read one file.", modelSettings: { model: "small" }, budget: { maxSteps: 4 } })
const read = SubAgent.tool({
  name: "read",
  description: "Hands a file to a reader.",
  parameters: Schema.Struct({ path: Schema.String }),
  agent: reader,
  tools: ToolRegistry.make(ask),
  task: ({ path }) => `Read ${path}.`
})
const planner = AgentDefinition.make({ name: "planner", systemPrompt: "You plan.", modelSettings: { model: "big" }, budget: { maxSteps: 12 } })
const tools = ToolRegistry.make(read)

const systemOf = (request: ModelClient.ModelRequest) => {
  const system = request.messages[0]
  return system?._tag === "System" ? system.text : ""
}
const taskOf = (request: ModelClient.ModelRequest) => {
  const user = request.messages.find((m) => m._tag === "User")
  return user?._tag === "User" ? user.text : ""
}
const callOf = (name: string, args: unknown, id = "") => ({ id, name, argumentsText: JSON.stringify(args) })

/** The script; the planner's first call has the id `readCallId` (empty: the scripted model's own). */
const scriptOf = (readCallId: string): ScriptedModel.Script => (request, call) => {
  const system = systemOf(request)
  if (system === "You are the expert.") return ModelReply.make({ text: "The expert says: 42.", usage: { inputTokens: 50, outputTokens: 10 } })
  if (system === "You read one file.") {
    if (taskOf(request).includes("b.md")) return ModelReply.make({ text: "b.md is short.", usage: { inputTokens: 40, outputTokens: 20 } })
    const usage = { inputTokens: 100, outputTokens: 20 }
    return call.step === 0
      ? ModelReply.make({ text: "", toolCalls: [callOf("ask", { question: "What is in a.md?" })], usage })
      : ModelReply.make({ text: "a.md holds 42.", usage })
  }
  const usage = { inputTokens: 200, outputTokens: 50 }
  if (call.step === 0) return ModelReply.make({ text: "", toolCalls: [callOf("read", { path: "a.md" }, readCallId)], usage })
  if (call.step === 1) return ModelReply.make({ text: "", toolCalls: [callOf("read", { path: "b.md" })], usage })
  return ModelReply.make({ text: "Both read.", usage })
}

/** The ids of the tree run under `root` (the planner's first call id `readCallId`, when given). */
export const idsOf = (root: string, readCallId = "") => {
  const readerA = SubAgent.childRunId(root, 0, readCallId === "" ? "call_s0_0" : readCallId)
  return {
    root,
    readerA,
    readerB: SubAgent.childRunId(root, 1, "call_s1_0"),
    expert: SubAgent.childRunId(readerA, 0, "call_s0_0")
  }
}

/** Runs the tree under `root` into the store in context (the planner's first call id `readCallId`, when given). */
export const run = (root: string, readCallId = ""): Effect.Effect<Agent.RunResult, unknown, RunLogStore.RunLogStore> =>
  Effect.gen(function*() {
    const model = yield* ScriptedModel.make(scriptOf(readCallId))
    return yield* Agent.run({ runId: Ids.runId(root), agent: planner, task: "Read a.md and b.md.", tools }).pipe(
      Effect.provide(Layer.mergeAll(model.layer, NativeToolCallParser.layer(), Layer.orDie(ToolRegistry.layerExecutor(tools)), EventSink.layerNoop))
    )
  })

/** A run of no parent whose id looks like a child's (`<parent>/<step>/<callId>`). */
export const runPlain = (runId: string): Effect.Effect<Agent.RunResult, unknown, RunLogStore.RunLogStore> =>
  Effect.gen(function*() {
    const model = yield* ScriptedModel.make([ModelReply.make({ text: "Alone.", usage: { inputTokens: 5, outputTokens: 5 } })])
    const agent = AgentDefinition.make({ name: "solo", systemPrompt: "Answer.", budget: { maxSteps: 2 } })
    return yield* Agent.run({ runId: Ids.runId(runId), agent, task: "Say something.", tools: ToolRegistry.empty }).pipe(
      Effect.provide(Layer.mergeAll(model.layer, NativeToolCallParser.layer(), Layer.orDie(ToolRegistry.layerExecutor(ToolRegistry.empty)), EventSink.layerNoop))
    )
  })

/**
 * A chain of sub-agents `depth` levels deep under `root`: level k calls level k + 1 at its step 0
 * and answers at its step 1; the last level answers at once (each reply 1 input + 1 output token).
 */
export const runChain = (root: string, depth: number): Effect.Effect<Agent.RunResult, unknown, RunLogStore.RunLogStore> =>
  Effect.gen(function*() {
    const levelOf = (k: number) => AgentDefinition.make({ name: `level-${k}`, systemPrompt: `Level ${k}.`, budget: { maxSteps: 100 } })
    let tools: ToolRegistry.ToolRegistry<never, never> = ToolRegistry.empty
    for (let k = depth; k >= 1; k--) {
      tools = ToolRegistry.make(SubAgent.tool({
        name: "down",
        description: "Asks the next level.",
        parameters: Schema.Struct({ question: Schema.String }),
        agent: levelOf(k),
        tools,
        task: ({ question }) => question
      }))
    }
    const usage = { inputTokens: 1, outputTokens: 1 }
    const model = yield* ScriptedModel.make((request, call) => {
      const level = Number(/^Level (\d+)\.$/.exec(systemOf(request))?.[1] ?? "0")
      return level < depth && call.step === 0
        ? ModelReply.make({ text: "", toolCalls: [callOf("down", { question: `From level ${level}.` })], usage })
        : ModelReply.make({ text: `Level ${level} done.`, usage })
    })
    return yield* Agent.run({ runId: Ids.runId(root), agent: levelOf(0), task: "Go down.", tools }).pipe(
      Effect.provide(Layer.mergeAll(model.layer, NativeToolCallParser.layer(), Layer.orDie(ToolRegistry.layerExecutor(tools)), EventSink.layerNoop))
    )
  })

/** A planner whose step 0 calls `n` sub-agents (each answers at once), then answers. */
export const runWide = (root: string, n: number): Effect.Effect<Agent.RunResult, unknown, RunLogStore.RunLogStore> =>
  Effect.gen(function*() {
    const leaf = AgentDefinition.make({ name: "leaf", systemPrompt: "You are a leaf.", budget: { maxSteps: 2 } })
    const tools = ToolRegistry.make(SubAgent.tool({
      name: "leaf",
      description: "Asks a leaf.",
      parameters: Schema.Struct({ i: Schema.Number }),
      agent: leaf,
      tools: ToolRegistry.empty,
      task: ({ i }) => `Leaf ${i}.`
    }))
    const usage = { inputTokens: 1, outputTokens: 1 }
    const model = yield* ScriptedModel.make((request, call) =>
      systemOf(request) === "You are a leaf."
        ? ModelReply.make({ text: "Leaf done.", usage })
        : call.step === 0
        ? ModelReply.make({ text: "", toolCalls: Array.from({ length: n }, (_, i) => callOf("leaf", { i })), usage })
        : ModelReply.make({ text: "All done.", usage })
    )
    const agent = AgentDefinition.make({ name: "wide", systemPrompt: "You fan out.", budget: { maxSteps: n + 10 } })
    return yield* Agent.run({ runId: Ids.runId(root), agent, task: "Fan out.", tools }).pipe(
      Effect.provide(Layer.mergeAll(model.layer, NativeToolCallParser.layer(), Layer.orDie(ToolRegistry.layerExecutor(tools)), EventSink.layerNoop))
    )
  })
