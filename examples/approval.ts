/**
 * Human approval that survives restarts (design 0160): a refund desk agent whose `refund` tool
 * needs a person's yes for amounts over 100 EUR. Run it, decide with the `polyloop` command, run
 * it again:
 *
 *   npx tsx examples/approval.ts                                   # looks the order up, asks to refund 180 EUR: suspended
 *   npx polyloop pending --db approval.db                          # the waiting call, its arguments and hash
 *   npx polyloop approve refund-order-42 <call> --db approval.db   # (or: reject … --reason "…")
 *   npx tsx examples/approval.ts                                   # resumed: the refund runs once, the run finishes
 *
 * The run lives in the SQLite file `approval.db` of the current directory (`--db <file>` to
 * choose another; `--fresh` deletes it first). While it waits, nothing runs: the process exits,
 * the decision can be made from another machine, and the next run of this script resumes. The
 * refund is written to `<db>.refunds.jsonl`, once. Rejected, the model is told the reason and
 * answers the customer without refunding. Scripted model: no API key needed.
 */
import * as FileSystem from "@effect/platform/FileSystem"
import * as NodeContext from "@effect/platform-node/NodeContext"
import * as NodeRuntime from "@effect/platform-node/NodeRuntime"
import * as Agent from "@polyloop/core/Agent"
import * as AgentDefinition from "@polyloop/core/AgentDefinition"
import type * as Approval from "@polyloop/core/Approval"
import * as EventSink from "@polyloop/core/EventSink"
import { runId as makeRunId } from "@polyloop/core/Ids"
import type { LoopEvent } from "@polyloop/core/LoopEvent"
import * as NativeToolCallParser from "@polyloop/core/NativeToolCallParser"
import * as StopReason from "@polyloop/core/StopReason"
import * as Tool from "@polyloop/core/Tool"
import { ToolContext } from "@polyloop/core/ToolContext"
import * as ToolRegistry from "@polyloop/core/ToolRegistry"
import * as SqlRunLogStore from "@polyloop/sql/SqlRunLogStore"
import * as ScriptedModel from "@polyloop/testing/ScriptedModel"
import * as Console from "effect/Console"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Schema from "effect/Schema"
import * as path from "node:path"

const args = process.argv.slice(2)
const dbIndex = args.indexOf("--db")
const db = path.resolve(dbIndex >= 0 && args[dbIndex + 1] !== undefined ? args[dbIndex + 1]! : "approval.db")
const ledger = `${db}.refunds.jsonl`
const runId = makeRunId("refund-order-42")

const Refund = Schema.Struct({ orderId: Schema.Number, amount: Schema.Number, reason: Schema.String })

const tools = ToolRegistry.make(
  Tool.make({
    name: "lookup_order",
    description: "Reads an order: items, price, delivery.",
    parameters: Schema.Struct({ orderId: Schema.Number }),
    replayPolicy: "Always",
    handler: ({ orderId }) => Effect.succeed(`order ${orderId}: 1 ceramic vase, 180 EUR, delivered broken (photo attached)`)
  }),
  Tool.make({
    name: "refund",
    description: "Refunds an amount on an order to the customer's card.",
    parameters: Refund,
    // A person approves refunds over 100 EUR; the description is what the run's snapshot records.
    approval: Tool.approvalWhen("refunds over 100 EUR", (refund: typeof Refund.Type) => refund.amount > 100),
    handler: ({ amount, orderId, reason }) =>
      Effect.gen(function*() {
        const fs = yield* FileSystem.FileSystem
        const { idempotencyKey } = yield* ToolContext
        const line = JSON.stringify({ idempotencyKey, orderId, amount, reason }) + "\n"
        yield* Effect.orDie(fs.writeFileString(ledger, line, { flag: "a" }))
        return `refunded ${amount} EUR on order ${orderId}`
      })
  })
)

