/**
 * The loop suite, resume and interruption: a run interrupted in a tool or in the model call, and resume after an interruption at every step boundary of a six-step run (the resumed log equals the uninterrupted one; a Never tool never runs twice).
 *
 * @internal
 */
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Fiber from "effect/Fiber"
import * as Option from "effect/Option"
import * as Ids from "@polyloop/core/Ids"
import * as RunLog from "@polyloop/core/RunLog"
import * as RunLogStore from "@polyloop/core/RunLogStore"
import * as SyntheticObservations from "@polyloop/core/SyntheticObservations"
import * as ScriptedModel from "../../ScriptedModel.js"
import type { Assert } from "../vitest.js"
import { makeFixture, recordingSink } from "./fixtures.js"
import { type SuiteContext, boundaries, comparable, describeBoundary, makeHarness, request, resultOfStep, sixSteps } from "./harness.js"

/** Registers this concern's tests. */
export const register = (ctx: SuiteContext): void => {
  const { describe, test } = ctx
  const assert: Assert = ctx.assert
  describe("SPEC §13: what each failure becomes", () => {
    test("a run interrupted mid-tool: the handler sees the interrupt, nothing is written for the step beyond ModelReplied, the claim is released", (h) =>
      Effect.gen(function*() {
        const f = makeFixture()
        const runId = Ids.runId("interrupt-tool-1")
        const reached = yield* Deferred.make<void>()
        f.blockHandlerAt({ step: 1, reached })
        const model = yield* ScriptedModel.make(sixSteps)
        const fiber = yield* Effect.fork(h.run(request(runId, f.tools), { model: model.layer }))
        yield* Deferred.await(reached)
        const before = yield* h.log(runId)
        yield* Fiber.interrupt(fiber)
        const exit = yield* Fiber.await(fiber)
        assert.isTrue(Exit.isInterrupted(exit))
        assert.deepStrictEqual(f.interrupted, ["write@1"])
        const log = yield* h.log(runId)
        assert.deepStrictEqual(log, before)
        assert.strictEqual(log.replies.length, 2)
        assert.strictEqual(log.steps.length, 1)
        assert.strictEqual(log.results.length, 1)
        // The claim was released: a new run resumes at once.
        const again = yield* ScriptedModel.make(sixSteps)
        const result = yield* h.run(request(runId, f.tools), { model: again.layer })
        assert.strictEqual(result.resumedCount, 1)
        assert.deepStrictEqual(f.effects, ["write k1=v1", "write k2=v2"])
      }))

    test("a run interrupted during the model call stops the call in flight", (h) =>
      Effect.gen(function*() {
        const f = makeFixture()
        const runId = Ids.runId("interrupt-model-1")
        const reached = yield* Deferred.make<void>()
        const model = yield* ScriptedModel.make(sixSteps, {
          onCall: (c) => (c.step === 2 ? Effect.zipRight(Deferred.succeed(reached, undefined), Effect.never) : Effect.void)
        })
        const fiber = yield* Effect.fork(h.run(request(runId, f.tools), { model: model.layer }))
        yield* Deferred.await(reached)
        yield* Fiber.interrupt(fiber)
        assert.strictEqual(yield* model.interruptions, 1)
        const log = yield* h.log(runId)
        assert.strictEqual(log.replies.length, 2)
        assert.strictEqual(log.steps.length, 2)
      }))
  })

  describe("resume after an interruption at every step boundary", () => {
    for (const boundary of boundaries) {
      test(`interrupted ${describeBoundary(boundary)}: the resumed log equals the uninterrupted one, and a Never tool never runs twice`, (h) =>
        Effect.gen(function*() {
          const runId = Ids.runId(`boundary-${boundary.at}-${boundary.step}`)
          // The uninterrupted reference, on a private memory store.
          const refFixture = makeFixture()
          const refModel = yield* ScriptedModel.make(sixSteps)
          const reference = yield* Effect.flatMap(RunLogStore.makeMemory, (memory) =>
            Effect.zipRight(
              makeHarness(memory).run(request(runId, refFixture.tools), { model: refModel.layer }),
              memory.readLog(runId)
            ))
          const refRequests = yield* refModel.requests

          const f = makeFixture()
          const reached = yield* Deferred.make<void>()
          const sink = recordingSink()
          let blocked = false
          const model = yield* ScriptedModel.make(sixSteps, {
            onCall: (c) =>
              boundary.at === "model" && c.step === boundary.step && !blocked
                ? Effect.zipRight(
                  Effect.sync(() => {
                    blocked = true
                  }),
                  Effect.zipRight(Deferred.succeed(reached, undefined), Effect.never)
                )
                : Effect.void
          })
          if (boundary.at === "tool") f.blockHandlerAt({ step: boundary.step, reached })
          if (boundary.at === "durable") {
            sink.blockAt({ matches: (e) => e._tag === "StepCompleted" && e.step === boundary.step, reached })
          }
          const fiber = yield* Effect.fork(h.run(request(runId, f.tools), { model: model.layer, sink: sink.layer }))
          yield* Deferred.await(reached)
          const atInterrupt = yield* h.log(runId)
          yield* Fiber.interrupt(fiber)
          assert.isTrue(Exit.isInterrupted(yield* Fiber.await(fiber)))
          const afterInterrupt = yield* h.log(runId)
          // Nothing more was written once the fiber was interrupted.
          assert.deepStrictEqual(afterInterrupt, atInterrupt)
          const k = boundary.step
          if (boundary.at === "model") {
            assert.strictEqual(afterInterrupt.replies.length, k)
            assert.strictEqual(afterInterrupt.steps.length, k)
          } else if (boundary.at === "tool") {
            assert.strictEqual(afterInterrupt.replies.length, k + 1)
            assert.strictEqual(afterInterrupt.steps.length, k)
            assert.isUndefined(resultOfStep(afterInterrupt, k))
            assert.strictEqual(f.interrupted.length, 1)
          } else {
            assert.strictEqual(afterInterrupt.steps.length, k + 1)
            assert.isTrue(Option.isNone(afterInterrupt.finished))
          }

          const resumedModel = yield* ScriptedModel.make(sixSteps)
          const result = yield* h.run(request(runId, f.tools), { model: resumedModel.layer })
          assert.strictEqual(result.resumedCount, 1)
          assert.deepStrictEqual(result.stopReason, { _tag: "Completed", by: "Tool", answer: "submitted 42" })
          const final = yield* h.log(runId)
          assert.strictEqual(final.resumes.length, 1)
          assert.strictEqual(final.resumes[0]!.fromStep, afterInterrupt.steps.length)

          const neverCut = boundary.at === "tool" && sixSteps[k]!.toolCalls[0]!.name === "write"
          if (neverCut) {
            // The Never tool was cut mid-flight: its step completes as NotExecuted with the interrupted text.
            const patched = comparable(reference).map((record) => {
              const r = record as { readonly _tag: string; readonly step?: number }
              if (r._tag === "ActionResulted" && r.step === k) {
                const resulted = record as Omit<RunLog.ActionResulted, "seq">
                return {
                  ...resulted,
                  outcome: {
                    status: "NotExecuted",
                    observation: SyntheticObservations.fill(SyntheticObservations.defaults.interrupted, {
                      tool: "write",
                      issues: "the run stopped while the action was in flight",
                      tools: f.tools.names.join(", ")
                    }),
                    observationIsSynthetic: true,
                    envReportedCompletion: false,
                    observationTruncatedChars: 0
                  },
                  executorObservation: "",
                  handlerFailed: false
                }
              }
              if (r._tag === "StepCompleted" && r.step === k) return { ...(record as Omit<RunLog.StepCompleted, "seq">), effective: false }
              if (r._tag === "ModelReplied" && r.step !== undefined && r.step > k) {
                // The interrupted text entered history: later requests, so their fingerprints, differ.
                return { ...(record as object), requestHash: final.replies[r.step]?.requestHash }
              }
              if (r._tag === "RunFinished") {
                const finished = record as Omit<RunLog.RunFinished, "seq">
                return { ...finished, counters: { ...finished.counters, effectiveSteps: finished.counters.effectiveSteps - 1 } }
              }
              return record
            })
            assert.deepStrictEqual(comparable(final), patched)
          } else {
            assert.deepStrictEqual(comparable(final), comparable(reference))
            // The model saw exactly the history of the uninterrupted run.
            for (const seen of yield* resumedModel.requests) {
              const same = refRequests.find((r) => r.call.step === seen.call.step)
              assert.deepStrictEqual(seen.request, same?.request, `request of step ${seen.call.step}`)
            }
          }
          // A Never tool never runs twice: each write happened exactly once.
          assert.deepStrictEqual(f.effects, ["write k1=v1", "write k2=v2"])
          assert.strictEqual(f.calls.get("write"), 2)
          const echoes = f.calls.get("echo") ?? 0
          // An Always tool cut mid-flight runs again.
          assert.strictEqual(echoes, boundary.at === "tool" && (k === 0 || k === 4) ? 3 : 2)
        }))
    }
  })
}
