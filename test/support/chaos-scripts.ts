/**
 * The scripted runs of the enumerated crash suite (`chaos.ts`), shared by the child that runs
 * them (`chaos-child.ts`) and the parent that checks them:
 *
 * - `tools`: one tool call per step (`crash-scenario.ts`): a `"Never"` write, an `"Always"`
 *   echo, a reply without action, a second write, arguments that are not JSON, an unknown tool,
 *   and the completing `submit`;
 * - `multi`: three tool calls per reply, policies mixed (design 0150: one `ActionResulted` per
 *   call), then `submit`;
 * - `code`: code actions (`CodeBlockParser`) run by an executor whose policy the code names
 *   (`never …` / `always …`), a reply without code (an invalid decision), and a last block the
 *   environment reports as completing the run;
 * - `approval`: a refund (`"Never"`, approval required) approved, a second one rejected, an echo
 *   and `submit` (design 0160: the run suspends, a person decides, the run resumes);
 * - `subagents`: a planner whose step 0 hands two files to reader sub-agents, one after the
 *   other — each a durable child run (design 0392) that calls `write` (`"Never"`) and `submit` —
 *   and whose step 1 submits (design 0405).
 *
 * Every side effect (tool handler or code execution) appends one JSON line to the scenario's
 * side file with `O_APPEND` (one `write(2)`, which a SIGKILL cannot cut), between the hook's
 * "before" and "after" points, so the parent can count how often each call ran.
 */
import * as ActionExecutor from "@polyloop/core/ActionExecutor"
import * as ActionOutcome from "@polyloop/core/ActionOutcome"
import * as AgentDefinition from "@polyloop/core/AgentDefinition"
import * as Approval from "@polyloop/core/Approval"
import * as CodeBlockParser from "@polyloop/core/CodeBlockParser"
import type * as DecisionParser from "@polyloop/core/DecisionParser"
import * as ModelReply from "@polyloop/core/ModelReply"
import * as NativeToolCallParser from "@polyloop/core/NativeToolCallParser"
import * as Tool from "@polyloop/core/Tool"
import * as ToolContext from "@polyloop/core/ToolContext"
import * as SubAgent from "@polyloop/core/SubAgent"
import * as ToolRegistry from "@polyloop/core/ToolRegistry"
import * as ScriptedModel from "@polyloop/testing/ScriptedModel"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import type * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Schema from "effect/Schema"
import * as Scenario from "./crash-scenario.js"

/** The scripted runs. */
export const scriptNames = ["tools", "multi", "code", "approval", "subagents"] as const
export type ScriptName = (typeof scriptNames)[number]

/** How many steps each script has in the suite. */
export const defaultSteps: Record<ScriptName, number> = { tools: 7, multi: 3, code: 5, approval: 4, subagents: 2 }

/** Called just before and just after a side effect (the line appended to the side file). */
export type EffectHook = (what: string, phase: "BeforeEffect" | "AfterEffect") => Effect.Effect<void>

const usage = { inputTokens: 12, outputTokens: 3 } as const

const agentOf = (name: string, steps: number): AgentDefinition.AgentDefinition =>
  AgentDefinition.make({
    name,
    systemPrompt: "You are a durable agent.",
    budget: { maxSteps: steps + 5 },
    modelRetry: { maxAttempts: 1, baseDelay: Duration.millis(1), maxDelay: Duration.millis(1) }
  })

/** Appends one execution line to the side file, between the hook's points. */
const sideEffect = (sideFile: string, hook: EffectHook, what: string, line: Scenario.Execution) =>
  Effect.gen(function*() {
    yield* hook(what, "BeforeEffect")
    yield* Effect.sync(() => Scenario.appendWhole(sideFile, JSON.stringify(line) + "\n"))
    yield* hook(what, "AfterEffect")
  })

// ---- what the pool sends a child (chaos-child.ts) -----------------------------------------

/** Where a life dies. */
export type Crash =
  | { readonly name: string; readonly occurrence: number }
  | { readonly ordinal: number }

/**
 * The crash points a timer passes (the lease's renewal, every `heartbeatInterval`), not the
 * life's own course: a life whose crash point is one of these holds its claim at its end until
 * it passed it (`chaos-child.ts`), so the point is reached however long the life took.
 */
export const timedPoints: ReadonlyArray<string> = ["before renew", "after renew", "before renew check", "after renew check"]

/** One life of a scenario. */
export interface Job {
  readonly life: "run" | "decide"
  readonly store: { readonly kind: "sqlite"; readonly file: string } | { readonly kind: "pg"; readonly url: string }
  /** Whether appends go through the store's fault hook (record by record in a transaction). */
  readonly hooked: boolean
  readonly script: ScriptName
  readonly steps: number
  readonly runId: string
  /**
   * How many runs the life runs at once on its store (1: `runId` alone). Several (`runIdsOf`)
   * run in lockstep — each model call waits until every unfinished run made its own — so their
   * appends reach the store together and are written grouped (one statement for all of them),
   * the same way in every life: the grouped statements' crash points are enumerable.
   */
  readonly runs: number
  readonly side: string
  readonly crash: Crash | null
  readonly trace: boolean
}

