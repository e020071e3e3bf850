/**
 * "Two runs of one configuration look the same; replay reproduces a recorded run or names the
 * first divergence" (issue 29): concurrent calls finishing in any order give byte-identical
 * exports and replay as identical; an in-flight "Never" call of a concurrent step settles as
 * interrupted on resume, never "not started"; a run that had an approval replays (the recorded
 * decision is served; a decision the record does not have is a divergence); an ablation fork,
 * continued, replays under its own configuration; one-character changes still diverge at the
 * right step and path, and a divergence always names a path.
 *
 * Every test runs under `TestClock` (time stands still), so the timestamps and elapsed times
 * of two runs are equal too and "byte-identical" means every byte.
 */
import { assert, describe, it } from "@effect/vitest"
import * as Agent from "@polyloop/core/Agent"
import * as AgentDefinition from "@polyloop/core/AgentDefinition"
import * as Approval from "@polyloop/core/Approval"
import { ToolEnvironmentError } from "@polyloop/core/Errors"
import * as EventSink from "@polyloop/core/EventSink"
import * as Ids from "@polyloop/core/Ids"
import type { LoopEvent } from "@polyloop/core/LoopEvent"
import * as LogFile from "@polyloop/core/LogFile"
import * as ModelReply from "@polyloop/core/ModelReply"
import * as NativeToolCallParser from "@polyloop/core/NativeToolCallParser"
import * as Replay from "@polyloop/core/Replay"
import * as RunLog from "@polyloop/core/RunLog"
import * as RunLogStore from "@polyloop/core/RunLogStore"
import * as SyntheticObservations from "@polyloop/core/SyntheticObservations"
import * as Tool from "@polyloop/core/Tool"
import * as ToolRegistry from "@polyloop/core/ToolRegistry"
import * as Trajectory from "@polyloop/core/Trajectory"
import * as ScriptedModel from "@polyloop/testing/ScriptedModel"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as Layer from "effect/Layer"
import * as Schema from "effect/Schema"

const X = Schema.Struct({ x: Schema.String })
const usage = { inputTokens: 10, outputTokens: 2 }

const calls = (...list: ReadonlyArray<readonly [string, string]>): ModelReply.ModelReply =>
  ModelReply.make({ text: "", toolCalls: list.map(([name, x]) => ({ id: "", name, argumentsText: JSON.stringify({ x }) })), usage })

const services = (
  tools: ToolRegistry.ToolRegistry<unknown>,
  store: RunLogStore.RunLogStore.Service,
  sink: Layer.Layer<EventSink.EventSink> = EventSink.layerNoop
) =>
  Layer.mergeAll(
    NativeToolCallParser.layer(),
    Layer.orDie(ToolRegistry.layerExecutor(tools as ToolRegistry.ToolRegistry<never>)),
    sink,
    Layer.succeed(RunLogStore.RunLogStore, store)
  )

/** Every export a user compares, in one text. */
const exports = (log: RunLog.RunLog) =>
  Effect.gen(function*() {
    return [
      LogFile.toJsonl(log),
      LogFile.toJson(log),
      yield* Trajectory.render(log, "openai-chat"),
      yield* Trajectory.render(log, "atif")
    ].join("\n----\n")
  })

