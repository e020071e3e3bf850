/**
 * The scripted agent of the crash-recovery test, shared by the child that runs it
 * (`crash-agent.ts`) and the parent that kills it (`crash-recovery.test.ts`).
 *
 * Steps cycle through every kind of step: a `"Never"` tool (`write`), an `"Always"` tool
 * (`echo`), a reply without action, a second `write`, arguments that are not JSON (an invalid
 * decision) and an unknown tool (not executed); the last step calls the completing `submit`.
 * Every handler execution is appended to a side file (one JSON line, written with `O_APPEND`
 * before the handler returns), so the parent can count how often each call really ran.
 */
import * as AgentDefinition from "@polyloop/core/AgentDefinition"
import * as HistoryPolicy from "@polyloop/core/HistoryPolicy"
import * as Ids from "@polyloop/core/Ids"
import type * as ModelReply from "@polyloop/core/ModelReply"
import * as Tool from "@polyloop/core/Tool"
import * as ToolContext from "@polyloop/core/ToolContext"
import * as ToolRegistry from "@polyloop/core/ToolRegistry"
import * as ScriptedModel from "@polyloop/testing/ScriptedModel"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Schema from "effect/Schema"
import * as fs from "node:fs"

/** The run every child works on. */
export const runId = Ids.runId("crash-recovery")

/** The `i`-th run when several run at once (`crash-agent.ts runs=<k>`). */
export const runOf = (i: number): Ids.RunId => Ids.runId(`${runId}-${i}`)

/** The task. */
export const task = "Write the keys, echo the texts, then submit."

/** One line of the side file: a handler execution. */
export interface Execution {
  readonly runId: string
  readonly tool: string
  readonly step: number
  readonly callId: string
  readonly replay: "Never" | "Always"
  readonly pid: number
}

const usage = { inputTokens: 12, outputTokens: 3 } as const

/** The reply of step `i` of a run of `steps` steps. */
export const replyOf = (i: number, steps: number): ModelReply.ModelReply => {
  if (i === steps - 1) return ScriptedModel.toolCall("submit", { answer: `done after ${steps} steps` }, { usage })
  switch (i % 6) {
    case 0:
    case 3:
      return ScriptedModel.toolCall("write", { key: `k${i}`, value: `v${i}` }, { usage })
    case 1:
      return ScriptedModel.toolCall("echo", { text: `e${i}` }, { usage })
    case 2:
      return ScriptedModel.text("", usage)
    case 4:
      return ScriptedModel.toolCall("echo", "{not json", { usage })
    default:
      return ScriptedModel.toolCall("erase_everything", {}, { usage })
  }
}

/**
 * The reply of step `i` of the multi-call run (design 0150): three calls per reply, replay
 * policies mixed — two `write`s (`"Never"`) around an `echo` (`"Always"`), or an `echo` between
 * them — and `submit` alone at the end. Call ids are filled by the scripted model
 * (`call_s<step>_<index>`).
 */
export const multiReplyOf = (i: number, steps: number): ModelReply.ModelReply => {
  if (i === steps - 1) return ScriptedModel.toolCall("submit", { answer: `done after ${steps} steps` }, { usage })
  const write = (k: number) => ({ id: "", name: "write", argumentsText: JSON.stringify({ key: `k${i}.${k}`, value: `v${i}.${k}` }) })
  const echo = (k: number) => ({ id: "", name: "echo", argumentsText: JSON.stringify({ text: `e${i}.${k}` }) })
  const calls = i % 2 === 0 ? [write(0), echo(1), write(2)] : [echo(0), write(1), echo(2)]
  return { text: "", toolCalls: calls, usage }
}

/** The script of the multi-call run of `steps` steps. */
export const multiScript = (steps: number): ReadonlyArray<ModelReply.ModelReply> =>
  Array.from({ length: steps }, (_, i) => multiReplyOf(i, steps))

/** The script of a run of `steps` steps. */
export const script = (steps: number): ReadonlyArray<ModelReply.ModelReply> => Array.from({ length: steps }, (_, i) => replyOf(i, steps))

/** The agent (its budget leaves room: the run ends by `submit`). */
export const agent = (steps: number): AgentDefinition.AgentDefinition =>
  AgentDefinition.make({
    name: "crash-agent",
    systemPrompt: "You are a durable agent. Use the tools.",
    budget: { maxSteps: steps + 5 },
    modelRetry: { maxAttempts: 1, baseDelay: Duration.millis(1), maxDelay: Duration.millis(1) }
  })