/** The run ids of a life of `runs` runs: `runId` alone, or `runId.g0`, `runId.g1`, …. */
export const runIdsOf = (runId: string, runs: number): ReadonlyArray<string> =>
  runs <= 1 ? [runId] : Array.from({ length: runs }, (_, i) => `${runId}.g${i}`)

/** The call ids of the `subagents` script's children (its planner's step 0 calls `read` twice). */
export const childCallIds: ReadonlyArray<string> = ["call_s0_0", "call_s0_1"]

/**
 * The runs a scenario checks: the runs a life runs and, for the `subagents` script, each one's
 * children (their run ids derived from the parent's, step 0 and the call ids).
 */
export const checkedRunIdsOf = (script: ScriptName, runId: string, runs: number): ReadonlyArray<string> =>
  runIdsOf(runId, runs).flatMap((id) => (script === "subagents" ? [id, ...childCallIds.map((callId) => SubAgent.childRunId(id, 0, callId))] : [id]))

/** How a life that was not killed ended. */
export interface End {
  readonly status: "finished" | "suspended" | "decided" | "error"
  readonly detail: string
}

// ---- code actions ---------------------------------------------------------------------------

const codeReplyOf = (i: number, steps: number): ModelReply.ModelReply => {
  if (i === steps - 1) return ScriptedModel.code("js", `always finish ${i}`, { usage })
  switch (i % 3) {
    case 0:
      return ScriptedModel.code("js", `never write k${i}`, { usage })
    case 1:
      return ScriptedModel.code("js", `always read k${i - 1}`, { preamble: "Reading it back.", usage })
    default:
      return ScriptedModel.text("I will think without code.", usage)
  }
}

const codeExecutor = (sideFile: string, hook: EffectHook): ActionExecutor.ActionExecutor.Service =>
  ActionExecutor.make({
    replayPolicy: (action) => (action._tag === "CodeAction" && action.code.startsWith("never ") ? "Never" : "Always"),
    execute: (action) =>
      Effect.gen(function*() {
        if (action._tag !== "CodeAction") return ActionOutcome.notExecuted("code actions only")
        const ctx = Option.getOrThrow(yield* Effect.serviceOption(ToolContext.ToolContext))
        const replay = action.code.startsWith("never ") ? "Never" : "Always"
        yield* sideEffect(sideFile, hook, "code", { runId: ctx.runId, tool: "code", step: ctx.step, callId: ctx.callId, replay, pid: process.pid })
        return ActionOutcome.executed(`ran: ${action.code}`, { envReportedCompletion: action.code.startsWith("always finish") })
      })
  })

// ---- approvals ------------------------------------------------------------------------------

const approvalReplyOf = (i: number, steps: number): ModelReply.ModelReply => {
  if (i === steps - 1) return ScriptedModel.toolCall("submit", { answer: "refunds handled" }, { usage })
  switch (i % 3) {
    case 0:
      return ScriptedModel.toolCall("refund", { orderId: i, amount: 100 + i }, { usage })
    case 1:
      return ScriptedModel.toolCall("refund", { orderId: i, amount: 900 + i }, { usage })
    default:
      return ScriptedModel.toolCall("echo", { text: `e${i}` }, { usage })
  }
}

/** The decision the person of the approval script makes: approve a small refund, reject a large one. */
export const decisionFor = (waiting: Approval.Waiting): Approval.DecideInput => {
  const action = waiting.action
  const amount = action._tag === "ToolCall" ? Number((action.arguments as { readonly amount?: unknown }).amount) : 0
  return {
    runId: waiting.runId,
    callId: waiting.callId,
    decision: amount < 500 ? { _tag: "Approve" } : { _tag: "Reject", reason: "too large" },
    by: "chaos"
  }
}

const approvalTools = (sideFile: string, hook: EffectHook) => {
  const base = Scenario.tools(sideFile, 0, hook)
  const refund = Tool.make({
    name: "refund",
    description: "Refunds an order (a person approves each refund; must not run twice).",
    parameters: Schema.Struct({ orderId: Schema.Number, amount: Schema.Number }),
    replayPolicy: "Never",
    approval: "Required",
    handler: ({ amount, orderId }) =>
      Effect.gen(function*() {
        const ctx = yield* ToolContext.ToolContext
        yield* sideEffect(sideFile, hook, "refund", { runId: ctx.runId, tool: "refund", step: ctx.step, callId: ctx.callId, replay: "Never", pid: process.pid })
        return `refunded ${amount} on order ${orderId}`
      })
  })
  return ToolRegistry.make(refund, ...base.tools)
}

