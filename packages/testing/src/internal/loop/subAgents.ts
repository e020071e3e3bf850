/**
 * The loop suite, sub-agents (design 0392): a planner whose tool runs a reader agent as a child
 * run. The child's id is derived, its answer is the call's observation, its cost is the
 * parent's `children` and counts in the parent's budget; a child's budget is capped by its
 * parent's; a child waiting for a person suspends the parent; and the parent killed at every
 * write of parent and children — before and after it — resumes to the uninterrupted logs, with
 * every child started once and its `"Never"` tool run at most once.
 *
 * @internal
 */
import * as Cause from "effect/Cause"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Fiber from "effect/Fiber"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Schema from "effect/Schema"
import * as ActionExecutor from "@polyloop/core/ActionExecutor"
import * as Approval from "@polyloop/core/Approval"
import * as DecisionParser from "@polyloop/core/DecisionParser"
import * as EventSink from "@polyloop/core/EventSink"
import * as Fork from "@polyloop/core/Fork"
import * as Ids from "@polyloop/core/Ids"
import * as ModelReply from "@polyloop/core/ModelReply"
import type * as ModelClient from "@polyloop/core/ModelClient"
import * as NativeToolCallParser from "@polyloop/core/NativeToolCallParser"
import * as RunLog from "@polyloop/core/RunLog"
import * as Replay from "@polyloop/core/Replay"
import * as RunLogStore from "@polyloop/core/RunLogStore"
import * as SubAgent from "@polyloop/core/SubAgent"
import * as Tool from "@polyloop/core/Tool"
import * as ToolRegistry from "@polyloop/core/ToolRegistry"
import * as Trajectory from "@polyloop/core/Trajectory"
import * as ScriptedModel from "../../ScriptedModel.js"
import type { Assert } from "../vitest.js"
import { agent } from "./fixtures.js"
import { comparable, type Harness, type SuiteContext, type SuiteRequest } from "./harness.js"

const usage = { inputTokens: 10, outputTokens: 5 }
const native = NativeToolCallParser.make()

/** A planner with a reader sub-agent; the reader charges once per file (a `"Never"` tool) and answers. */
const makeWorld = (options?: {
  readonly chargeText?: string
  readonly readerSteps?: number
  readonly approval?: boolean
  readonly plannerSteps?: number
  readonly plannerTokens?: number
  /** a.txt's charge waits for b.txt's, then lets the b child run on: the second call settles first. */
  readonly secondFirst?: boolean
}) => {
  const charges: Array<string> = []
  const secondCharged = Effect.runSync(Deferred.make<void>())
  const ordered = (path: string): Effect.Effect<void> =>
    options?.secondFirst !== true
      ? Effect.void
      : path === "b.txt"
      ? Deferred.succeed(secondCharged, undefined)
      : Effect.zipRight(Deferred.await(secondCharged), Effect.repeatN(Effect.yieldNow(), 500))
  const charge = Tool.make({
    name: "charge",
    description: "Charges the reading of a file (must not run twice).",
    parameters: Schema.Struct({ path: Schema.String }),
    replayPolicy: "Never",
    ...(options?.approval === true ? { approval: "Required" as const } : {}),
    handler: ({ path }) =>
      Effect.zipRight(
        ordered(path),
        Effect.sync(() => {
          charges.push(path)
          return `${options?.chargeText ?? "charged"} ${path}`
        })
      )
  })
  const readerTools = ToolRegistry.make(charge)
  const reader = SubAgent.tool({
    name: "read",
    description: "Ask a reader agent to summarise one file.",
    parameters: Schema.Struct({ path: Schema.String }),
    agent: agent({ name: "reader", systemPrompt: "You read one file and summarise it.", budget: { maxSteps: options?.readerSteps ?? 10 } }),
    tools: readerTools,
    task: ({ path }) => `Summarise ${path}.`
  })
  const plannerTools = ToolRegistry.make(reader)
  const planner = agent({
    name: "planner",
    systemPrompt: "You plan and delegate.",
    budget: { maxSteps: options?.plannerSteps ?? 10, ...(options?.plannerTokens === undefined ? {} : { maxTokens: options.plannerTokens }) },
    actionConcurrency: 2
  })
  // One model for parent and children: a request is the planner's or a reader's by its system prompt.
  const script = (request: ModelClient.ModelRequest, c: ScriptedModel.Call): ModelReply.ModelReply => {
    const system = request.messages[0]
    const isReader = system?._tag === "System" && system.text.startsWith("You read")
    if (isReader) {
      const task = request.messages.find((m) => m._tag === "User")
      const path = task?._tag === "User" ? task.text.slice("Summarise ".length, -1) : "?"
      return c.step === 0
        ? ModelReply.make({ text: "", toolCalls: [{ id: "", name: "charge", argumentsText: JSON.stringify({ path }) }], usage })
        : ModelReply.make({ text: `summary of ${path}`, usage })
    }
    return c.step === 0
      ? ModelReply.make({
        text: "",
        toolCalls: [
          { id: "", name: "read", argumentsText: JSON.stringify({ path: "a.txt" }) },
          { id: "", name: "read", argumentsText: JSON.stringify({ path: "b.txt" }) }
        ],
        usage
      })
      : ModelReply.make({ text: "both files summarised", usage })
  }
  const request = (runId: string): SuiteRequest => ({ runId: Ids.runId(runId), agent: planner, task: "Summarise a.txt and b.txt.", tools: plannerTools })
  return { charges, readerTools, plannerTools, request, script }
}

