/**
 * Approvals without the loop (design 0160): the tool declaration and its snapshot member, the
 * `rejected` text in the snapshot, `Agent.decide` against hand-written logs (each refusal writes
 * nothing; the first decision stands; two deciders at once: one wins, the other is told), the
 * summary's `Suspended` status, and a log written before approvals existed (a fixture made with
 * the previous version) read and resumed to its end by this version.
 */
import { assert, describe, it } from "@effect/vitest"
import * as Agent from "@polyloop/core/Agent"
import * as AgentDefinition from "@polyloop/core/AgentDefinition"
import * as Approval from "@polyloop/core/Approval"
import * as EventSink from "@polyloop/core/EventSink"
import * as Ids from "@polyloop/core/Ids"
import type * as LoopEvent from "@polyloop/core/LoopEvent"
import * as ModelReply from "@polyloop/core/ModelReply"
import * as NativeToolCallParser from "@polyloop/core/NativeToolCallParser"
import * as RunLog from "@polyloop/core/RunLog"
import * as RunLogStore from "@polyloop/core/RunLogStore"
import * as Snapshot from "@polyloop/core/Snapshot"
import * as Tool from "@polyloop/core/Tool"
import * as ToolRegistry from "@polyloop/core/ToolRegistry"
import * as ScriptedModel from "@polyloop/testing/ScriptedModel"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Schema from "effect/Schema"
import * as fs from "node:fs"
import * as Old from "./fixtures/preApprovalConfig.js"

const Refund = Schema.Struct({ orderId: Schema.Number, amount: Schema.Number })

const refund = Tool.make({
  name: "refund",
  description: "Refunds an order.",
  parameters: Refund,
  approval: Tool.approvalWhen("amounts over 100 EUR", (args: typeof Refund.Type) => args.amount > 100),
  handler: ({ amount }) => Effect.succeed(`refunded ${amount}`)
})

const agent = AgentDefinition.make({
  name: "desk",
  systemPrompt: "Refund.",
  budget: { maxSteps: 5 },
  modelRetry: { maxAttempts: 1, baseDelay: Duration.millis(1), maxDelay: Duration.millis(1) }
})

const runId = Ids.runId("approval-1")
const call: RunLog.ApprovalRequested["action"] = { _tag: "ToolCall", id: "c1", name: "refund", arguments: { orderId: 7, amount: 250 } }
const hash = Approval.actionHash(runId, 0, "c1", call)

/** A run suspended at step 0 on call `c1` (and `c2` when `two`), written by hand. */
const suspendedLog = (store: RunLogStore.RunLogStore.Service, two = false) =>
  Effect.gen(function*() {
    yield* store.start({ _tag: "RunStarted", seq: 0, runId, task: "t", snapshot: {}, snapshotHash: "h", startedAt: 1 })
    yield* store.appendReply(runId, { _tag: "ModelReplied", seq: 1, step: 0 as Ids.StepIndex, reply: ModelReply.make({ text: "" }) })
    const requests: Array<RunLog.ApprovalRequested> = [
      { _tag: "ApprovalRequested", seq: 2, step: 0 as Ids.StepIndex, callId: "c1", action: call, actionHash: hash, at: 2 }
    ]
    if (two) {
      const other = { ...call, id: "c2" }
      requests.push({ _tag: "ApprovalRequested", seq: 3, step: 0 as Ids.StepIndex, callId: "c2", action: other, actionHash: Approval.actionHash(runId, 0, "c2", other), at: 2 })
    }
    yield* store.appendApprovals(runId, requests as [RunLog.ApprovalRequested, ...Array<RunLog.ApprovalRequested>])
  })

const withStore = <A, E>(f: (store: RunLogStore.RunLogStore.Service) => Effect.Effect<A, E, RunLogStore.RunLogStore>) =>
  Effect.gen(function*() {
    const store = yield* RunLogStore.makeMemory
    return yield* Effect.provideService(f(store), RunLogStore.RunLogStore, store)
  })

const sizeOf = (store: RunLogStore.RunLogStore.Service) => Effect.map(store.readLog(runId), RunLog.size)