// ---- sub-agents -----------------------------------------------------------------------------

const subAgentFiles = ["a.md", "b.md"]

/**
 * The planner's tool `read`: a reader sub-agent per call, whose tools are the suite's (`write`,
 * `"Never"`, and `submit`). The reader writes its file's key, then submits.
 */
const subAgentTools = (sideFile: string, hook: EffectHook) =>
  ToolRegistry.make(SubAgent.tool({
    name: "read",
    description: "Hands one file to a reader agent.",
    parameters: Schema.Struct({ path: Schema.String }),
    agent: AgentDefinition.make({
      name: "chaos-reader",
      systemPrompt: "You read one file.",
      budget: { maxSteps: 4 },
      modelRetry: { maxAttempts: 1, baseDelay: Duration.millis(1), maxDelay: Duration.millis(1) }
    }),
    tools: Scenario.tools(sideFile, 0, hook),
    task: ({ path }) => `Read ${path}.`
  }))

/** The planner and its readers share one scripted model: the system prompt says whose call it is. */
const subAgentScript: ScriptedModel.Script = (request, call) => {
  const system = request.messages[0]
  if (system?._tag === "System" && system.text === "You read one file.") {
    const task = request.messages.find((m) => m._tag === "User")
    const file = task?._tag === "User" ? task.text.slice("Read ".length, -1) : ""
    return call.step === 0
      ? ScriptedModel.toolCall("write", { key: file, value: "read" }, { usage })
      : ScriptedModel.toolCall("submit", { answer: `read ${file}` }, { usage })
  }
  if (call.step === 0) {
    return ModelReply.make({ text: "", toolCalls: subAgentFiles.map((path) => ({ id: "", name: "read", argumentsText: JSON.stringify({ path }) })), usage })
  }
  return ScriptedModel.toolCall("submit", { answer: "all read" }, { usage })
}

// ---- the runs -------------------------------------------------------------------------------

/** What a child needs to run one script. */
export interface Setup {
  readonly agent: AgentDefinition.AgentDefinition
  readonly replies: ScriptedModel.Script
  readonly tools: ToolRegistry.ToolRegistry<ToolContext.ToolContext>
  readonly parser: Layer.Layer<DecisionParser.DecisionParser>
  /** The executor: the tools' derived one, or the code executor. */
  readonly executor: Effect.Effect<ActionExecutor.ActionExecutor.Service>
}

/** The task every script is given. */
export const task = "Do the scripted work."

/** The set-up of `script` with `steps` steps; side effects go to `sideFile`, passing `hook`. */
export const setup = (script: ScriptName, steps: number, sideFile: string, hook: EffectHook): Setup => {
  const toolsOf = (registry: ToolRegistry.ToolRegistry<ToolContext.ToolContext>) => Effect.orDie(registry.executor())
  switch (script) {
    case "tools": {
      const tools = Scenario.tools(sideFile, 0, hook)
      return {
        agent: agentOf("chaos-tools", steps),
        replies: Scenario.script(steps),
        tools,
        parser: NativeToolCallParser.layer({ onText: "NoAction" }),
        executor: toolsOf(tools)
      }
    }
    case "multi": {
      const tools = Scenario.tools(sideFile, 0, hook)
      return {
        agent: agentOf("chaos-multi", steps),
        replies: Scenario.multiScript(steps),
        tools,
        parser: NativeToolCallParser.layer({ onText: "NoAction" }),
        executor: toolsOf(tools)
      }
    }
    case "code":
      return {
        agent: agentOf("chaos-code", steps),
        replies: Array.from({ length: steps }, (_, i) => codeReplyOf(i, steps)),
        tools: ToolRegistry.empty,
        parser: CodeBlockParser.layer({ language: "js" }),
        executor: Effect.succeed(codeExecutor(sideFile, hook))
      }
    case "approval": {
      const tools = approvalTools(sideFile, hook)
      return {
        agent: agentOf("chaos-approval", steps),
        replies: Array.from({ length: steps }, (_, i) => approvalReplyOf(i, steps)),
        tools,
        parser: NativeToolCallParser.layer({ onText: "NoAction" }),
        executor: toolsOf(tools)
      }
    }
    case "subagents": {
      const tools = subAgentTools(sideFile, hook)
      return {
        // Its own steps and its two children's (2 each) in its budget (design 0392); one call at a
        // time, so that every life passes the children's points in the same order.
        agent: agentOf("chaos-subagents", steps + 4),
        replies: subAgentScript,
        tools,
        parser: NativeToolCallParser.layer({ onText: "NoAction" }),
        executor: toolsOf(tools)
      }
    }
  }
}