describe("concurrent calls: the same log whatever order they finish in", () => {
  /**
   * Four calls at once; each waits for its `before` call to finish first, so the completion
   * order is the given one (`[3, 2, 1, 0]`: reverse call order).
   */
  const concurrentRun = (order: ReadonlyArray<number>) =>
    Effect.gen(function*() {
      const done = yield* Effect.forEach([0, 1, 2, 3], () => Deferred.make<void>())
      const finished: Array<number> = []
      const fetch = Tool.make({
        name: "fetch",
        description: "Fetches x.",
        parameters: X,
        replayPolicy: "Always",
        handler: ({ x }) =>
          Effect.gen(function*() {
            const i = Number(x)
            const position = order.indexOf(i)
            if (position > 0) yield* Deferred.await(done[order[position - 1]!]!)
            finished.push(i)
            yield* Deferred.succeed(done[i]!, undefined)
            return `fetched ${x}`
          })
      })
      const tools = ToolRegistry.make(fetch)
      const store = yield* RunLogStore.makeMemory
      const events: Array<LoopEvent> = []
      const model = yield* ScriptedModel.make([
        calls(["fetch", "0"], ["fetch", "1"], ["fetch", "2"], ["fetch", "3"]),
        ModelReply.make({ text: "all fetched", usage })
      ])
      const agent = AgentDefinition.make({ name: "fetcher", systemPrompt: "Fetch.", budget: { maxSteps: 4 }, actionConcurrency: 4 })
      const request = { runId: Ids.runId("concurrent"), agent, task: "Fetch 0 to 3.", tools }
      const result = yield* Agent.run(request).pipe(
        Effect.provide(Layer.merge(services(tools, store, EventSink.layer((e) => Effect.sync(() => void events.push(e)))), model.layer))
      )
      assert.strictEqual(result.stopReason._tag, "Completed")
      assert.deepStrictEqual(finished, order, "the calls finished in the order asked for")
      // Each result was durable as its call finished: the events say so, in completion order.
      const executed = events.flatMap((e) => (e._tag === "ActionExecuted" ? [e.callIndex] : []))
      assert.deepStrictEqual(executed, order)
      return { log: yield* store.readLog(request.runId), request, tools }
    })

  it.effect("reverse and forward completion give byte-identical exports (jsonl, json, openai-chat, ATIF), in call order", () =>
    Effect.gen(function*() {
      const reverse = yield* concurrentRun([3, 2, 1, 0])
      const forward = yield* concurrentRun([0, 1, 2, 3])
      const shuffled = yield* concurrentRun([2, 0, 3, 1])
      const a = yield* exports(reverse.log)
      assert.strictEqual(yield* exports(forward.log), a)
      assert.strictEqual(yield* exports(shuffled.log), a)
      // As read, a step's results are in call order, with their sequence numbers in call order.
      assert.deepStrictEqual(reverse.log.results.map((r) => r.callIndex), [0, 1, 2, 3])
      const seqs = reverse.log.results.map((r) => r.seq)
      assert.deepStrictEqual(seqs, [...seqs].sort((x, y) => x - y))
      assert.deepStrictEqual(RunLog.records(reverse.log).map((r) => r.seq), RunLog.records(reverse.log).map((_, i) => i))
      // An import of the export reads back as the same log, and exports the same bytes.
      const copy = yield* RunLogStore.makeMemory
      yield* LogFile.importText(LogFile.toJsonl(reverse.log)).pipe(Effect.provideService(RunLogStore.RunLogStore, copy))
      assert.strictEqual(yield* exports(yield* copy.readLog(reverse.request.runId)), a)
    }))

  it.effect("a run whose calls finished in reverse order replays as identical", () =>
    Effect.gen(function*() {
      const recorded = yield* concurrentRun([3, 2, 1, 0])
      // The replay's calls finish in call order: a comparison in write order would see a difference.
      const fetch = Tool.make({ name: "fetch", description: "Fetches x.", parameters: X, replayPolicy: "Always", handler: ({ x }) => Effect.succeed(`fetched ${x}`) })
      const tools = ToolRegistry.make(fetch)
      const store = yield* RunLogStore.makeMemory
      const comparison = yield* Replay.run({ recorded: recorded.log, request: { ...recorded.request, runId: Ids.runId("replayed"), tools } }).pipe(
        Effect.provide(services(tools, store))
      )
      assert.deepStrictEqual(comparison, { _tag: "Identical", records: RunLog.size(recorded.log) })
    }))
})

