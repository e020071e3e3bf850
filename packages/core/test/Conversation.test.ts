/**
 * Conversations (issue 31, design 0300 decisions 6–9): `Agent.send` appends a person's message
 * (idempotent by its id) and runs its turn; budgets count per turn; the history holds every
 * message in order and every call paired with its answer; an interrupted turn is finished by the
 * next send (a retried send included) with the requests of the run never interrupted; a message
 * while the conversation waits for a decision is held and answered after it; drift between turns
 * is recorded, within a turn refused; history policies never mask or drop a person's message;
 * `Agent.run` keeps its single-task meaning.
 */
import { assert, describe, it } from "@effect/vitest"
import * as Agent from "@polyloop/core/Agent"
import * as AgentDefinition from "@polyloop/core/AgentDefinition"
import * as Approval from "@polyloop/core/Approval"
import type { RunError } from "@polyloop/core/Errors"
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
import * as Schedule from "effect/Schedule"
import * as Schema from "effect/Schema"
import * as TestClock from "effect/TestClock"
import * as Snapshot from "@polyloop/core/Snapshot"
import * as Stats from "@polyloop/core/Stats"
import * as StopReason from "@polyloop/core/StopReason"

const lookup = Tool.make({
  name: "lookup",
  description: "Looks an order up.",
  parameters: Schema.Struct({ order: Schema.String }),
  replayPolicy: "Always",
  handler: ({ order }) => Effect.succeed(`order ${order}: shipped, ${"tracking details ".repeat(30)}`)
})
const refund = Tool.make({
  name: "refund",
  description: "Refunds an order (a clerk approves each call).",
  parameters: Schema.Struct({ order: Schema.String }),
  approval: "Required",
  handler: ({ order }) => Effect.succeed(`refunded ${order}`)
})
const tools = ToolRegistry.make(lookup, refund)

const agentWith = (
  options: {
    readonly maxSteps?: number
    readonly prompt?: string
    readonly history?: HistoryPolicy.HistoryPolicy
    readonly conversationBudget?: AgentDefinition.AgentDefinition["conversationBudget"]
  } = {}
) =>
  AgentDefinition.make({
    name: "desk",
    systemPrompt: options.prompt ?? "You answer customers about their orders.",
    budget: { maxSteps: options.maxSteps ?? 6 },
    ...(options.history === undefined ? {} : { history: options.history }),
    ...(options.conversationBudget === undefined ? {} : { conversationBudget: options.conversationBudget })
  })

/** The last user message of a request (what the turn answers). */
const lastUser = (messages: ReadonlyArray<Message.Message>): string => {
  for (let i = messages.length - 1; i >= 0; i--) {
    const m = messages[i]!
    if (m._tag === "User" && !m.text.startsWith("[")) return m.text
  }
  return ""
}

/**
 * The model: each turn looks the order of its message up `lookups` times, then answers naming
 * the message it answers; a message containing "refund" asks for a refund first.
 */
const desk = (lookups = 2): ScriptedModel.Script => (request) => {
  const messages = request.messages
  const question = lastUser(messages)
  let since = 0
  for (let i = messages.length - 1; i >= 0 && !(messages[i]!._tag === "User" && messages[i]!.text === question); i--) {
    if (messages[i]!._tag === "Assistant") since++
  }
  const order = /\d+/.exec(question)?.[0] ?? "0"
  // What a provider would report: about a token per four characters of what it read.
  const inputTokens = Math.ceil(messages.reduce((n, m) => n + m.text.length, 0) / 4)
  if (question.includes("refund") && since === 0) return ModelReply.make({ text: "", toolCalls: [{ id: "", name: "refund", argumentsText: JSON.stringify({ order }) }] })
  if (since < lookups) return ModelReply.make({ text: "", toolCalls: [{ id: "", name: "lookup", argumentsText: JSON.stringify({ order }) }], usage: { inputTokens, outputTokens: 2 } })
  return ModelReply.make({ text: `Answer to "${question}"`, usage: { inputTokens, outputTokens: 3 } })
}

const services = (store: RunLogStore.RunLogStore.Service, sink: Layer.Layer<EventSink.EventSink> = EventSink.layerNoop) =>
  Layer.mergeAll(NativeToolCallParser.layer(), Layer.orDie(ToolRegistry.layerExecutor(tools)), sink, Layer.succeed(RunLogStore.RunLogStore, store))

const sendWith = (store: RunLogStore.RunLogStore.Service, model: ScriptedModel.ScriptedModel, runId: string, messageId: string, text: string, agent = agentWith(), sink?: Layer.Layer<EventSink.EventSink>) =>
  Agent.send({ runId: Ids.runId(runId), messageId, text, agent, tools }).pipe(Effect.provide(Layer.merge(services(store, sink), model.layer)))

