/**
 * Child process of the approval crash test (design 0160): runs (or resumes) a refund desk run
 * whose `refund` call (replay policy "Never") needs a person's decision, or records a decision.
 *
 *   node --import tsx approval-agent.ts <sqlite:<file> | pg:<url>> <ledger> <runId> run [<hold>]
 *   node --import tsx approval-agent.ts <sqlite:<file> | pg:<url>> <ledger> <runId> approve | reject
 *
 * Prints `ready` once the store is open, `running` when the run starts or resumes (its record
 * durable), `executing` when the refund handler starts (it then waits ~20 ms, appends one line to
 * <ledger>, the side effect that must happen at most once, and waits ~20 ms more), and at the
 * end `suspended <call ids>`, `finished <RunResult JSON>`, `decided`, or `error <tag>`.
 *
 * With a `<hold>` (`running`, `executing` or `effected`: once the run's start or resume is
 * durable, once the refund handler started, once its side effect is done), the life stops there
 * for good and prints `holding <hold>`: the parent kills it at that event, not after a delay.
 */
import * as ActionExecutor from "@polyloop/core/ActionExecutor"
import * as Agent from "@polyloop/core/Agent"
import * as AgentDefinition from "@polyloop/core/AgentDefinition"
import * as Approval from "@polyloop/core/Approval"
import * as EventSink from "@polyloop/core/EventSink"
import * as Ids from "@polyloop/core/Ids"
import * as NativeToolCallParser from "@polyloop/core/NativeToolCallParser"
import * as Tool from "@polyloop/core/Tool"
import { ToolContext } from "@polyloop/core/ToolContext"
import * as ToolRegistry from "@polyloop/core/ToolRegistry"
import * as SqlRunLogStore from "@polyloop/sql/SqlRunLogStore"
import * as ScriptedModel from "@polyloop/testing/ScriptedModel"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Redacted from "effect/Redacted"
import * as Schema from "effect/Schema"
import * as fs from "node:fs"

const [where, ledger, runIdText, mode, hold] = process.argv.slice(2)
if (where === undefined || ledger === undefined || runIdText === undefined || mode === undefined) {
  process.stderr.write("usage: approval-agent.ts <sqlite:<file> | pg:<url>> <ledger> <runId> run|approve|reject\n")
  process.exit(2)
}
const runId = Ids.runId(runIdText)
const say = (line: string) => Effect.sync(() => void process.stdout.write(`${line}\n`))
/** At the hold point: says so and never goes on (the parent kills the process). */
const holdAt = (point: string) => (hold === point ? Effect.zipRight(say(`holding ${point}`), Effect.never) : Effect.void)

const Refund = Schema.Struct({ orderId: Schema.Number, amount: Schema.Number })
const tools = ToolRegistry.make(
  Tool.make({
    name: "refund",
    description: "Refunds an order.",
    parameters: Refund,
    approval: "Required",
    handler: ({ amount }) =>
      Effect.gen(function*() {
        const { idempotencyKey } = yield* ToolContext
        yield* say("executing")
        yield* holdAt("executing")
        yield* Effect.sleep("20 millis")
        fs.appendFileSync(ledger, `${idempotencyKey} ${amount}\n`)
        yield* holdAt("effected")
        yield* Effect.sleep("20 millis")
        return `refunded ${amount}`
      })
  })
)

const agent = AgentDefinition.make({
  name: "refund-desk",
  systemPrompt: "Refund.",
  budget: { maxSteps: 4 },
  modelRetry: { maxAttempts: 1, baseDelay: Duration.millis(1), maxDelay: Duration.millis(1) }
})

const script = [ScriptedModel.toolCall("refund", { orderId: 1, amount: 250 }, { id: "r1" }), ScriptedModel.text("done")]

const store = where.startsWith("pg:")
  ? SqlRunLogStore.layerPg({ url: Redacted.make(where.slice(3)), leaseDuration: "300 millis", heartbeatInterval: "75 millis" })
  : SqlRunLogStore.layerSqlite({ filename: where.slice("sqlite:".length), leaseDuration: "300 millis", heartbeatInterval: "75 millis" })

const runIt = Effect.gen(function*() {
  const model = yield* ScriptedModel.make(script, { latency: "5 millis" })
  const executor = yield* Effect.orDie(tools.executor())
  return yield* Agent.run({ runId, agent, task: "Refund order 1.", tools }).pipe(
    Effect.provide(Layer.mergeAll(
      model.layer,
      ActionExecutor.layer(executor),
      NativeToolCallParser.layer(),
      // Delivered before the loop goes on: holding here holds the run.
      EventSink.layer((event) => (event._tag === "RunStarted" || event._tag === "RunResumed" ? Effect.zipRight(say("running"), holdAt("running")) : Effect.void))
    ))
  )
})

const program = Effect.gen(function*() {
  yield* say("ready")
  if (mode === "run") {
    const result = yield* runIt
    yield* say(`finished ${JSON.stringify(result)}`)
    return
  }
  yield* Agent.decide({ runId, callId: "r1", decision: mode === "approve" ? Approval.approve : Approval.reject("not this one"), by: "crash-test" })
  yield* say("decided")
}).pipe(
  Effect.catchTag("Suspended", (s) => say(`suspended ${s.waiting.map((w) => w.callId).join(",")}`)),
  Effect.tapError((error) => say(`error ${error._tag}`)),
  Effect.provide(store)
)

Effect.runPromise(program).catch((error: unknown) => {
  process.stdout.write(`failed: ${String(error)}\n`)
  process.exitCode = 1
})