describe("a concurrent step resumed after an EnvError", () => {
  it.effect("the earlier in-flight \"Never\" call is settled as interrupted, never \"not started\"", () =>
    Effect.gen(function*() {
      const notes: Array<string> = []
      let hold = true
      const inFlight = yield* Deferred.make<void>()
      const tools = ToolRegistry.make(
        Tool.make({
          name: "note",
          description: "Notes x down (must not run twice).",
          parameters: X,
          replayPolicy: "Never",
          handler: ({ x }) =>
            Effect.gen(function*() {
              notes.push(x)
              yield* Deferred.succeed(inFlight, undefined)
              if (hold) yield* Effect.never
              return `noted ${x}`
            })
        }),
        Tool.make({
          name: "boom",
          description: "Its backend is down.",
          parameters: X,
          handler: ({ x }) => Effect.zipRight(Deferred.await(inFlight), Effect.fail(new ToolEnvironmentError({ message: `backend down (${x})` })))
        })
      )
      const store = yield* RunLogStore.makeMemory
      const agent = AgentDefinition.make({ name: "noter", systemPrompt: "Note.", budget: { maxSteps: 3 }, actionConcurrency: 2 })
      const request = { runId: Ids.runId("in-flight"), agent, task: "Note a, then b.", tools }
      const script = [calls(["note", "a"], ["boom", "b"]), ModelReply.make({ text: "done", usage })]
      // The later call's EnvError is durable while the earlier "Never" call is still running.
      const logged = yield* Deferred.make<void>()
      const sink = EventSink.layer((e) => e._tag === "ActionExecuted" && e.callIndex === 1 ? Deferred.succeed(logged, undefined) : Effect.void)
      const first = yield* ScriptedModel.make(script)
      const fiber = yield* Effect.fork(Agent.run(request).pipe(Effect.provide(Layer.merge(services(tools, store, sink), first.layer))))
      yield* Deferred.await(logged)
      yield* Fiber.interrupt(fiber)
      const cut = yield* store.readLog(request.runId)
      assert.deepStrictEqual(cut.results.map((r) => [r.callIndex, r.outcome.status]), [[1, "EnvError"]])

      hold = false
      const again = yield* ScriptedModel.make(script)
      const result = yield* Agent.run(request).pipe(Effect.provide(Layer.merge(services(tools, store), again.layer)))
      assert.deepStrictEqual(result.stopReason, { _tag: "EnvError", message: "backend down (b)" })
      assert.deepStrictEqual(notes, ["a"], "the Never call did not run again")
      const log = yield* store.readLog(request.runId)
      const settled = log.results[0]!
      assert.strictEqual(settled.outcome.status, "NotExecuted")
      assert.strictEqual(
        settled.outcome.observation,
        SyntheticObservations.fill(SyntheticObservations.defaults.interrupted, {
          tool: "note",
          issues: "the run stopped while the action was in flight",
          tools: "note, boom"
        })
      )
      assert.notInclude(settled.outcome.observation, "not started")
    }))
})

