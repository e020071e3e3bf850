/**
 * `RunLogAudit.logProblems` on approval records (design 0160), the audit `polyloop verify` and
 * the crash suites run: the log of a real run (a refund approved, a second one rejected, run in
 * memory through suspension, decisions and resumes) has no problem; each damage — a call run
 * after a rejection, a decision bound to another action, a call decided twice, a decision
 * before its request, a request before its step's reply — is one line naming its record.
 */
import { assert, describe, it } from "@effect/vitest"
import * as Agent from "@polyloop/core/Agent"
import * as AgentDefinition from "@polyloop/core/AgentDefinition"
import * as Approval from "@polyloop/core/Approval"
import * as EventSink from "@polyloop/core/EventSink"
import * as Ids from "@polyloop/core/Ids"
import * as NativeToolCallParser from "@polyloop/core/NativeToolCallParser"
import * as RunLog from "@polyloop/core/RunLog"
import * as RunLogAudit from "@polyloop/core/RunLogAudit"
import * as RunLogStore from "@polyloop/core/RunLogStore"
import * as Tool from "@polyloop/core/Tool"
import * as ToolRegistry from "@polyloop/core/ToolRegistry"
import * as ScriptedModel from "@polyloop/testing/ScriptedModel"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Schema from "effect/Schema"

const refund = Tool.make({
  name: "refund",
  description: "Refunds an order.",
  parameters: Schema.Struct({ orderId: Schema.Number, amount: Schema.Number }),
  approval: "Required",
  handler: ({ amount }) => Effect.succeed(`refunded ${amount}`)
})
const tools = ToolRegistry.make(refund)
const agent = AgentDefinition.make({
  name: "desk",
  systemPrompt: "Refund.",
  budget: { maxSteps: 5 },
  modelRetry: { maxAttempts: 1, baseDelay: Duration.millis(1), maxDelay: Duration.millis(1) }
})
const runId = Ids.runId("audit-approvals")
const script = [
  ScriptedModel.toolCall("refund", { orderId: 1, amount: 50 }, { id: "small" }),
  ScriptedModel.toolCall("refund", { orderId: 2, amount: 900 }, { id: "large" }),
  ScriptedModel.text("done")
]

/** The log of the run: suspended, decided, resumed until it finishes. */
const approvedLog = Effect.gen(function*() {
  const store = yield* RunLogStore.makeMemory
  const layer = Layer.mergeAll(
    ScriptedModel.layer(script),
    NativeToolCallParser.layer(),
    Layer.orDie(ToolRegistry.layerExecutor(tools)),
    EventSink.layerNoop,
    Layer.succeed(RunLogStore.RunLogStore, store)
  )
  for (let i = 0; i < 6; i++) {
    const done = yield* Agent.run({ runId, agent, task: "Refund.", tools }).pipe(
      Effect.as(true),
      Effect.catchTag("Suspended", () => Effect.succeed(false)),
      Effect.provide(layer)
    )
    if (done) break
    for (const waiting of Approval.waiting(yield* store.readLog(runId))) {
      const decision = waiting.callId === "small" ? Approval.approve : Approval.reject("too large")
      yield* Agent.decide({ runId, callId: waiting.callId, decision, by: "audit" }).pipe(Effect.provideService(RunLogStore.RunLogStore, store))
    }
  }
  return yield* store.readLog(runId)
})

/** The log with its records edited by `edit` (sequence numbers given again in order). */
const damaged = (log: RunLog.RunLog, edit: (records: Array<RunLog.RunRecord>) => Array<RunLog.RunRecord>): RunLog.RunLog =>
  RunLog.fromRecords(edit([...RunLog.records(log)]).map((record, seq) => ({ ...record, seq })))

const decisionOf = (records: ReadonlyArray<RunLog.RunRecord>, callId: string) =>
  records.findIndex((r) => r._tag === "ApprovalDecided" && r.callId === callId)
const requestOf = (records: ReadonlyArray<RunLog.RunRecord>, callId: string) =>
  records.findIndex((r) => r._tag === "ApprovalRequested" && r.callId === callId)

describe("RunLogAudit: approval records", () => {
  it.effect("a run through two approvals has no problem; each damage is reported", () =>
    Effect.gen(function*() {
      const log = yield* approvedLog
      assert.strictEqual(log.approvals.length, 4, "two requests, two decisions")
      assert.deepStrictEqual(log.results.map((r) => r.outcome.status), ["Executed", "NotExecuted"])
      assert.deepStrictEqual(RunLogAudit.logProblems(log), [])

      const rejected = damaged(log, (records) => {
        const i = decisionOf(records, "small")
        records[i] = { ...(records[i] as RunLog.ApprovalDecided), decision: { _tag: "Reject", reason: "no" } }
        return records
      })
      assert.deepStrictEqual(
        RunLogAudit.logProblems(rejected).map((p) => p.replace(/record \d+/g, "record n")),
        ["record n: call small of step 0 ran without an approval (it was requested at record n)"]
      )

      const otherAction = damaged(log, (records) => {
        const i = decisionOf(records, "large")
        records[i] = { ...(records[i] as RunLog.ApprovalDecided), actionHash: "another" }
        return records
      })
      assert.match(RunLogAudit.logProblems(otherAction).join("\n"), /^record \d+: ApprovalDecided for call large of step 1 is bound to another action than its request \(record \d+\)$/)

      const twice = damaged(log, (records) => {
        const i = decisionOf(records, "large")
        records.splice(i + 1, 0, records[i]!)
        return records
      })
      assert.match(RunLogAudit.logProblems(twice).join("\n"), /call large of step 1 decided again \(first at record \d+\)/)

      const decidedFirst = damaged(log, (records) => {
        const request = records.splice(requestOf(records, "large"), 1)[0]!
        records.splice(decisionOf(records, "large") + 1, 0, request)
        return records
      })
      assert.match(RunLogAudit.logProblems(decidedFirst).join("\n"), /ApprovalDecided for call large of step 1, which was not requested before it/)

      const beforeReply = damaged(log, (records) => {
        const request = records.splice(requestOf(records, "large"), 1)[0]!
        const reply = records.findIndex((r) => r._tag === "ModelReplied" && r.step === 1)
        records.splice(reply, 0, request)
        return records
      })
      assert.match(RunLogAudit.logProblems(beforeReply).join("\n"), /ApprovalRequested for call large of step 1 before the step's reply/)
    }))
})
