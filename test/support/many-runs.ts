/**
 * Stores at the size experiments and long runs produce (issue 45), for the viewer's scale tests
 * (`viewer-scale.test.ts`) and its bench (`bench/viewer-scale.ts`). Everything is made by the
 * real loop (`Agent.run` with a scripted model, in memory), then copied into the store in context
 * with `appendRecords` (one commit per run), so the store holds real logs:
 *
 * - `seedMany`: `runs` finished runs of `agents` agents, each agent with its own number of
 *   snapshots (configurations: the system prompt differs), 1 to 8 steps each, ending in every
 *   way (a submitting tool, a final answer, the step budget of 8), started one minute apart;
 * - `longRun`: one run of `steps` steps, each observation `observationBytes` long (a page of
 *   text), finishing with a submit.
 */
import * as ActionExecutor from "@polyloop/core/ActionExecutor"
import * as Agent from "@polyloop/core/Agent"
import * as AgentDefinition from "@polyloop/core/AgentDefinition"
import * as EventSink from "@polyloop/core/EventSink"
import * as Fork from "@polyloop/core/Fork"
import * as Ids from "@polyloop/core/Ids"
import type * as ModelReply from "@polyloop/core/ModelReply"
import * as NativeToolCallParser from "@polyloop/core/NativeToolCallParser"
import * as RunLog from "@polyloop/core/RunLog"
import * as RunLogStore from "@polyloop/core/RunLogStore"
import * as Tool from "@polyloop/core/Tool"
import * as ToolRegistry from "@polyloop/core/ToolRegistry"
import * as ScriptedModel from "@polyloop/testing/ScriptedModel"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Schema from "effect/Schema"

/** A page of text of `bytes` characters, numbered lines (what a fetched page looks like). */
export const pageText = (seed: number, bytes: number): string => {
  const lines: Array<string> = []
  let size = 0
  for (let line = 0; size < bytes; line++) {
    const text = `${String(line + 1).padStart(4, " ")}  result ${seed}.${line}: the quick brown fox jumps over the lazy dog, again and again`
    lines.push(text)
    size += text.length + 1
  }
  return lines.join("\n").slice(0, bytes)
}

const fetchPage = Tool.make({
  name: "fetch_page",
  description: "Fetches a page of results.",
  parameters: Schema.Struct({ page: Schema.Number, bytes: Schema.Number }),
  replayPolicy: "Always",
  handler: (args: { readonly page: number; readonly bytes: number }) => Effect.succeed(pageText(args.page, args.bytes))
})

const submit = Tool.make({
  name: "submit",
  description: "Submits the answer and ends the run.",
  parameters: Schema.Struct({ answer: Schema.String }),
  replayPolicy: "Always",
  completesRun: true,
  handler: (args: { readonly answer: string }) => Effect.succeed(`submitted: ${args.answer}`)
})

const tools = ToolRegistry.make(fetchPage, submit)

const usageOf = (step: number) => ({ inputTokens: 200 + step * 40, outputTokens: 20 + (step % 7) * 3 })

/** The step budget of every run: one budget, so an agent's snapshots differ by their system prompt alone. */
export const maxSteps = 8

/** The replies of a run: `steps - 1` fetches then its ending (a submit, a final answer, or fetches until the budget stops it). */
const script = (steps: number, ending: "Tool" | "Answer" | "Steps", bytes: number): ReadonlyArray<ModelReply.ModelReply> => {
  const fetches = Array.from({ length: ending === "Steps" ? Math.max(steps, maxSteps) : steps - 1 }, (_, i) =>
    ScriptedModel.toolCall("fetch_page", { page: i, bytes }, { text: `Fetching page ${i}.`, usage: usageOf(i) }))
  if (ending === "Tool") return [...fetches, ScriptedModel.toolCall("submit", { answer: `done after ${steps} steps` }, { usage: usageOf(steps) })]
  if (ending === "Answer") return [...fetches, ScriptedModel.text(`The answer, after ${steps} steps.`, usageOf(steps))]
  return fetches
}

interface RunOptions {
  readonly agent: string
  readonly variant: string
  readonly steps: number
  readonly ending: "Tool" | "Answer" | "Steps"
  readonly bytes: number
}

