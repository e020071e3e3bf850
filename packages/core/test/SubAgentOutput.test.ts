/**
 * A child agent with an output schema hands its typed answer to its parent (issue 47, design
 * 0392 decision 7): the call's observation is the answer as the child's schema encodes it (or
 * what `observe` renders of the typed value); a child whose answers never decode is a call that
 * stopped without an answer; a completing sub-agent under a typed parent makes the parent's
 * typed output; a finished child asked again under a schema that no longer decodes its answer
 * is refused, typed, with nothing written for the call.
 */
import { assert, describe, it } from "@effect/vitest"
import * as Agent from "@polyloop/core/Agent"
import * as AgentDefinition from "@polyloop/core/AgentDefinition"
import * as EventSink from "@polyloop/core/EventSink"
import * as Ids from "@polyloop/core/Ids"
import type * as ModelClient from "@polyloop/core/ModelClient"
import * as ModelReply from "@polyloop/core/ModelReply"
import * as NativeToolCallParser from "@polyloop/core/NativeToolCallParser"
import * as RunLogAudit from "@polyloop/core/RunLogAudit"
import * as RunLogStore from "@polyloop/core/RunLogStore"
import * as SubAgent from "@polyloop/core/SubAgent"
import * as Tool from "@polyloop/core/Tool"
import * as ToolRegistry from "@polyloop/core/ToolRegistry"
import * as ScriptedModel from "@polyloop/testing/ScriptedModel"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Schema from "effect/Schema"

/** The reader's report: `lines` is a number from a numeric string on the wire (encoded ≠ type). */
const Report = Schema.Struct({ file: Schema.String, title: Schema.String, lines: Schema.NumberFromString })
type Report = typeof Report.Type

const lookup = Tool.make({
  name: "read_file",
  description: "Reads a file.",
  parameters: Schema.Struct({ path: Schema.String }),
  replayPolicy: "Always",
  handler: ({ path }) => Effect.succeed(`# Title of ${path}\nline 2\nline 3`)
})
const readerTools = ToolRegistry.make(lookup)
const reader = AgentDefinition.make({ name: "reader", systemPrompt: "You read one file.", budget: { maxSteps: 6 }, output: Report })

const readTool = (options: { readonly observe?: (report: Report) => string; readonly completesRun?: boolean; readonly agent?: AgentDefinition.AgentDefinition<Report> } = {}) =>
  SubAgent.tool({
    name: "read",
    description: "Hands a file to a reader.",
    parameters: Schema.Struct({ path: Schema.String }),
    agent: options.agent ?? reader,
    tools: readerTools,
    task: ({ path }) => `Read ${path}.`,
    ...(options.observe === undefined ? {} : { observe: options.observe }),
    ...(options.completesRun === undefined ? {} : { completesRun: options.completesRun })
  })

const isReader = (request: ModelClient.ModelRequest) => {
  const system = request.messages[0]
  return system?._tag === "System" && system.text === "You read one file."
}
const callOf = (name: string, args: unknown) => ({ id: "", name, argumentsText: JSON.stringify(args) })

/**
 * The reader reads, then answers with `answers[i]` at its step `i + 1` (the last repeated); the
 * planner calls `read` at step 0 and then answers with the observation it got back.
 */
const scriptOf = (answers: ReadonlyArray<string>): ScriptedModel.Script => (request, call) => {
  if (isReader(request)) {
    if (call.step === 0) return ModelReply.make({ text: "", toolCalls: [callOf("read_file", { path: "a.md" })] })
    return ModelReply.make({ text: answers[Math.min(call.step - 1, answers.length - 1)]! })
  }
  if (call.step === 0) return ModelReply.make({ text: "", toolCalls: [callOf("read", { path: "a.md" })] })
  const observed = request.messages.filter((m) => m._tag === "Tool").map((m) => (m._tag === "Tool" ? m.text : ""))
  return ModelReply.make({ text: `seen: ${observed.join(" | ")}` })
}

