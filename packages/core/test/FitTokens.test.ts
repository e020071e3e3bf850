/**
 * Token budgets and the emergency step (issue 30, design 0300 decision 4): `fitTokens` drops
 * whole steps, oldest first, in blocks, each drop a `HistoryCompacted` record written before the
 * request that uses it; the system prompt, the task and the last step stay; a call is never
 * separated from its answer; a resumed or replayed run sends the uninterrupted run's requests;
 * a provider's `context_length_exceeded` is recovered once by the policy and recorded, and
 * fails typed (`ContextWindowExceeded`) when nothing can shrink.
 */
import { assert, describe, it } from "@effect/vitest"
import * as Agent from "@polyloop/core/Agent"
import * as AgentDefinition from "@polyloop/core/AgentDefinition"
import * as EventSink from "@polyloop/core/EventSink"
import * as HistoryPolicy from "@polyloop/core/HistoryPolicy"
import * as Ids from "@polyloop/core/Ids"
import type * as Message from "@polyloop/core/Message"
import type { ModelRequest } from "@polyloop/core/ModelClient"
import * as ModelReply from "@polyloop/core/ModelReply"
import * as NativeToolCallParser from "@polyloop/core/NativeToolCallParser"
import * as Replay from "@polyloop/core/Replay"
import * as RunLog from "@polyloop/core/RunLog"
import * as RunLogAudit from "@polyloop/core/RunLogAudit"
import * as RunLogStore from "@polyloop/core/RunLogStore"
import * as TokenCounter from "@polyloop/core/TokenCounter"
import * as Tool from "@polyloop/core/Tool"
import * as ToolRegistry from "@polyloop/core/ToolRegistry"
import * as Pairing from "@polyloop/testing/Pairing"
import * as ScriptedModel from "@polyloop/testing/ScriptedModel"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as fc from "effect/FastCheck"
import * as Fiber from "effect/Fiber"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Schema from "effect/Schema"

/** Each read returns `lines` lines of 40 characters (about 4 kB, ~1,000 approximate tokens). */
const lines = 100
const read = Tool.make({
  name: "read_file",
  description: "Reads a file.",
  parameters: Schema.Struct({ path: Schema.String }),
  replayPolicy: "Always",
  handler: ({ path }) => Effect.succeed(Array.from({ length: lines }, (_, i) => `${path}:${String(i).padStart(4, "0")} ${"x".repeat(29)}`).join("\n"))
})
const tools = ToolRegistry.make(read)

/** The provider's count of a request: what a real provider reports (here: the approximate count, a little more). */
const reported = (messages: ReadonlyArray<Message.Message>): number => {
  let n = 0
  for (const m of messages) {
    n += 4 + Math.ceil(m.text.length / 4)
    if (m._tag === "Assistant") for (const c of m.toolCalls) n += Math.ceil((c.name.length + c.argumentsText.length) / 4)
  }
  return Math.ceil(n * 1.1)
}

/** `steps` replies reading one or two files, then an answer; usage reports the request's size. */
const script = (steps: number) => (request: ModelRequest, call: ScriptedModel.Call): ModelReply.ModelReply =>
  request.tools.length === 0
    ? ModelReply.make({ text: `summary for step ${call.step}: ${request.messages[1]!.text.length} characters read`, usage: { inputTokens: 200, outputTokens: 10 } })
    : call.step < steps
    ? ModelReply.make({
      text: "",
      toolCalls: call.step % 3 === 0
        ? [
          { id: "", name: "read_file", argumentsText: JSON.stringify({ path: `a${call.step}` }) },
          { id: "", name: "read_file", argumentsText: JSON.stringify({ path: `b${call.step}` }) }
        ]
        : [{ id: "", name: "read_file", argumentsText: JSON.stringify({ path: `f${call.step}` }) }],
      usage: { inputTokens: reported(request.messages), outputTokens: 5 }
    })
    : ModelReply.make({ text: "done", usage: { inputTokens: reported(request.messages), outputTokens: 1 } })

const fit = HistoryPolicy.fitTokens({ window: 8_000, headroom: 1_000 })
const agentWith = (history: HistoryPolicy.HistoryPolicy | undefined, maxSteps: number) =>
  AgentDefinition.make({ name: "reader", systemPrompt: "Read files.", budget: { maxSteps }, ...(history === undefined ? {} : { history }) })

const services = (store: RunLogStore.RunLogStore.Service, sink: Layer.Layer<EventSink.EventSink> = EventSink.layerNoop) =>
  Layer.mergeAll(NativeToolCallParser.layer(), Layer.orDie(ToolRegistry.layerExecutor(tools)), sink, Layer.succeed(RunLogStore.RunLogStore, store))