describe("Tool approval and the snapshot", () => {
  it("a tool without approval leaves the snapshot as it was; a declared rule is recorded with its description, and the rejected text with it", () => {
    const plain = ToolRegistry.make(Tool.make({ name: "refund", description: "Refunds an order.", parameters: Refund }))
    const before = Snapshot.make({ agent, task: "t", tools: plain, parserId: "p" })
    assert.isFalse("approval" in before.tools[0]!)
    assert.isUndefined(before.agent.syntheticObservations.rejected)
    const gated = Snapshot.make({ agent, task: "t", tools: ToolRegistry.make(refund), parserId: "p" })
    assert.strictEqual(gated.tools[0]!.approval, "When: amounts over 100 EUR")
    assert.strictEqual(gated.agent.syntheticObservations.rejected, "The call to {tool} was rejected by a person and was not executed. Reason: {reason}")
    const always = Snapshot.make({ agent, task: "t", tools: ToolRegistry.make(Tool.make({ name: "x", description: "", parameters: Refund, approval: "Required" })), parserId: "p" })
    assert.strictEqual(always.tools[0]!.approval, "Required")
    // Changing the rule's description is a configuration change.
    const reworded = Snapshot.make({
      agent,
      task: "t",
      tools: ToolRegistry.make({ ...refund, approval: Tool.approvalWhen("amounts over 200 EUR", () => true) }),
      parserId: "p"
    })
    assert.deepStrictEqual(Snapshot.diff(Snapshot.encode(gated).value, Snapshot.encode(reworded).value).map(([path]) => path), ["tools[0].approval"])
  })

  it("needsApproval evaluates the predicate on the decoded arguments", () => {
    assert.isTrue(Tool.needsApproval(refund, { orderId: 1, amount: 101 }))
    assert.isFalse(Tool.needsApproval(refund, { orderId: 1, amount: 100 }))
    assert.isFalse(Tool.needsApproval(Tool.make({ name: "y", description: "", parameters: Refund }), { orderId: 1, amount: 1e9 }))
  })
})

describe("Agent.decide", () => {
  it.effect("records the decision bound to the requested hash; the run is Suspended until every call is decided", () =>
    withStore((store) =>
      Effect.gen(function*() {
        yield* suspendedLog(store, true)
        const listed = yield* store.listRuns()
        assert.strictEqual(listed[0]!.status, "Suspended")
        const log = yield* store.readLog(runId)
        assert.deepStrictEqual(Approval.waiting(log).map((w) => [w.callId, w.tool, w.actionHash === hash || w.callId === "c2"]), [["c1", "refund", true], ["c2", "refund", true]])
        const record = yield* Agent.decide({ runId, callId: "c1", decision: Approval.approve, by: "ana", actionHash: hash })
        assert.deepStrictEqual([record.seq, record.step, record.callId, record.actionHash, record.by], [4, 0, "c1", hash, "ana"])
        assert.strictEqual((yield* store.listRuns())[0]!.status, "Suspended")
        yield* Agent.decide({ runId, callId: "c2", decision: Approval.reject("too much"), by: "ben" })
        assert.strictEqual((yield* store.listRuns())[0]!.status, "Unfinished")
        assert.deepStrictEqual((yield* store.listRuns({ status: "Suspended" })).length, 0)
        const after = yield* store.readLog(runId)
        assert.deepStrictEqual(after.approvals.map((r) => r._tag), ["ApprovalRequested", "ApprovalRequested", "ApprovalDecided", "ApprovalDecided"])
        assert.deepStrictEqual(Approval.waiting(after), [])
      })
    ))

  it.effect("refuses, writing nothing: no such run, a run that waits for nothing, an unknown call, a second decision (the first stands), a forged hash, bad input", () =>
    withStore((store) =>
      Effect.gen(function*() {
        const missing = yield* Effect.flip(Agent.decide({ runId, callId: "c1", decision: Approval.approve, by: "ana" }))
        assert.deepStrictEqual([missing._tag, missing._tag === "NotSuspended" && missing.reason], ["NotSuspended", "NotFound"])
        yield* store.start({ _tag: "RunStarted", seq: 0, runId, task: "t", snapshot: {}, snapshotHash: "h", startedAt: 1 })
        const idle = yield* Effect.flip(Agent.decide({ runId, callId: "c1", decision: Approval.approve, by: "ana" }))
        assert.deepStrictEqual([idle._tag, idle._tag === "NotSuspended" && idle.reason], ["NotSuspended", "NotWaiting"])
        assert.strictEqual(yield* sizeOf(store), 1)
        yield* store.appendReply(runId, { _tag: "ModelReplied", seq: 1, step: 0 as Ids.StepIndex, reply: ModelReply.make({ text: "" }) })
        yield* store.appendApprovals(runId, [{ _tag: "ApprovalRequested", seq: 2, step: 0 as Ids.StepIndex, callId: "c1", action: call, actionHash: hash, at: 2 }])
        const unknown = yield* Effect.flip(Agent.decide({ runId, callId: "nope", decision: Approval.approve, by: "ana" }))
        assert.strictEqual(unknown._tag, "UnknownCall")
        assert.deepStrictEqual(unknown._tag === "UnknownCall" && unknown.waiting, ["c1"])
        const forged = Approval.actionHash(runId, 0, "c1", { ...call, arguments: { orderId: 7, amount: 25000 } })
        const mismatch = yield* Effect.flip(Agent.decide({ runId, callId: "c1", decision: Approval.approve, by: "ana", actionHash: forged }))
        assert.strictEqual(mismatch._tag, "ActionMismatch")
        const otherRun = yield* Effect.flip(
          Agent.decide({ runId, callId: "c1", decision: Approval.approve, by: "ana", actionHash: Approval.actionHash("another-run", 0, "c1", call) })
        )
        assert.strictEqual(otherRun._tag, "ActionMismatch")
        for (const bad of [
          { runId, callId: "c1", decision: Approval.approve, by: "  " },
          { runId, callId: "c1", decision: Approval.reject(""), by: "ana" },
          { runId: "", callId: "c1", decision: Approval.approve, by: "ana" }
        ]) {
          assert.strictEqual((yield* Effect.flip(Agent.decide(bad)))._tag, "InvalidDecision")
        }
        assert.strictEqual(yield* sizeOf(store), 3)
        yield* Agent.decide({ runId, callId: "c1", decision: Approval.reject("no receipt"), by: "ana" })
        const second = yield* Effect.flip(Agent.decide({ runId, callId: "c1", decision: Approval.approve, by: "ben", actionHash: hash }))
        assert.strictEqual(second._tag, "AlreadyDecided")
        if (second._tag === "AlreadyDecided") {
          assert.deepStrictEqual([second.decision, second.by], [{ _tag: "Reject", reason: "no receipt" }, "ana"])
        }
        assert.strictEqual(yield* sizeOf(store), 4)
        yield* store.finish(runId, {
          _tag: "RunFinished",
          seq: 4,
          stopReason: { _tag: "Completed", by: "Answer", answer: "" },
          finishedAt: 3,
          counters: { steps: 0, effectiveSteps: 0, usage: { inputTokens: 0, outputTokens: 0 }, elapsed: 0, resumedCount: 0 },
          eventDeliveryFailures: 0
        })
        const finished = yield* Effect.flip(Agent.decide({ runId, callId: "c9", decision: Approval.approve, by: "ana" }))
        assert.deepStrictEqual([finished._tag, finished._tag === "NotSuspended" && finished.reason], ["NotSuspended", "Finished"])
      })
    ))

  it.effect("two people deciding the same call at once: one decision is recorded, the other is told it came second", () =>
    withStore((store) =>
      Effect.gen(function*() {
        yield* suspendedLog(store)
        const results = yield* Effect.all(
          ["ana", "ben", "cy", "dee"].map((by) => Effect.either(Agent.decide({ runId, callId: "c1", decision: Approval.approve, by }))),
          { concurrency: "unbounded" }
        )
        assert.strictEqual(results.filter((r) => r._tag === "Right").length, 1)
        for (const r of results) if (r._tag === "Left") assert.strictEqual(r.left._tag, "AlreadyDecided")
        const log = yield* store.readLog(runId)
        assert.strictEqual(log.approvals.filter((r) => r._tag === "ApprovalDecided").length, 1)
      })
    ))

  it.effect("emits ApprovalDecided when an event sink is in context", () =>
    withStore((store) =>
      Effect.gen(function*() {
        yield* suspendedLog(store)
        const events: Array<LoopEvent.LoopEvent> = []
        yield* Agent.decide({ runId, callId: "c1", decision: Approval.approve, by: "ana" }).pipe(
          Effect.provide(EventSink.layer((event) => Effect.sync(() => void events.push(event))))
        )
        assert.deepStrictEqual(events, [{ _tag: "ApprovalDecided", runId, step: 0, callId: "c1", actionHash: hash, decision: { _tag: "Approve" }, by: "ana" }])
      })
    ))
})