const services = (store: RunLogStore.RunLogStore.Service, tools: ToolRegistry.ToolRegistry<never, never>) =>
  Layer.mergeAll(NativeToolCallParser.layer(), Layer.orDie(ToolRegistry.layerExecutor(tools)), EventSink.layerNoop, Layer.succeed(RunLogStore.RunLogStore, store))

const planner = AgentDefinition.make({ name: "planner", systemPrompt: "You plan.", budget: { maxSteps: 6 } })
/** The answer with an excess member and the schema's members out of order. */
const answer = JSON.stringify({ lines: "3", extra: "dropped", title: "Title of a.md", file: "a.md" })

/** The parent's observations of its `read` call. */
const observationsOf = (store: RunLogStore.RunLogStore.Service, id: Ids.RunId) =>
  Effect.map(store.readLog(id), (log) =>
    log.results.filter((r) => r.action._tag === "ToolCall" && r.action.name === "read").map((r) => ({ status: r.outcome.status, observation: r.outcome.observation })))

describe("a child's typed answer (design 0392, decision 7)", () => {
  it.effect("the parent reads the answer as the child's schema encodes it: excess members dropped, the schema's order", () =>
    Effect.gen(function*() {
      const store = yield* RunLogStore.makeMemory
      const tools = ToolRegistry.make(readTool())
      const model = yield* ScriptedModel.make(scriptOf([answer]))
      const id = Ids.runId("typed-child")
      const result = yield* Agent.run({ runId: id, agent: planner, task: "Read a.md.", tools }).pipe(Effect.provide(Layer.merge(services(store, tools), model.layer)))
      assert.strictEqual(result.stopReason._tag, "Completed")
      const [outcome] = yield* observationsOf(store, id)
      assert.deepStrictEqual(outcome, { status: "Executed", observation: JSON.stringify({ file: "a.md", title: "Title of a.md", lines: "3" }) })
      // The child's own log holds the encoded answer; the parent's observation is that, not the raw reply.
      const child = yield* store.readLog(SubAgent.childRunId(id, 0, "call_s0_0"))
      assert.deepStrictEqual(Option.getOrThrow(child.finished).output, { file: "a.md", title: "Title of a.md", lines: "3" })
      assert.deepStrictEqual(RunLogAudit.logProblems(yield* store.readLog(id)), [])
    }))

  it.effect("`observe` renders the typed value (a number here, decoded from the wire's string)", () =>
    Effect.gen(function*() {
      const store = yield* RunLogStore.makeMemory
      const seen: Array<Report> = []
      const tools = ToolRegistry.make(readTool({
        observe: (report) => {
          seen.push(report)
          return `${report.title} has ${report.lines + 1} lines counting the last newline`
        }
      }))
      const model = yield* ScriptedModel.make(scriptOf([answer]))
      const id = Ids.runId("typed-child-observe")
      yield* Agent.run({ runId: id, agent: planner, task: "Read a.md.", tools }).pipe(Effect.provide(Layer.merge(services(store, tools), model.layer)))
      assert.deepStrictEqual(seen, [{ file: "a.md", title: "Title of a.md", lines: 3 }])
      assert.strictEqual(typeof seen[0]!.lines, "number")
      const [outcome] = yield* observationsOf(store, id)
      assert.deepStrictEqual(outcome, { status: "Executed", observation: "Title of a.md has 4 lines counting the last newline" })
    }))

  it.effect("a child whose answers never decode stops with InvalidOutput; the parent's call stopped without an answer, and the parent goes on", () =>
    Effect.gen(function*() {
      const store = yield* RunLogStore.makeMemory
      const tools = ToolRegistry.make(readTool({ agent: AgentDefinition.make({ name: "reader", systemPrompt: "You read one file.", budget: { maxSteps: 6 }, output: Report, outputAttempts: 2 }) }))
      const model = yield* ScriptedModel.make(scriptOf(["not json", JSON.stringify({ file: "a.md" })]))
      const id = Ids.runId("typed-child-invalid")
      const result = yield* Agent.run({ runId: id, agent: planner, task: "Read a.md.", tools }).pipe(Effect.provide(Layer.merge(services(store, tools), model.layer)))
      assert.strictEqual(result.stopReason._tag, "Completed", "the parent answers after its failed call")
      const child = yield* store.readLog(SubAgent.childRunId(id, 0, "call_s0_0"))
      assert.strictEqual(Option.getOrThrow(child.finished).stopReason._tag, "InvalidOutput")
      const log = yield* store.readLog(id)
      const read = log.results.find((r) => r.action._tag === "ToolCall" && r.action.name === "read")!
      assert.isTrue(read.handlerFailed)
      assert.strictEqual(read.outcome.status, "Executed")
      assert.include(read.outcome.observation, "stopped without an answer")
      assert.include(read.outcome.observation, "InvalidOutput")
      assert.strictEqual(read.child?.stopReason._tag, "InvalidOutput")
    }))

  it.effect("a completing sub-agent under a typed parent: the child's typed answer is the parent's typed output", () =>
    Effect.gen(function*() {
      const store = yield* RunLogStore.makeMemory
      const tools = ToolRegistry.make(readTool({ completesRun: true }))
      const typedPlanner = AgentDefinition.make({ name: "planner", systemPrompt: "You plan.", budget: { maxSteps: 6 }, output: Report })
      const model = yield* ScriptedModel.make(scriptOf([answer]))
      const id = Ids.runId("typed-handoff")
      const result = yield* Agent.run({ runId: id, agent: typedPlanner, task: "Read a.md.", tools }).pipe(Effect.provide(Layer.merge(services(store, tools), model.layer)))
      assert.strictEqual(result.stopReason._tag, "Completed")
      const output: Report | undefined = result.output
      assert.deepStrictEqual(output, { file: "a.md", title: "Title of a.md", lines: 3 })
      assert.deepStrictEqual(result.encodedOutput, { file: "a.md", title: "Title of a.md", lines: "3" })
      assert.strictEqual(result.steps, 1, "the handoff ends the parent at the calling step")
    }))

  it.effect("a finished child asked again under a schema that no longer decodes its answer: InvalidRunRequest naming the child, nothing written for the call", () =>
    Effect.gen(function*() {
      const store = yield* RunLogStore.makeMemory
      const id = Ids.runId("typed-child-changed")
      const childId = SubAgent.childRunId(id, 0, "call_s0_0")
      // The child finishes on its own under the first schema (as if the parent died right after).
      const model = yield* ScriptedModel.make(scriptOf([answer]))
      yield* Agent.run({ runId: childId, agent: reader, task: "Read a.md.", tools: readerTools }).pipe(Effect.provide(Layer.merge(services(store, readerTools), model.layer)))
      // The parent's reader now wants `lines` as a JSON number: the recorded "3" does not decode.
      const changed = AgentDefinition.make({ name: "reader", systemPrompt: "You read one file.", budget: { maxSteps: 6 }, output: Schema.Struct({ file: Schema.String, title: Schema.String, lines: Schema.Number }) })
      const tools = ToolRegistry.make(SubAgent.tool({
        name: "read",
        description: "Hands a file to a reader.",
        parameters: Schema.Struct({ path: Schema.String }),
        agent: changed,
        tools: readerTools,
        task: ({ path }) => `Read ${path}.`
      }))
      const error = yield* Agent.run({ runId: id, agent: planner, task: "Read a.md.", tools }).pipe(
        Effect.provide(Layer.merge(services(store, tools), model.layer)),
        Effect.flip
      )
      assert.strictEqual(error._tag, "InvalidRunRequest")
      assert.strictEqual(error._tag === "InvalidRunRequest" ? error.runId : "", childId)
      assert.include(error.message, "does not decode")
      const log = yield* store.readLog(id)
      assert.deepStrictEqual(log.results, [], "nothing written for the call")
      assert.isTrue(Option.isNone(log.finished))
    }))
})