/** Every Assistant message with calls is followed by exactly one answer per call, in order, and no answer stands alone. */
const assertPaired = (messages: ReadonlyArray<Message.Message>) => assert.deepStrictEqual(Pairing.problems(messages), [])

const userTexts = (request: ModelRequest) => request.messages.filter((m) => m._tag === "User").map((m) => m.text)

const conversation = ["Where is order 17?", "And order 23?", "Thanks. Is 41 shipped too?"]

describe("Agent.send", () => {
  it.effect("turns in one log: each message's turn answers it, with every earlier message in the history; budgets per turn", () =>
    Effect.gen(function*() {
      const store = yield* RunLogStore.makeMemory
      const model = yield* ScriptedModel.make(desk())
      const agent = agentWith({ maxSteps: 3 })
      const results = []
      for (const [i, text] of conversation.entries()) results.push(yield* sendWith(store, model, "chat", `m${i}`, text, agent))
      assert.deepStrictEqual(results.map((r) => [r.turn, r.stopReason._tag, r.steps]), [[0, "Completed", 3], [1, "Completed", 3], [2, "Completed", 3]])
      for (const [i, r] of results.entries()) {
        assert.strictEqual(r.stopReason._tag === "Completed" ? r.stopReason.answer : "", `Answer to "${conversation[i]}"`)
      }
      const log = yield* store.readLog(Ids.runId("chat"))
      assert.isTrue(Option.isNone(log.finished), "a conversation stays open")
      assert.strictEqual(log.steps.length, 9, "9 steps in all: the budget of 3 is per turn")
      assert.deepStrictEqual(log.userMessages.map((m) => [m.turn, m.messageId, m.text]), [[1, "m1", conversation[1]], [2, "m2", conversation[2]]])
      assert.deepStrictEqual(log.turns.map((t) => [t.turn, t.atStep, t.counters.steps]), [[0, 3, 3], [1, 6, 3], [2, 9, 3]])
      assert.deepStrictEqual(RunLogAudit.logProblems(log), [])
      const requests = (yield* model.requests).map((seen) => seen.request)
      for (const request of requests) assertPaired(request.messages)
      // The last turn's requests hold the three messages, in order, after the task (the first).
      assert.deepStrictEqual(userTexts(requests.at(-1)!), conversation)
    }))

  it.effect("idempotent by message id: a retried send returns the same turn's result and appends nothing; Agent.run keeps its meaning", () =>
    Effect.gen(function*() {
      const store = yield* RunLogStore.makeMemory
      const model = yield* ScriptedModel.make(desk())
      const first = yield* sendWith(store, model, "chat", "m0", conversation[0]!)
      const second = yield* sendWith(store, model, "chat", "m1", conversation[1]!)
      const size = RunLog.size(yield* store.readLog(Ids.runId("chat")))
      const calls = yield* model.calls
      assert.deepStrictEqual(yield* sendWith(store, model, "chat", "m1", conversation[1]!), second)
      assert.deepStrictEqual(yield* sendWith(store, model, "chat", "m0", conversation[0]!), first)
      assert.strictEqual(RunLog.size(yield* store.readLog(Ids.runId("chat"))), size)
      assert.strictEqual(yield* model.calls, calls)
      // Agent.run on the conversation: its last turn's result, nothing run.
      const ran = yield* Agent.run({ runId: Ids.runId("chat"), agent: agentWith(), task: conversation[0]!, tools }).pipe(Effect.provide(Layer.merge(services(store), model.layer)))
      assert.deepStrictEqual(ran, second)
      // A single-task run stays one: a recorded result for run, a typed refusal for send.
      const single = yield* Agent.run({ runId: Ids.runId("single"), agent: agentWith(), task: conversation[0]!, tools }).pipe(Effect.provide(Layer.merge(services(store), model.layer)))
      assert.isUndefined(single.turn)
      const refused = yield* Effect.flip(sendWith(store, model, "single", "x", "hello?"))
      assert.strictEqual(refused._tag, "InvalidRunRequest")
      assert.isTrue(Option.isSome((yield* store.readLog(Ids.runId("single"))).finished))
    }))

  it.effect("interrupted inside a turn, or between a message's write and its turn: the retried send finishes it with the requests of the run never interrupted", () =>
    Effect.gen(function*() {
      const refStore = yield* RunLogStore.makeMemory
      const refModel = yield* ScriptedModel.make(desk())
      for (const [i, text] of conversation.entries()) yield* sendWith(refStore, refModel, "chat", `m${i}`, text)
      const reference = yield* refStore.readLog(Ids.runId("chat"))
      const expected = reference.replies.map((r) => r.requestHash)
      // Every step boundary, and right after each message is durable.
      const cuts: Array<(e: { readonly _tag: string; readonly step?: number; readonly turn?: number }) => boolean> = [
        ...Array.from({ length: reference.steps.length }, (_, k) => (e: { readonly _tag: string; readonly step?: number }) => e._tag === "StepCompleted" && e.step === k),
        ...[1, 2].map((turn) => (e: { readonly _tag: string; readonly turn?: number }) => e._tag === "TurnStarted" && e.turn === turn)
      ]
      for (const [c, cut] of cuts.entries()) {
        const store = yield* RunLogStore.makeMemory
        let interrupted = false
        for (const [i, text] of conversation.entries()) {
          const reached = yield* Deferred.make<void>()
          const sink = EventSink.layer((e) => (!interrupted && cut(e) ? Effect.zipRight(Deferred.succeed(reached, undefined), Effect.never) : Effect.void))
          const model = yield* ScriptedModel.make(desk())
          const fiber = yield* Effect.fork(sendWith(store, model, "chat", `m${i}`, text, agentWith(), sink))
          const done = yield* Effect.raceFirst(Effect.as(Deferred.await(reached), "cut" as const), Effect.as(Fiber.await(fiber), "done" as const))
          if (done === "cut") {
            interrupted = true
            yield* Fiber.interrupt(fiber)
            // The caller retries the same message.
            const again = yield* ScriptedModel.make(desk())
            const result = yield* sendWith(store, again, "chat", `m${i}`, text)
            assert.strictEqual(result.turn, i, `cut ${c}`)
          }
        }
        const log = yield* store.readLog(Ids.runId("chat"))
        assert.isTrue(interrupted, `cut ${c} was reached`)
        assert.deepStrictEqual(log.replies.map((r) => r.requestHash), expected, `cut ${c}`)
        assert.deepStrictEqual(log.userMessages.map((m) => m.messageId), ["m1", "m2"], `cut ${c}: no message lost or doubled`)
        assert.deepStrictEqual(RunLogAudit.logProblems(log), [])
      }
    }), { timeout: 120_000 })

  it.effect("a message while the conversation waits for a decision is held, then answered after the decision, once", () =>
    Effect.gen(function*() {
      const store = yield* RunLogStore.makeMemory
      const model = yield* ScriptedModel.make(desk(1))
      yield* sendWith(store, model, "chat", "m0", "Where is order 17?")
      const suspended = yield* Effect.flip(sendWith(store, model, "chat", "m1", "Please refund order 17."))
      assert.strictEqual(suspended._tag, "Suspended")
      // The customer writes again while the clerk has not decided: held, not taken as a decision.
      const held = yield* Effect.flip(sendWith(store, model, "chat", "m2", "Also, is order 23 shipped?"))
      assert.strictEqual(held._tag, "Suspended")
      const waiting = yield* store.readLog(Ids.runId("chat"))
      assert.deepStrictEqual(waiting.userMessages.map((m) => m.messageId), ["m1", "m2"])
      assert.deepStrictEqual(waiting.approvals.filter((a) => a._tag === "ApprovalDecided"), [])
      // Sending it again holds nothing more.
      yield* Effect.flip(sendWith(store, model, "chat", "m2", "Also, is order 23 shipped?"))
      assert.strictEqual((yield* store.readLog(Ids.runId("chat"))).userMessages.length, 2)
      // The clerk approves; the retried send finishes the refund turn, then answers the held message.
      if (suspended._tag !== "Suspended") return
      yield* Approval.decide({ runId: Ids.runId("chat"), callId: suspended.waiting[0]!.callId, decision: { _tag: "Approve" }, by: "clerk", actionHash: suspended.waiting[0]!.actionHash }).pipe(
        Effect.provideService(RunLogStore.RunLogStore, store)
      )
      const answered = yield* sendWith(store, model, "chat", "m2", "Also, is order 23 shipped?")
      assert.strictEqual(answered.turn, 2)
      assert.strictEqual(answered.stopReason._tag === "Completed" ? answered.stopReason.answer : "", `Answer to "Also, is order 23 shipped?"`)
      const log = yield* store.readLog(Ids.runId("chat"))
      assert.deepStrictEqual(log.turns.map((t) => t.turn), [0, 1, 2])
      assert.isTrue(log.results.some((r) => r.outcome.observation === "refunded 17"))
      assert.deepStrictEqual(RunLogAudit.logProblems(log), [])
      for (const seen of yield* model.requests) assertPaired(seen.request.messages)
    }))

  it.effect("drift between turns is allowed and recorded on the message; within a turn it is refused", () =>
    Effect.gen(function*() {
      const store = yield* RunLogStore.makeMemory
      const model = yield* ScriptedModel.make(desk())
      yield* sendWith(store, model, "chat", "m0", conversation[0]!)
      const redeployed = agentWith({ prompt: "You answer customers about their orders, politely." })
      const result = yield* sendWith(store, model, "chat", "m1", conversation[1]!, redeployed)
      assert.strictEqual(result.stopReason._tag, "Completed")
      const log = yield* store.readLog(Ids.runId("chat"))
      const message = log.userMessages[0]!
      assert.isDefined(message.snapshotHash)
      assert.deepStrictEqual(message.differences?.map((d) => d.path), ["agent.systemPrompt"])
      // The next turn under the same redeployed configuration records nothing new.
      yield* sendWith(store, model, "chat", "m2", conversation[2]!, redeployed)
      assert.isUndefined((yield* store.readLog(Ids.runId("chat"))).userMessages[1]!.snapshotHash)

      // Interrupted inside a turn, then sent again under another configuration: refused.
      const other = yield* RunLogStore.makeMemory
      yield* sendWith(other, model, "chat", "m0", conversation[0]!)
      const reached = yield* Deferred.make<void>()
      const sink = EventSink.layer((e) => (e._tag === "StepCompleted" && e.step === 3 ? Effect.zipRight(Deferred.succeed(reached, undefined), Effect.never) : Effect.void))
      const fiber = yield* Effect.fork(sendWith(other, model, "chat", "m1", conversation[1]!, agentWith(), sink))
      yield* Deferred.await(reached)
      yield* Fiber.interrupt(fiber)
      const mismatch = yield* Effect.flip(sendWith(other, model, "chat", "m1", conversation[1]!, redeployed))
      assert.strictEqual(mismatch._tag, "SnapshotMismatch")
      const refusedNew = yield* Effect.flip(sendWith(other, model, "chat", "m2", conversation[2]!, redeployed))
      assert.strictEqual(refusedNew._tag, "SnapshotMismatch", "the interrupted turn must finish under its own configuration first")
      assert.strictEqual((yield* other.readLog(Ids.runId("chat"))).userMessages.length, 1)
    }))

  it.effect("history policies compose with turns: a person's messages are never masked or dropped", () =>
    Effect.gen(function*() {
      const store = yield* RunLogStore.makeMemory
      const model = yield* ScriptedModel.make(desk(3))
      const history = HistoryPolicy.compose(HistoryPolicy.maskObservations({ keepLast: 1, every: 1 }), HistoryPolicy.fitTokens({ window: 600, headroom: 50 }))
      const texts = Array.from({ length: 6 }, (_, i) => `Question ${i}: where is order ${100 + i}? ${"Please be quick. ".repeat(i)}`)
      for (const [i, text] of texts.entries()) yield* sendWith(store, model, "chat", `m${i}`, text, agentWith({ history }))
      const log = yield* store.readLog(Ids.runId("chat"))
      assert.isAbove(log.compactions.length, 0)
      assert.deepStrictEqual(RunLogAudit.logProblems(log), [])
      for (const seen of yield* model.requests) {
        assertPaired(seen.request.messages)
        const users = userTexts(seen.request).filter((t) => t.startsWith("Question") || t.startsWith("Where"))
        // Every message sent so far, verbatim, in order.
        assert.deepStrictEqual(users, texts.slice(0, users.length))
        assert.include(texts, lastUser(seen.request.messages))
      }
    }))

  it.effect.prop(
    "random turn sequences, kill points and approval outcomes: every request pairs each call with one answer, in order, and holds every message",
    [
      fc.array(fc.record({ refund: fc.boolean(), approve: fc.boolean(), lookups: fc.integer({ min: 0, max: 2 }) }), { minLength: 1, maxLength: 5 }),
      fc.integer({ min: 0, max: 12 })
    ],
    ([turns, killAt]) =>
      Effect.gen(function*() {
        const store = yield* RunLogStore.makeMemory
        const texts = turns.map((t, i) => (t.refund ? `Please refund order ${i}.` : `Where is order ${i}?`) + " ".repeat(t.lookups))
        let killed = false
        let steps = 0
        for (const [i, text] of texts.entries()) {
          for (let attempt = 0; attempt < 6; attempt++) {
            const reached = yield* Deferred.make<void>()
            const sink = EventSink.layer((e) => {
              if (e._tag === "StepCompleted") steps++
              return !killed && e._tag === "StepCompleted" && steps === killAt + 1 ? Effect.zipRight(Deferred.succeed(reached, undefined), Effect.never) : Effect.void
            })
            const model = yield* ScriptedModel.make(desk(1 + (turns[i]!.lookups % 2)))
            const fiber = yield* Effect.fork(Effect.either(sendWith(store, model, "chat", `m${i}`, text, agentWith({ maxSteps: 4 }), sink)))
            const done = yield* Effect.raceFirst(Effect.as(Deferred.await(reached), undefined), Fiber.join(fiber))
            for (const seen of yield* model.requests) assertPaired(seen.request.messages)
            if (done === undefined) {
              killed = true
              yield* Fiber.interrupt(fiber)
              continue
            }
            if (done._tag === "Right") break
            if (done.left._tag !== "Suspended") return yield* Effect.dieMessage(`unexpected ${done.left._tag}`)
            const waiting = done.left.waiting[0]!
            yield* Approval.decide({
              runId: Ids.runId("chat"),
              callId: waiting.callId,
              decision: turns[i]!.approve ? { _tag: "Approve" } : { _tag: "Reject", reason: "not eligible" },
              by: "clerk",
              actionHash: waiting.actionHash
            }).pipe(Effect.provideService(RunLogStore.RunLogStore, store))
          }
        }
        const log = yield* store.readLog(Ids.runId("chat"))
        assert.strictEqual(log.turns.length, texts.length)
        assert.deepStrictEqual(log.userMessages.map((m) => m.messageId), texts.slice(1).map((_, i) => `m${i + 1}`))
        assert.deepStrictEqual(RunLogAudit.logProblems(log), [])
      }),
    { fastCheck: { numRuns: 25 } }
  )
})

