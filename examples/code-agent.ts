/**
 * A code-action agent (dissect-like) on `@polyloop/sandbox` (design 0330): the model writes one
 * fenced Python block per reply (read by `CodeBlockParser`); `Sandbox.layer` runs it in a
 * persistent Python interpreter inside bubblewrap — no network, a read-only system, the run's own
 * workspace (which starts with `sales.csv`) — so variables survive from one step to the next.
 * The model is scripted: it loads the CSV, makes a mistake (a `TypeError` is an observation, not
 * a failure), fixes it, computes the revenue per region and calls `final_answer(...)`, which
 * completes the run (`Completed(Environment)`).
 *
 *   npx tsx examples/code-agent.ts
 *
 * Crash and resume: the example runs the agent in a child process on a SQLite file and the child
 * kills itself (SIGKILL) right after the snapshot of step 2, before the step's result is logged;
 * a second child resumes the run: step 2 is settled as interrupted (a `"Never"` action), the
 * sandbox restores the variables and workspace saved after step 1 — the last step the log records
 * — and the model, told the step was interrupted, writes it again. A missing interpreter or no bubblewrap fails the sandbox's layer
 * with `SandboxUnavailable`, naming what is missing:
 *
 *   CODE_AGENT_PYTHON=/no/such/python3 npx tsx examples/code-agent.ts
 */
import * as NodeRuntime from "@effect/platform-node/NodeRuntime"
import * as Agent from "@polyloop/core/Agent"
import * as AgentDefinition from "@polyloop/core/AgentDefinition"
import * as CodeBlockParser from "@polyloop/core/CodeBlockParser"
import * as EventSink from "@polyloop/core/EventSink"
import { runId } from "@polyloop/core/Ids"
import type { LoopEvent } from "@polyloop/core/LoopEvent"
import type { ModelRequest } from "@polyloop/core/ModelClient"
import * as StopReason from "@polyloop/core/StopReason"
import * as ToolRegistry from "@polyloop/core/ToolRegistry"
import * as Sandbox from "@polyloop/sandbox/Sandbox"
import * as SqlRunLogStore from "@polyloop/sql/SqlRunLogStore"
import * as ScriptedModel from "@polyloop/testing/ScriptedModel"
import * as Console from "effect/Console"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import { spawn } from "node:child_process"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { fileURLToPath } from "node:url"

const sales = `region,product,amount
north,widget,120.50
south,widget,80.00
north,gadget,45.25
east,widget,200.00
south,gadget,99.99
east,gadget,10.01
north,widget,30.00
`

const agent = AgentDefinition.make({
  name: "sales-analyst",
  systemPrompt: "You analyse data by writing Python. Each reply holds exactly one ```python code block; it runs in a " +
    "persistent interpreter (your variables stay) whose working directory holds the data. Call final_answer(value) when done.",
  budget: { maxSteps: 10 }
})

const task = "Which region has the highest revenue in sales.csv, and how much is it?"

const script: ReadonlyArray<ScriptedModel.Scripted> = [
  ScriptedModel.code("python", "import csv\nrows = list(csv.DictReader(open('sales.csv')))\nprint(len(rows), rows[0])", { preamble: "Let me load the data." }),
  ScriptedModel.code("python", "total = sum(r['amount'] for r in rows)", { preamble: "The total first." }),
  ScriptedModel.code("python", "revenue = {}\nfor r in rows:\n    revenue[r['region']] = revenue.get(r['region'], 0) + float(r['amount'])\nrevenue", {
    preamble: "The amounts are strings; converting them, per region."
  }),
  ScriptedModel.code("python", "best = max(revenue, key=revenue.get)\nprint(best, round(revenue[best], 2))", { preamble: "The best region:" }),
  ScriptedModel.code("python", "final_answer(f'{best}: {revenue[best]:.2f}')", { preamble: "Reporting it." })
]

/**
 * The scripted model answers from the history, as a model would: after a step the resume settled
 * as interrupted, it writes that step's code again.
 */