type Write = "start" | "appendReply" | "appendResults" | "completeStep" | "appendResume" | "finish" | "appendApprovals"

/** A store that interrupts the fiber at its `at`-th write (counted over every run), before or after the write. */
const killing = (store: RunLogStore.RunLogStore.Service, at: number, when: "before" | "after") => {
  let n = 0
  const guard = <A, E>(_kind: Write, write: Effect.Effect<A, E>): Effect.Effect<A, E> =>
    Effect.suspend(() => {
      const mine = n++
      if (mine !== at) return write
      return when === "before" ? Effect.interrupt : Effect.zipRight(write, Effect.interrupt)
    })
  const wrapped: RunLogStore.RunLogStore.Service = {
    ...store,
    start: (record) => guard("start", store.start(record)),
    appendReply: (runId, record) => guard("appendReply", store.appendReply(runId, record)),
    appendResults: (runId, results) => guard("appendResults", store.appendResults(runId, results)),
    completeStep: (runId, results, step) => guard("completeStep", store.completeStep(runId, results, step)),
    appendResume: (runId, record) => guard("appendResume", store.appendResume(runId, record)),
    finish: (runId, record) => guard("finish", store.finish(runId, record))
  }
  return { store: wrapped, writes: () => n }
}

const childIds = (runId: string) => [SubAgent.childRunId(runId, 0, "call_s0_0"), SubAgent.childRunId(runId, 0, "call_s0_1")]