describe("the conversation's budget", () => {
  const four = [...conversation, "One more: order 52?"]
  const turnsOf = (log: RunLog.RunLog) => log.turns.map((t) => [t.turn, t.counters.steps, t.stopReason])
  const snapshotOf = (log: RunLog.RunLog) => Schema.decodeUnknownSync(Snapshot.Snapshot)(Option.getOrThrow(log.started).snapshot)
  const conversationSteps = { _tag: "BudgetExhausted", budget: "Steps", scope: "Conversation" } as const

  it.effect("counts over every turn; exhausted, the turn stops with its scope, and a later message is recorded and answered so without a model call", () =>
    Effect.gen(function*() {
      const store = yield* RunLogStore.makeMemory
      const model = yield* ScriptedModel.make(desk())
      // Three steps a turn: the turn's budget (6) never runs out; the conversation's (7) does in turn 2.
      const agent = agentWith({ conversationBudget: { maxSteps: 7 } })
      const results = []
      for (const [i, text] of four.entries()) results.push(yield* sendWith(store, model, "chat", `m${i}`, text, agent))
      assert.deepStrictEqual(results.map((r) => [r.turn, r.steps, r.stopReason._tag]), [[0, 3, "Completed"], [1, 3, "Completed"], [2, 1, "BudgetExhausted"], [3, 0, "BudgetExhausted"]])
      assert.deepStrictEqual(results[2]!.stopReason, conversationSteps)
      assert.deepStrictEqual(results[3]!.stopReason, conversationSteps)
      assert.strictEqual(yield* model.calls, 7, "the exhausted conversation's message called no model")
      const log = yield* store.readLog(Ids.runId("chat"))
      assert.deepStrictEqual(log.userMessages.map((m) => m.messageId), ["m1", "m2", "m3"], "the message is recorded, never lost")
      assert.deepStrictEqual(turnsOf(log).at(-1), [3, 0, conversationSteps])
      assert.deepStrictEqual(RunLogAudit.logProblems(log), [])
      // A retried send of the exhausted message: the same result, nothing appended or called.
      const size = RunLog.size(log)
      assert.deepStrictEqual(yield* sendWith(store, model, "chat", "m3", four[3]!, agent), results[3])
      assert.strictEqual(RunLog.size(yield* store.readLog(Ids.runId("chat"))), size)
      assert.strictEqual(yield* model.calls, 7)
      // The snapshot holds it; an agent without one keeps the snapshot it had.
      assert.deepStrictEqual(snapshotOf(log).agent.conversationBudget, { maxSteps: 7 })
      const plain = yield* RunLogStore.makeMemory
      yield* sendWith(plain, model, "chat", "m0", four[0]!)
      assert.isFalse("conversationBudget" in snapshotOf(yield* plain.readLog(Ids.runId("chat"))).agent)
    }))

  it.effect("tokens count over every turn; a single-task run ignores the conversation's budget", () =>
    Effect.gen(function*() {
      const reference = yield* RunLogStore.makeMemory
      const model = yield* ScriptedModel.make(desk())
      for (const [i, text] of conversation.entries()) yield* sendWith(reference, model, "chat", `m${i}`, text)
      const turns = (yield* reference.readLog(Ids.runId("chat"))).turns
      const tokensOf = (t: RunLog.TurnFinished) => t.counters.usage.inputTokens + t.counters.usage.outputTokens
      // Just over turn 0's tokens: reached by turn 1's first step, counted on from turn 0.
      const maxTokens = tokensOf(turns[0]!) + 1
      const store = yield* RunLogStore.makeMemory
      const agent = agentWith({ conversationBudget: { maxTokens } })
      const results = []
      for (const [i, text] of conversation.entries()) results.push(yield* sendWith(store, model, "chat", `m${i}`, text, agent))
      assert.deepStrictEqual(results.map((r) => [r.steps, StopReason.format(r.stopReason)]), [
        [3, "Completed(Answer)"],
        [1, "BudgetExhausted(Conversation:Tokens)"],
        [0, "BudgetExhausted(Conversation:Tokens)"]
      ])
      const single = yield* Agent.run({ runId: Ids.runId("single"), agent: agentWith({ conversationBudget: { maxSteps: 1, maxTokens: 1 } }), task: conversation[0]!, tools }).pipe(
        Effect.provide(Layer.merge(services(store), model.layer))
      )
      assert.deepStrictEqual([single.steps, single.stopReason._tag], [3, "Completed"])
    }))

  it.effect("killed at every step boundary and between a message's write and its turn: the resumed conversation counts on from the log, ending every turn as the uninterrupted one", () =>
    Effect.gen(function*() {
      const agent = agentWith({ conversationBudget: { maxSteps: 7 } })
      const refStore = yield* RunLogStore.makeMemory
      const refModel = yield* ScriptedModel.make(desk())
      for (const [i, text] of four.entries()) yield* sendWith(refStore, refModel, "chat", `m${i}`, text, agent)
      const reference = yield* refStore.readLog(Ids.runId("chat"))
      const cuts: Array<(e: { readonly _tag: string; readonly step?: number; readonly turn?: number }) => boolean> = [
        ...Array.from({ length: reference.steps.length }, (_, k) => (e: { readonly _tag: string; readonly step?: number }) => e._tag === "StepCompleted" && e.step === k),
        ...[1, 2, 3].map((turn) => (e: { readonly _tag: string; readonly turn?: number }) => e._tag === "TurnStarted" && e.turn === turn)
      ]
      for (const [c, cut] of cuts.entries()) {
        const store = yield* RunLogStore.makeMemory
        let interrupted = false
        for (const [i, text] of four.entries()) {
          const reached = yield* Deferred.make<void>()
          const sink = EventSink.layer((e) => (!interrupted && cut(e) ? Effect.zipRight(Deferred.succeed(reached, undefined), Effect.never) : Effect.void))
          const model = yield* ScriptedModel.make(desk())
          const fiber = yield* Effect.fork(sendWith(store, model, "chat", `m${i}`, text, agent, sink))
          const done = yield* Effect.raceFirst(Effect.as(Deferred.await(reached), "cut" as const), Effect.as(Fiber.await(fiber), "done" as const))
          if (done === "cut") {
            interrupted = true
            yield* Fiber.interrupt(fiber)
            assert.strictEqual((yield* sendWith(store, yield* ScriptedModel.make(desk()), "chat", `m${i}`, text, agent)).turn, i, `cut ${c}`)
          }
        }
        const log = yield* store.readLog(Ids.runId("chat"))
        assert.isTrue(interrupted, `cut ${c} was reached`)
        assert.deepStrictEqual(turnsOf(log), turnsOf(reference), `cut ${c}`)
        assert.deepStrictEqual(log.replies.map((r) => r.requestHash), reference.replies.map((r) => r.requestHash), `cut ${c}`)
        assert.deepStrictEqual(log.userMessages.map((m) => m.messageId), ["m1", "m2", "m3"], `cut ${c}`)
      }
    }), { timeout: 120_000 })
})