/**
 * Called just before and just after a tool's side effect (the line appended to the side file):
 * the enumerated crash suite kills its child there.
 */
export type EffectHook = (tool: string, phase: "BeforeEffect" | "AfterEffect") => Effect.Effect<void>

const page = 4096

/**
 * Appends a short line so that a SIGKILL cannot cut it: Linux copies a write into the page cache
 * page by page and stops between two pages when a fatal signal is pending, so a line that
 * straddles a page boundary can be torn (seen once in a fresh-clone run: `…"too{"runId":…`). A
 * line that would straddle one is moved to the next page by a padding write of newlines (empty
 * lines, which the reader skips; a torn padding write is only fewer newlines). @internal
 */
export const appendWhole = (file: string, line: string): void => {
  const bytes = Buffer.byteLength(line)
  const size = fs.existsSync(file) ? fs.statSync(file).size : 0
  const offset = size % page
  if (bytes <= page && offset + bytes > page) fs.appendFileSync(file, "\n".repeat(page - offset))
  fs.appendFileSync(file, line)
}

/** The tools; each execution is appended to `sideFile`, then the handler takes `work` (real time). */
export const tools = (sideFile: string, work: Duration.DurationInput, hook?: EffectHook) => {
  const record = (tool: string, replay: "Never" | "Always") =>
    Effect.gen(function*() {
      const ctx = yield* ToolContext.ToolContext
      const line: Execution = { runId: ctx.runId, tool, step: ctx.step, callId: ctx.callId, replay, pid: process.pid }
      if (hook !== undefined) yield* hook(tool, "BeforeEffect")
      yield* Effect.sync(() => appendWhole(sideFile, JSON.stringify(line) + "\n"))
      if (hook !== undefined) yield* hook(tool, "AfterEffect")
      yield* Effect.sleep(work)
    })
  const write = Tool.make({
    name: "write",
    description: "Writes a value under a key (must not run twice).",
    parameters: Schema.Struct({ key: Schema.String, value: Schema.String }),
    replayPolicy: "Never",
    handler: (args: { readonly key: string; readonly value: string }) =>
      Effect.as(record("write", "Never"), `wrote ${args.key}=${args.value}`)
  })
  const echo = Tool.make({
    name: "echo",
    description: "Echoes a text (safe to repeat).",
    parameters: Schema.Struct({ text: Schema.String }),
    replayPolicy: "Always",
    handler: (args: { readonly text: string }) => Effect.as(record("echo", "Always"), `echo: ${args.text}`)
  })
  const submit = Tool.make({
    name: "submit",
    description: "Submits the answer and ends the run.",
    parameters: Schema.Struct({ answer: Schema.String }),
    replayPolicy: "Always",
    completesRun: true,
    handler: (args: { readonly answer: string }) => Effect.as(record("submit", "Always"), `submitted: ${args.answer}`)
  })
  return ToolRegistry.make(write, echo, submit)
}

/**
 * Reads the side file. Each line was appended by one `write(2)` of a few dozen bytes within one
 * page (`appendWhole`), which a SIGKILL cannot cut in half; a line that does not parse is an
 * error, not something to skip.
 */
export const readExecutions = (sideFile: string): ReadonlyArray<Execution> => {
  if (!fs.existsSync(sideFile)) return []
  return fs.readFileSync(sideFile, "utf8").split("\n").filter((line) => line !== "").map((line) => JSON.parse(line) as Execution)
}

/**
 * The history run (issue 30, design 0300): a `read` tool whose observations (~3 kB each) outgrow
 * the budget, under masking, summaries and a token budget at once, and `submit` at the end. The
 * summariser appends each of its calls to the side file (`tool: "summariser"`) so the parent can
 * count how often a summary was asked for.
 */
export const historyReplyOf = (i: number, steps: number): ModelReply.ModelReply =>
  i === steps - 1
    ? ScriptedModel.toolCall("submit", { answer: `done after ${steps} steps` }, { usage: unreported })
    : ScriptedModel.toolCall("read", { path: `notes/${i}.txt` }, { usage: unreported })

/** No input count reported (the budget is counted, not calibrated: the script's replies are not of the requests). */
const unreported = { inputTokens: 0, outputTokens: 3 } as const

/** The script of the history run. */
export const historyScript = (steps: number): ReadonlyArray<ModelReply.ModelReply> => Array.from({ length: steps }, (_, i) => historyReplyOf(i, steps))