const nextReply = (request: ModelRequest): ScriptedModel.Scripted => {
  let replies = 0
  let interrupted = 0
  for (const message of request.messages) {
    if (message._tag === "Assistant") replies++
    if (message._tag === "User" && message.text.includes("was interrupted")) interrupted++
  }
  return script[Math.min(script.length - 1, replies - interrupted)]!
}

const print = (event: LoopEvent): Effect.Effect<void> => {
  switch (event._tag) {
    case "RunResumed":
      return Console.log(`resumed from step ${event.fromStep}`)
    case "DecisionParsed": {
      const decision = event.decision
      return Console.log(
        decision._tag === "Act" && decision.actions[0]._tag === "CodeAction"
          ? `step ${event.step}: ${decision.actions[0].language} code\n${decision.actions[0].code.replace(/^/gm, "    | ")}`
          : `step ${event.step}: ${decision._tag}`
      )
    }
    case "ActionExecuted": {
      const outcome = event.outcome
      return Console.log(`  ${outcome.status}${outcome.envReportedCompletion ? " (reports completion)" : ""}:\n${outcome.observation.replace(/^/gm, "    > ")}`)
    }
    case "RunFinished":
      return Console.log(`stop: ${StopReason.format(event.stopReason)}`)
    default:
      return Effect.void
  }
}

/** One life of the agent on the SQLite file `db`; `crashAfter` kills this process after that step's snapshot. */
const child = (db: string, crashAfter: number | undefined) =>
  Effect.gen(function*() {
    const sandbox = Sandbox.layer({
      files: { "sales.csv": sales },
      wallTime: "10 seconds",
      ...(process.env["CODE_AGENT_PYTHON"] === undefined ? {} : { python: process.env["CODE_AGENT_PYTHON"] }),
      ...(crashAfter === undefined ? {} : {
        crashPoint: ({ stage, step }) =>
          stage === "AfterSnapshot" && step === crashAfter
            ? Effect.sync(() => {
              console.log(`(killing this process with SIGKILL after the snapshot of step ${step})`)
              process.kill(process.pid, "SIGKILL")
            })
            : Effect.void
      })
    })
    const services = Layer.mergeAll(
      ScriptedModel.layer(nextReply),
      CodeBlockParser.layer({ language: "python", aliases: ["py"] }),
      EventSink.layer(print),
      sandbox
    ).pipe(Layer.provideMerge(SqlRunLogStore.layerSqlite({ filename: db })))
    const result = yield* Agent.run({ runId: runId("code-agent-1"), agent, task, tools: ToolRegistry.empty }).pipe(Effect.provide(services))
    yield* Console.log(`steps: ${result.steps} (${result.effectiveSteps} effective), resumed ${result.resumedCount} time(s)`)
  })

/** Runs this file again as a child process, its output prefixed. */
const life = (db: string, crashAfter: number | undefined): Promise<number | null> =>
  new Promise((resolve) => {
    const proc = spawn(process.execPath, [...process.execArgv, fileURLToPath(import.meta.url), "--child", db, ...(crashAfter === undefined ? [] : [String(crashAfter)])], {
      stdio: ["ignore", "pipe", "inherit"]
    })
    proc.stdout.setEncoding("utf8").on("data", (chunk: string) => process.stdout.write(chunk.replace(/^(?=.)/gm, "child | ")))
    proc.on("close", (code, signal) => {
      console.log(`(child exited: ${signal ?? `code ${code}`})`)
      resolve(code)
    })
  })

if (process.argv[2] === "--child") {
  const crashAfter = process.argv[4] === undefined ? undefined : Number(process.argv[4])
  NodeRuntime.runMain(child(process.argv[3]!, crashAfter))
} else {
  console.log(`task: ${task}\n`)
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "polyloop-code-agent-"))
  const db = path.join(dir, "runs.db")
  const first = await life(db, 2)
  if (first === 1) process.exit(1)
  console.log(
    "\nresuming in a new process: step 2 has no result in the log, so it is settled as interrupted and its snapshot is ignored;\n" +
      "the sandbox restores the variables and the workspace saved after step 1, and the model writes step 2 again\n"
  )
  const second = await life(db, undefined)
  fs.rmSync(dir, { recursive: true, force: true })
  process.exit(second ?? 1)
}