const runOnce = (runId: string, steps: number, history?: HistoryPolicy.HistoryPolicy, options: ScriptedModel.Options = {}) =>
  Effect.gen(function*() {
    const store = yield* RunLogStore.makeMemory
    const model = yield* ScriptedModel.make(script(steps), options)
    const request = { runId: Ids.runId(runId), agent: agentWith(history, steps + 5), task: "Read everything.", tools }
    const result = yield* Agent.run(request).pipe(Effect.provide(Layer.merge(services(store), model.layer)))
    const requests = (yield* model.requests).map((seen) => seen.request)
    return { result, requests, log: yield* store.readLog(request.runId), request, store, model }
  })

/** Every Assistant message with calls is followed by exactly one answer per call, in order, and no answer stands alone. */
const assertPaired = (messages: ReadonlyArray<Message.Message>) => assert.deepStrictEqual(Pairing.problems(messages), [])

const approximateSize = (messages: ReadonlyArray<Message.Message>): number => {
  let n = TokenCounter.approximateCount(JSON.stringify(ToolRegistry.make(read).modelView()))
  for (const m of messages) {
    n += 4 + TokenCounter.approximateCount(m.text)
    if (m._tag === "Tool") n += TokenCounter.approximateCount(m.name)
    if (m._tag === "Assistant") for (const c of m.toolCalls) n += TokenCounter.approximateCount(c.name) + TokenCounter.approximateCount(c.argumentsText)
  }
  return n
}

/** Interrupts a run once it has completed `cut` (at the step boundary), then resumes it; the log. */
const killAndResume = (runId: string, steps: number, history: HistoryPolicy.HistoryPolicy, cut: number, options: ScriptedModel.Options = {}) =>
  Effect.gen(function*() {
    const store = yield* RunLogStore.makeMemory
    const request = { runId: Ids.runId(runId), agent: agentWith(history, steps + 5), task: "Read everything.", tools }
    const reached = yield* Deferred.make<void>()
    const sink = EventSink.layer((e) => (e._tag === "StepCompleted" && e.step === cut ? Effect.zipRight(Deferred.succeed(reached, undefined), Effect.never) : Effect.void))
    const first = yield* ScriptedModel.make(script(steps), options)
    const fiber = yield* Effect.fork(Agent.run(request).pipe(Effect.provide(Layer.merge(services(store, sink), first.layer))))
    yield* Deferred.await(reached)
    yield* Fiber.interrupt(fiber)
    const again = yield* ScriptedModel.make(script(steps))
    const result = yield* Agent.run(request).pipe(Effect.provide(Layer.merge(services(store), again.layer)))
    return { result, log: yield* store.readLog(request.runId), requests: (yield* again.requests).map((seen) => seen.request) }
  })

/** The step of a scripted call id (`call_s<step>_<i>`). */
const stepOfCall = (id: string): number => Number(/^call_s(\d+)_/.exec(id)?.[1])

const withoutSeq = (records: ReadonlyArray<RunLog.HistoryCompacted>) => records.map(({ seq: _, ...rest }) => rest)

