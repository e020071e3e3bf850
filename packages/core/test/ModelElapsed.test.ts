/**
 * A step finished after a resume records `modelElapsed` as the uninterrupted step does (issue
 * 44, item 9): the model call's elapsed, recorded with its reply (`ModelReplied.modelElapsed`)
 * when the reply was logged, so the log's shape does not depend on where a run was interrupted.
 * A log written by the previous version (its replies without it) still resumes.
 */
import { assert, describe, it } from "@effect/vitest"
import * as Agent from "@polyloop/core/Agent"
import * as AgentDefinition from "@polyloop/core/AgentDefinition"
import * as EventSink from "@polyloop/core/EventSink"
import * as Ids from "@polyloop/core/Ids"
import * as ModelReply from "@polyloop/core/ModelReply"
import * as NativeToolCallParser from "@polyloop/core/NativeToolCallParser"
import * as RunLog from "@polyloop/core/RunLog"
import * as RunLogAudit from "@polyloop/core/RunLogAudit"
import * as RunLogStore from "@polyloop/core/RunLogStore"
import * as Tool from "@polyloop/core/Tool"
import * as ToolRegistry from "@polyloop/core/ToolRegistry"
import * as ScriptedModel from "@polyloop/testing/ScriptedModel"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Schema from "effect/Schema"
import * as TestClock from "effect/TestClock"
import * as fs from "node:fs"

const lookup = Tool.make({
  name: "lookup",
  description: "Looks an order up.",
  parameters: Schema.Struct({ order: Schema.String }),
  replayPolicy: "Always",
  handler: ({ order }) => Effect.succeed(`order ${order}: shipped`)
})
const tools = ToolRegistry.make(lookup)
const agent = AgentDefinition.make({ name: "desk", systemPrompt: "You look orders up.", budget: { maxSteps: 5 } })
const script: ScriptedModel.Script = (request) =>
  request.messages.filter((m) => m._tag === "Assistant").length < 2
    ? ModelReply.make({ text: "", toolCalls: [{ id: "", name: "lookup", argumentsText: JSON.stringify({ order: "17" }) }] })
    : ModelReply.make({ text: "Shipped." })

const services = (store: RunLogStore.RunLogStore.Service, sink: Layer.Layer<EventSink.EventSink> = EventSink.layerNoop) =>
  Layer.mergeAll(NativeToolCallParser.layer(), Layer.orDie(ToolRegistry.layerExecutor(tools)), sink, Layer.succeed(RunLogStore.RunLogStore, store))

/** Runs `effect` forked, moving the TestClock a second at a time until it ends or `until` is reached. */
const driven = <A, E>(effect: Effect.Effect<A, E>, until?: Deferred.Deferred<void>) =>
  Effect.gen(function*() {
    const fiber = yield* Effect.fork(effect)
    for (let i = 0; i < 60; i++) {
      if (Option.isSome(yield* Fiber.poll(fiber))) break
      if (until !== undefined && (yield* Deferred.isDone(until))) break
      yield* TestClock.adjust("1 second")
    }
    return fiber
  })

const keysOf = (log: RunLog.RunLog) => log.steps.map((s) => Object.keys(s).sort())

describe("modelElapsed", () => {
  it.effect("a step finished after a resume records the model call's elapsed as the uninterrupted step does", () =>
    Effect.gen(function*() {
      const request = { runId: Ids.runId("timed"), agent, task: "Where is order 17?", tools }
      // Uninterrupted: every model call takes 2 seconds of the Clock.
      const reference = yield* RunLogStore.makeMemory
      const model = yield* ScriptedModel.make(script, { latency: "2 seconds" })
      yield* Fiber.join(yield* driven(Agent.run(request).pipe(Effect.provide(Layer.merge(services(reference), model.layer)))))
      const expected = yield* reference.readLog(request.runId)
      assert.deepStrictEqual(expected.steps.map((s) => s.modelElapsed), [2000, 2000, 2000])

      // Interrupted once step 1's reply is logged, before the step completes; then resumed.
      const store = yield* RunLogStore.makeMemory
      const reached = yield* Deferred.make<void>()
      const sink = EventSink.layer((e) => (e._tag === "ModelReplied" && e.step === 1 ? Effect.zipRight(Deferred.succeed(reached, undefined), Effect.never) : Effect.void))
      const first = yield* ScriptedModel.make(script, { latency: "2 seconds" })
      const cut = yield* driven(Agent.run(request).pipe(Effect.provide(Layer.merge(services(store, sink), first.layer))), reached)
      yield* Deferred.await(reached)
      yield* Fiber.interrupt(cut)
      const again = yield* ScriptedModel.make(script, { latency: "2 seconds" })
      yield* Fiber.join(yield* driven(Agent.run(request).pipe(Effect.provide(Layer.merge(services(store), again.layer)))))
      const log = yield* store.readLog(request.runId)
      assert.strictEqual(log.resumes.length, 1)
      assert.deepStrictEqual(keysOf(log), keysOf(expected), "the same fields with and without the interruption")
      assert.deepStrictEqual(log.steps.map((s) => s.modelElapsed), [2000, 2000, 2000])
      assert.deepStrictEqual(log.replies.map((r) => r.modelElapsed), [2000, 2000, 2000])
      assert.deepStrictEqual(RunLogAudit.logProblems(log), [])
    }))

  it.effect("a log written by the previous version (replies without modelElapsed), interrupted after a reply, resumes and finishes", () =>
    Effect.gen(function*() {
      const texts = fs.readFileSync(new URL("./fixtures/pre-model-elapsed-log.jsonl", import.meta.url), "utf8").trim().split("\n")
      const backend = RunLogStore.makeMemoryBackend()
      const store = RunLogStore.make(backend)
      const runId = Ids.runId("pre-model-elapsed")
      for (const text of texts) {
        const record = JSON.parse(text) as RunLog.RunRecord
        yield* backend.append(runId, [{ seq: record.seq, kind: record._tag, json: text, record }])
      }
      const before = yield* store.readLog(runId)
      assert.isTrue(before.replies.every((r) => r.modelElapsed === undefined), "the fixture is the previous version's")
      assert.strictEqual(before.replies.length, before.steps.length + 1, "its last reply's step did not complete")
      const model = yield* ScriptedModel.make(script)
      const result = yield* Agent.run({ runId, agent, task: "Where is order 17?", tools }).pipe(Effect.provide(Layer.merge(services(store), model.layer)))
      assert.strictEqual(result.stopReason._tag, "Completed")
      const log = yield* store.readLog(runId)
      assert.isUndefined(log.steps[1]!.modelElapsed, "nothing was recorded for it: nothing is invented")
      assert.isDefined(log.steps[2]!.modelElapsed)
      assert.deepStrictEqual(RunLogAudit.logProblems(log), [])
    }))
})
