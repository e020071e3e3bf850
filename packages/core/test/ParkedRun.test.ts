/**
 * What a run parked in its model call holds (issue 35, design 0350 "Flattening execute"): its
 * fiber's continuation stack is a few frames — the claim scope's `onExit` and one frame for the
 * step — whatever the step, not one frame per combinator of the loop. Counted on Effect's fiber
 * runtime's own stack (`_stack`, an internal field of `FiberRuntime`: the only place the frames
 * can be counted), with a model that parks without a canceller, so every frame is the loop's.
 * Also: such a run, interrupted, releases its claim and resumes where it stopped.
 */
import { assert, describe, it } from "@effect/vitest"
import * as Agent from "@polyloop/core/Agent"
import * as AgentDefinition from "@polyloop/core/AgentDefinition"
import type { ModelError } from "@polyloop/core/Errors"
import * as Ids from "@polyloop/core/Ids"
import * as ModelClient from "@polyloop/core/ModelClient"
import type { ModelReply } from "@polyloop/core/ModelReply"
import * as NativeToolCallParser from "@polyloop/core/NativeToolCallParser"
import * as RunLogStore from "@polyloop/core/RunLogStore"
import * as Tool from "@polyloop/core/Tool"
import * as ToolRegistry from "@polyloop/core/ToolRegistry"
import * as ScriptedModel from "@polyloop/testing/ScriptedModel"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Fiber from "effect/Fiber"
import * as Layer from "effect/Layer"
import * as Schema from "effect/Schema"

const count = Tool.make({
  name: "count",
  description: "Counts.",
  parameters: Schema.Struct({ n: Schema.Number }),
  replayPolicy: "Always",
  handler: ({ n }) => Effect.succeed(`counted ${n}`)
})
const tools = ToolRegistry.make(count)
const agent = AgentDefinition.make({ name: "parked", systemPrompt: "Count.", budget: { maxSteps: 6 } })

/** The frames on a fiber's continuation stack (Effect 3's `FiberRuntime._stack`). */
const framesOf = (fiber: Fiber.RuntimeFiber<unknown, unknown>): number => {
  const stack = (fiber as unknown as { readonly _stack?: unknown })._stack
  if (!Array.isArray(stack)) throw new Error("effect's FiberRuntime keeps its continuation stack elsewhere now: update framesOf")
  return stack.length
}

/**
 * A model that parks the call of step `parkAt` (its history's length says the step) until the
 * returned gate opens, and tells `parked` when it does; every other call is a tool call.
 */
const parkingModel = (parkAt: number, parked: Deferred.Deferred<void>, gate: { open: (() => void) | undefined }) =>
  ModelClient.layer((request) => {
    const step = (request.messages.length - 2) / 2
    const reply = ScriptedModel.toolCall("count", { n: step }, { id: `c${step}` })
    if (step !== parkAt) return Effect.succeed(reply)
    // An `Effect.async` without a canceller adds no frame of its own: every frame counted is the loop's.
    return Effect.zipRight(
      Deferred.succeed(parked, undefined),
      Effect.async<ModelReply, ModelError>((resume) => {
        gate.open = () => resume(Effect.succeed(reply))
      })
    )
  })

const parkedFrames = (runId: string, parkAt: number) =>
  Effect.gen(function*() {
    const parked = yield* Deferred.make<void>()
    const gate: { open: (() => void) | undefined } = { open: undefined }
    const services = Agent.layer({ store: RunLogStore.inMemory(), model: parkingModel(parkAt, parked, gate), parser: NativeToolCallParser.layer(), tools })
    return yield* Effect.gen(function*() {
      // Forked under services already provided: the run's fiber holds no frame of a provide.
      const fiber = yield* Effect.fork(Agent.run({ runId: Ids.runId(runId), agent, task: "Count.", tools }))
      yield* Deferred.await(parked)
      yield* Effect.yieldNow()
      const frames = framesOf(fiber)
      gate.open?.()
      const result = yield* Fiber.join(fiber)
      assert.strictEqual(result.steps, 6)
      return frames
    }).pipe(Effect.provide(Layer.fresh(services)))
  })

describe("a run parked in its model call", () => {
  it.effect("holds at most 5 continuation frames (it held 14 before execute was flattened), the same at every step", () =>
    Effect.gen(function*() {
      const atFirst = yield* parkedFrames("parked-0", 0)
      const atFourth = yield* parkedFrames("parked-3", 3)
      assert.isAtMost(atFirst, 5)
      assert.strictEqual(atFourth, atFirst)
    }))

  it.effect("interrupted while parked: its claim is released and it resumes from the step it was in", () =>
    Effect.gen(function*() {
      const parked = yield* Deferred.make<void>()
      const gate: { open: (() => void) | undefined } = { open: undefined }
      const store = RunLogStore.inMemory()
      const runId = Ids.runId("parked-interrupted")
      const request = { runId, agent, task: "Count.", tools }
      const interrupted = yield* Effect.gen(function*() {
        const fiber = yield* Effect.fork(Agent.run(request))
        yield* Deferred.await(parked)
        return yield* Fiber.await(yield* Fiber.interruptFork(fiber).pipe(Effect.as(fiber)))
      }).pipe(Effect.provide(Agent.layer({ store, model: parkingModel(2, parked, gate), parser: NativeToolCallParser.layer(), tools })))
      assert.isTrue(Exit.isInterrupted(interrupted), "the run ended interrupted, not failed")
      // The same store (`inMemory()` keeps its runs across provides): the claim was released, so
      // a second run of the id is not `RunBusy`; it resumes and finishes the steps left.
      const never = yield* Deferred.make<void>()
      const resumed = yield* Agent.run(request).pipe(
        Effect.provide(Agent.layer({ store, model: parkingModel(-1, never, gate), parser: NativeToolCallParser.layer(), tools }))
      )
      assert.strictEqual(resumed.steps, 6)
      assert.strictEqual(resumed.resumedCount, 1)
    }))
})