describe("fitTokens", () => {
  it.effect("drops the oldest steps in blocks, recorded before the request; the prompt, the task and the last step stay; the log keeps everything", () =>
    Effect.gen(function*() {
      const { log, requests, result } = yield* runOnce("fit", 40, fit)
      assert.strictEqual(result.stopReason._tag, "Completed")
      assert.isAbove(log.compactions.length, 2)
      for (const r of log.results) assert.strictEqual(r.outcome.observation.split("\n").length, lines)
      assert.deepStrictEqual(RunLogAudit.logProblems(log), [])
      for (let s = 0; s < requests.length; s++) {
        const messages = requests[s]!.messages
        assertPaired(messages)
        assert.deepStrictEqual(messages.slice(0, 2), [{ _tag: "System", text: "Read files." }, { _tag: "User", text: "Read everything." }])
        assert.isAtMost(approximateSize(messages), fit.window - fit.headroom, `request ${s} fits`)
        const compaction = [...log.compactions].reverse().find((c) => c.step <= s)
        if (compaction !== undefined) {
          assert.deepStrictEqual(messages[2], { _tag: "User", text: `[steps 0–${compaction.toStep - 1} omitted: ${compaction.toStep} steps]` })
          // The first step sent is the one after the dropped span: its call ids say which.
          const first = messages[3]!
          assert.strictEqual(first._tag, "Assistant")
          if (first._tag === "Assistant") assert.strictEqual(stepOfCall(first.toolCalls[0]!.id), compaction.toStep)
        }
        if (s > 0) {
          // The last completed step is always sent.
          const last = [...messages].reverse().find((m) => m._tag === "Assistant")
          assert.isTrue(last !== undefined && last._tag === "Assistant" && stepOfCall(last.toolCalls[0]!.id) === s - 1)
        }
      }
      // Each compaction is written before the reply of its step, and only when the budget asks.
      for (const c of log.compactions) {
        const reply = log.replies[c.step]!
        assert.isBelow(c.seq, reply.seq)
        assert.strictEqual(c.reason, "Budget")
        assert.isAbove(c.requestTokens, fit.window - fit.headroom)
      }
      // Between two drops, each request extends the previous one (a stable prefix for caches).
      const dropped = new Set<number>(log.compactions.map((c) => c.step))
      for (let s = 1; s < requests.length; s++) {
        const previous = requests[s - 1]!.messages
        const extends_ = JSON.stringify(requests[s]!.messages.slice(0, previous.length)) === JSON.stringify([...previous])
        assert.strictEqual(extends_, !dropped.has(s), `request ${s}`)
      }
    }))

  it.effect("a 500-step run with 2 MB of observations, masked and fitted to a 32k window: every request fits and pairs, the run completes", () =>
    Effect.gen(function*() {
      const history = HistoryPolicy.compose(HistoryPolicy.maskObservations({ keepLast: 5, every: 5 }), HistoryPolicy.fitTokens({ window: 32_000, headroom: 4_000 }))
      const { log, requests, result } = yield* runOnce("long", 500, history)
      assert.strictEqual(result.stopReason._tag, "Completed")
      assert.isAbove(log.results.reduce((n, r) => n + r.outcome.observation.length, 0), 2_000_000)
      let largest = 0
      for (const request of requests) {
        assertPaired(request.messages)
        largest = Math.max(largest, approximateSize(request.messages))
      }
      assert.isAtMost(largest, 28_000)
      assert.isAbove(log.compactions.length, 0)
      assert.deepStrictEqual(RunLogAudit.logProblems(log), [])
    }), { timeout: 120_000 })

  it.effect("the count is corrected by the provider's reported input tokens, deterministically", () =>
    Effect.gen(function*() {
      // The same run, the provider reporting twice as many tokens: the budget is met sooner.
      const plain = yield* runOnce("calibrated-a", 30, fit)
      const doubled = yield* Effect.gen(function*() {
        const store = yield* RunLogStore.makeMemory
        const model = yield* ScriptedModel.make((request, call) =>
          Effect.map(Effect.succeed(script(30)), (f) => {
            const reply = f(request, call)
            return ModelReply.make({ text: reply.text, toolCalls: reply.toolCalls, usage: { inputTokens: reply.usage.inputTokens * 2, outputTokens: 1 } })
          }))
        const request = { runId: Ids.runId("calibrated-b"), agent: agentWith(fit, 35), task: "Read everything.", tools }
        yield* Agent.run(request).pipe(Effect.provide(Layer.merge(services(store), model.layer)))
        return yield* store.readLog(request.runId)
      })
      assert.isBelow(doubled.compactions[0]!.step, plain.log.compactions[0]!.step)
      // Given the log, the decisions are the same: a second run of each gives the same records.
      const again = yield* runOnce("calibrated-c", 30, fit)
      assert.deepStrictEqual(withoutSeq(again.log.compactions), withoutSeq(plain.log.compactions))
    }))

  it.effect("interrupted at every step boundary and resumed: every request's fingerprint and every compaction equal the uninterrupted run's", () =>
    Effect.gen(function*() {
      const steps = 30
      const history = HistoryPolicy.compose(HistoryPolicy.maskObservations({ keepLast: 2, every: 3 }), HistoryPolicy.fitTokens({ window: 4_000, headroom: 500 }))
      const reference = yield* runOnce("ref", steps, history)
      assert.isAbove(reference.log.compactions.length, 1)
      for (let cut = 0; cut < steps; cut++) {
        const { log, result } = yield* killAndResume(`cut-${cut}`, steps, history, cut)
        assert.strictEqual(result.resumedCount, 1)
        assert.deepStrictEqual(log.replies.map((r) => r.requestHash), reference.log.replies.map((r) => r.requestHash), `cut after step ${cut}`)
        assert.deepStrictEqual(withoutSeq(log.compactions), withoutSeq(reference.log.compactions))
      }
    }), { timeout: 120_000 })

  it.effect("a compacting run replays as identical; a changed budget diverges", () =>
    Effect.gen(function*() {
      const recorded = yield* runOnce("recorded", 20, fit)
      const store = yield* RunLogStore.makeMemory
      const comparison = yield* Replay.run({ recorded: recorded.log, request: { ...recorded.request, runId: Ids.runId("replayed") } }).pipe(Effect.provide(services(store)))
      assert.deepStrictEqual(comparison, { _tag: "Identical", records: RunLog.size(recorded.log) })
      const other = HistoryPolicy.fitTokens({ window: 6_000, headroom: 1_000 })
      const error = yield* Effect.flip(
        Replay.run({ recorded: recorded.log, request: { ...recorded.request, runId: Ids.runId("other"), agent: agentWith(other, 25) } }).pipe(Effect.provide(services(store)))
      )
      assert.strictEqual(error._tag, "ReplayDiverged")
    }))

  it.effect.prop(
    "random runs, policies (masking, summaries, budgets) and kill points: every request pairs each call with its answer, and a resumed run sends the uninterrupted run's requests",
    [
      fc.integer({ min: 2, max: 16 }),
      // A window holds at least the largest step (two reads, ~2,100 tokens) within its budget (design 0361).
      fc.integer({ min: 3_000, max: 9_000 }),
      fc.option(fc.record({ keepLast: fc.integer({ min: 0, max: 4 }), every: fc.integer({ min: 1, max: 4 }) }), { nil: undefined }),
      fc.double({ min: 0.3, max: 1, noNaN: true }),
      fc.integer({ min: 0, max: 15 }),
      fc.option(fc.record({ triggerTokens: fc.integer({ min: 1_500, max: 6_000 }), keepLast: fc.integer({ min: 0, max: 3 }) }), { nil: undefined })
    ],
    ([steps, window, mask, trimTo, killAt, summary]) =>
      Effect.gen(function*() {
        const budget = HistoryPolicy.fitTokens({ window, headroom: 500, trimTo })
        const parts = [
          ...(mask === undefined ? [] : [HistoryPolicy.maskObservations(mask)]),
          ...(summary === undefined ? [] : [HistoryPolicy.summarise(summary)]),
          budget
        ]
        const history = parts.length === 1 ? budget : HistoryPolicy.compose(...parts)
        const reference = yield* runOnce("ref", steps, history)
        for (const request of reference.requests) assertPaired(request.messages)
        const { log, requests } = yield* killAndResume("cut", steps, history, Math.min(killAt, steps - 1))
        for (const request of requests) assertPaired(request.messages)
        assert.deepStrictEqual(log.replies.map((r) => r.requestHash), reference.log.replies.map((r) => r.requestHash))
        assert.deepStrictEqual(RunLogAudit.logProblems(log), [])
      }),
    { fastCheck: { numRuns: 30 } }
  )

  it.effect("an encoding the TokenCounter does not have is a typed InvalidRunRequest, nothing written", () =>
    Effect.gen(function*() {
      const store = yield* RunLogStore.makeMemory
      const model = yield* ScriptedModel.make(script(1))
      const agent = agentWith(HistoryPolicy.fitTokens({ window: 8_000, tokenizer: "o200k_base" }), 5)
      const error = yield* Effect.flip(
        Agent.run({ runId: Ids.runId("enc"), agent, task: "t", tools }).pipe(Effect.provide(Layer.merge(services(store), model.layer)))
      )
      assert.strictEqual(error._tag, "InvalidRunRequest")
      if (error._tag === "InvalidRunRequest") assert.include(error.issues, "o200k_base")
      assert.isTrue(RunLog.isEmpty(yield* store.readLog(Ids.runId("enc"))))
      // A headroom not below the window is refused too.
      const bad = yield* Effect.flip(
        Agent.run({ runId: Ids.runId("enc2"), agent: agentWith(HistoryPolicy.fitTokens({ window: 100, headroom: 100 }), 5), task: "t", tools }).pipe(
          Effect.provide(Layer.merge(services(store), model.layer))
        )
      )
      assert.strictEqual(bad._tag, "InvalidRunRequest")
    }))
})

