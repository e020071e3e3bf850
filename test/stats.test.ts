/**
 * Statistics (issue 17, design 0170): 100 generated runs — four configurations, every kind of
 * ending (a completing tool, a final answer, each budget, an environment error), some resumed,
 * some left unfinished — and `Stats.fromStore` gives the counts and distributions of a direct
 * count from the logs' own records (steps, results, replies, resumes). Filters by agent,
 * snapshot hash and stop reason select the same runs as a direct filter.
 */
import { assert, describe, it } from "@effect/vitest"
import * as Agent from "@polyloop/core/Agent"
import * as AgentDefinition from "@polyloop/core/AgentDefinition"
import { ToolEnvironmentError } from "@polyloop/core/Errors"
import * as EventSink from "@polyloop/core/EventSink"
import * as Ids from "@polyloop/core/Ids"
import * as ModelReply from "@polyloop/core/ModelReply"
import * as NativeToolCallParser from "@polyloop/core/NativeToolCallParser"
import * as RunLog from "@polyloop/core/RunLog"
import * as RunLogStore from "@polyloop/core/RunLogStore"
import * as Stats from "@polyloop/core/Stats"
import * as StopReason from "@polyloop/core/StopReason"
import * as Tool from "@polyloop/core/Tool"
import * as ToolRegistry from "@polyloop/core/ToolRegistry"
import * as ScriptedModel from "@polyloop/testing/ScriptedModel"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Schema from "effect/Schema"
import * as Research from "./support/research-agent.js"

const broken = Tool.make({
  name: "deploy",
  description: "Deploys.",
  parameters: Schema.Struct({}),
  handler: () => Effect.fail(new ToolEnvironmentError({ message: "the cluster is unreachable" }))
})
const tools = ToolRegistry.make(Research.add, Research.note, Research.submit, broken)

/** A deterministic pseudo-random sequence (the runs are the same on every test run). */
const lcg = (seed: number) => () => {
  seed = (seed * 1103515245 + 12345) % 2147483648
  return seed / 2147483648
}

type Ending = "Tool" | "Answer" | "Steps" | "Tokens" | "EnvError" | "Unfinished"
const endings: ReadonlyArray<Ending> = ["Tool", "Answer", "Steps", "Tokens", "EnvError", "Unfinished"]

const generate = (n: number) =>
  Effect.gen(function*() {
    const random = lcg(17)
    for (let i = 0; i < n; i++) {
      const agentName = random() < 0.5 ? "alpha" : "beta"
      const temperature = random() < 0.5 ? 0 : 1
      const ending = endings[Math.floor(random() * endings.length)]!
      const length = 1 + Math.floor(random() * 5)
      const resumed = random() < 0.3
      const agent = AgentDefinition.make({
        name: agentName,
        systemPrompt: Research.systemPrompt,
        // One budget for all (it is part of the snapshot, so of the configuration): 8 steps, 640 tokens.
        budget: { maxSteps: 8, maxTokens: 640 },
        modelSettings: { model: "scripted-1", temperature },
        modelRetry: { maxAttempts: 1, baseDelay: Duration.millis(1), maxDelay: Duration.millis(1) }
      })
      const reply = (step: number): ModelReply.ModelReply => {
        // Small replies run into the step budget, large ones into the token budget, others end first.
        const usage = ending === "Steps" ? { inputTokens: 10 + step, outputTokens: 1 } : ending === "Tokens" ? { inputTokens: 250 + step, outputTokens: 20 } : { inputTokens: 90 + step, outputTokens: 10 }
        const id = `call_${step}`
        if (step >= length - 1) {
          if (ending === "Tool") return ScriptedModel.toolCall("submit", { answer: "x" }, { id, usage })
          if (ending === "Answer") return ModelReply.make({ text: "The answer is x.", usage })
          if (ending === "EnvError") return ScriptedModel.toolCall("deploy", {}, { id, usage })
        }
        return step % 3 === 2
          ? ScriptedModel.toolCall("nope", {}, { id, usage })
          : ScriptedModel.toolCall("add", { a: step, b: i }, { id, usage })
      }
      const parser = NativeToolCallParser.layer({ onText: "Finish" })
      const services = Layer.mergeAll(parser, Layer.orDie(ToolRegistry.layerExecutor(tools)), EventSink.layerNoop)
      const request: Agent.RunRequest = { runId: Ids.runId(`run-${String(i).padStart(3, "0")}`), agent, task: Research.task, tools }
      const stopAt = ending === "Unfinished" ? Math.floor(length / 2) : resumed ? Math.floor(length / 2) : -1
      if (stopAt >= 0) {
        const failing = ScriptedModel.layer((_r, call) => reply(call.step), { failures: [{ step: stopAt, times: 1, retryable: false }] })
        yield* Effect.flip(Agent.run(request).pipe(Effect.provide(Layer.merge(services, failing))))
        if (ending === "Unfinished") continue
      }
      yield* Agent.run(request).pipe(Effect.provide(Layer.merge(services, ScriptedModel.layer((_r, call) => reply(call.step)))))
    }
  })

