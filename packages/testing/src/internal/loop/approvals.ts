/**
 * The loop suite, human approval (design 0160): a call that needs a person's decision
 * suspends the run with nothing held and nothing run; while undecided, `Agent.run` writes
 * nothing; approved, the call runs once on the next `Agent.run`; rejected, it is `NotExecuted`
 * with the `rejected` text and the run goes on; a predicate that says no needs no decision;
 * several calls of one step each wait for their own decision; an approved call interrupted while
 * it runs follows its replay policy; a run stopped between its reply and its requests requests
 * on resume; a decision that does not bind is refused; a configuration change is refused.
 *
 * @internal
 */
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as Option from "effect/Option"
import * as Schema from "effect/Schema"
import * as Agent from "@polyloop/core/Agent"
import * as Approval from "@polyloop/core/Approval"
import { StoreError } from "@polyloop/core/Errors"
import * as Ids from "@polyloop/core/Ids"
import type * as ModelReply from "@polyloop/core/ModelReply"
import * as NativeToolCallParser from "@polyloop/core/NativeToolCallParser"
import * as RunLog from "@polyloop/core/RunLog"
import * as RunLogStore from "@polyloop/core/RunLogStore"
import * as Tool from "@polyloop/core/Tool"
import * as ToolContext from "@polyloop/core/ToolContext"
import * as ToolRegistry from "@polyloop/core/ToolRegistry"
import * as ScriptedModel from "../../ScriptedModel.js"
import type { Assert } from "../vitest.js"
import { calls, recordingSink, say } from "./fixtures.js"
import { type Harness, request, type SuiteContext } from "./harness.js"

const native = NativeToolCallParser.make()

const Refund = Schema.Struct({ orderId: Schema.Number, amount: Schema.Number })

/** A refund desk: `refund` ("Never") needs approval over 100; `note` ("Always") never does. */
const makeDesk = (options?: { readonly refundPolicy?: "Never" | "Always"; readonly rule?: string }) => {
  const effects: Array<string> = []
  let block: Deferred.Deferred<void> | undefined
  const refund = Tool.make({
    name: "refund",
    description: "Refunds an amount on an order.",
    parameters: Refund,
    replayPolicy: options?.refundPolicy ?? "Never",
    approval: Tool.approvalWhen(options?.rule ?? "amounts over 100", (args: typeof Refund.Type) => args.amount > 100),
    handler: ({ amount, orderId }) =>
      Effect.gen(function*() {
        const ctx = yield* ToolContext.ToolContext
        effects.push(`refund ${orderId}/${amount} @${ctx.step}`)
        const b = block
        if (b !== undefined) {
          block = undefined
          yield* Deferred.succeed(b, undefined)
          yield* Effect.never
        }
        return `refunded ${amount}`
      })
  })
  const note = Tool.make({
    name: "note",
    description: "Notes a text.",
    parameters: Schema.Struct({ text: Schema.String }),
    replayPolicy: "Always",
    handler: ({ text }) => Effect.sync(() => (effects.push(`note ${text}`), `noted ${text}`))
  })
  return {
    tools: ToolRegistry.make(refund, note),
    effects,
    blockNextRefund: (reached: Deferred.Deferred<void>) => {
      block = reached
    }
  }
}

const suspendedOf = (assert: Assert, exit: unknown): Approval.Suspended => {
  assert.isTrue(exit instanceof Approval.Suspended, `expected Suspended, got ${String(exit)}`)
  return exit as Approval.Suspended
}

/** A store that fails the first approval append (before it reaches the store), as a crash between reply and requests would leave it. */
const failingFirstRequest = (store: RunLogStore.RunLogStore.Service): RunLogStore.RunLogStore.Service => {
  let failed = false
  return {
    ...store,
    appendApprovals: (runId, records) =>
      Effect.suspend(() => {
        if (failed) return store.appendApprovals(runId, records)
        failed = true
        return Effect.fail(new StoreError({ reason: "Unavailable", runId, message: "injected: the requests were not written" }))
      })
  }
}