describe("what the policy can never drop (issue 44, design 0361)", () => {
  it.effect("a window smaller than the system prompt and the task is refused at start, typed, nothing written, no call", () =>
    Effect.gen(function*() {
      const store = yield* RunLogStore.makeMemory
      const model = yield* ScriptedModel.make(script(3))
      // About 850 approximate tokens of system prompt against a 400-token window.
      const agent = AgentDefinition.make({
        name: "reader",
        systemPrompt: "You read files carefully and report what they say. ".repeat(65),
        budget: { maxSteps: 8 },
        history: HistoryPolicy.fitTokens({ window: 400 })
      })
      const error = yield* Effect.flip(Agent.run({ runId: Ids.runId("small"), agent, task: "Read everything.", tools }).pipe(Effect.provide(Layer.merge(services(store), model.layer))))
      assert.strictEqual(error._tag, "InvalidRunRequest")
      if (error._tag === "InvalidRunRequest") {
        assert.include(error.issues, "window 400")
        assert.match(error.issues, /counts? \d+ tokens/)
      }
      assert.isTrue(RunLog.isEmpty(yield* store.readLog(Ids.runId("small"))))
      assert.strictEqual(yield* model.calls, 0)
    }))

  it.effect("a last step that alone does not fit: ContextWindowExceeded naming the window and the size, and no request over the budget is sent", () =>
    Effect.gen(function*() {
      // Steps 0 and 3 read two files each: the request after one cannot drop it and is over 2,000 − 250.
      const { error, log, requests } = yield* Effect.gen(function*() {
        const store = yield* RunLogStore.makeMemory
        // The provider reports what the test counts (the calibration is 1): "over the budget" means the same to both.
        const model = yield* ScriptedModel.make((request, call) =>
          ModelReply.make({ ...script(6)(request, call), usage: { inputTokens: approximateSize(request.messages), outputTokens: 1 } })
        )
        const request = { runId: Ids.runId("last"), agent: agentWith(HistoryPolicy.fitTokens({ window: 2_000, headroom: 250 }), 10), task: "Read everything.", tools }
        const error = yield* Effect.flip(Agent.run(request).pipe(Effect.provide(Layer.merge(services(store), model.layer))))
        return { error, log: yield* store.readLog(request.runId), requests: (yield* model.requests).map((seen) => seen.request) }
      })
      assert.strictEqual(error._tag, "ContextWindowExceeded")
      if (error._tag === "ContextWindowExceeded") {
        assert.strictEqual(error.window, 2_000)
        assert.strictEqual(error.step, requests.length, "the step whose request was not sent")
        assert.isAbove(error.requestTokens, 1_750)
        assert.isUndefined(error.cause)
        assert.include(error.message, "2000 tokens")
      }
      assert.isAtLeast(requests.length, 1)
      for (const r of requests) assert.isAtMost(approximateSize(r.messages), 1_750)
      assert.isTrue(Option.isNone(log.finished))
      assert.deepStrictEqual(RunLogAudit.logProblems(log), [])
    }))

  it.effect("under keepAll, ContextWindowExceeded names the model's window when the provider's refusal states it", () =>
    Effect.gen(function*() {
      const kept = yield* Effect.flip(runOnce("keep-all-known", 10, undefined, {
        failures: [{ step: 3, times: 1, retryable: false, status: 400, code: "context_length_exceeded", contextWindow: 4_097 }]
      }))
      assert.strictEqual(kept._tag, "ContextWindowExceeded")
      if (kept._tag === "ContextWindowExceeded") {
        assert.strictEqual(kept.window, 4_097)
        assert.include(kept.message, "(4097 tokens)")
      }
    }))
})

