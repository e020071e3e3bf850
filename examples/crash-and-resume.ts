/**
 * A crash-and-resume walk-through, for real: the GovDoc-like agent of `@polyloop/cli/GovDoc` (packages/cli/src/GovDoc.ts) runs on a
 * SQLite file in a child process; when the child is in the middle of step 5 — its
 * `append_to_file` tool has appended a line to CHANGELOG.md, and the log has not recorded the
 * step yet — this process kills it with SIGKILL. Then it reads what the log holds, resumes the
 * run in this process with the same request, and checks that no tool ran twice.
 *
 *   npx tsx examples/crash-and-resume.ts
 *
 * What to expect: the resumed run parses step 5's logged reply again; `append_to_file` has the
 * replay policy `"Never"`, so it is not run again — the step is recorded as `NotExecuted` with
 * the synthetic `interrupted` observation ("may or may not have taken effect"); the model reads
 * CHANGELOG.md (a read, replay policy `"Always"`), sees its line is there, and submits. The line
 * is in the file once. Exits 0 when every check holds, 1 otherwise.
 */
import * as Command from "@effect/platform/Command"
import * as FileSystem from "@effect/platform/FileSystem"
import * as NodeContext from "@effect/platform-node/NodeContext"
import * as NodeRuntime from "@effect/platform-node/NodeRuntime"
import * as Agent from "@polyloop/core/Agent"
import * as EventSink from "@polyloop/core/EventSink"
import { type RunId, runId as makeRunId } from "@polyloop/core/Ids"
import * as JsonActionParser from "@polyloop/core/JsonActionParser"
import type { LoopEvent } from "@polyloop/core/LoopEvent"
import * as RunLog from "@polyloop/core/RunLog"
import * as RunLogStore from "@polyloop/core/RunLogStore"
import * as StopReason from "@polyloop/core/StopReason"
import { ToolContext } from "@polyloop/core/ToolContext"
import * as SqlRunLogStore from "@polyloop/sql/SqlRunLogStore"
import * as ScriptedModel from "@polyloop/testing/ScriptedModel"
import * as Console from "effect/Console"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import * as Schedule from "effect/Schedule"
import * as Stream from "effect/Stream"
import * as path from "node:path"
import { fileURLToPath } from "node:url"
import * as GovDoc from "@polyloop/cli/GovDoc"

const runId: RunId = makeRunId("crash-walkthrough")
const killStep = 5
/** The line the child prints when it is mid-step, after the tool's side effect. */
const midStepMarker = "MID-STEP"

/** The store both processes use: a short claim lease, so a killed owner's claim expires quickly. */
const store = (db: string) => SqlRunLogStore.layerSqlite({ filename: db, leaseDuration: "500 millis" })

const oneLine = (text: string) => {
  const flat = text.replace(/\s+/g, " ").trim()
  return flat.length > 90 ? `${flat.slice(0, 89)}…` : flat
}

const print = (prefix: string) => (event: LoopEvent): Effect.Effect<void> => {
  switch (event._tag) {
    case "RunResumed":
      return Console.log(`${prefix}resumed at step ${event.fromStep}`)
    case "ActionExecuted": {
      const action = event.action._tag === "ToolCall" ? event.action.name : event.action.language
      const synthetic = event.outcome.observationIsSynthetic ? " (synthetic)" : ""
      const replayed = event.replayed ? " [settled on resume]" : ""
      return Console.log(`${prefix}step ${event.step}: ${action} → ${event.outcome.status}${synthetic}${replayed}: ${oneLine(event.outcome.observation)}`)
    }
    case "StepCompleted":
      return event.decision === "Act" ? Effect.void : Console.log(`${prefix}step ${event.step}: ${event.decision}`)
    case "RunFinished":
      return Console.log(`${prefix}stop: ${StopReason.format(event.stopReason)}`)
    default:
      return Effect.void
  }
}

/** The run request and its services; the child and the resuming parent build exactly the same. */
const request = (root: string, afterTool?: GovDoc.Options["afterTool"]) => {
  const tools = GovDoc.makeTools(root, afterTool === undefined ? {} : { afterTool })
  return { request: { runId, agent: GovDoc.agent, task: GovDoc.task, tools }, tools }
}

const services = (db: string, tools: ReturnType<typeof GovDoc.makeTools>, prefix: string) =>
  Agent.layer({ store: store(db), model: ScriptedModel.layer(GovDoc.script), parser: JsonActionParser.layer(), tools, events: EventSink.layer(print(prefix)) })

// -----------------------------------------------------------------------------
// The child: runs the agent, and stops dead in the middle of step 5
// -----------------------------------------------------------------------------

const child = (db: string, root: string) =>
  Effect.gen(function*() {
    const { request: req, tools } = request(root, (tool) =>
      Effect.flatMap(ToolContext, (context) =>
        context.step === killStep
          ? Effect.zipRight(Console.log(`${midStepMarker} ${tool} ${context.idempotencyKey}`), Effect.never)
          : Effect.void))
    yield* Agent.run(req).pipe(Effect.provide(services(db, tools, "")))
  })

// -----------------------------------------------------------------------------
// The parent: start, kill, look, resume, check
// -----------------------------------------------------------------------------

