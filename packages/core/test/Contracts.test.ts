/**
 * Every implementation core ships runs its contract suite from `@polyloop/testing`: the memory
 * store, the three decision parsers, the derived executor, and the three event sinks.
 */
import { NodeFileSystem } from "@effect/platform-node"
import * as FileSystem from "@effect/platform/FileSystem"
import * as Chunk from "effect/Chunk"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Schema from "effect/Schema"
import * as Stream from "effect/Stream"
import { existsSync } from "node:fs"
import type { Action } from "@polyloop/core/Action"
import * as CodeBlockParser from "@polyloop/core/CodeBlockParser"
import { ToolEnvironmentError } from "@polyloop/core/Errors"
import * as EventSink from "@polyloop/core/EventSink"
import * as JsonActionParser from "@polyloop/core/JsonActionParser"
import { LoopEvent } from "@polyloop/core/LoopEvent"
import * as ModelReply from "@polyloop/core/ModelReply"
import * as NativeToolCallParser from "@polyloop/core/NativeToolCallParser"
import * as RunLogStore from "@polyloop/core/RunLogStore"
import * as Tool from "@polyloop/core/Tool"
import * as ToolRegistry from "@polyloop/core/ToolRegistry"
import * as ActionExecutorContract from "@polyloop/testing/ActionExecutorContract"
import * as DecisionParserContract from "@polyloop/testing/DecisionParserContract"
import * as EventSinkContract from "@polyloop/testing/EventSinkContract"
import * as FaultInjection from "@polyloop/testing/FaultInjection"
import * as RunLogStoreContract from "@polyloop/testing/RunLogStoreContract"

// --- RunLogStore -------------------------------------------------------------------------------

RunLogStoreContract.suite("layerMemory", RunLogStore.layerMemory, { faultInjection: FaultInjection.layerMemory })

// --- DecisionParser: each with replies in its own format -------------------------------------

DecisionParserContract.suite("NativeToolCallParser", NativeToolCallParser.layer(), {
  replies: [
    ModelReply.make({ toolCalls: [{ id: "c1", name: "search", argumentsText: "{\"q\":\"effect\"}" }] }),
    ModelReply.make({ toolCalls: [{ id: "c1", name: "search", argumentsText: "{not json" }] }),
    ModelReply.make({ text: "The answer is 42." })
  ]
})
DecisionParserContract.suite("NativeToolCallParser (onText: NoAction)", NativeToolCallParser.layer({ onText: "NoAction" }))

DecisionParserContract.suite("JsonActionParser", JsonActionParser.layer({ finishTool: { name: "submit" } }), {
  replies: [
    ModelReply.make({ text: "{\"tool\":\"read\",\"arguments\":{\"path\":\"a.txt\"}}" }),
    ModelReply.make({ text: "```json\n{\"tool\":\"read\",\"path\":\"a.txt\"}\n```" }),
    ModelReply.make({ text: "{\"final_answer\":\"done\"}" }),
    ModelReply.make({ text: "{\"tool\":\"submit\",\"answer\":\"x\"}" })
  ]
})

DecisionParserContract.suite(
  "CodeBlockParser(python)",
  CodeBlockParser.layer({ language: "python", aliases: ["py"], finalAnswer: { line: "Final Answer:", call: "final_answer" } }),
  {
    replies: [
      ModelReply.make({ text: "Let me compute.\n```python\nprint(1 + 1)\n```" }),
      ModelReply.make({ text: "```python\nfinal_answer(\"2\")\n```" }),
      ModelReply.make({ text: "Final Answer: 2" }),
      ModelReply.make({ text: "```python\nprint(1)\n" }),
      ModelReply.make({ text: "```js\nconsole.log(1)\n```" })
    ]
  }
)

// --- ActionExecutor: the derived executor, with calls generated from its registry --------------

