/**
 * `Agent.layer` (one layer for every service a run needs) and `RunLogStore.inMemory()` (one
 * in-memory store across provides), design 0211.
 */
import { assert, describe, it } from "@effect/vitest"
import * as ActionExecutor from "@polyloop/core/ActionExecutor"
import * as ActionOutcome from "@polyloop/core/ActionOutcome"
import * as Agent from "@polyloop/core/Agent"
import * as AgentDefinition from "@polyloop/core/AgentDefinition"
import { MissingToolHandler } from "@polyloop/core/Errors"
import * as EventSink from "@polyloop/core/EventSink"
import * as Ids from "@polyloop/core/Ids"
import type { LoopEvent } from "@polyloop/core/LoopEvent"
import * as NativeToolCallParser from "@polyloop/core/NativeToolCallParser"
import * as RunLogStore from "@polyloop/core/RunLogStore"
import * as StopReason from "@polyloop/core/StopReason"
import * as Tool from "@polyloop/core/Tool"
import * as ToolRegistry from "@polyloop/core/ToolRegistry"
import * as ScriptedModel from "@polyloop/testing/ScriptedModel"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Schema from "effect/Schema"

type Equals<X, Y> = (<T>() => T extends X ? 1 : 2) extends (<T>() => T extends Y ? 1 : 2) ? true : false

class Thermometer extends Context.Tag("test/Thermometer")<Thermometer, { readonly read: (city: string) => number }>() {}

const weather = Tool.make({
  name: "weather",
  description: "The temperature of a city.",
  parameters: Schema.Struct({ city: Schema.String }),
  replayPolicy: "Always",
  handler: ({ city }) => Effect.map(Thermometer, (t) => String(t.read(city)))
})
const tools = ToolRegistry.make(weather)
const agent = AgentDefinition.make({ name: "layer-test", systemPrompt: "Answer.", budget: { maxSteps: 5 } })
const script = [ScriptedModel.toolCall("weather", { city: "Oslo" }), "It is 4 °C."]
const thermometer = Layer.succeed(Thermometer, { read: (city: string) => (city === "Oslo" ? 4 : 18) })
const request = (id: string) => ({ runId: Ids.runId(id), agent, task: "How warm is Oslo?", tools })

describe("Agent.layer", () => {
  it.effect("provides every service of a run from a store, a model, a parser and tools; the handlers' services come from outside", () =>
    Effect.gen(function*() {
      const model = yield* ScriptedModel.make(script)
      const services = Agent.layer({ store: RunLogStore.inMemory(), model: model.layer, parser: NativeToolCallParser.layer(), tools })
      // A registry of handled tools: no MissingToolHandler, and the layer needs what the handler needs.
      const typed: Equals<typeof services, Layer.Layer<Agent.Requirements, never, Thermometer>> = true
      assert.isTrue(typed)
      const result = yield* Agent.run(request("wired")).pipe(Effect.provide(services), Effect.provide(thermometer))
      assert.strictEqual(StopReason.format(result.stopReason), "Completed(Answer)")
      assert.strictEqual(result.steps, 2)
      const seen = yield* model.requests
      assert.strictEqual(seen[1]?.request.messages.at(-1)?.text, "4", "the derived executor ran the handler with the outer Thermometer")
      // The defaults (design 0214, amendment): the no-op sink itself, and the registry's derived executor.
      const [sink, executor] = yield* Effect.all([EventSink.EventSink, ActionExecutor.ActionExecutor]).pipe(
        Effect.provide(services),
        Effect.provide(thermometer)
      )
      assert.isTrue(EventSink.isNoop(sink), "no events given: the loop builds no events")
      assert.isTrue(ToolRegistry.isDerivedExecutor(executor) && ToolRegistry.isDerivedFrom(executor, tools))
    }))

  it.effect("a registry with a tool without handler: MissingToolHandler is in the layer's type and fails the provide", () =>
    Effect.gen(function*() {
      const declared = Tool.make({ name: "weather", description: "", parameters: Schema.Struct({ city: Schema.String }) })
      const services = Agent.layer({
        store: RunLogStore.inMemory(),
        model: ScriptedModel.unreachable,
        parser: NativeToolCallParser.layer(),
        tools: ToolRegistry.make(declared)
      })
      const typed: Equals<Layer.Layer.Error<typeof services>, MissingToolHandler> = true
      assert.isTrue(typed)
      const error = yield* Agent.run({ ...request("missing"), tools: ToolRegistry.make(declared) }).pipe(Effect.provide(services), Effect.flip)
      assert.instanceOf(error, MissingToolHandler)
      assert.deepStrictEqual((error as MissingToolHandler).tools, ["weather"])
    }))

  it.effect("events and executor can be given: the sink receives the loop's events, the executor runs the actions", () =>
    Effect.gen(function*() {
      const events: Array<LoopEvent> = []
      const executed: Array<string> = []
      const executor = ActionExecutor.layer(ActionExecutor.make({
        execute: (action) =>
          Effect.sync(() => {
            executed.push(action._tag === "ToolCall" ? action.name : action.language)
            return ActionOutcome.executed("21")
          })
      }))
      const declared = ToolRegistry.make(Tool.make({ name: "weather", description: "", parameters: Schema.Struct({ city: Schema.String }) }))
      const services = Agent.layer({
        store: RunLogStore.inMemory(),
        model: ScriptedModel.layer(script),
        parser: NativeToolCallParser.layer(),
        executor,
        events: EventSink.layer((event) => Effect.sync(() => void events.push(event)))
      })
      const typed: Equals<Layer.Layer.Error<typeof services>, never> = true
      assert.isTrue(typed)
      const result = yield* Agent.run({ ...request("own-executor"), tools: declared }).pipe(Effect.provide(services))
      assert.strictEqual(result.steps, 2)
      assert.deepStrictEqual(executed, ["weather"])
      assert.includeMembers(events.map((event) => event._tag), ["RunStarted", "RunFinished"])
    }))
})