describe("replay of a run that had an approval", () => {
  const refund = (suffix = "") =>
    Tool.make({
      name: "refund",
      description: "Refunds an order.",
      parameters: X,
      replayPolicy: "Never",
      approval: "Required",
      handler: ({ x }) => Effect.succeed(`refunded ${x}${suffix}`)
    })
  const agent = AgentDefinition.make({ name: "clerk", systemPrompt: "Refund what is asked.", budget: { maxSteps: 4 } })
  const script = [calls(["refund", "42"]), ModelReply.make({ text: "Refunded.", usage })]

  const recordWithApproval = Effect.gen(function*() {
    const tools = ToolRegistry.make(refund())
    const store = yield* RunLogStore.makeMemory
    const request = { runId: Ids.runId("approved"), agent, task: "Refund order 42.", tools }
    const run = Effect.flatMap(ScriptedModel.make(script), (model) =>
      Agent.run(request).pipe(Effect.provide(Layer.merge(services(tools, store), model.layer))))
    const suspended = yield* Effect.flip(run)
    assert.strictEqual(suspended._tag, "Suspended")
    yield* Approval.decide({ runId: "approved", callId: "call_s0_0", decision: Approval.approve, by: "ana" }).pipe(
      Effect.provideService(RunLogStore.RunLogStore, store)
    )
    const result = yield* run
    assert.deepStrictEqual(result.stopReason, { _tag: "Completed", by: "Answer", answer: "Refunded." })
    return { log: yield* store.readLog(request.runId), request }
  })

  it.effect("replays as identical: the recorded decision is served", () =>
    Effect.gen(function*() {
      const recorded = yield* recordWithApproval
      const tools = ToolRegistry.make(refund())
      const store = yield* RunLogStore.makeMemory
      const comparison = yield* Replay.run({ recorded: recorded.log, request: { ...recorded.request, runId: Ids.runId("replayed"), tools } }).pipe(
        Effect.provide(services(tools, store))
      )
      // Compared record by record, RunResumed records (one per decision) aside.
      assert.deepStrictEqual(comparison, { _tag: "Identical", records: RunLog.size(recorded.log) - recorded.log.resumes.length })
      const replayed = yield* store.readLog(Ids.runId("replayed"))
      const decided = replayed.approvals.filter((r) => r._tag === "ApprovalDecided")
      assert.deepStrictEqual(decided.map((r) => [r.callId, r.decision, r.by]), [["call_s0_0", Approval.approve, "ana"]])
    }))

  it.effect("a one-character change of an observation diverges at the next step, at that message", () =>
    Effect.gen(function*() {
      const recorded = yield* recordWithApproval
      const tools = ToolRegistry.make(refund("!"))
      const store = yield* RunLogStore.makeMemory
      const error = yield* Effect.flip(
        Replay.run({ recorded: recorded.log, request: { ...recorded.request, runId: Ids.runId("changed"), tools } }).pipe(Effect.provide(services(tools, store)))
      )
      assert.strictEqual(error._tag, "ReplayDiverged")
      if (error._tag !== "ReplayDiverged") return
      assert.strictEqual(error.step, 1)
      assert.strictEqual(error.path, "messages[3].text")
      assert.strictEqual(error.recorded, "refunded 42")
      assert.strictEqual(error.current, "refunded 42!")
    }))

  it.effect("a decision the record does not have is a divergence naming the call", () =>
    Effect.gen(function*() {
      // Recorded without any approval rule: the replay's tool asks for a decision.
      const plain = Tool.make({ name: "refund", description: "Refunds an order.", parameters: X, replayPolicy: "Never", handler: ({ x }) => Effect.succeed(`refunded ${x}`) })
      const plainTools = ToolRegistry.make(plain)
      const recordedStore = yield* RunLogStore.makeMemory
      const model = yield* ScriptedModel.make(script)
      const request = { runId: Ids.runId("unapproved"), agent, task: "Refund order 42.", tools: plainTools }
      yield* Agent.run(request).pipe(Effect.provide(Layer.merge(services(plainTools, recordedStore), model.layer)))
      const recorded = yield* recordedStore.readLog(request.runId)

      const tools = ToolRegistry.make(refund())
      const store = yield* RunLogStore.makeMemory
      const error = yield* Effect.flip(
        Replay.run({ recorded, request: { ...request, runId: Ids.runId("asks"), tools } }).pipe(Effect.provide(services(tools, store)))
      )
      assert.strictEqual(error._tag, "ReplayDiverged")
      if (error._tag !== "ReplayDiverged") return
      assert.strictEqual(error.step, 0)
      assert.strictEqual(error.path, "approvals[call_s0_0]")
      assert.match(error.message, /asks for a decision \(approvals\[call_s0_0\]\) that the recorded run does not have/)
    }))
})