describe("Stats and the run summary of a conversation", () => {
  it.effect("a conversation awaiting a message is listed so with its turns, and counted in Stats by its last turn and the sums of its turns; mid-turn it is neither", () =>
    Effect.gen(function*() {
      const store = yield* RunLogStore.makeMemory
      const model = yield* ScriptedModel.make(desk())
      const agent = agentWith({ maxSteps: 3 })
      for (const [i, text] of conversation.entries()) yield* sendWith(store, model, "chat", `m${i}`, text, agent)
      yield* Agent.run({ runId: Ids.runId("single"), agent, task: conversation[0]!, tools }).pipe(Effect.provide(Layer.merge(services(store), model.layer)))
      const summary = (yield* store.listRuns()).find((s) => s.runId === "chat")!
      assert.strictEqual(summary.status, "AwaitingMessage")
      assert.deepStrictEqual(summary.conversation, { turns: 3, messages: 3, lastStopReason: { _tag: "Completed", by: "Answer", answer: `Answer to "${conversation[2]}"` } })
      const groups = yield* Stats.fromStore().pipe(Effect.provideService(RunLogStore.RunLogStore, store))
      assert.strictEqual(groups.length, 1)
      const group = groups[0]!
      assert.strictEqual(group.runs, 2)
      assert.deepStrictEqual(group.stopReasons, { "Completed(Answer)": 2 })
      assert.deepStrictEqual(group.steps, { median: 6, p90: 9, max: 9 }, "the conversation's steps: the sum of its three turns'")
      assert.deepStrictEqual(group.conversations, { runs: 1, turns: { median: 3, p90: 3, max: 3 } })
      const log = yield* store.readLog(Ids.runId("chat"))
      assert.isTrue(Stats.matches(log, { status: "AwaitingMessage", stopReason: "Completed(Answer)" }))
      assert.isFalse(Stats.matches(log, { status: "Unfinished" }))
      // A single-task run's group has no conversations: its statistics are what they were.
      const single = yield* store.readLog(Ids.runId("single"))
      assert.isUndefined(Stats.compute([single])[0]!.conversations)
      // Killed inside turn 3: unfinished, left out of Stats.
      const reached = yield* Deferred.make<void>()
      const sink = EventSink.layer((e) => (e._tag === "StepCompleted" && e.step === 9 ? Effect.zipRight(Deferred.succeed(reached, undefined), Effect.never) : Effect.void))
      const fiber = yield* Effect.fork(sendWith(store, model, "chat", "m3", "And order 99?", agent, sink))
      yield* Deferred.await(reached)
      yield* Fiber.interrupt(fiber)
      const running = (yield* store.listRuns()).find((s) => s.runId === "chat")!
      assert.strictEqual(running.status, "Unfinished")
      assert.deepStrictEqual([running.conversation?.turns, running.conversation?.messages], [3, 4])
      assert.strictEqual((yield* Stats.fromStore().pipe(Effect.provideService(RunLogStore.RunLogStore, store)))[0]!.runs, 1)
    }))
})

