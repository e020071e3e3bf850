/**
 * The shipped event sinks: pubsub (subscribers get a `Stream`) and JSON lines (a file through
 * `FileSystem`); both deliver in order; a full subscriber makes the emit fail (counted by the
 * loop), never block.
 */
import { assert, describe, it } from "@effect/vitest"
import * as NodeFileSystem from "@effect/platform-node/NodeFileSystem"
import * as FileSystem from "@effect/platform/FileSystem"
import * as Agent from "@polyloop/core/Agent"
import * as AgentDefinition from "@polyloop/core/AgentDefinition"
import * as EventSink from "@polyloop/core/EventSink"
import * as Ids from "@polyloop/core/Ids"
import * as LoopEvent from "@polyloop/core/LoopEvent"
import * as NativeToolCallParser from "@polyloop/core/NativeToolCallParser"
import * as RunLogStore from "@polyloop/core/RunLogStore"
import * as Tool from "@polyloop/core/Tool"
import * as ToolRegistry from "@polyloop/core/ToolRegistry"
import * as ScriptedModel from "@polyloop/testing/ScriptedModel"
import * as Chunk from "effect/Chunk"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Layer from "effect/Layer"
import * as Schema from "effect/Schema"
import * as Scope from "effect/Scope"
import * as Stream from "effect/Stream"

const event = (step: number): LoopEvent.LoopEvent => ({ _tag: "StepStarted", runId: Ids.runId("e"), step })

const echo = Tool.make({
  name: "echo",
  description: "Echoes.",
  parameters: Schema.Struct({ text: Schema.String }),
  replayPolicy: "Always",
  handler: ({ text }) => Effect.succeed(text)
})
const tools = ToolRegistry.make(echo)

const runRequest = (runId: string): Agent.RunRequest => ({
  runId: Ids.runId(runId),
  agent: AgentDefinition.make({
    name: "sink-agent",
    systemPrompt: "Echo.",
    budget: { maxSteps: 10 },
    modelRetry: { maxAttempts: 1, baseDelay: Duration.millis(1), maxDelay: Duration.millis(1) }
  }),
  task: "Echo twice.",
  tools
})

const script = [ScriptedModel.toolCall("echo", { text: "a" }), ScriptedModel.toolCall("echo", { text: "b" }), ScriptedModel.text("done")]

const expectedTags = [
  "RunStarted",
  "StepStarted",
  "ModelReplied",
  "DecisionParsed",
  "ActionExecuted",
  "StepCompleted",
  "StepStarted",
  "ModelReplied",
  "DecisionParsed",
  "ActionExecuted",
  "StepCompleted",
  "StepStarted",
  "ModelReplied",
  "DecisionParsed",
  "StepCompleted",
  "RunFinished"
]

const loop = Layer.mergeAll(
  ScriptedModel.layer(script),
  NativeToolCallParser.layer(),
  Layer.orDie(ToolRegistry.layerExecutor(tools)),
  RunLogStore.layerMemory
)

describe("EventSink.layerPubSub", () => {
  it.scoped("a subscriber gets every event emitted after it subscribed, in order; so does a second one", () =>
    Effect.gen(function*() {
      const sink = yield* EventSink.EventSink
      const events = yield* EventSink.Events
      const first = yield* events.subscribe
      const second = yield* events.subscribe
      yield* Effect.forEach(Array.from({ length: 200 }, (_, i) => event(i)), sink.emit, { discard: true })
      const a = yield* Stream.runCollect(Stream.take(first, 200))
      const b = yield* Stream.runCollect(Stream.take(second, 200))
      assert.deepStrictEqual(Chunk.toReadonlyArray(a), Array.from({ length: 200 }, (_, i) => event(i)))
      assert.deepStrictEqual(Chunk.toReadonlyArray(b), Chunk.toReadonlyArray(a))
    }).pipe(Effect.provide(EventSink.layerPubSub())))

  it.scoped("streams the events of Agent.run in the order the loop emits them", () =>
    Effect.gen(function*() {
      const events = yield* EventSink.Events
      const stream = yield* events.subscribe
      const result = yield* Agent.run(runRequest("pubsub-run"))
      const collected = yield* Stream.runCollect(Stream.takeUntil(stream, (e) => e._tag === "RunFinished"))
      assert.deepStrictEqual(Chunk.toReadonlyArray(collected).map((e) => e._tag), expectedTags)
      assert.strictEqual(result.eventDeliveryFailures, 0)
    }).pipe(Effect.provide(Layer.merge(loop, EventSink.layerPubSub()))))

  it.effect("the streams end when the sink's layer is released", () =>
    Effect.gen(function*() {
      const scope = yield* Scope.make()
      const context = yield* Layer.buildWithScope(EventSink.layerPubSub(), scope)
      const events = yield* Effect.provide(EventSink.Events, context)
      const sink = yield* Effect.provide(EventSink.EventSink, context)
      const stream = yield* Effect.provideService(events.subscribe, Scope.Scope, scope)
      yield* sink.emit(event(0))
      const fiber = yield* Effect.fork(Stream.runCollect(stream))
      yield* Effect.yieldNow()
      yield* Scope.close(scope, Exit.void)
      const exit = yield* fiber.await
      // Either the stream ended normally with what it had, or it was cut by the shutdown: it does not hang.
      assert.isTrue(Exit.isSuccess(exit) || Exit.isInterrupted(exit))
    }))

  it.scoped("with a capacity, an event a full subscriber cannot take fails the emit instead of blocking", () =>
    Effect.gen(function*() {
      const sink = yield* EventSink.EventSink
      const events = yield* EventSink.Events
      yield* events.subscribe
      yield* sink.emit(event(0))
      yield* sink.emit(event(1))
      const error = yield* Effect.flip(sink.emit(event(2)))
      assert.strictEqual(error._tag, "EventDeliveryError")
    }).pipe(Effect.provide(EventSink.layerPubSub({ capacity: 2 }))))

  it.scoped("a run with a full subscriber goes on and counts the dropped events", () =>
    Effect.gen(function*() {
      const events = yield* EventSink.Events
      yield* events.subscribe
      const result = yield* Agent.run(runRequest("pubsub-full"))
      assert.strictEqual(result.stopReason._tag, "Completed")
      // Two events fit; every later one but RunFinished (emitted after its record) is counted.
      assert.strictEqual(result.eventDeliveryFailures, expectedTags.length - 3)
    }).pipe(Effect.provide(Layer.merge(loop, EventSink.layerPubSub({ capacity: 2 })))))
})

