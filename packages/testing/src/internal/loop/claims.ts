/**
 * The loop suite, idempotence and claims: a finished run returns its recorded result, a configuration changed before resume is refused, a run held by another owner is RunBusy, and requests refused before anything is written.
 *
 * @internal
 */
import * as Deferred from "effect/Deferred"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Fiber from "effect/Fiber"
import * as Schema from "effect/Schema"
import * as ActionExecutor from "@polyloop/core/ActionExecutor"
import * as Agent from "@polyloop/core/Agent"
import * as Ids from "@polyloop/core/Ids"
import * as RunLog from "@polyloop/core/RunLog"
import * as Tool from "@polyloop/core/Tool"
import * as ToolRegistry from "@polyloop/core/ToolRegistry"
import * as ScriptedModel from "../../ScriptedModel.js"
import type { Assert } from "../vitest.js"
import { makeFixture, call, recordingSink } from "./fixtures.js"
import { type SuiteContext, type SuiteRequest, request, sixSteps } from "./harness.js"

/** Registers this concern's tests. */
export const register = (ctx: SuiteContext): void => {
  const { describe, test } = ctx
  const assert: Assert = ctx.assert
  describe("SPEC §13: what each failure becomes", () => {
    test("a configuration changed between start and resume is refused with SnapshotMismatch and the log is unchanged", (h) =>
      Effect.gen(function*() {
        const f = makeFixture()
        const runId = Ids.runId("snapshot-1")
        const down = yield* ScriptedModel.make(sixSteps, { failures: [{ step: 2, times: 1, retryable: false }] })
        yield* Effect.flip(h.run(request(runId, f.tools), { model: down.layer }))
        const before = yield* h.log(runId)
        assert.strictEqual(before.steps.length, 2)
        const otherSchema = ToolRegistry.make(
          ...f.tools.tools.map((tool) =>
            tool.name === "echo"
              ? Tool.make({ name: "echo", description: tool.description, parameters: Schema.Struct({ text: Schema.String, loud: Schema.Boolean }), replayPolicy: "Always", handler: () => Effect.succeed("") })
              : tool
          )
        )
        const changes: ReadonlyArray<readonly [string, SuiteRequest, string]> = [
          ["system prompt", request(runId, f.tools, { systemPrompt: "You are a reckless agent." }), "agent.systemPrompt"],
          ["tool schema", request(runId, otherSchema), "tools[0].parameters"],
          ["budget", request(runId, f.tools, { budget: { maxSteps: 21 } }), "agent.budget.maxSteps"],
          ["task", request(runId, f.tools, {}, "Do another task."), "task"]
        ]
        for (const [what, changed, path] of changes) {
          const never = yield* ScriptedModel.make([])
          const error = yield* Effect.flip(h.run(changed, { model: never.layer }))
          assert.strictEqual(error._tag, "SnapshotMismatch", what)
          if (error._tag === "SnapshotMismatch") {
            assert.isTrue(error.differences.some(([p]) => p.startsWith(path)), `${what}: ${JSON.stringify(error.differences)}`)
          }
          assert.strictEqual(yield* never.calls, 0)
          assert.deepStrictEqual(yield* h.log(runId), before, what)
        }
        // modelRetry is not in the snapshot: a resume may change it.
        const up = yield* ScriptedModel.make(sixSteps)
        const result = yield* h.run(request(runId, f.tools, { modelRetry: { maxAttempts: 5, baseDelay: Duration.millis(7), maxDelay: Duration.seconds(1) } }), { model: up.layer })
        assert.strictEqual(result.stopReason._tag, "Completed")
        assert.strictEqual(result.resumedCount, 1)
      }))

    test("a run being run by another owner is refused with RunBusy and nothing is done", (h) =>
      Effect.gen(function*() {
        const f = makeFixture()
        const runId = Ids.runId("busy-1")
        const reached = yield* Deferred.make<void>()
        const gate = yield* Deferred.make<void>()
        const first = yield* ScriptedModel.make(sixSteps, {
          onCall: (c) => (c.step === 1 && c.attempt === 0 ? Effect.zipRight(Deferred.succeed(reached, undefined), Deferred.await(gate)) : Effect.void)
        })
        const fiber = yield* Effect.fork(h.run(request(runId, f.tools), { model: first.layer }))
        yield* Deferred.await(reached)
        const before = yield* h.log(runId)
        const second = yield* ScriptedModel.make(sixSteps)
        const error = yield* Effect.flip(h.run(request(runId, f.tools), { model: second.layer }))
        assert.strictEqual(error._tag, "RunBusy")
        assert.strictEqual(yield* second.calls, 0)
        assert.deepStrictEqual(yield* h.log(runId), before)
        yield* Deferred.succeed(gate, undefined)
        const result = yield* Fiber.join(fiber)
        assert.strictEqual(result.stopReason._tag, "Completed")
        assert.strictEqual(result.resumedCount, 0)
        assert.deepStrictEqual(f.effects, ["write k1=v1", "write k2=v2"])
      }))

    test("two runs started at once on one run id: exactly one runs, the other fails with RunBusy", (h) =>
      Effect.gen(function*() {
        const f = makeFixture()
        const runId = Ids.runId("busy-2")
        // Whichever run claims first stops at its first model call until the other has returned.
        const reached = yield* Deferred.make<void>()
        const gate = yield* Deferred.make<void>()
        const hold = {
          onCall: (c: ScriptedModel.Call) =>
            c.step === 0 && c.attempt === 0 ? Effect.zipRight(Deferred.succeed(reached, undefined), Deferred.await(gate)) : Effect.void
        }
        const a = yield* ScriptedModel.make(sixSteps, hold)
        const b = yield* ScriptedModel.make(sixSteps, hold)
        const fa = yield* Effect.fork(Effect.either(h.run(request(runId, f.tools), { model: a.layer })))
        const fb = yield* Effect.fork(Effect.either(h.run(request(runId, f.tools), { model: b.layer })))
        // The first to return is the refused one: the other is held at the gate.
        const refused = yield* Effect.raceFirst(Fiber.join(fa), Fiber.join(fb))
        assert.isTrue(Either.isLeft(refused) && refused.left._tag === "RunBusy", JSON.stringify(refused))
        yield* Deferred.await(reached)
        yield* Deferred.succeed(gate, undefined)
        const outcomes = [yield* Fiber.join(fa), yield* Fiber.join(fb)]
        const ok = outcomes.filter(Either.isRight)
        const busy = outcomes.filter((o) => Either.isLeft(o) && o.left._tag === "RunBusy")
        assert.strictEqual(ok.length, 1)
        assert.strictEqual(busy.length, 1)
        assert.strictEqual((yield* a.calls) + (yield* b.calls), 6)
        assert.deepStrictEqual(f.effects, ["write k1=v1", "write k2=v2"])
        const log = yield* h.log(runId)
        assert.strictEqual(log.resumes.length, 0)
        assert.strictEqual(log.steps.length, 6)
      }))

    test("an executor derived from another registry is refused with ExecutorRegistryMismatch before anything is written", (h) =>
      Effect.gen(function*() {
        const f = makeFixture()
        const narrowed = Either.getOrThrow(f.tools.restrictTo(["echo", "submit"]))
        const executor = yield* Effect.orDie(narrowed.executor())
        const model = yield* ScriptedModel.make(sixSteps)
        const error = yield* Effect.flip(h.run(request("mismatch-1", f.tools), { model: model.layer, executor }))
        assert.strictEqual(error._tag, "ExecutorRegistryMismatch")
        assert.isTrue(RunLog.isEmpty(yield* h.log(Ids.runId("mismatch-1"))))
        assert.strictEqual(yield* model.calls, 0)
        // The same narrowing on both sides is accepted.
        const ok = yield* ScriptedModel.make([call("echo", { text: "x" }), call("submit", { answer: "y" })])
        const result = yield* h.run(request("mismatch-2", narrowed), { model: ok.layer, executor })
        assert.deepStrictEqual(result.stopReason, { _tag: "Completed", by: "Tool", answer: "submitted y" })
      }))

    test("an invalid agent definition is refused with InvalidRunRequest before anything is written", (h) =>
      Effect.gen(function*() {
        const f = makeFixture()
        const error = yield* Effect.flip(h.run(request("invalid-req-1", f.tools, { budget: { maxSteps: 0 } }), { model: ScriptedModel.unreachable }))
        assert.strictEqual(error._tag, "InvalidRunRequest")
        assert.isTrue(RunLog.isEmpty(yield* h.log(Ids.runId("invalid-req-1"))))
      }))
  })

  describe("idempotence", () => {
    test("a finished run id returns its recorded result without calling the model or the executor", (h) =>
      Effect.gen(function*() {
        const f = makeFixture()
        const runId = Ids.runId("finished-1")
        const model = yield* ScriptedModel.make(sixSteps)
        const first = yield* h.run(request(runId, f.tools), { model: model.layer })
        const log = yield* h.log(runId)
        const dying = ActionExecutor.make({ execute: () => Effect.dieMessage("the executor must not be called") })
        const sink = recordingSink()
        const second = yield* h.run(request(runId, f.tools), { model: ScriptedModel.unreachable, executor: dying, sink: sink.layer })
        assert.deepStrictEqual(second, first)
        assert.deepStrictEqual(yield* h.log(runId), log)
        assert.deepStrictEqual(sink.events, [])
        // Even under another configuration: a finished run is history, not a resume.
        const third = yield* h.run(request(runId, f.tools, { systemPrompt: "changed" }), { model: ScriptedModel.unreachable, executor: dying })
        assert.deepStrictEqual(third, first)
        assert.deepStrictEqual(Schema.decodeUnknownSync(Agent.RunResult)(Schema.encodeSync(Agent.RunResult)(first)), first)
      }))

    test("a finished run returns its result even while another caller holds its claim; an unfinished one is refused with RunBusy", (h) =>
      Effect.gen(function*() {
        const f = makeFixture()
        const done = Ids.runId("finished-2")
        const model = yield* ScriptedModel.make(sixSteps)
        const first = yield* h.run(request(done, f.tools), { model: model.layer })
        const doneLog = yield* h.log(done)
        const open = Ids.runId("finished-3")
        const down = yield* ScriptedModel.make(sixSteps, { failures: [{ step: 2, times: 1, retryable: false }] })
        yield* Effect.flip(h.run(request(open, f.tools), { model: down.layer }))
        const openLog = yield* h.log(open)
        yield* Effect.scoped(
          Effect.gen(function*() {
            yield* h.store.claim(done)
            yield* h.store.claim(open)
            const again = yield* h.run(request(done, f.tools), { model: ScriptedModel.unreachable })
            assert.deepStrictEqual(again, first)
            const error = yield* Effect.flip(h.run(request(open, f.tools), { model: ScriptedModel.unreachable }))
            assert.strictEqual(error._tag, "RunBusy")
          })
        )
        assert.deepStrictEqual(yield* h.log(done), doneLog)
        assert.deepStrictEqual(yield* h.log(open), openLog)
      }))
  })
}