describe("context_length_exceeded", () => {
  const refusal = (step: number, times: number): ScriptedModel.Options => ({
    failures: [{ step, times, retryable: false, status: 400, code: "context_length_exceeded", message: "context window exceeded" }]
  })

  it.effect("a refused request is shrunk by the policy, recorded, and sent again once; the run completes, resumes and replays the same", () =>
    Effect.gen(function*() {
      const history = HistoryPolicy.maskObservations({ keepLast: 3, every: 2 })
      const { log, model, request, result, requests } = yield* runOnce("exceeded", 10, history, refusal(6, 1))
      assert.strictEqual(result.stopReason._tag, "Completed")
      assert.deepStrictEqual(withoutSeq(log.compactions).map(({ reason, step, toStep }) => ({ reason, step, toStep })), [{ reason: "ContextExceeded", step: 6, toStep: 5 }])
      assert.strictEqual(yield* model.calls, 12)
      // The retried request: the prompt, the task, the note, and step 5 only.
      const retried = requests[7]!.messages
      assert.deepStrictEqual(retried[2], { _tag: "User", text: "[steps 0–4 omitted: 5 steps]" })
      assert.strictEqual(retried.filter((m) => m._tag === "Assistant").length, 1)
      assertPaired(retried)
      assert.deepStrictEqual(RunLogAudit.logProblems(log), [])
      // Replay meets the same refusal and takes the same step.
      const store = yield* RunLogStore.makeMemory
      const comparison = yield* Replay.run({ recorded: log, request: { ...request, runId: Ids.runId("exceeded-replay") } }).pipe(Effect.provide(services(store)))
      assert.deepStrictEqual(comparison, { _tag: "Identical", records: RunLog.size(log) })
      // Killed right after the compaction, while the shrunk request is in flight: the resume
      // sends the shrunk request again (the provider would accept it now), not the refused one.
      const cutStore = yield* RunLogStore.makeMemory
      const reached = yield* Deferred.make<void>()
      const first = yield* ScriptedModel.make(script(10), {
        ...refusal(6, 1),
        onCall: (call) => (call.step === 6 && call.attempt === 1 ? Effect.zipRight(Deferred.succeed(reached, undefined), Effect.never) : Effect.void)
      })
      const cutRequest = { ...request, runId: Ids.runId("exceeded-cut") }
      const fiber = yield* Effect.fork(Agent.run(cutRequest).pipe(Effect.provide(Layer.merge(services(cutStore), first.layer))))
      yield* Deferred.await(reached)
      yield* Fiber.interrupt(fiber)
      assert.strictEqual((yield* cutStore.readLog(cutRequest.runId)).compactions.length, 1)
      const again = yield* ScriptedModel.make(script(10))
      yield* Agent.run(cutRequest).pipe(Effect.provide(Layer.merge(services(cutStore), again.layer)))
      const cut = yield* cutStore.readLog(cutRequest.runId)
      assert.deepStrictEqual(cut.replies.map((r) => r.requestHash), log.replies.map((r) => r.requestHash))
      assert.deepStrictEqual(withoutSeq(cut.compactions), withoutSeq(log.compactions))
    }))

  it.effect("streamed: a refused stream takes the same emergency step and the run completes", () =>
    Effect.gen(function*() {
      const history = HistoryPolicy.maskObservations({ keepLast: 3, every: 2 })
      const store = yield* RunLogStore.makeMemory
      const model = yield* ScriptedModel.make(script(8), { ...refusal(5, 1), streaming: true })
      const request = { runId: Ids.runId("streamed"), agent: agentWith(history, 12), task: "Read everything.", tools, streaming: true }
      const result = yield* Agent.run(request).pipe(Effect.provide(Layer.merge(services(store), model.layer)))
      assert.strictEqual(result.stopReason._tag, "Completed")
      const log = yield* store.readLog(request.runId)
      assert.deepStrictEqual(log.compactions.map((c) => [c.reason, c.step, c.toStep]), [["ContextExceeded", 5, 4]])
    }))

  it.effect("refused again after the emergency step, or under keepAll: ContextWindowExceeded naming the window and the size; the log stays resumable", () =>
    Effect.gen(function*() {
      const twice = yield* Effect.gen(function*() {
        const store = yield* RunLogStore.makeMemory
        const model = yield* ScriptedModel.make(script(10), refusal(4, 2))
        const request = { runId: Ids.runId("twice"), agent: agentWith(fit, 15), task: "Read everything.", tools }
        const error = yield* Effect.flip(Agent.run(request).pipe(Effect.provide(Layer.merge(services(store), model.layer))))
        return { error, log: yield* store.readLog(request.runId), store, request }
      })
      assert.strictEqual(twice.error._tag, "ContextWindowExceeded")
      if (twice.error._tag === "ContextWindowExceeded") {
        assert.strictEqual(twice.error.window, 8_000)
        assert.strictEqual(twice.error.step, 4)
        assert.isAbove(twice.error.requestTokens, 0)
        assert.strictEqual(twice.error.cause?.code, "context_length_exceeded")
      }
      assert.strictEqual(twice.log.compactions.length, 1)
      assert.isTrue(Option.isNone(twice.log.finished))
      // Resumable: the same run goes on when the provider accepts.
      const later = yield* ScriptedModel.make(script(10))
      const resumed = yield* Agent.run(twice.request).pipe(Effect.provide(Layer.merge(services(twice.store), later.layer)))
      assert.strictEqual(resumed.stopReason._tag, "Completed")

      const kept = yield* Effect.flip(runOnce("keep-all", 10, undefined, refusal(3, 1)))
      assert.strictEqual(kept._tag, "ContextWindowExceeded")
      if (kept._tag === "ContextWindowExceeded") {
        assert.isUndefined(kept.window)
        assert.isAbove(kept.requestTokens, 3 * lines * 10)
        assert.include(kept.message, "cannot shrink")
      }
    }))
})