describe("Replay of a conversation", () => {
  it.effect("replays message by message as identical; a changed prompt diverges at its step", () =>
    Effect.gen(function*() {
      const store = yield* RunLogStore.makeMemory
      const model = yield* ScriptedModel.make(desk())
      for (const [i, text] of conversation.entries()) yield* sendWith(store, model, "chat", `m${i}`, text)
      const recorded = yield* store.readLog(Ids.runId("chat"))
      const replayStore = yield* RunLogStore.makeMemory
      const comparison = yield* Replay.run({ recorded, request: { runId: Ids.runId("chat-replayed"), agent: agentWith(), task: conversation[0]!, tools } }).pipe(
        Effect.provide(services(replayStore))
      )
      assert.deepStrictEqual(comparison, { _tag: "Identical", records: RunLog.size(recorded) })
      const diverged = yield* Effect.flip(
        Replay.run({ recorded, request: { runId: Ids.runId("chat-other"), agent: agentWith({ prompt: "Another prompt." }), task: conversation[0]!, tools } }).pipe(
          Effect.provide(services(replayStore))
        )
      )
      assert.strictEqual(diverged._tag, "ReplayDiverged")
    }))
})

describe("a message while a turn runs in this process", () => {
  it.effect("is queued: written at the running turn's next step boundary (held), answered by its own turn after it; the running turn is not restarted", () =>
    Effect.gen(function*() {
      const store = yield* RunLogStore.makeMemory
      const gate = yield* Deferred.make<void>()
      const blocked = yield* Deferred.make<void>()
      // Turn 1's second model call (step 4 of the conversation) waits for the gate.
      const model = yield* ScriptedModel.make(desk(), {
        onCall: (call) => (call.step === 4 ? Effect.zipRight(Deferred.succeed(blocked, undefined), Deferred.await(gate)) : Effect.void)
      })
      yield* sendWith(store, model, "chat", "m0", conversation[0]!)
      const agent = agentWith()
      const first = yield* Effect.fork(sendWith(store, model, "chat", "m1", conversation[1]!, agent))
      yield* Deferred.await(blocked)
      const second = yield* Effect.fork(sendWith(store, model, "chat", "m2", conversation[2]!, agent))
      // Its claim is refused (turn 1 holds it) and it queues: on the memory store that is a few
      // synchronous steps of the forked fiber, done within these yields.
      for (let i = 0; i < 200; i++) yield* Effect.yieldNow()
      yield* Deferred.succeed(gate, undefined)
      const [r1, r2] = [yield* Fiber.join(first), yield* Fiber.join(second)]
      assert.deepStrictEqual([r1.turn, r2.turn], [1, 2])
      assert.strictEqual(r2.stopReason._tag === "Completed" ? r2.stopReason.answer : "", `Answer to "${conversation[2]}"`)
      const log = yield* store.readLog(Ids.runId("chat"))
      const m2 = log.userMessages.find((m) => m.messageId === "m2")!
      const ended1 = log.turns.find((t) => t.turn === 1)!
      assert.isBelow(m2.seq, ended1.seq, "written while turn 1 ran (held)")
      assert.deepStrictEqual(log.turns.map((t) => t.turn), [0, 1, 2])
      assert.strictEqual(log.resumes.length, 0, "nothing restarted")
      // Turn 1's requests never held the queued message; turn 2's do.
      const requests = (yield* model.requests).map((seen) => seen.request)
      for (const request of requests) assertPaired(request.messages)
      const withM2 = requests.filter((r) => userTexts(r).includes(conversation[2]!))
      assert.isTrue(withM2.every((r) => lastUser(r.messages) === conversation[2]))
      assert.deepStrictEqual(RunLogAudit.logProblems(log), [])
    }))
})