const echo = Tool.make({
  name: "echo",
  description: "Echoes a text.",
  parameters: Schema.Struct({ text: Schema.String }),
  handler: ({ text }) => Effect.succeed(text)
})
const divide = Tool.make({
  name: "divide",
  description: "Divides a by b; fails on zero.",
  parameters: Schema.Struct({ a: Schema.Number, b: Schema.Number }),
  handler: ({ a, b }) => (b === 0 ? Effect.fail(new RangeError("division by zero")) : Effect.succeed(String(a / b)))
})
const crash = Tool.make({
  name: "crash",
  description: "Throws.",
  parameters: Schema.Struct({ reason: Schema.String }),
  handler: ({ reason }) => Effect.sync((): string => { throw new Error(reason) })
})
const slow = Tool.make({
  name: "slow",
  description: "Never answers; times out.",
  parameters: Schema.Struct({}),
  handler: () => Effect.never,
  timeout: "5 millis"
})
const database = Tool.make({
  name: "database",
  description: "A database that is down.",
  parameters: Schema.Struct({ sql: Schema.String }),
  handler: () => Effect.fail(new ToolEnvironmentError({ message: "connection refused" }))
})
const block = Tool.make({ name: "block", description: "Blocks until interrupted.", parameters: Schema.Struct({}), handler: () => ActionExecutorContract.block })
const registry = ToolRegistry.make(echo, divide, crash, slow, database, block)
const blockingAction: Action = { _tag: "ToolCall", id: "call_block", name: "block", arguments: {} }

ActionExecutorContract.suite("ToolRegistry.executor()", ToolRegistry.layerExecutor(registry), {
  cases: ActionExecutorContract.casesFromRegistry(registry, {
    exclude: ["block"],
    expect: { echo: ["Executed"], divide: ["Executed"], crash: ["Executed"], slow: ["Executed"], database: ["EnvError"] }
  }),
  blockingAction
})

// --- EventSink: noop, pubsub (read back through a subscription), jsonl (read back from the file)

EventSinkContract.suite("layerNoop", EventSink.layerNoop)

const pubsub = (capacity?: number) =>
  Effect.gen(function*() {
    const context = yield* Layer.build(EventSink.layerPubSub(capacity === undefined ? {} : { capacity }))
    const stream = yield* Context.get(context, EventSink.Events).subscribe
    return { sink: Context.get(context, EventSink.EventSink), stream }
  })

/** A pubsub sink whose only subscriber never reads and already has a full buffer: every emit is dropped. */
const pubsubFull = Effect.gen(function*() {
  const { sink } = yield* pubsub(1)
  yield* Effect.orDie(sink.emit({ _tag: "StepStarted", runId: "filler" as LoopEvent["runId"], step: 0 }))
  return { sink }
})

EventSinkContract.suite(
  "layerPubSub",
  Effect.map(pubsub(), ({ sink, stream }): EventSinkContract.SinkInstance => ({
    sink,
    readBack: (count) => Effect.map(Stream.runCollect(Stream.take(stream, count)), Chunk.toReadonlyArray)
  })),
  { failing: pubsubFull }
)

const decodeLine = Schema.decodeUnknown(Schema.parseJson(LoopEvent))

const jsonl = Effect.gen(function*() {
  const fs = yield* FileSystem.FileSystem
  const dir = yield* fs.makeTempDirectoryScoped()
  const path = `${dir}/events.jsonl`
  const sink = yield* Effect.map(Layer.build(EventSink.layerJsonl(path)), Context.get(EventSink.EventSink))
  return {
    sink,
    readBack: (count: number) =>
      fs.readFileString(path).pipe(
        Effect.flatMap((text) => Effect.forEach(text.split("\n").filter((line) => line.length > 0).slice(0, count), (line) => decodeLine(line)))
      )
  } satisfies EventSinkContract.SinkInstance
}).pipe(Effect.provide(NodeFileSystem.layer))

// `/dev/full` accepts the open and fails every write with ENOSPC: a jsonl sink that cannot deliver.
const jsonlFull = EventSink.layerJsonl("/dev/full").pipe(Layer.provide(NodeFileSystem.layer))

EventSinkContract.suite("layerJsonl", jsonl, existsSync("/dev/full") ? { failing: jsonlFull } : {})