const parent = Effect.gen(function*() {
  const fs = yield* FileSystem.FileSystem
  const dir = yield* fs.makeTempDirectoryScoped({ prefix: "polyloop-crash-walkthrough-" })
  const db = path.join(dir, "runs.db")
  const root = path.join(dir, "workspace")
  yield* GovDoc.seed(root)
  const checks: Array<readonly [string, boolean]> = []
  const check = (what: string, ok: boolean) => Effect.sync(() => checks.push([what, ok]))

  // 1. Start the run in a child process and kill it mid-step.
  yield* Console.log(`1. A child process runs the agent on ${db}; it is killed with SIGKILL in the middle of step ${killStep}.\n`)
  const tsx = import.meta.resolve("tsx")
  const self = fileURLToPath(import.meta.url)
  const killedMidStep = yield* Effect.scoped(
    Effect.gen(function*() {
      const process = yield* Command.start(Command.make(globalThis.process.execPath, "--import", tsx, self, "--child", db, root))
      let killed = false
      yield* process.stdout.pipe(
        Stream.decodeText(),
        Stream.splitLines,
        Stream.runForEach((line) =>
          Effect.gen(function*() {
            yield* Console.log(`   child | ${line}`)
            if (line.startsWith(midStepMarker) && !killed) {
              killed = true
              yield* Console.log(`   parent | the tool has done its work and the step is not recorded: SIGKILL the child (pid ${process.pid})`)
              yield* process.kill("SIGKILL")
            }
          })
        )
      )
      const exit = yield* Effect.either(process.exitCode)
      return killed && exit._tag === "Left"
    })
  )
  yield* check(`the child was killed by SIGKILL in step ${killStep}`, killedMidStep)

  // 2. What the log and the workspace hold now.
  const before = yield* Effect.flatMap(RunLogStore.RunLogStore, (s) => s.readLog(runId)).pipe(Effect.provide(store(db)))
  const lastRecord = RunLog.records(before).at(-1)
  const ledgerBefore = yield* GovDoc.ledger(root)
  yield* Console.log(
    `\n2. The log holds ${RunLog.size(before)} records: ${before.steps.length} completed steps, then ${
      lastRecord?._tag === "ModelReplied" ? `step ${lastRecord.step}'s reply — logged before its action ran, never completed` : lastRecord?._tag
    }.\n` +
      `   The ledger of the workspace shows the writes that really happened:\n${ledgerBefore.map((e) => `     ${e.key}  ${e.tool} ${e.path}`).join("\n")}\n` +
      `   So step ${killStep}'s append took effect, and the log does not know it.\n`
  )
  yield* check("the log ends with the killed step's reply", lastRecord?._tag === "ModelReplied" && lastRecord.step === killStep && Option.isNone(before.finished))

  // 3. Resume in this process: the same request, the same run id.
  yield* Console.log(`3. Resume: Agent.run with the same request (waiting for the dead child's claim to expire).\n`)
  const { request: req, tools } = request(root)
  const result = yield* Agent.run(req).pipe(
    Effect.provide(services(db, tools, "   ")),
    Effect.retry({ while: (error) => error._tag === "RunBusy", schedule: Schedule.spaced("100 millis").pipe(Schedule.upTo("10 seconds")) })
  )

  // 4. Check that no tool ran twice.
  const after = yield* Effect.flatMap(RunLogStore.RunLogStore, (s) => s.readLog(runId)).pipe(Effect.provide(store(db)))
  const ledger = yield* GovDoc.ledger(root)
  const changelog = yield* fs.readFileString(path.join(root, "CHANGELOG.md"))
  const settled = after.results.find((r) => r.step === killStep)
  const lines = changelog.split("\n").filter((line) => line.startsWith("- Customer records are now kept for 90 days"))
  yield* Console.log(`\n4. Checks`)
  yield* check("the run completed", result.stopReason._tag === "Completed")
  yield* check("it was resumed once", result.resumedCount === 1)
  yield* check(
    `step ${killStep} was settled as NotExecuted with the synthetic "interrupted" observation (append_to_file's replay policy is "Never")`,
    settled?.outcome.status === "NotExecuted" && settled.outcome.observationIsSynthetic && settled.outcome.observation.includes("interrupted")
  )
  yield* check("every write in the ledger has its own idempotency key (no write ran twice)", new Set(ledger.map((e) => e.key)).size === ledger.length)
  yield* check("the ledger holds the same writes as before the resume (nothing was re-applied)", ledger.length === ledgerBefore.length)
  yield* check("CHANGELOG.md has its new line exactly once", lines.length === 1)
  for (const [what, ok] of checks) yield* Console.log(`   ${ok ? "ok  " : "FAIL"} ${what}`)
  const failed = checks.filter(([, ok]) => !ok).length
  if (failed > 0) return yield* Effect.fail(`${failed} check(s) failed`)
  yield* Console.log(`\nno tool ran twice: ${StopReason.format(result.stopReason)} after ${result.steps} steps, resumed ${result.resumedCount}×`)
}).pipe(Effect.scoped)

const argv = process.argv.slice(2)
const main = argv[0] === "--child" && argv[1] !== undefined && argv[2] !== undefined ? child(argv[1], argv[2]) : parent

NodeRuntime.runMain(main.pipe(Effect.provide(NodeContext.layer)))
