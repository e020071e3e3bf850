/**
 * Child process of the sub-agent SIGKILL test (design 0405): runs (or resumes) a planner whose
 * step 0 hands three files to reader sub-agents (two at a time), each a durable child run; a
 * reader calls `charge` (replay policy "Never": it appends `<file> <child run id> <call id>` to
 * <ledger>, the side effect that must happen at most once) and answers; the planner answers.
 *
 *   node --import tsx subagent-agent.ts <sqlite:<file> | pg:<url>> <ledger> <runId> [<hold>]
 *
 * Prints `ready` once the store is open, `running` when the planner starts or resumes (its
 * record durable), `ev <tag> <runId>` for each run's start, resume and finish (the planner's and
 * the children's), `charging <runId>` when a charge starts, and at the end `finished <answer>` or
 * `error <tag>`.
 *
 * With a `<hold>` — `child-started` (the first child's `RunStarted` delivered), `charged` (a
 * charge's ledger line appended), `child-finished` (the first child's `RunFinished` delivered,
 * before its parent records it) — the life stops there for good and prints `holding <hold>`: the
 * test kills it at that event, not after a delay.
 */
import * as ActionExecutor from "@polyloop/core/ActionExecutor"
import * as Agent from "@polyloop/core/Agent"
import * as AgentDefinition from "@polyloop/core/AgentDefinition"
import * as EventSink from "@polyloop/core/EventSink"
import * as Ids from "@polyloop/core/Ids"
import type * as ModelClient from "@polyloop/core/ModelClient"
import * as ModelReply from "@polyloop/core/ModelReply"
import * as NativeToolCallParser from "@polyloop/core/NativeToolCallParser"
import * as SubAgent from "@polyloop/core/SubAgent"
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

const [where, ledger, runIdText, hold] = process.argv.slice(2)
if (where === undefined || ledger === undefined || runIdText === undefined) {
  process.stderr.write("usage: subagent-agent.ts <sqlite:<file> | pg:<url>> <ledger> <runId> [<hold>]\n")
  process.exit(2)
}
const runId = Ids.runId(runIdText)
const say = (line: string) => Effect.sync(() => void process.stdout.write(`${line}\n`))
/** At the hold point: says so and never goes on (the test kills the process). */
const holdAt = (point: string) => (hold === point ? Effect.zipRight(say(`holding ${point}`), Effect.never) : Effect.void)

/** The files the planner hands out, one reader each. */
const files = ["a.md", "b.md", "c.md"]

const charge = Tool.make({
  name: "charge",
  description: "Charges the reading of a file (must not run twice).",
  parameters: Schema.Struct({ path: Schema.String }),
  replayPolicy: "Never",
  handler: ({ path }) =>
    Effect.gen(function*() {
      const ctx = yield* ToolContext
      yield* say(`charging ${ctx.runId}`)
      yield* Effect.sleep("10 millis")
      fs.appendFileSync(ledger, `${path} ${ctx.runId} ${ctx.callId}\n`)
      yield* holdAt("charged")
      yield* Effect.sleep("10 millis")
      return `charged ${path}`
    })
})

const reader = AgentDefinition.make({
  name: "reader",
  systemPrompt: "You read one file.",
  budget: { maxSteps: 4 },
  modelRetry: { maxAttempts: 1, baseDelay: Duration.millis(1), maxDelay: Duration.millis(1) }
})

const read = SubAgent.tool({
  name: "read",
  description: "Hands one file to a reader agent.",
  parameters: Schema.Struct({ path: Schema.String }),
  agent: reader,
  tools: ToolRegistry.make(charge),
  task: ({ path }) => `Read ${path}.`
})
const tools = ToolRegistry.make(read)

const planner = AgentDefinition.make({
  name: "planner",
  systemPrompt: "You plan.",
  // Its own 2 steps and its children's 6 (design 0392: children count in the parent's budget).
  budget: { maxSteps: 12 },
  actionConcurrency: 2,
  modelRetry: { maxAttempts: 1, baseDelay: Duration.millis(1), maxDelay: Duration.millis(1) }
})

const usage = { inputTokens: 10, outputTokens: 5 }
const call = (name: string, args: unknown) => ({ id: "", name, argumentsText: JSON.stringify(args) })

/** A reader charges its file, then reports; the planner delegates, then summarises. */
const script = (request: ModelClient.ModelRequest, c: ScriptedModel.Call): ModelReply.ModelReply => {
  const system = request.messages[0]
  if (system?._tag === "System" && system.text.startsWith("You read")) {
    const task = request.messages.find((m) => m._tag === "User")
    const file = task?._tag === "User" ? task.text.slice("Read ".length, -1) : ""
    if (c.step === 0) return ModelReply.make({ text: "", toolCalls: [call("charge", { path: file })], usage })
    return ModelReply.make({ text: `read ${file}`, usage })
  }
  if (c.step === 0) return ModelReply.make({ text: "", toolCalls: files.map((path) => call("read", { path })), usage })
  return ModelReply.make({ text: "all read", usage })
}

const store = where.startsWith("pg:")
  ? SqlRunLogStore.layerPg({ url: Redacted.make(where.slice(3)), leaseDuration: "300 millis", heartbeatInterval: "75 millis", reclaimDeadLocalOwners: true })
  : SqlRunLogStore.layerSqlite({ filename: where.slice("sqlite:".length), leaseDuration: "300 millis", heartbeatInterval: "75 millis", reclaimDeadLocalOwners: true })

let childStarted = false
let childFinished = false

// Delivered before the loop goes on: holding here holds the run (and its sibling children).
const sink = EventSink.layer((event) => {
  if (event._tag !== "RunStarted" && event._tag !== "RunResumed" && event._tag !== "RunFinished") return Effect.void
  const child = event.runId !== runId
  return say(`ev ${event._tag} ${event.runId}`).pipe(
    Effect.zipRight(!child && event._tag !== "RunFinished" ? say("running") : Effect.void),
    Effect.zipRight(Effect.suspend(() => {
      if (child && event._tag === "RunStarted" && !childStarted) {
        childStarted = true
        return holdAt("child-started")
      }
      if (child && event._tag === "RunFinished" && !childFinished) {
        childFinished = true
        return holdAt("child-finished")
      }
      return Effect.void
    }))
  )
})

const program = Effect.gen(function*() {
  yield* say("ready")
  const model = yield* ScriptedModel.make(script, { latency: "5 millis" })
  const executor = yield* Effect.orDie(tools.executor())
  const result = yield* Agent.run({ runId, agent: planner, task: "Read the files.", tools }).pipe(
    Effect.provide(Layer.mergeAll(model.layer, ActionExecutor.layer(executor), NativeToolCallParser.layer(), sink))
  )
  yield* say(`finished ${result.stopReason._tag === "Completed" ? result.stopReason.answer ?? "" : result.stopReason._tag}`)
}).pipe(
  Effect.tapError((error) => say(`error ${error._tag}`)),
  Effect.provide(store)
)

Effect.runPromise(program).catch((error: unknown) => {
  process.stdout.write(`failed: ${String(error)}\n`)
  process.exitCode = 1
})