/** The statistics counted directly from the records, independently of `Stats`. */
const directCount = (logs: ReadonlyArray<RunLog.RunLog>) => {
  const groups = new Map<string, Array<RunLog.RunLog>>()
  for (const log of logs) {
    if (Option.isNone(log.finished)) continue
    const started = Option.getOrThrow(log.started)
    const key = `${(started.snapshot as { agent: { name: string } }).agent.name}|${started.snapshotHash}`
    groups.set(key, [...(groups.get(key) ?? []), log])
  }
  const dist = (values: Array<number>) => {
    values.sort((a, b) => a - b)
    const n = values.length
    return {
      median: n % 2 === 1 ? values[(n - 1) / 2]! : (values[n / 2 - 1]! + values[n / 2]!) / 2,
      p90: values[Math.ceil(n * 0.9) - 1]!,
      max: values[n - 1]!
    }
  }
  return [...groups.entries()].sort(([a], [b]) => (a < b ? -1 : 1)).map(([key, members]) => {
    const [agent = "", snapshotHash = ""] = key.split("|")
    const stopReasons: Record<string, number> = {}
    for (const m of members) {
      const label = StopReason.format(Option.getOrThrow(m.finished).stopReason)
      stopReasons[label] = (stopReasons[label] ?? 0) + 1
    }
    return {
      agent,
      snapshotHash,
      runs: members.length,
      stopReasons,
      steps: dist(members.map((m) => m.steps.length)),
      effectiveSteps: dist(members.map((m) => m.results.filter((r) => r.outcome.status === "Executed").length)),
      tokens: dist(members.map((m) => m.replies.reduce((sum, r) => sum + r.reply.usage.inputTokens + r.reply.usage.outputTokens, 0))),
      resumedRuns: members.filter((m) => m.resumes.length > 0).length,
      resumes: members.reduce((sum, m) => sum + m.resumes.length, 0)
    }
  })
}

describe("Stats", () => {
  it.effect("on 100 generated runs the statistics match a direct count from the logs", () =>
    Effect.gen(function*() {
      yield* generate(100)
      const store = yield* RunLogStore.RunLogStore
      const summaries = yield* store.listRuns()
      assert.strictEqual(summaries.length, 100)
      const logs = yield* Effect.forEach(summaries, (s) => store.readLog(Ids.runId(s.runId)))
      const stats = yield* Stats.fromStore()
      assert.deepStrictEqual(stats, directCount(logs))
      // Every kind of ending is there, some runs were resumed, and unfinished runs are left out.
      const all: Record<string, number> = {}
      for (const group of stats) for (const [reason, count] of Object.entries(group.stopReasons)) all[reason] = (all[reason] ?? 0) + count
      assert.includeMembers(Object.keys(all), ["Completed(Tool)", "Completed(Answer)", "BudgetExhausted(Steps)", "BudgetExhausted(Tokens)", "EnvError"])
      assert.isTrue(stats.some((g) => g.resumedRuns > 0))
      const finished = logs.filter((l) => Option.isSome(l.finished)).length
      assert.isTrue(finished < 100)
      assert.strictEqual(stats.reduce((sum, g) => sum + g.runs, 0), finished)
      assert.strictEqual(stats.length, 4)
      // The JSON form encodes.
      assert.strictEqual(Schema.encodeSync(Schema.Array(Stats.Group))(stats).length, 4)

      // Filters select what a direct filter selects.
      const hash = stats[0]!.snapshotHash
      const byHash = yield* Stats.select({ snapshotHash: hash })
      assert.deepStrictEqual(byHash.map((l) => Option.getOrThrow(l.started).runId).sort(), logs.filter((l) => Option.getOrThrow(l.started).snapshotHash === hash).map((l) => Option.getOrThrow(l.started).runId).sort())
      const envErrors = yield* Stats.select({ agent: "alpha", stopReason: "EnvError" })
      assert.isTrue(envErrors.length > 0)
      assert.strictEqual(envErrors.length, logs.filter((l) => Stats.agentOf(l) === "alpha" && Option.exists(l.finished, (f) => f.stopReason._tag === "EnvError")).length)
      const budgets = yield* Stats.select({ stopReason: "BudgetExhausted" })
      assert.strictEqual(budgets.length, (all["BudgetExhausted(Steps)"] ?? 0) + (all["BudgetExhausted(Tokens)"] ?? 0))
      assert.deepStrictEqual(yield* Stats.fromStore({ agent: "alpha" }), stats.filter((g) => g.agent === "alpha"))
    }).pipe(Effect.provide(RunLogStore.layerMemory)), { timeout: 120_000 })

  it("distribution: median of an even count is the mean of the middle two; p90 is the nearest rank", () => {
    assert.deepStrictEqual(Stats.distribution([]), { median: 0, p90: 0, max: 0 })
    assert.deepStrictEqual(Stats.distribution([5]), { median: 5, p90: 5, max: 5 })
    assert.deepStrictEqual(Stats.distribution([4, 1, 3, 2]), { median: 2.5, p90: 4, max: 4 })
    assert.deepStrictEqual(Stats.distribution(Array.from({ length: 10 }, (_, i) => 10 - i)), { median: 5.5, p90: 9, max: 10 })
  })
})
