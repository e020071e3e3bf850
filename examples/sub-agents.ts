/**
 * Agents that call agents (issue 47, design 0392): a planner hands two files to reader agents,
 * each a durable child run, and writes a typed summary of what they found. No API key: the model
 * is scripted, the files are real (two of this repository's design records).
 *
 *   npx tsx examples/sub-agents.ts [--db <file>]
 *
 * What it shows:
 * 1. The planner's step 0 calls `read` twice; the loop runs each call as a child run under
 *    `<planner>/<step>/<callId>`, two at once (`actionConcurrency: 2`). A reader reads its file
 *    with `read_file` and bills the reading with `bill` — a `"Never"` tool, which must not run twice.
 * 2. The process is "killed" (the run interrupted) while the second reader waits for its model,
 *    after the first reader has finished. The next `Agent.run` resumes: the first child's
 *    recorded result is read (nothing of it runs again), the second child resumes from its log.
 * 3. Each reading is billed once; the planner's result counts its children's steps and tokens;
 *    the run tree is printed with each child's cost.
 * 4. Typed answers (design 0400): a reader answers a `Report` (its output schema); the planner
 *    reads each report as JSON the schema checked, and answers a `Summary` — `result.output` is
 *    typed, decoded from the log.
 *
 * Exits 0 when every check holds, 1 otherwise.
 */
import * as NodeRuntime from "@effect/platform-node/NodeRuntime"
import * as Agent from "@polyloop/core/Agent"
import * as AgentDefinition from "@polyloop/core/AgentDefinition"
import * as Ids from "@polyloop/core/Ids"
import type * as ModelClient from "@polyloop/core/ModelClient"
import * as ModelReply from "@polyloop/core/ModelReply"
import * as NativeToolCallParser from "@polyloop/core/NativeToolCallParser"
import * as RunLog from "@polyloop/core/RunLog"
import * as RunLogStore from "@polyloop/core/RunLogStore"
import * as StopReason from "@polyloop/core/StopReason"
import * as SubAgent from "@polyloop/core/SubAgent"
import * as Tool from "@polyloop/core/Tool"
import * as ToolRegistry from "@polyloop/core/ToolRegistry"
import * as SqlRunLogStore from "@polyloop/sql/SqlRunLogStore"
import * as ScriptedModel from "@polyloop/testing/ScriptedModel"
import * as Console from "effect/Console"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Fiber from "effect/Fiber"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Schedule from "effect/Schedule"
import * as Schema from "effect/Schema"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { fileURLToPath } from "node:url"

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..")
const files = ["docs/design/0392-sub-agents.md", "docs/design/0160-approvals.md"]
const dbArg = process.argv.indexOf("--db")
const db = dbArg > 0 ? process.argv[dbArg + 1]! : path.join(fs.mkdtempSync(path.join(os.tmpdir(), "polyloop-sub-agents-")), "runs.db")

// The readers' tools: a read (safe to run again) and a bill (must not run twice).
const bills: Array<string> = []
const readFile = Tool.make({
  name: "read_file",
  description: "Reads a file of the repository.",
  parameters: Schema.Struct({ path: Schema.String }),
  replayPolicy: "Always",
  handler: ({ path: file }) => Effect.sync(() => fs.readFileSync(path.join(root, file), "utf8"))
})
const bill = Tool.make({
  name: "bill",
  description: "Bills the reading of a file (once per file).",
  parameters: Schema.Struct({ path: Schema.String }),
  replayPolicy: "Never",
  handler: ({ path: file }) =>
    Effect.sync(() => {
      bills.push(file)
      return `billed ${file}`
    })
})
const readerTools = ToolRegistry.make(readFile, bill)
/** A reader's typed answer, and the planner's. */
const Report = Schema.Struct({ file: Schema.String, title: Schema.String, lines: Schema.Int })
const Summary = Schema.Struct({ reports: Schema.Array(Report), totalLines: Schema.Int })
const reader = AgentDefinition.make({ name: "reader", systemPrompt: "You read one file and report its title and size.", budget: { maxSteps: 6 }, output: Report })