/** The history run's policy: masking, a summary past 3,000 tokens (keeping 4 steps), a 3,300-token budget. */
export const historyPolicy = HistoryPolicy.compose(
  HistoryPolicy.maskObservations({ keepLast: 3, every: 3 }),
  HistoryPolicy.summarise({ triggerTokens: 3_000, keepLast: 4 }),
  HistoryPolicy.fitTokens({ window: 3_600, headroom: 300 })
)

/** The history run's agent. */
export const historyAgent = (steps: number): AgentDefinition.AgentDefinition =>
  AgentDefinition.make({
    name: "crash-agent",
    systemPrompt: "You are a durable agent. Use the tools.",
    budget: { maxSteps: steps + 5 },
    modelRetry: { maxAttempts: 1, baseDelay: Duration.millis(1), maxDelay: Duration.millis(1) },
    history: historyPolicy
  })

/** The history run's tools: `read` (`"Always"`, a long text per path) and `submit`. */
export const historyTools = (sideFile: string, work: Duration.DurationInput) => {
  const record = (tool: string) =>
    Effect.gen(function*() {
      const ctx = yield* ToolContext.ToolContext
      const line: Execution = { runId: ctx.runId, tool, step: ctx.step, callId: ctx.callId, replay: "Always", pid: process.pid }
      yield* Effect.sync(() => appendWhole(sideFile, JSON.stringify(line) + "\n"))
      yield* Effect.sleep(work)
    })
  const read = Tool.make({
    name: "read",
    description: "Reads a file (safe to repeat).",
    parameters: Schema.Struct({ path: Schema.String }),
    replayPolicy: "Always",
    handler: (args: { readonly path: string }) =>
      Effect.as(record("read"), Array.from({ length: 60 }, (_, k) => `${args.path}:${k} the quick brown fox jumps over the lazy dog`).join("\n"))
  })
  const submit = Tool.make({
    name: "submit",
    description: "Submits the answer and ends the run.",
    parameters: Schema.Struct({ answer: Schema.String }),
    replayPolicy: "Always",
    completesRun: true,
    handler: (args: { readonly answer: string }) => Effect.as(record("submit"), `submitted: ${args.answer}`)
  })
  return ToolRegistry.make(read, submit)
}

/** The history run's summariser: a deterministic summary; each call appended to the side file first. */
export const historySummariser = (sideFile: string) =>
  ScriptedModel.make(
    (request, call) => ScriptedModel.text(`summary at step ${call.step} of ${request.messages[1]!.text.length} characters`, { inputTokens: 300, outputTokens: 12 }),
    {
      onCall: (call) =>
        Effect.sync(() =>
          appendWhole(sideFile, JSON.stringify({ runId: String(runId), tool: "summariser", step: call.step, callId: "", replay: "Never", pid: process.pid } satisfies Execution) + "\n")
        )
    }
  )

/** The conversation run (issue 31): turns sent one after another, each writing, echoing, writing, then answering. */
export const chatTurns = 5

/** The text of turn `i`'s message. */
export const chatMessage = (i: number): string => `turn ${i}: write and echo, then answer`

/** The model of the conversation run: its replies follow from the turn's message and the steps since it. */
export const chatScript: ScriptedModel.Script = (request) => {
  const messages = request.messages
  let at = messages.length - 1
  while (at > 0 && !(messages[at]!._tag === "User" && messages[at]!.text.startsWith("turn "))) at--
  const turn = Number(/^turn (\d+)/.exec(messages[at]?.text ?? "")?.[1] ?? 0)
  let since = 0
  for (let i = at + 1; i < messages.length; i++) if (messages[i]!._tag === "Assistant") since++
  switch (since) {
    case 0:
      return ScriptedModel.toolCall("write", { key: `t${turn}a`, value: `v${turn}` }, { usage })
    case 1:
      return ScriptedModel.toolCall("echo", { text: `e${turn}` }, { usage })
    case 2:
      return ScriptedModel.toolCall("write", { key: `t${turn}b`, value: `w${turn}` }, { usage })
    default:
      return ScriptedModel.text(`done with turn ${turn}`, usage)
  }
}

/** The conversation run's agent: a budget per turn. */
export const chatAgent = AgentDefinition.make({
  name: "crash-chat",
  systemPrompt: "You are a durable conversational agent. Use the tools.",
  budget: { maxSteps: 6 },
  modelRetry: { maxAttempts: 1, baseDelay: Duration.millis(1), maxDelay: Duration.millis(1) }
})