describe("summarise", () => {
  const history = HistoryPolicy.summarise({ triggerTokens: 5_000, keepLast: 2 })
  /** A summariser whose summary names the step and how much it read. */
  const summariser = () =>
    ScriptedModel.make((request, call) =>
      ModelReply.make({ text: `SUMMARY@${call.step}: read ${request.messages[1]!.text.length} characters`, usage: { inputTokens: 1_000, outputTokens: 20 } }))

  const runSummarising = (runId: string, steps: number, store: RunLogStore.RunLogStore.Service, options: {
    readonly sink?: Layer.Layer<EventSink.EventSink>
    readonly summariser: ScriptedModel.ScriptedModel
    readonly model?: ScriptedModel.ScriptedModel
  }) =>
    Effect.gen(function*() {
      const model = options.model ?? (yield* ScriptedModel.make(script(steps)))
      const request = { runId: Ids.runId(runId), agent: agentWith(history, steps + 5), task: "Read everything.", tools }
      const result = yield* Agent.run(request).pipe(
        Effect.provide(Layer.mergeAll(services(store, options.sink), model.layer, Layer.succeed(HistoryPolicy.Summariser, options.summariser.client)))
      )
      return { result, model, request, log: yield* store.readLog(request.runId) }
    })

  it.effect("a summary replaces the oldest steps, recorded before the request with its fingerprint and usage; the usage counts in the run's tokens", () =>
    Effect.gen(function*() {
      const store = yield* RunLogStore.makeMemory
      const writer = yield* summariser()
      const { log, model, result } = yield* runSummarising("sum", 20, store, { summariser: writer })
      assert.strictEqual(result.stopReason._tag, "Completed")
      const summaries = log.compactions.filter((c) => c.summary !== undefined)
      assert.isAbove(summaries.length, 1)
      assert.strictEqual(yield* writer.calls, summaries.length)
      assert.deepStrictEqual(RunLogAudit.logProblems(log), [])
      const requests = (yield* model.requests).map((seen) => seen.request)
      for (const c of summaries) {
        assert.strictEqual(c.reason, "Threshold")
        assert.isBelow(c.seq, log.replies[c.step]!.seq)
        assert.strictEqual(c.toStep, c.step - 2)
        // The request of its step carries the summary in place of the steps before toStep.
        const sent = requests[c.step]!.messages
        assert.deepStrictEqual(sent[2], { _tag: "User", text: `[summary of steps 0–${c.toStep - 1}]\n${c.summary}` })
        assert.strictEqual(stepOfCall((sent[3] as Extract<Message.Message, { readonly _tag: "Assistant" }>).toolCalls[0]!.id), c.toStep)
        assertPaired(sent)
      }
      // The summariser read the task, the previous summary and the steps it replaces, as text; no tools.
      const asked = (yield* writer.requests).map((seen) => seen.request)
      assert.deepStrictEqual(asked[0]!.tools, [])
      assert.strictEqual(asked[0]!.messages[0]!._tag, "System")
      assert.include(asked[0]!.messages[1]!.text, "Task: Read everything.")
      assert.include(asked[1]!.messages[1]!.text, summaries[0]!.summary!)
      // Each summary's usage counts: the run's tokens are its steps' and its summaries'.
      const stepTokens = log.steps.reduce((n, s) => n + s.usage.inputTokens + s.usage.outputTokens, 0)
      assert.strictEqual(result.usage.inputTokens + result.usage.outputTokens, stepTokens + summaries.length * 1_020)
      assert.strictEqual(Option.getOrThrow(RunLogStore.summarize(log)).tokens, stepTokens + summaries.length * 1_020)
    }))

  it.effect("killed at every step boundary and inside a summary: the requests equal the uninterrupted run's; a recorded summary is never asked for again", () =>
    Effect.gen(function*() {
      const steps = 16
      const refStore = yield* RunLogStore.makeMemory
      const reference = yield* runSummarising("ref", steps, refStore, { summariser: yield* summariser() })
      const summaries = reference.log.compactions.filter((c) => c.summary !== undefined)
      for (let cut = 0; cut < steps; cut++) {
        const store = yield* RunLogStore.makeMemory
        const writer = yield* summariser()
        const reached = yield* Deferred.make<void>()
        const sink = EventSink.layer((e) => (e._tag === "StepCompleted" && e.step === cut ? Effect.zipRight(Deferred.succeed(reached, undefined), Effect.never) : Effect.void))
        const fiber = yield* Effect.fork(runSummarising("cut", steps, store, { sink, summariser: writer }))
        yield* Deferred.await(reached)
        yield* Fiber.interrupt(fiber)
        const { log } = yield* runSummarising("cut", steps, store, { summariser: writer })
        assert.deepStrictEqual(log.replies.map((r) => r.requestHash), reference.log.replies.map((r) => r.requestHash), `cut after step ${cut}`)
        assert.deepStrictEqual(withoutSeq(log.compactions), withoutSeq(reference.log.compactions))
        assert.strictEqual(yield* writer.calls, summaries.length, `the summariser is called once per summary (cut ${cut})`)
      }
      // Killed while the summariser writes: nothing was recorded, so the resume asks again — once.
      const store = yield* RunLogStore.makeMemory
      const inside = yield* Deferred.make<void>()
      const blocked = yield* ScriptedModel.make(() => "never", { onCall: () => Effect.zipRight(Deferred.succeed(inside, undefined), Effect.never) })
      const fiber = yield* Effect.fork(runSummarising("inside", steps, store, { summariser: blocked }))
      yield* Deferred.await(inside)
      yield* Fiber.interrupt(fiber)
      assert.strictEqual((yield* store.readLog(Ids.runId("inside"))).compactions.length, 0)
      const writer = yield* summariser()
      const { log } = yield* runSummarising("inside", steps, store, { summariser: writer })
      assert.deepStrictEqual(log.replies.map((r) => r.requestHash), reference.log.replies.map((r) => r.requestHash))
      assert.strictEqual(yield* writer.calls, summaries.length)
    }), { timeout: 120_000 })

  it.effect("a summarising run replays as identical without calling any summariser; the run's own model summarises when no Summariser is given", () =>
    Effect.gen(function*() {
      const store = yield* RunLogStore.makeMemory
      const recorded = yield* runSummarising("sum-rec", 14, store, { summariser: yield* summariser() })
      assert.isAbove(recorded.log.compactions.length, 0)
      const replayStore = yield* RunLogStore.makeMemory
      const comparison = yield* Replay.run({ recorded: recorded.log, request: { ...recorded.request, runId: Ids.runId("sum-replayed") } }).pipe(
        Effect.provide(Layer.merge(services(replayStore), Layer.succeed(HistoryPolicy.Summariser, ScriptedModel.make([]).pipe(Effect.runSync).client)))
      )
      assert.deepStrictEqual(comparison, { _tag: "Identical", records: RunLog.size(recorded.log) })

      // No Summariser: the run's model is asked (its request has no tools and the summary prompt).
      const own = yield* ScriptedModel.make((request, call) =>
        request.tools.length === 0
          ? ModelReply.make({ text: `own summary at ${call.step}` })
          : (script(14) as (r: typeof request, c: typeof call) => ModelReply.ModelReply)(request, call))
      const ownStore = yield* RunLogStore.makeMemory
      const request = { runId: Ids.runId("own"), agent: agentWith(history, 19), task: "Read everything.", tools }
      yield* Agent.run(request).pipe(Effect.provide(Layer.merge(services(ownStore), own.layer)))
      const log = yield* ownStore.readLog(request.runId)
      assert.isTrue(log.compactions.some((c) => c.summary?.startsWith("own summary at") === true))
    }))
})