describe("replay of an ablation fork", () => {
  const echo = Tool.make({ name: "echo", description: "Echoes x.", parameters: X, replayPolicy: "Always", handler: ({ x }) => Effect.succeed(`echo ${x}`) })
  const tools = ToolRegistry.make(echo)
  const script = [calls(["echo", "a"]), calls(["echo", "b"]), calls(["echo", "c"]), ModelReply.make({ text: "done", usage })]
  const agentWith = (systemPrompt: string) => AgentDefinition.make({ name: "echoer", systemPrompt, budget: { maxSteps: 6 } })

  const forkedAndContinued = Effect.gen(function*() {
    const store = yield* RunLogStore.makeMemory
    const parent = { runId: Ids.runId("parent"), agent: agentWith("Echo what is asked."), task: "Echo a, b, c.", tools }
    yield* Effect.flatMap(ScriptedModel.make(script), (model) => Agent.run(parent).pipe(Effect.provide(Layer.merge(services(tools, store), model.layer))))
    // The ablation: another system prompt from step 2 on.
    const ablated = agentWith("Echo exactly what is asked.")
    const forked = yield* Agent.fork({ from: parent.runId, atStep: 2, runId: Ids.runId("fork"), agent: ablated }).pipe(
      Effect.provideService(RunLogStore.RunLogStore, store)
    )
    assert.isAbove(forked.forkedFrom.differences.length, 0)
    const request = { runId: Ids.runId("fork"), agent: ablated, task: parent.task, tools }
    const result = yield* Effect.flatMap(ScriptedModel.make(script), (model) =>
      Agent.run(request).pipe(Effect.provide(Layer.merge(services(tools, store), model.layer))))
    assert.strictEqual(result.stopReason._tag, "Completed")
    return { log: yield* store.readLog(request.runId), request }
  })

  it.effect("the continued fork replays as identical under its own configuration", () =>
    Effect.gen(function*() {
      const fork = yield* forkedAndContinued
      const store = yield* RunLogStore.makeMemory
      const comparison = yield* Replay.run({ recorded: fork.log, request: { ...fork.request, runId: Ids.runId("fork-replayed") } }).pipe(
        Effect.provide(services(tools, store))
      )
      assert.deepStrictEqual(comparison, { _tag: "Identical", records: RunLog.size(fork.log) })
    }))

  it.effect("a one-character change of the fork's prompt diverges at step 0, at the system prompt", () =>
    Effect.gen(function*() {
      const fork = yield* forkedAndContinued
      const store = yield* RunLogStore.makeMemory
      const error = yield* Effect.flip(
        Replay.run({ recorded: fork.log, request: { ...fork.request, runId: Ids.runId("fork-changed"), agent: agentWith("Echo exactly what is asked!") } }).pipe(
          Effect.provide(services(tools, store))
        )
      )
      assert.strictEqual(error._tag, "ReplayDiverged")
      if (error._tag !== "ReplayDiverged") return
      assert.strictEqual(error.step, 0)
      assert.strictEqual(error.path, "messages[0].text")
      assert.strictEqual(error.recorded, "Echo exactly what is asked.")
    }))

  it.effect("a fork's log whose copied hash is not its own request names the hash, never an empty path", () =>
    Effect.gen(function*() {
      const fork = yield* forkedAndContinued
      // The parent's hash put back on the fork's first copied reply (what forks wrote before issue 29).
      const tampered = { ...fork.log, replies: fork.log.replies.map((r, i) => (i === 0 ? { ...r, requestHash: "0".repeat(64) } : r)) }
      const store = yield* RunLogStore.makeMemory
      const error = yield* Effect.flip(
        Replay.run({ recorded: tampered, request: { ...fork.request, runId: Ids.runId("fork-tampered") } }).pipe(Effect.provide(services(tools, store)))
      )
      assert.strictEqual(error._tag, "ReplayDiverged")
      if (error._tag !== "ReplayDiverged") return
      assert.strictEqual(error.step, 0)
      assert.strictEqual(error.path, "requestHash")
      assert.strictEqual(error.recorded, "0".repeat(64))
      assert.notInclude(error.message, "(absent)")
    }))
})