const agent = AgentDefinition.make({
  name: "refund-desk",
  systemPrompt: "You handle refund requests. Look the order up; refund when the customer is right; then answer the customer.",
  budget: { maxSteps: 6 },
  modelRetry: { maxAttempts: 1, baseDelay: Duration.millis(1), maxDelay: Duration.millis(1) }
})

const task = "Customer: my vase (order 42) arrived broken. I want my money back."

/** The model: look up, refund, then answer according to what the refund's observation says. */
const model = ScriptedModel.layer((request, { step }) => {
  if (step === 0) return ScriptedModel.toolCall("lookup_order", { orderId: 42 })
  if (step === 1) return ScriptedModel.toolCall("refund", { orderId: 42, amount: 180, reason: "delivered broken" })
  const last = request.messages[request.messages.length - 1]
  const observation = last !== undefined && last._tag === "Tool" ? last.text : ""
  return observation.startsWith("refunded")
    ? "I have refunded 180 EUR to your card; sorry about the vase."
    : `I could not refund the order yet: ${observation}`
})

const print = (event: LoopEvent): Effect.Effect<void> => {
  switch (event._tag) {
    case "RunStarted":
      return Console.log(`started run ${event.runId}`)
    case "RunResumed":
      return Console.log(`resumed run ${event.runId} at step ${event.fromStep}`)
    case "ActionExecuted": {
      const name = event.action._tag === "ToolCall" ? `${event.action.name} ${JSON.stringify(event.action.arguments)}` : event.action.language
      return Console.log(`step ${event.step}: ${name}\n    ${event.outcome.status}: ${event.outcome.observation}`)
    }
    case "ApprovalRequested":
      return Console.log(`step ${event.step}: ${event.action._tag === "ToolCall" ? event.action.name : ""} needs approval (call ${event.callId})`)
    case "RunFinished":
      return Console.log(`stop: ${StopReason.format(event.stopReason)}`)
    default:
      return Effect.void
  }
}

const explain = (suspended: Approval.Suspended) =>
  Console.log(
    [
      `suspended: run ${suspended.runId} waits for a person's decision on:`,
      ...suspended.waiting.map((w) =>
        `  call ${w.callId}: ${w.tool} ${w.action._tag === "ToolCall" ? JSON.stringify(w.action.arguments) : ""} (hash ${w.actionHash.slice(0, 12)})`
      ),
      "nothing is running now. Decide, then run this example again:",
      ...suspended.waiting.map((w) => `  npx polyloop approve ${suspended.runId} ${w.callId} --db ${db}`),
      ...suspended.waiting.map((w) => `  npx polyloop reject ${suspended.runId} ${w.callId} --db ${db} --reason "…"`)
    ].join("\n")
  )

const program = Effect.gen(function*() {
  const fs = yield* FileSystem.FileSystem
  if (args.includes("--fresh")) {
    for (const file of [db, `${db}-wal`, `${db}-shm`, ledger]) yield* Effect.orDie(fs.remove(file, { force: true }))
  }
  const outcome = yield* Agent.run({ runId, agent, task, tools }).pipe(
    Effect.provide(
      Agent.layer({ store: SqlRunLogStore.layerSqlite({ filename: db }), model, parser: NativeToolCallParser.layer(), tools, events: EventSink.layer(print) })
    ),
    Effect.map((result) => ({ _tag: "Finished" as const, result })),
    Effect.catchTag("Suspended", (suspended) => Effect.as(explain(suspended), { _tag: "Suspended" as const }))
  )
  if (outcome._tag === "Finished") {
    const refunds = (yield* fs.readFileString(ledger).pipe(Effect.orElseSucceed(() => ""))).split("\n").filter((l) => l !== "").length
    yield* Console.log(`finished: ${StopReason.format(outcome.result.stopReason)}; refunds written: ${refunds}`)
  }
})

NodeRuntime.runMain(program.pipe(Effect.provide(NodeContext.layer)))