describe("EventSink.layerJsonl", () => {
  const decodeLine = Schema.decodeUnknownSync(Schema.parseJson(LoopEvent.LoopEvent))

  it.scoped("appends one JSON line per event, in order, across runs", () =>
    Effect.gen(function*() {
      const fs = yield* FileSystem.FileSystem
      const dir = yield* fs.makeTempDirectoryScoped()
      const path = `${dir}/events.jsonl`
      yield* Agent.run(runRequest("jsonl-1")).pipe(Effect.provide(Layer.merge(loop, EventSink.layerJsonl(path))))
      yield* Agent.run(runRequest("jsonl-2")).pipe(Effect.provide(Layer.merge(loop, EventSink.layerJsonl(path))))
      const text = yield* fs.readFileString(path)
      assert.isTrue(text.endsWith("\n"))
      const events = text.trimEnd().split("\n").map((line) => decodeLine(line))
      assert.deepStrictEqual(events.map((e) => e._tag), [...expectedTags, ...expectedTags])
      assert.deepStrictEqual(
        events.map((e) => e.runId),
        [...expectedTags.map(() => "jsonl-1"), ...expectedTags.map(() => "jsonl-2")]
      )
      const line = yield* EventSink.toJsonLine(events[2]!)
      assert.strictEqual(text.split("\n")[2], line)
    }).pipe(Effect.provide(NodeFileSystem.layer)))

  it.scoped("lines of concurrent emitters never interleave", () =>
    Effect.gen(function*() {
      const fs = yield* FileSystem.FileSystem
      const dir = yield* fs.makeTempDirectoryScoped()
      const path = `${dir}/concurrent.jsonl`
      const big = (i: number): LoopEvent.LoopEvent => ({
        _tag: "ModelReplied",
        runId: Ids.runId(`r${i % 7}`),
        step: i,
        reply: { text: "y".repeat(5000 + i), toolCalls: [], usage: { inputTokens: 1, outputTokens: 1 } }
      })
      yield* Effect.gen(function*() {
        const sink = yield* EventSink.EventSink
        yield* Effect.forEach(Array.from({ length: 300 }, (_, i) => i), (i) => sink.emit(big(i)), { concurrency: 16, discard: true })
      }).pipe(Effect.provide(EventSink.layerJsonl(path)))
      const lines = (yield* fs.readFileString(path)).trimEnd().split("\n")
      assert.strictEqual(lines.length, 300)
      const steps = lines.map((line) => {
        const decoded = decodeLine(line)
        return decoded._tag === "ModelReplied" && decoded.reply.text.length === 5000 + decoded.step ? decoded.step : -1
      })
      assert.deepStrictEqual([...steps].sort((a, b) => a - b), Array.from({ length: 300 }, (_, i) => i))
    }).pipe(Effect.provide(NodeFileSystem.layer)))

  it.scoped("a file that cannot be opened fails the layer with the platform error", () =>
    Effect.gen(function*() {
      const fs = yield* FileSystem.FileSystem
      const dir = yield* fs.makeTempDirectoryScoped()
      const exit = yield* Effect.exit(Layer.build(EventSink.layerJsonl(`${dir}/missing/dir/events.jsonl`)))
      assert.isTrue(Exit.isFailure(exit))
    }).pipe(Effect.provide(NodeFileSystem.layer)))
})