describe("a log written before approvals existed", () => {
  const texts = fs.readFileSync(new URL("./fixtures/pre-approval-log.jsonl", import.meta.url), "utf8").trim().split("\n")

  it.effect("reads back with no approvals, is listed Unfinished, and resumes to its end under the same configuration (its snapshot hash still matches)", () =>
    Effect.gen(function*() {
      const backend = RunLogStore.makeMemoryBackend()
      const store = RunLogStore.make(backend)
      const records = texts.map((text) => JSON.parse(text) as RunLog.RunRecord)
      for (const record of records) {
        yield* backend.append(Old.runId, [{ seq: record.seq, kind: record._tag, json: JSON.stringify(record), record }])
      }
      const log = yield* store.readLog(Old.runId, { verify: true })
      assert.deepStrictEqual(log.approvals, [])
      assert.strictEqual((yield* store.listRuns())[0]!.status, "Unfinished")
      const model = yield* ScriptedModel.make(Old.script)
      const result = yield* Agent.run({ runId: Old.runId, agent: Old.agent, task: Old.task, tools: Old.tools }).pipe(
        Effect.provide(Layer.mergeAll(
          model.layer,
          NativeToolCallParser.layer(),
          Layer.orDie(ToolRegistry.layerExecutor(Old.tools)),
          EventSink.layerNoop,
          Layer.succeed(RunLogStore.RunLogStore, store)
        ))
      )
      assert.deepStrictEqual([result.stopReason._tag, result.steps, result.resumedCount], ["Completed", 3, 1])
      const after = yield* store.readLog(Old.runId)
      assert.strictEqual(Option.getOrThrow(after.started).snapshotHash, JSON.parse(texts[0]!).snapshotHash)
    }))
})
