/**
 * The agent, tools and scripts of the version-1 log fixture (`test/fixtures/log-v1/`): the
 * fixture was written by `test/fixtures/log-v1/make.ts` with the code before design 0150 (log
 * schema version 1: one action per step, `StepCompleted.resultId`, `Act.action`), and
 * `test/log-v1.test.ts` reads, resumes and shows it with today's code. Both use this module, so
 * the resumed runs are configured exactly as the recorded snapshots say (the tools' schemas,
 * replay policies and completion markers, the parser, the agent).
 *
 * Tools: `read_file` (Never), `write_file` (Never), `bump` (Always), `submit` (completes the
 * run). A handler blocks forever (after signalling) when `control.block` names its tool for its
 * run, so a run can be interrupted in the middle of an action.
 */
import * as AgentDefinition from "@polyloop/core/AgentDefinition"
import type { ModelReply } from "@polyloop/core/ModelReply"
import * as Tool from "@polyloop/core/Tool"
import * as ToolContext from "@polyloop/core/ToolContext"
import * as ToolRegistry from "@polyloop/core/ToolRegistry"
import * as ScriptedModel from "@polyloop/testing/ScriptedModel"
import * as ModelReplyModule from "@polyloop/core/ModelReply"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Schema from "effect/Schema"

/** Which handler blocks: `${runId}:${tool}` → the deferred it signals before blocking. */
export const control: { block: Map<string, Deferred.Deferred<void>> } = { block: new Map() }

/** Every handler call that returned or blocked, as `${runId}:${step}:${tool}`. */
export const calls: Array<string> = []

const handled = <A>(tool: string, result: (args: A) => string) => (args: A) =>
  Effect.gen(function*() {
    const ctx = yield* ToolContext.ToolContext
    calls.push(`${ctx.runId}:${ctx.step}:${tool}`)
    const gate = control.block.get(`${ctx.runId}:${tool}`)
    if (gate !== undefined) {
      control.block.delete(`${ctx.runId}:${tool}`)
      yield* Deferred.succeed(gate, undefined)
      return yield* Effect.never
    }
    return result(args)
  })

export const tools = ToolRegistry.make(
  Tool.make({
    name: "read_file",
    description: "Reads a file.",
    parameters: Schema.Struct({ path: Schema.String }),
    handler: handled("read_file", (args: { readonly path: string }) => `contents of ${args.path}`)
  }),
  Tool.make({
    name: "write_file",
    description: "Writes a file.",
    parameters: Schema.Struct({ path: Schema.String, text: Schema.String }),
    handler: handled("write_file", (args: { readonly path: string; readonly text: string }) => `wrote ${args.text.length} characters to ${args.path}`)
  }),
  Tool.make({
    name: "bump",
    description: "Adds to a counter (safe to repeat).",
    parameters: Schema.Struct({ n: Schema.Number }),
    replayPolicy: "Always",
    handler: handled("bump", (args: { readonly n: number }) => `counter +${args.n}`)
  }),
  Tool.make({
    name: "submit",
    description: "Submits the answer and ends the run.",
    parameters: Schema.Struct({ answer: Schema.String }),
    completesRun: true,
    handler: handled("submit", (args: { readonly answer: string }) => args.answer)
  })
)

export const agent = AgentDefinition.make({
  name: "fixture-v1",
  systemPrompt: "You edit files with tools.",
  budget: { maxSteps: 12 }
})

export const task = "Update a.md, then submit."

const usage = (step: number) => ({ inputTokens: 100 + step, outputTokens: 10 })
const call = (step: number, name: string, args: unknown) => ScriptedModel.toolCall(name, args, { usage: usage(step) })
const calls2 = (step: number, a: readonly [string, unknown], b: readonly [string, unknown]): ModelReply =>
  ModelReplyModule.make({
    text: "Two at once.",
    toolCalls: [
      { id: "", name: a[0], argumentsText: JSON.stringify(a[1]) },
      { id: "", name: b[0], argumentsText: JSON.stringify(b[1]) }
    ],
    usage: usage(step)
  })

/**
 * The scripts, by run id. `finished`: an executed call, an unknown tool (NotExecuted), two calls
 * at once (InvalidDecision in version 1), a write interrupted in flight and settled on resume
 * (NotExecuted, interrupted), arguments that are not JSON (InvalidDecision), invalid arguments
 * (NotExecuted), then submit. The three unfinished runs stop: in a `bump` (Always), in a
 * `write_file` (Never), and in the model call of step 2 (no pending reply).
 */
export const scripts: Record<string, ReadonlyArray<ModelReply>> = {
  "v1-finished": [
    call(0, "read_file", { path: "a.md" }),
    call(1, "nope", {}),
    calls2(2, ["read_file", { path: "a.md" }], ["read_file", { path: "b.md" }]),
    call(3, "write_file", { path: "a.md", text: "new text" }),
    call(4, "read_file", "{path:"),
    call(5, "read_file", {}),
    call(6, "submit", { answer: "done" })
  ],
  "v1-pending-always": [call(0, "read_file", { path: "a.md" }), call(1, "bump", { n: 1 }), call(2, "submit", { answer: "bumped" })],
  "v1-pending-never": [call(0, "write_file", { path: "a.md", text: "x" }), call(1, "submit", { answer: "written" })],
  "v1-boundary": [call(0, "read_file", { path: "a.md" }), call(1, "read_file", { path: "b.md" }), call(2, "submit", { answer: "read" })]
}

/** The scripted model of a run (the reply of step k is `scripts[runId][k]`). */
export const model = (runId: string, options?: ScriptedModel.Options) => ScriptedModel.make(scripts[runId]!, options)