describe("Agent.layer builds its parts one after the other (design 0214)", () => {
  class Shared extends Context.Tag("test/Shared")<Shared, { readonly id: number }>() {}

  it.effect("in order, each once, released in reverse order; a layer shared by two parts is built once; inputs come from outside", () =>
    Effect.gen(function*() {
      const log: Array<string> = []
      let sharedBuilds = 0
      const shared = Layer.effect(Shared, Effect.sync(() => ({ id: ++sharedBuilds })))
      /** A part that logs its acquisition and release and needs `Shared`. */
      const tracked = <A, E, R>(name: string, part: Layer.Layer<A, E, R>) =>
        Layer.unwrapScoped(Effect.gen(function*() {
          yield* Shared
          log.push(`acquire ${name}`)
          yield* Effect.addFinalizer(() => Effect.sync(() => void log.push(`release ${name}`)))
          return part
        })).pipe(Layer.provide(shared))
      // The model needs an EventSink: it must get the application's, not the agent's own.
      const outerEvents: Array<string> = []
      const outerSink = EventSink.make((event) => Effect.sync(() => void outerEvents.push(event._tag)))
      const model = yield* ScriptedModel.make(script)
      const modelPart = Layer.unwrapScoped(Effect.gen(function*() {
        const sink = yield* EventSink.EventSink
        assert.strictEqual(sink, outerSink, "the model's EventSink is the one from outside")
        log.push("acquire model")
        yield* Effect.addFinalizer(() => Effect.sync(() => void log.push("release model")))
        return model.layer
      }))
      const storePart = tracked("store", RunLogStore.inMemory())
      const eventsPart = tracked("events", EventSink.layerNoop)
      const services = Agent.layer({ store: storePart, model: modelPart, parser: NativeToolCallParser.layer(), tools, events: eventsPart })
      const result = yield* Agent.run(request("ordered")).pipe(
        Effect.provide(services),
        Effect.provide(Layer.merge(thermometer, Layer.succeed(EventSink.EventSink, outerSink)))
      )
      assert.strictEqual(result.steps, 2)
      assert.deepStrictEqual(log, ["acquire store", "acquire model", "acquire events", "release events", "release model", "release store"])
      assert.strictEqual(sharedBuilds, 1, "the layer under the store and the events is built once")
      assert.deepStrictEqual(outerEvents, [], "the run's events go to the agent's sink, not the model's")
    }))
})

describe("RunLogStore.inMemory", () => {
  it.effect("one store across provides: a second provide returns the recorded run without calling the model", () =>
    Effect.gen(function*() {
      const store = RunLogStore.inMemory()
      const first = yield* Agent.run(request("shared")).pipe(
        Effect.provide(Agent.layer({ store, model: ScriptedModel.layer(script), parser: NativeToolCallParser.layer(), tools })),
        Effect.provide(thermometer)
      )
      const second = yield* Agent.run(request("shared")).pipe(
        Effect.provide(Agent.layer({ store, model: ScriptedModel.unreachable, parser: NativeToolCallParser.layer(), tools })),
        Effect.provide(thermometer)
      )
      assert.deepStrictEqual(second, first)
    }))

  it.effect("layerMemory, by contrast, is a new empty store at each provide: the same run id starts over", () =>
    Effect.gen(function*() {
      const models = [yield* ScriptedModel.make(script), yield* ScriptedModel.make(script)]
      for (const model of models) {
        const result = yield* Agent.run(request("fresh")).pipe(
          Effect.provide(Agent.layer({ store: RunLogStore.layerMemory, model: model.layer, parser: NativeToolCallParser.layer(), tools })),
          Effect.provide(thermometer)
        )
        assert.strictEqual(result.resumedCount, 0)
      }
      assert.deepStrictEqual(yield* Effect.all(models.map((model) => model.calls)), [2, 2], "each provide ran the whole run again")
    }))
})