describe("forks of a compacting run", () => {
  it.effect("a fork under the same policy continues with the parent's requests; a fork under another budget replays as itself", () =>
    Effect.gen(function*() {
      const parent = yield* runOnce("parent", 24, fit)
      const at = parent.log.compactions[1]!.step + 2
      const forkId = Ids.runId("child")
      yield* Agent.fork({ from: parent.request.runId, atStep: at, runId: forkId }).pipe(Effect.provideService(RunLogStore.RunLogStore, parent.store))
      const model = yield* ScriptedModel.make(script(24))
      yield* Agent.run({ ...parent.request, runId: forkId }).pipe(Effect.provide(Layer.merge(services(parent.store), model.layer)))
      const child = yield* parent.store.readLog(forkId)
      assert.deepStrictEqual(child.replies.map((r) => r.requestHash), parent.log.replies.map((r) => r.requestHash))
      assert.deepStrictEqual(withoutSeq(child.compactions), withoutSeq(parent.log.compactions))

      // An ablation: the same copied steps under a smaller budget; the fork's own log replays as identical.
      const smaller = agentWith(HistoryPolicy.fitTokens({ window: 6_000, headroom: 1_000 }), 29)
      const ablationId = Ids.runId("ablation")
      const forked = yield* Agent.fork({ from: parent.request.runId, atStep: at, runId: ablationId, agent: smaller }).pipe(Effect.provideService(RunLogStore.RunLogStore, parent.store))
      assert.isTrue(forked.forkedFrom.differences.some((d) => d.path.startsWith("agent.history")))
      const again = yield* ScriptedModel.make(script(24))
      yield* Agent.run({ ...parent.request, runId: ablationId, agent: smaller }).pipe(Effect.provide(Layer.merge(services(parent.store), again.layer)))
      const ablation = yield* parent.store.readLog(ablationId)
      const replayStore = yield* RunLogStore.makeMemory
      const comparison = yield* Replay.run({ recorded: ablation, request: { ...parent.request, runId: Ids.runId("ablation-replayed"), agent: smaller } }).pipe(Effect.provide(services(replayStore)))
      assert.deepStrictEqual(comparison, { _tag: "Identical", records: RunLog.size(ablation) })
    }))
})
