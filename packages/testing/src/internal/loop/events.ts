/**
 * The loop suite, events: emitted in order, each after the record it reports; a failing sink is counted and never interrupts the run.
 *
 * @internal
 */
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import { EventDeliveryError } from "@polyloop/core/Errors"
import * as EventSink from "@polyloop/core/EventSink"
import * as Ids from "@polyloop/core/Ids"
import type { LoopEvent } from "@polyloop/core/LoopEvent"
import type * as RunLog from "@polyloop/core/RunLog"
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
        // At each delivery the sink reads the run's log from the store under test: a record an
        // event reports must already be there; a step's records must not be there at StepStarted.
        const seen: Array<{ readonly event: LoopEvent; readonly durable: boolean }> = []
        const sink = EventSink.layer((event) =>
          h.log(event.runId).pipe(
            Effect.map((log) => {
              seen.push({ event, durable: isDurable(log, event) })
            }),
            Effect.mapError((error) => new EventDeliveryError({ message: `cannot read the log: ${error.message}`, cause: error }))
          )
        )
        const model = yield* ScriptedModel.make([call("echo", { text: "a" }), say("nonsense"), say("FINISH: ok")])
        const result = yield* h.run(request("events-1", f.tools), { model: model.layer, sink })
        assert.strictEqual(result.eventDeliveryFailures, 0, "the sink could read the log at every event")
        assert.deepStrictEqual(seen.map(({ event }) => event._tag), [
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
        const notYetDurable = seen.filter(({ durable }) => !durable).map(({ event }) => "step" in event ? `${event._tag}@${event.step}` : event._tag)
        assert.deepStrictEqual(notYetDurable, [], "each event's record was in the log when the event was emitted")
        const log = yield* h.log(Ids.runId("events-1"))
        const started = seen[0]?.event
        assert.strictEqual(started?._tag === "RunStarted" ? started.snapshotHash : "", Option.getOrThrow(log.started).snapshotHash)
      }))
  })
}

/**
 * Is what `event` reports in `log`? `RunStarted`, `ModelReplied`, `ActionExecuted`,
 * `StepCompleted` and `RunFinished` each need their record; at `StepStarted` none of the step's
 * records exist yet; `DecisionParsed` follows its step's reply.
 */
const isDurable = (log: RunLog.RunLog, event: LoopEvent): boolean => {
  switch (event._tag) {
    case "RunStarted":
      return Option.exists(log.started, (record) => record.snapshotHash === event.snapshotHash)
    case "StepStarted":
      return !log.replies.some((r) => r.step === event.step) && !log.steps.some((s) => s.step === event.step)
    case "ModelReplied":
    case "DecisionParsed":
      return log.replies.some((r) => r.step === event.step)
    case "ActionExecuted":
      return log.results.some((r) => r.step === event.step && r.callIndex === event.callIndex && r.outcome.status === event.outcome.status)
    case "StepCompleted":
      return log.steps.some((s) => s.step === event.step && s.decision._tag === event.decision)
    case "RunFinished":
      return Option.exists(log.finished, (record) => record.stopReason._tag === event.stopReason._tag)
    default:
      return true
  }
}