/** Registers this concern's tests. */
export const register = (ctx: SuiteContext): void => {
  const { describe, liveTest, test } = ctx
  const assert: Assert = ctx.assert

  const runWorld = (h: Harness, world: ReturnType<typeof makeWorld>, runId: string, store?: RunLogStore.RunLogStore.Service) =>
    Effect.flatMap(ScriptedModel.make(world.script), (model) =>
      h.run(world.request(runId), { model: model.layer, parser: native, ...(store === undefined ? {} : { store }) }))

  describe("sub-agents: a child is a durable run (design 0392)", () => {
    test("a sub-agent's call runs a child under <parent>/<step>/<callId>; its answer is the observation; the parent records and reports what the children cost", (h) =>
      Effect.gen(function*() {
        const world = makeWorld()
        const result = yield* runWorld(h, world, "sub-1")
        assert.deepStrictEqual(result.stopReason, { _tag: "Completed", by: "Answer", answer: "both files summarised" })
        assert.deepStrictEqual(result.usage, { inputTokens: 20, outputTokens: 10 })
        assert.deepStrictEqual(result.children, { runs: 2, steps: 4, usage: { inputTokens: 40, outputTokens: 20 } })
        assert.deepStrictEqual(world.charges.slice().sort(), ["a.txt", "b.txt"])
        const log = yield* h.log(Ids.runId("sub-1"))
        assert.deepStrictEqual(log.results.map((r) => r.executorObservation), ["summary of a.txt", "summary of b.txt"])
        const [a, b] = childIds("sub-1")
        assert.deepStrictEqual(log.results.map((r) => r.child?.runId), [a, b])
        assert.strictEqual(a, "sub-1/0/call_s0_0")
        const child = yield* h.log(a!)
        assert.strictEqual(Option.getOrThrow(child.started).task, "Summarise a.txt.")
        assert.deepStrictEqual(Option.getOrThrow(child.finished).stopReason, { _tag: "Completed", by: "Answer", answer: "summary of a.txt" })
        assert.deepStrictEqual(Option.getOrThrow(log.finished).counters.children, result.children)
        // The ATIF export points each call's result at its child's trajectory.
        const atif = yield* Trajectory.atif(log)
        const refs = atif.steps.flatMap((step) => step.observation?.results.flatMap((r) => r.subagent_trajectory_ref ?? []) ?? [])
        assert.deepStrictEqual(refs.map((r) => r.session_id), childIds("sub-1"))
        // Run again: the recorded result, nothing called, no child started again.
        const again = yield* runWorld(h, world, "sub-1")
        assert.deepStrictEqual(again, result)
        assert.strictEqual(world.charges.length, 2)
      }))

    test("killed at every write of parent and children, before and after it, then resumed: the logs equal the uninterrupted ones apart from resumes, each child's Never tool ran at most once", (h) =>
      Effect.gen(function*() {
        const reference = makeWorld()
        const counted = killing(h.store, -1, "before")
        yield* runWorld(h, reference, "sub-ref", counted.store)
        const total = counted.writes()
        assert.isAtLeast(total, 12)
        const expected = yield* logsOf(h, "sub-ref")
        let doubled = 0
        let kills = 0
        for (let at = 0; at < total; at++) {
          for (const when of ["before", "after"] as const) {
            const world = makeWorld()
            const runId = `sub-kill-${at}-${when}`
            const killer = killing(h.store, at, when)
            const exit = yield* Effect.exit(runWorld(h, world, runId, killer.store))
            if (Exit.isInterrupted(exit)) kills++
            const result = yield* runWorld(h, world, runId)
            assert.deepStrictEqual(result.stopReason, { _tag: "Completed", by: "Answer", answer: "both files summarised" }, `${at} ${when}`)
            for (const path of ["a.txt", "b.txt"]) if (world.charges.filter((p) => p === path).length > 1) doubled++
            const got = yield* logsOf(h, runId)
            assert.deepStrictEqual(renamed(got.parent, runId), renamed(expected.parent, "sub-ref"), `parent log, killed at write ${at} ${when}`)
            // A child's Never call interrupted mid-flight is recorded as not run again; the child's answer is the same.
            assert.deepStrictEqual(got.children.map((c) => Option.getOrThrow(c.finished).stopReason), expected.children.map((c) => Option.getOrThrow(c.finished).stopReason))
          }
        }
        assert.strictEqual(doubled, 0)
        assert.strictEqual(kills, total * 2)
      }))

    test("a child's steps and tokens count in the parent's budget, and the parent's budget caps its children", (h) =>
      Effect.gen(function*() {
        // The planner may spend 3 steps in all: its first step, then each child is capped at 2 steps.
        const world = makeWorld({ plannerSteps: 3 })
        const result = yield* runWorld(h, world, "sub-budget")
        assert.deepStrictEqual(result.stopReason, { _tag: "BudgetExhausted", budget: "Steps" })
        assert.strictEqual(result.steps, 1)
        assert.deepStrictEqual(result.children?.steps, 4)
        const child = yield* h.log(childIds("sub-budget")[0]!)
        const snapshot = Option.getOrThrow(child.started).snapshot as { readonly agent: { readonly budget: { readonly maxSteps: number } } }
        assert.strictEqual(snapshot.agent.budget.maxSteps, 2)
        // A child too small for its task stops without an answer: the call says so and failed.
        const small = makeWorld({ readerSteps: 1 })
        yield* runWorld(h, small, "sub-small")
        const log = yield* h.log(Ids.runId("sub-small"))
        assert.match(log.results[0]!.outcome.observation, /stopped without an answer: BudgetExhausted\(Steps\) after 1 steps/)
        assert.isTrue(log.results[0]!.handlerFailed)
      }))

    test("a child waiting for a person's decision suspends the parent durably; decided on the child's run id, the parent resumes both", (h) =>
      Effect.gen(function*() {
        const world = makeWorld({ approval: true })
        const exit = yield* Effect.exit(runWorld(h, world, "sub-approve"))
        assert.isTrue(Exit.isFailure(exit) && !Exit.isInterrupted(exit))
        const error = Exit.isFailure(exit) ? Option.getOrUndefined(Cause.failureOption(exit.cause)) : undefined
        assert.strictEqual(error?._tag, "Suspended")
        const parent = yield* h.log(Ids.runId("sub-approve"))
        assert.strictEqual(parent.results.length, 0)
        assert.deepStrictEqual(world.charges, [])
        for (const id of childIds("sub-approve")) {
          const log = yield* h.log(id)
          const call = log.approvals.find((r) => r._tag === "ApprovalRequested")
          assert.isDefined(call)
          if (call?._tag === "ApprovalRequested") {
            yield* Approval.decide({ runId: id, callId: call.callId, decision: { _tag: "Approve" }, by: "test" }).pipe(
              Effect.provideService(RunLogStore.RunLogStore, h.store)
            )
          }
        }
        const result = yield* runWorld(h, world, "sub-approve")
        assert.strictEqual(result.stopReason._tag, "Completed")
        assert.deepStrictEqual(world.charges.slice().sort(), ["a.txt", "b.txt"])
      }))

    test("replay of the parent replays each child from its own log and says identical; a fork before the call starts fresh children under the fork", (h) =>
      Effect.gen(function*() {
        const world = makeWorld()
        yield* runWorld(h, world, "sub-replay")
        const recorded = yield* h.log(Ids.runId("sub-replay"))
        const comparison = yield* Replay.run({ recorded, request: world.request("sub-replay-again") }).pipe(
          Effect.provide(Layer.mergeAll(
            DecisionParser.layer(native),
            ActionExecutor.layer(yield* Effect.orDie(world.plannerTools.executor())),
            EventSink.layerNoop,
            Layer.succeed(RunLogStore.RunLogStore, h.store)
          ))
        )
        // The parent's 8 records and each child's 7.
        assert.deepStrictEqual(comparison, { _tag: "Identical", records: 22 })
        // A child whose tool answers otherwise under replay: the replay stops at that child's
        // next request, naming the recorded child and its step. Both children diverge; the
        // second settles first, yet the replay names the first call's child, as every run would.
        const changed = makeWorld({ chargeText: "billed", secondFirst: true })
        const diverged = yield* Effect.flip(Replay.run({ recorded, request: changed.request("sub-replay-changed") }).pipe(
          Effect.provide(Layer.mergeAll(
            DecisionParser.layer(native),
            ActionExecutor.layer(yield* Effect.orDie(changed.plannerTools.executor())),
            EventSink.layerNoop,
            Layer.succeed(RunLogStore.RunLogStore, h.store)
          ))
        ))
        assert.strictEqual(diverged._tag, "ReplayDiverged")
        if (diverged._tag === "ReplayDiverged") assert.deepStrictEqual([diverged.runId, diverged.step], ["sub-replay/0/call_s0_0", 1])
        // Replayed children ran under the replay's ids, served the recorded children's replies.
        const replayedChild = yield* h.log(SubAgent.childRunId(Ids.runId("sub-replay-again"), 0, "call_s0_0"))
        assert.strictEqual(Option.getOrThrow(replayedChild.finished).stopReason._tag, "Completed")
        assert.deepStrictEqual(world.charges.slice().sort(), ["a.txt", "a.txt", "b.txt", "b.txt"])
        // A fork at step 0 (before the calls): its children are new runs under the fork's id.
        yield* Fork.fork({ from: Ids.runId("sub-replay"), atStep: 0, runId: Ids.runId("sub-fork") }).pipe(Effect.provideService(RunLogStore.RunLogStore, h.store))
        const forked = yield* runWorld(h, world, "sub-fork")
        assert.strictEqual(forked.stopReason._tag, "Completed")
        const forkLog = yield* h.log(Ids.runId("sub-fork"))
        assert.deepStrictEqual(forkLog.results.map((r) => r.child?.runId), childIds("sub-fork"))
        assert.strictEqual(world.charges.length, 6)
        // A fork after the calls keeps the parent's results: no child runs again.
        yield* Fork.fork({ from: Ids.runId("sub-replay"), atStep: 1, runId: Ids.runId("sub-fork-late") }).pipe(Effect.provideService(RunLogStore.RunLogStore, h.store))
        yield* runWorld(h, world, "sub-fork-late")
        assert.strictEqual(world.charges.length, 6)
      }))

    liveTest("interrupting the parent interrupts its running children (never caught); each child's claim is released and the next run resumes them", (h) =>
      Effect.gen(function*() {
        const world = makeWorld()
        const reached = yield* Deferred.make<void>()
        let blocked = 0
        const model = yield* ScriptedModel.make(world.script, {
          onCall: (_c, request) => {
            const system = request.messages[0]
            const isReader = system?._tag === "System" && system.text.startsWith("You read")
            // Both children park in their second model call.
            if (isReader && request.messages.some((m) => m._tag === "Assistant")) {
              blocked++
              return Effect.zipRight(blocked === 2 ? Deferred.succeed(reached, undefined) : Effect.void, Effect.never)
            }
            return Effect.void
          }
        })
        const fiber = yield* Effect.fork(h.run(world.request("sub-interrupt"), { model: model.layer, parser: native }))
        yield* Deferred.await(reached)
        yield* Fiber.interrupt(fiber)
        const exit = yield* Fiber.await(fiber)
        assert.isTrue(Exit.isInterrupted(exit))
        assert.strictEqual(yield* model.interruptions, 2)
        for (const id of childIds("sub-interrupt")) assert.isTrue(Option.isNone((yield* h.log(id)).finished))
        const result = yield* runWorld(h, world, "sub-interrupt")
        assert.strictEqual(result.stopReason._tag, "Completed")
        assert.deepStrictEqual(world.charges.slice().sort(), ["a.txt", "b.txt"])
        for (const id of childIds("sub-interrupt")) assert.strictEqual(Option.getOrThrow((yield* h.log(id)).finished).counters.resumedCount, 1)
      }))
  })

  const logsOf = (h: Harness, runId: string) =>
    Effect.gen(function*() {
      const parent = yield* h.log(Ids.runId(runId))
      const children = yield* Effect.forEach(childIds(runId), (id) => h.log(id))
      return { parent, children }
    })
}