// The planner's tool: a reader sub-agent per call.
const read = SubAgent.tool({
  name: "read",
  description: "Hands one file to a reader agent; returns its report.",
  parameters: Schema.Struct({ path: Schema.String }),
  agent: reader,
  tools: readerTools,
  task: ({ path: file }) => `Report the title and size of ${file}.`
})
const plannerTools = ToolRegistry.make(read)
const planner = AgentDefinition.make({
  name: "planner",
  systemPrompt: "You plan: hand each file to a reader, then summarise their reports.",
  budget: { maxSteps: 8, maxTokens: 20_000 },
  actionConcurrency: 2,
  output: Summary
})

const usage = { inputTokens: 120, outputTokens: 30 }
const call = (name: string, args: unknown) => ({ id: "", name, argumentsText: JSON.stringify(args) })

// The scripted model: a reader reads, bills, and reports what it read; the planner delegates, then summarises.
const script = (request: ModelClient.ModelRequest, c: ScriptedModel.Call): ModelReply.ModelReply => {
  const system = request.messages[0]
  if (system?._tag === "System" && system.text.startsWith("You read")) {
    const task = request.messages.find((m) => m._tag === "User")
    const file = task?._tag === "User" ? task.text.slice("Report the title and size of ".length, -1) : ""
    if (c.step === 0) return ModelReply.make({ text: "", toolCalls: [call("read_file", { path: file })], usage })
    if (c.step === 1) return ModelReply.make({ text: "", toolCalls: [call("bill", { path: file })], usage })
    // The report: what `read_file` returned (its first observation), read from the request.
    const read = request.messages.find((m) => m._tag === "Tool")
    const text = read?._tag === "Tool" ? read.text.replace(/^Observation:\n/, "") : ""
    const report = { file, title: text.split("\n")[0]!.replace(/^#\s*/, ""), lines: text.split("\n").length }
    return ModelReply.make({ text: JSON.stringify(report), usage })
  }
  if (c.step === 0) return ModelReply.make({ text: "", toolCalls: files.map((file) => call("read", { path: file })), usage })
  // Each report arrives as the JSON its schema checked (design 0392, decision 7).
  const reports = request.messages.flatMap((m) => (m._tag === "Tool" ? [JSON.parse(m.text.replace(/^Observation:\n/, "")) as typeof Report.Type] : []))
  return ModelReply.make({ text: JSON.stringify({ reports, totalLines: reports.reduce((n, r) => n + r.lines, 0) }), usage })
}

const runId = Ids.runId("planner-1")
const request = { runId, agent: planner, task: `Summarise ${files.join(" and ")}.`, tools: plannerTools }

/** The run tree: the planner and, under each call, its child with what it cost. */
const tree = (store: RunLogStore.RunLogStore.Service, id: Ids.RunId, depth: number): Effect.Effect<Array<string>, unknown> =>
  Effect.gen(function*() {
    const log = yield* store.readLog(id)
    const finished = Option.getOrUndefined(log.finished)
    const own = finished === undefined ? "unfinished" : `${StopReason.format(finished.stopReason)}, ${finished.counters.steps} steps, ${finished.counters.usage.inputTokens + finished.counters.usage.outputTokens} tokens`
    const lines = [`${"  ".repeat(depth)}${id} — ${own}`]
    for (const result of log.results) if (result.child !== undefined) lines.push(...(yield* tree(store, result.child.runId, depth + 1)))
    return lines
  })

const program = Effect.gen(function*() {
  const store = yield* RunLogStore.RunLogStore
  let failures = 0
  const check = (ok: boolean, what: string) =>
    Effect.sync(() => {
      if (!ok) failures++
    }).pipe(Effect.zipRight(Console.log(`${ok ? "ok  " : "FAIL"} ${what}`)))

  // 1–2. The first attempt: interrupted while the second reader waits for its model's report.
  const waiting = yield* Deferred.make<void>()
  const stalling = yield* ScriptedModel.make(script, {
    onCall: (c, req) => {
      const task = req.messages.find((m) => m._tag === "User")
      const second = task?._tag === "User" && task.text.includes(files[1]!)
      return second && c.step === 2 ? Effect.zipRight(Deferred.succeed(waiting, undefined), Effect.never) : Effect.void
    }
  })
  const first = yield* Effect.fork(Agent.run(request).pipe(Effect.provide(Agent.layer({ store: Layer.succeed(RunLogStore.RunLogStore, store), model: stalling.layer, parser: NativeToolCallParser.layer(), tools: plannerTools }))))
  yield* Deferred.await(waiting)
  const [childA, childB] = [SubAgent.childRunId(runId, 0, "call_s0_0"), SubAgent.childRunId(runId, 0, "call_s0_1")]
  // The first reader finishes meanwhile; then the "kill".
  yield* Effect.repeat(store.readLog(childA), { until: (log) => Option.isSome(log.finished), schedule: Schedule.spaced("10 millis") })
  yield* Fiber.interrupt(first)
  yield* check(Exit.isInterrupted(yield* Fiber.await(first)), "the planner was interrupted mid-child (interruption is never caught)")
  yield* Console.log(`after the interruption: ${childA} ${Option.isSome((yield* store.readLog(childA)).finished) ? "finished" : "unfinished"}, ${childB} unfinished`)

  // 3. Resumed: the finished child is read, the other resumes; nothing billed twice.
  const model = yield* ScriptedModel.make(script)
  const result = yield* Agent.run(request).pipe(Effect.provide(Agent.layer({ store: Layer.succeed(RunLogStore.RunLogStore, store), model: model.layer, parser: NativeToolCallParser.layer(), tools: plannerTools })))
  yield* Console.log(`\n${StopReason.format(result.stopReason)}`)
  // The typed summary: `result.output` is a `Summary`, decoded from the planner's log.
  const summary: typeof Summary.Type | undefined = result.output
  for (const report of summary?.reports ?? []) yield* Console.log(`  ${report.file}: "${report.title}", ${report.lines} lines`)
  yield* Console.log(`  total: ${summary?.totalLines} lines`)
  yield* Console.log(`planner: ${result.steps} steps, ${result.usage.inputTokens + result.usage.outputTokens} tokens; its children: ${result.children?.runs} runs, ${result.children?.steps} steps, ${(result.children?.usage.inputTokens ?? 0) + (result.children?.usage.outputTokens ?? 0)} tokens\n`)
  for (const line of yield* tree(store, runId, 0)) yield* Console.log(line)
  yield* Console.log("")
  yield* check(result.stopReason._tag === "Completed", "the planner completed")
  yield* check([...bills].sort().join(",") === [...files].sort().join(","), `each file billed once (${bills.length} bills)`)
  yield* check(result.children?.runs === 2 && result.children.steps === 6, "the children's cost is the planner's (2 runs, 6 steps)")
  const actualLines = files.reduce((n, file) => n + fs.readFileSync(path.join(root, file), "utf8").split("\n").length, 0)
  yield* check(summary !== undefined && summary.reports.length === 2 && summary.totalLines === actualLines, `the typed summary counts the files' ${actualLines} lines`)
  const log = yield* store.readLog(runId)
  yield* check(log.results.every((r) => r.child !== undefined && r.outcome.status === "Executed"), "each call's result records its child")
  yield* check(RunLog.size(log) > 0, `the planner's log is durable in ${db}`)
  if (failures > 0) return yield* Effect.fail(`${failures} check(s) failed`)
}).pipe(Effect.provide(SqlRunLogStore.layerSqlite({ filename: db })))

NodeRuntime.runMain(program)
