/**
 * The loop suite, events: emitted in order, each after the record it reports; a failing sink is counted and never interrupts the run.
 *
 * @internal
 */
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import * as Ids from "@polyloop/core/Ids"
import * as ScriptedModel from "../../ScriptedModel.js"
import type { Assert } from "../vitest.js"
import { makeFixture, call, say, recordingSink } from "./fixtures.js"
import { type SuiteContext, request, sixSteps } from "./harness.js"

/** Registers this concern's tests. */
export const register = (ctx: SuiteContext): void => {
  const { describe, test } = ctx
  const assert: Assert = ctx.assert
  describe("SPEC §13: what each failure becomes", () => {
    test("an event sink that fails is counted and never interrupts the run", (h) =>
      Effect.gen(function*() {
        const f = makeFixture()
        const failing = recordingSink((event) => event._tag !== "RunFinished")
        const model = yield* ScriptedModel.make(sixSteps)
        const result = yield* h.run(request("sink-1", f.tools), { model: model.layer, sink: failing.layer })
        assert.strictEqual(result.stopReason._tag, "Completed")
        assert.strictEqual(result.steps, 6)
        const delivered = failing.events.length
        // Every event but RunFinished failed; RunFinished is emitted after its record.
        assert.strictEqual(result.eventDeliveryFailures, delivered - 1)
        assert.isAbove(result.eventDeliveryFailures, 6 * 4)
        const log = yield* h.log(Ids.runId("sink-1"))
        assert.deepStrictEqual(Option.map(log.finished, (x) => x.eventDeliveryFailures), Option.some(delivered - 1))
        const quiet = yield* ScriptedModel.make(sixSteps)
        const g = makeFixture()
        const clean = yield* h.run(request("sink-2", g.tools), { model: quiet.layer, sink: recordingSink().layer })
        assert.strictEqual(clean.eventDeliveryFailures, 0)
      }))
  })

  describe("events", () => {
    test("events of a run are emitted in order, each after the record it reports", (h) =>
      Effect.gen(function*() {
        const f = makeFixture()
        const sink = recordingSink()
        const model = yield* ScriptedModel.make([call("echo", { text: "a" }), say("nonsense"), say("FINISH: ok")])
        yield* h.run(request("events-1", f.tools), { model: model.layer, sink: sink.layer })
        assert.deepStrictEqual(sink.events.map((e) => e._tag), [
          "RunStarted",
          "StepStarted",
          "ModelReplied",
          "DecisionParsed",
          "ActionExecuted",
          "StepCompleted",
          "StepStarted",
          "ModelReplied",
          "DecisionParsed",
          "StepCompleted",
          "StepStarted",
          "ModelReplied",
          "DecisionParsed",
          "StepCompleted",
          "RunFinished"
        ])
        const log = yield* h.log(Ids.runId("events-1"))
        const started = sink.events[0]
        assert.strictEqual(started?._tag === "RunStarted" ? started.snapshotHash : "", Option.getOrThrow(log.started).snapshotHash)
      }))
  })
}