/** Registers this concern's tests. */
export const register = (ctx: SuiteContext): void => {
  const { describe, test } = ctx
  const assert: Assert = ctx.assert

  const run = (h: Harness, runId: string, desk: ReturnType<typeof makeDesk>, script: ReadonlyArray<ModelReply.ModelReply>, extra?: { readonly store?: RunLogStore.RunLogStore.Service; readonly sink?: ReturnType<typeof recordingSink> }) =>
    Effect.gen(function*() {
      const model = yield* ScriptedModel.make(script)
      return yield* h.run(request(runId, desk.tools), {
        model: model.layer,
        parser: native,
        ...(extra?.store === undefined ? {} : { store: extra.store }),
        ...(extra?.sink === undefined ? {} : { sink: extra.sink.layer })
      })
    })

  const decide = (h: Harness, input: Approval.DecideInput) => Effect.provideService(Agent.decide(input), RunLogStore.RunLogStore, h.store)

  describe("approvals (design 0160)", () => {
    test("a call that needs approval suspends the run: its request is durable, nothing ran, and while undecided Agent.run writes nothing and holds nothing", (h) =>
      Effect.gen(function*() {
        const desk = makeDesk()
        const runId = Ids.runId("approve-suspend-1")
        const script = [calls(["refund", { orderId: 7, amount: 250 }]), say("done")]
        const sink = recordingSink()
        const first = suspendedOf(assert, yield* Effect.flip(run(h, runId, desk, script, { sink })))
        assert.deepStrictEqual(first.waiting.map((w) => [w.step, w.callId, w.tool]), [[0, "call_s0_0", "refund"]])
        assert.deepStrictEqual(desk.effects, [])
        const log = yield* h.log(runId)
        assert.deepStrictEqual(RunLog.records(log).map((r) => r._tag), ["RunStarted", "ModelReplied", "ApprovalRequested"])
        const request0 = log.approvals[0] as RunLog.ApprovalRequested
        assert.strictEqual(request0.actionHash, Approval.actionHash(runId, 0, "call_s0_0", request0.action))
        assert.deepStrictEqual(sink.events.filter((e) => e._tag === "ApprovalRequested").map((e) => e._tag === "ApprovalRequested" && e.callId), ["call_s0_0"])
        assert.isTrue(Approval.isSuspended(log))
        // Again, undecided: the same suspension, nothing written (no RunResumed), the claim free.
        const again = suspendedOf(assert, yield* Effect.flip(run(h, runId, desk, script)))
        assert.deepStrictEqual(again.waiting, first.waiting)
        assert.deepStrictEqual(yield* h.log(runId), log)
        yield* Effect.scoped(h.store.claim(runId))
      }))

    test("approved: the next Agent.run resumes, the call runs once, its observation enters history, the run finishes", (h) =>
      Effect.gen(function*() {
        const desk = makeDesk()
        const runId = Ids.runId("approve-yes-1")
        const script = [calls(["refund", { orderId: 7, amount: 250 }]), say("refunded")]
        yield* Effect.flip(run(h, runId, desk, script))
        yield* decide(h, { runId, callId: "call_s0_0", decision: Approval.approve, by: "ana" })
        const model = yield* ScriptedModel.make(script)
        const result = yield* h.run(request(runId, desk.tools), { model: model.layer, parser: native })
        assert.deepStrictEqual([result.stopReason._tag, result.steps, result.effectiveSteps, result.resumedCount], ["Completed", 2, 1, 1])
        assert.deepStrictEqual(desk.effects, ["refund 7/250 @0"])
        const log = yield* h.log(runId)
        assert.deepStrictEqual(log.results.map((r) => [r.outcome.status, r.outcome.observation]), [["Executed", "refunded 250"]])
        const seen = yield* model.requests
        const messages = seen[seen.length - 1]!.request.messages
        assert.deepStrictEqual(messages[messages.length - 1], { _tag: "Tool", callId: "call_s0_0", name: "refund", text: "refunded 250" })
        // Finished: a late decision is refused, and the run returns its result.
        const late = yield* Effect.flip(decide(h, { runId, callId: "call_s0_0", decision: Approval.approve, by: "ben" }))
        assert.strictEqual(late._tag, "AlreadyDecided")
        assert.deepStrictEqual(yield* run(h, runId, desk, script), result)
      }))

    test("rejected: NotExecuted with the rejected text filled with the reason, the handler never runs, the run goes on", (h) =>
      Effect.gen(function*() {
        const desk = makeDesk()
        const runId = Ids.runId("approve-no-1")
        const script = [calls(["refund", { orderId: 7, amount: 250 }]), say("could not refund")]
        yield* Effect.flip(run(h, runId, desk, script))
        yield* decide(h, { runId, callId: "call_s0_0", decision: Approval.reject("no receipt"), by: "ana" })
        const model = yield* ScriptedModel.make(script)
        const result = yield* h.run(request(runId, desk.tools), { model: model.layer, parser: native })
        assert.deepStrictEqual([result.stopReason._tag, result.steps, result.effectiveSteps], ["Completed", 2, 0])
        assert.deepStrictEqual(desk.effects, [])
        const outcome = (yield* h.log(runId)).results[0]!.outcome
        const text = "The call to refund was rejected by a person and was not executed. Reason: no receipt"
        assert.deepStrictEqual([outcome.status, outcome.observation, outcome.observationIsSynthetic], ["NotExecuted", text, true])
        const seen = yield* model.requests
        const messages = seen[seen.length - 1]!.request.messages
        assert.deepStrictEqual(messages[messages.length - 1], { _tag: "Tool", callId: "call_s0_0", name: "refund", text })
      }))

    test("a predicate that says no needs no decision: the call runs at once", (h) =>
      Effect.gen(function*() {
        const desk = makeDesk()
        const result = yield* run(h, Ids.runId("approve-small-1"), desk, [calls(["refund", { orderId: 7, amount: 40 }]), say("ok")])
        assert.strictEqual(result.stopReason._tag, "Completed")
        assert.deepStrictEqual(desk.effects, ["refund 7/40 @0"])
        assert.deepStrictEqual((yield* h.log(Ids.runId("approve-small-1"))).approvals, [])
      }))

    test("several calls of one step each wait for their own decision; the step's other calls wait with them and run in call order after", (h) =>
      Effect.gen(function*() {
        const desk = makeDesk()
        const runId = Ids.runId("approve-many-1")
        const script = [
          calls(["note", { text: "before" }], ["refund", { orderId: 1, amount: 200 }], ["refund", { orderId: 2, amount: 300 }], ["refund", { orderId: 3, amount: 5 }]),
          say("done")
        ]
        const first = suspendedOf(assert, yield* Effect.flip(run(h, runId, desk, script)))
        assert.deepStrictEqual(first.waiting.map((w) => w.callId), ["call_s0_1", "call_s0_2"])
        assert.deepStrictEqual(desk.effects, [])
        yield* decide(h, { runId, callId: "call_s0_2", decision: Approval.reject("duplicate order"), by: "ana" })
        const second = suspendedOf(assert, yield* Effect.flip(run(h, runId, desk, script)))
        assert.deepStrictEqual(second.waiting.map((w) => w.callId), ["call_s0_1"])
        yield* decide(h, { runId, callId: "call_s0_1", decision: Approval.approve, by: "ben" })
        const result = yield* run(h, runId, desk, script)
        assert.strictEqual(result.stopReason._tag, "Completed")
        assert.deepStrictEqual(desk.effects, ["note before", "refund 1/200 @0", "refund 3/5 @0"])
        const log = yield* h.log(runId)
        assert.deepStrictEqual(log.results.map((r) => [r.callIndex, r.outcome.status]), [[0, "Executed"], [1, "Executed"], [2, "NotExecuted"], [3, "Executed"]])
      }))

    test("an approved call interrupted while it runs follows its replay policy on resume: a \"Never\" call is not run again, an \"Always\" call is", (h) =>
      Effect.gen(function*() {
        for (const policy of ["Never", "Always"] as const) {
          const desk = makeDesk({ refundPolicy: policy })
          const runId = Ids.runId(`approve-kill-${policy}`)
          const script = [calls(["refund", { orderId: 9, amount: 500 }]), say("done")]
          yield* Effect.flip(run(h, runId, desk, script))
          yield* decide(h, { runId, callId: "call_s0_0", decision: Approval.approve, by: "ana" })
          const reached = yield* Deferred.make<void>()
          desk.blockNextRefund(reached)
          const fiber = yield* Effect.fork(run(h, runId, desk, script))
          yield* Deferred.await(reached)
          yield* Fiber.interrupt(fiber)
          const result = yield* run(h, runId, desk, script)
          assert.strictEqual(result.stopReason._tag, "Completed")
          const outcome = (yield* h.log(runId)).results[0]!.outcome
          if (policy === "Never") {
            assert.deepStrictEqual(desk.effects, ["refund 9/500 @0"])
            assert.strictEqual(outcome.status, "NotExecuted")
            assert.match(outcome.observation, /interrupted and may or may not have taken effect/)
          } else {
            assert.deepStrictEqual(desk.effects, ["refund 9/500 @0", "refund 9/500 @0"])
            assert.strictEqual(outcome.status, "Executed")
          }
        }
      }))

    test("a run stopped between its reply and its requests requests on resume and suspends; nothing ran", (h) =>
      Effect.gen(function*() {
        const desk = makeDesk()
        const runId = Ids.runId("approve-gap-1")
        const script = [calls(["refund", { orderId: 4, amount: 120 }]), say("done")]
        const failed = yield* Effect.flip(run(h, runId, desk, script, { store: failingFirstRequest(h.store) }))
        assert.strictEqual(failed._tag, "StoreError")
        assert.deepStrictEqual(RunLog.records(yield* h.log(runId)).map((r) => r._tag), ["RunStarted", "ModelReplied"])
        const suspended = suspendedOf(assert, yield* Effect.flip(run(h, runId, desk, script)))
        assert.deepStrictEqual(suspended.waiting.map((w) => w.callId), ["call_s0_0"])
        assert.deepStrictEqual(RunLog.records(yield* h.log(runId)).map((r) => r._tag), ["RunStarted", "ModelReplied", "RunResumed", "ApprovalRequested"])
        assert.deepStrictEqual(desk.effects, [])
        yield* decide(h, { runId, callId: "call_s0_0", decision: Approval.approve, by: "ana" })
        yield* run(h, runId, desk, script)
        assert.deepStrictEqual(desk.effects, ["refund 4/120 @0"])
      }))

    test("a decision that does not bind to the requested action (written around Agent.decide) is refused: StoreError Corrupt, nothing runs, nothing is written", (h) =>
      Effect.gen(function*() {
        const desk = makeDesk()
        const runId = Ids.runId("approve-forged-1")
        const script = [calls(["refund", { orderId: 7, amount: 250 }]), say("done")]
        yield* Effect.flip(run(h, runId, desk, script))
        const log = yield* h.log(runId)
        const forgedHash = Approval.actionHash(runId, 0, "call_s0_0", { _tag: "ToolCall", id: "call_s0_0", name: "refund", arguments: { orderId: 7, amount: 25 } })
        yield* h.store.appendApprovals(runId, [{
          _tag: "ApprovalDecided",
          seq: RunLog.nextSeq(log),
          step: 0 as Ids.StepIndex,
          callId: "call_s0_0",
          actionHash: forgedHash,
          decision: Approval.approve,
          by: "mallory",
          at: 0
        }])
        const before = yield* h.log(runId)
        const error = yield* Effect.flip(run(h, runId, desk, script))
        assert.deepStrictEqual([error._tag, error._tag === "StoreError" && error.reason], ["StoreError", "Corrupt"])
        assert.deepStrictEqual(desk.effects, [])
        assert.deepStrictEqual(yield* h.log(runId), before)
      }))

    test("a configuration changed between suspension and resume is refused with SnapshotMismatch, nothing written", (h) =>
      Effect.gen(function*() {
        const runId = Ids.runId("approve-config-1")
        const script = [calls(["refund", { orderId: 7, amount: 250 }]), say("done")]
        yield* Effect.flip(run(h, runId, makeDesk(), script))
        yield* decide(h, { runId, callId: "call_s0_0", decision: Approval.approve, by: "ana" })
        const before = yield* h.log(runId)
        const changed = makeDesk({ rule: "amounts over 50" })
        const error = yield* Effect.flip(run(h, runId, changed, script))
        assert.strictEqual(error._tag, "SnapshotMismatch")
        assert.isTrue(error._tag === "SnapshotMismatch" && error.differences.some(([path]) => path === "tools[0].approval"))
        assert.deepStrictEqual(changed.effects, [])
        assert.deepStrictEqual(yield* h.log(runId), before)
        assert.isTrue(Option.isNone(before.finished))
      }))
  })
}