describe("a message while another process holds the conversation's claim", () => {
  it.effect("is RunBusy at once, nothing appended; with whileBusy it waits under the schedule (the Clock's time) and is answered once the claim is free", () =>
    Effect.gen(function*() {
      const store = yield* RunLogStore.makeMemory
      const model = yield* ScriptedModel.make(desk())
      const agent = agentWith()
      yield* sendWith(store, model, "chat", "m0", conversation[0]!, agent)
      const size = RunLog.size(yield* store.readLog(Ids.runId("chat")))
      // Another owner (another process, as the store sees it) holds the claim until released.
      const claimed = yield* Deferred.make<void>()
      const release = yield* Deferred.make<void>()
      const owner = yield* Effect.fork(Effect.scoped(Effect.zipRight(
        Effect.zipRight(store.claim(Ids.runId("chat")), Deferred.succeed(claimed, undefined)),
        Deferred.await(release)
      )))
      yield* Deferred.await(claimed)
      const send = (whileBusy?: Schedule.Schedule<unknown, RunError>) =>
        Agent.send({ runId: Ids.runId("chat"), messageId: "m1", text: conversation[1]!, agent, tools, ...(whileBusy === undefined ? {} : { whileBusy }) }).pipe(
          Effect.provide(Layer.merge(services(store), model.layer))
        )
      assert.strictEqual((yield* Effect.flip(send()))._tag, "RunBusy")
      // A schedule that ends while the claim is held: RunBusy, after its recurrences.
      const bounded = yield* Effect.fork(Effect.flip(send(Schedule.addDelay(Schedule.recurs(2), () => "1 second"))))
      yield* TestClock.adjust("3 seconds")
      assert.strictEqual((yield* Fiber.join(bounded))._tag, "RunBusy")
      assert.strictEqual(RunLog.size(yield* store.readLog(Ids.runId("chat"))), size, "nothing appended while busy")
      const calls = yield* model.calls
      // Waiting: polls every second while the claim is held, then answers by its own turn.
      const waiting = yield* Effect.fork(send(Schedule.spaced("1 second")))
      yield* TestClock.adjust("10 seconds")
      assert.isNull(yield* Fiber.poll(waiting).pipe(Effect.map(Option.getOrNull)), "still waiting for the claim")
      assert.strictEqual(yield* model.calls, calls)
      yield* Deferred.succeed(release, undefined)
      yield* Fiber.join(owner)
      yield* TestClock.adjust("1 second")
      const result = yield* Fiber.join(waiting)
      assert.deepStrictEqual([result.turn, result.stopReason._tag === "Completed" ? result.stopReason.answer : ""], [1, `Answer to "${conversation[1]}"`])
      const log = yield* store.readLog(Ids.runId("chat"))
      assert.deepStrictEqual(log.userMessages.map((m) => m.messageId), ["m1"], "written once")
      assert.deepStrictEqual(log.turns.map((t) => t.turn), [0, 1])
    }))
})