/** Runs one scripted run as `runId` on `store`. */
const runOn = (store: RunLogStore.RunLogStore.Service, runId: Ids.RunId, options: RunOptions) =>
  Effect.gen(function*() {
    const model = yield* ScriptedModel.make(script(options.steps, options.ending, options.bytes))
    const executor = yield* tools.executor()
    const agent = AgentDefinition.make({
      name: options.agent,
      systemPrompt: `You are ${options.agent}, configuration ${options.variant}. Fetch pages, then answer.`,
      budget: { maxSteps: Math.max(maxSteps, options.steps), maxTokens: 1_000_000_000 },
      modelRetry: { ...AgentDefinition.defaultModelRetry, maxAttempts: 1 }
    })
    yield* Agent.run({ runId, agent, task: "Fetch the pages you need, then answer.", tools }).pipe(
      Effect.provide(Layer.mergeAll(
        model.layer,
        ActionExecutor.layer(executor),
        NativeToolCallParser.layer({ onText: "Finish" }),
        EventSink.layerNoop,
        Layer.succeed(RunLogStore.RunLogStore, store)
      ))
    )
  })

/** Runs one scripted run in a fresh memory store and returns its records. */
const recordsOf = (options: RunOptions) =>
  Effect.gen(function*() {
    const store = yield* RunLogStore.makeMemory
    const runId = Ids.runId("template")
    yield* runOn(store, runId, options)
    return RunLog.records(yield* store.readLog(runId))
  })

/** Copies a template's records into the store in context under `runId`, started at `startedAt`. */
const copy = (records: ReadonlyArray<RunLog.RunRecord>, runId: string, startedAt: number) =>
  Effect.flatMap(RunLogStore.RunLogStore, (store) => {
    const id = Ids.runId(runId)
    const moved = records.map((record) => (record._tag === "RunStarted" ? { ...record, runId: id, startedAt } : record)) as unknown as readonly [
      RunLog.RunRecord,
      ...Array<RunLog.RunRecord>
    ]
    return store.appendRecords!(id, moved)
  })

/** The number of snapshots agent `a` has: varied, 1 to 40. */
export const snapshotsOf = (a: number): number => 1 + ((a * 7) % 40)

/** The name of agent `a`. */
export const agentName = (a: number): string => `agent-${String(a).padStart(2, "0")}`

/**
 * `runs` finished runs of `agents` agents (run `i` is agent `i % agents`, one of its
 * `snapshotsOf` snapshots), run ids `run-000000` …, started one minute apart from `startAt`.
 */
export const seedMany = (options: { readonly runs: number; readonly agents: number; readonly startAt: number }) =>
  Effect.gen(function*() {
    const templates = new Map<string, ReadonlyArray<RunLog.RunRecord>>()
    const endings = ["Tool", "Answer", "Steps"] as const
    for (let i = 0; i < options.runs; i++) {
      const a = i % options.agents
      const variant = Math.floor(i / options.agents) % snapshotsOf(a)
      const ending = endings[(i * 7) % 3]!
      const steps = ending === "Steps" ? maxSteps : 1 + ((i * 5) % maxSteps)
      const key = `${a} ${variant} ${steps} ${ending}`
      let records = templates.get(key)
      if (records === undefined) {
        records = yield* recordsOf({ agent: agentName(a), variant: `v${variant}`, steps, ending, bytes: 120 })
        templates.set(key, records)
      }
      yield* copy(records, `run-${String(i).padStart(6, "0")}`, options.startAt + i * 60_000)
    }
  })

/**
 * One run of `steps` steps whose observations are `observationBytes` long, as `runId`, run by the
 * loop on the store in context (not copied: `appendRecords` of a few thousand records at once
 * exceeds SQLite's limit of bound variables — a limit of the SQL store's import, not the viewer's).
 */
export const longRun = (options: { readonly runId: string; readonly steps: number; readonly observationBytes: number }) =>
  Effect.flatMap(RunLogStore.RunLogStore, (store) =>
    runOn(store, Ids.runId(options.runId), { agent: "long-reader", variant: "v0", steps: options.steps, ending: "Tool", bytes: options.observationBytes }))

/**
 * A parent and its forks (design 0170): `parent` of 8 steps (7 fetches, then a submit); `fork`
 * forked from it at step 5 and run on, ending with a final answer at step 6 (so it differs from
 * step 6 on); `unrun` forked at step 5 and not run (its log holds the copied steps only).
 */
export const parentAndForks = (ids: { readonly parent: string; readonly fork: string; readonly unrun: string }) =>
  Effect.gen(function*() {
    const store = yield* RunLogStore.RunLogStore
    const common = { agent: "forker", variant: "v0", bytes: 200 } as const
    yield* runOn(store, Ids.runId(ids.parent), { ...common, steps: 8, ending: "Tool" })
    yield* Fork.fork({ from: Ids.runId(ids.parent), atStep: 5, runId: Ids.runId(ids.fork) })
    yield* runOn(store, Ids.runId(ids.fork), { ...common, steps: 7, ending: "Answer" })
    yield* Fork.fork({ from: Ids.runId(ids.parent), atStep: 5, runId: Ids.runId(ids.unrun) })
  })