/** The parent's comparable log with its own id (and its children's) replaced, so two runs compare. */
const renamed = (log: RunLog.RunLog, runId: string): string =>
  JSON.stringify(
    inCallOrder(comparable(log)),
    // A child killed between its reply and its "Never" call resumes with that call recorded as
    // interrupted, not run again (SPEC §9): its own effective steps may be one fewer. Everything
    // else the parent records of it is the same.
    function(this: unknown, key, value) {
      if (key === "startedAt" || key === "finishedAt" || key === "elapsed" || key === "at") return 0
      // Only the child's own count (inside `child`) may differ; the parent's must not.
      const holder = this as { readonly runId?: unknown; readonly stopReason?: unknown }
      return key === "effectiveSteps" && holder.runId !== undefined && holder.stopReason !== undefined ? "n" : value
    }
  ).split(runId).join("<run>")

/** Concurrent calls write their results as they finish: compare a step's results in call order. */
const inCallOrder = (records: ReadonlyArray<unknown>): ReadonlyArray<unknown> => {
  const out = records.slice()
  const key = (r: unknown) => {
    const a = r as { readonly _tag?: string; readonly step?: number; readonly callIndex?: number }
    return a._tag === "ActionResulted" ? [a.step ?? 0, a.callIndex ?? 0] as const : undefined
  }
  for (let i = 0; i < out.length; i++) {
    let j = i
    while (j < out.length && key(out[j]) !== undefined) j++
    if (j - i > 1) {
      const run = out.slice(i, j).sort((x, y) => key(x)![0] - key(y)![0] || key(x)![1] - key(y)![1])
      out.splice(i, j - i, ...run)
    }
    i = j
  }
  return out
}
