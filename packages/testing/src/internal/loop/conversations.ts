/**
 * The loop suite, conversations (design 0300, decisions 6–9): `Agent.send` over the store under
 * test — each message's turn, budgets per turn, a retried send appending nothing, an interrupted
 * turn finished by the next send with the requests of the conversation never interrupted, drift
 * between turns recorded and within a turn refused, a message while the conversation waits for
 * a decision held, the conversation's budget over every turn, and the store's listing of turns.
 *
 * @internal
 */
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Schedule from "effect/Schedule"
import * as Schema from "effect/Schema"
import * as ActionExecutor from "@polyloop/core/ActionExecutor"
import * as Agent from "@polyloop/core/Agent"
import * as Approval from "@polyloop/core/Approval"
import * as DecisionParser from "@polyloop/core/DecisionParser"
import * as EventSink from "@polyloop/core/EventSink"
import * as Ids from "@polyloop/core/Ids"
import type * as ModelClient from "@polyloop/core/ModelClient"
import * as RunLog from "@polyloop/core/RunLog"
import * as RunLogStore from "@polyloop/core/RunLogStore"
import * as Tool from "@polyloop/core/Tool"
import type * as ToolContext from "@polyloop/core/ToolContext"
import * as ToolRegistry from "@polyloop/core/ToolRegistry"
import * as Pairing from "../../Pairing.js"
import * as ScriptedModel from "../../ScriptedModel.js"
import type { Assert } from "../vitest.js"
import { agent, call, makeFixture, parser, say } from "./fixtures.js"
import { request, type SuiteContext } from "./harness.js"

/** The person's messages of a request (after the system prompt). */
const said = (request: ModelClient.ModelRequest): ReadonlyArray<string> => request.messages.filter((m) => m._tag === "User").map((m) => m.text)

/** Each turn: an echo of its message, then an answer naming it. */
const script: ScriptedModel.Script = (request) => {
  const last = request.messages.at(-1)!
  return last._tag === "User" ? call("echo", { text: last.text }) : say(`FINISH: answered: ${said(request).at(-1) ?? ""}`)
}

const texts = ["Where is order 17?", "And order 23?", "Thanks."]

/** Registers this concern's tests. */
export const register = (ctx: SuiteContext): void => {
  const { describe, liveTest, test } = ctx
  const assert: Assert = ctx.assert

  const send = (
    store: RunLogStore.RunLogStore.Service,
    model: ScriptedModel.ScriptedModel,
    messageId: string,
    text: string,
    options: {
      readonly prompt?: string
      readonly maxSteps?: number
      readonly conversationBudget?: { readonly maxSteps?: number; readonly maxTokens?: number }
      readonly sink?: Layer.Layer<EventSink.EventSink>
      readonly tools?: ToolRegistry.ToolRegistry<ToolContext.ToolContext>
    } = {}
  ) =>
    Effect.gen(function*() {
      const tools = options.tools ?? makeFixture().tools
      const executor = yield* Effect.orDie(tools.executor())
      return yield* Agent.send({
        runId: Ids.runId("conversation-1"),
        messageId,
        text,
        agent: agent({
          budget: { maxSteps: options.maxSteps ?? 5 },
          ...(options.conversationBudget === undefined ? {} : { conversationBudget: options.conversationBudget }),
          ...(options.prompt === undefined ? {} : { systemPrompt: options.prompt })
        }),
        tools
      }).pipe(
        Effect.provide(
          Layer.mergeAll(
            model.layer,
            ActionExecutor.layer(executor),
            DecisionParser.layer(parser),
            options.sink ?? EventSink.layerNoop,
            Layer.succeed(RunLogStore.RunLogStore, store)
          )
        )
      )
    })

  describe("conversations (design 0300)", () => {
    test("each message's turn answers it with every earlier message in the history; budgets count per turn; the conversation stays open", (h) =>
      Effect.gen(function*() {
        const model = yield* ScriptedModel.make(script)
        const results = []
        for (const [i, text] of texts.entries()) results.push(yield* send(h.store, model, `m${i}`, text, { maxSteps: 2 }))
        assert.deepStrictEqual(results.map((r) => [r.turn, r.steps, r.stopReason._tag === "Completed" ? r.stopReason.answer : r.stopReason._tag]), [
          [0, 2, `answered: ${texts[0]}`],
          [1, 2, `answered: ${texts[1]}`],
          [2, 2, `answered: ${texts[2]}`]
        ])
        const log = yield* h.log(Ids.runId("conversation-1"))
        assert.isTrue(Option.isNone(log.finished))
        assert.deepStrictEqual(log.userMessages.map((m) => m.messageId), ["m1", "m2"])
        assert.deepStrictEqual(log.turns.map((t) => [t.turn, t.atStep]), [[0, 2], [1, 4], [2, 6]])
        const requests = (yield* model.requests).map((seen) => seen.request)
        for (const request of requests) assert.deepStrictEqual(Pairing.problems(request.messages), [])
        assert.deepStrictEqual(said(requests.at(-1)!).filter((t) => texts.includes(t)), texts)
      }))

    liveTest("the store lists a conversation whose every message has had its turn as AwaitingMessage, with its turns; mid-turn it is Unfinished", (h) =>
      Effect.gen(function*() {
        const model = yield* ScriptedModel.make(script)
        const listed = Effect.map(h.store.listRuns(), (all) => all.find((s) => s.runId === "conversation-1"))
        yield* send(h.store, model, "m0", texts[0]!)
        const awaiting = yield* listed
        assert.strictEqual(awaiting?.status, "AwaitingMessage")
        assert.deepStrictEqual(awaiting?.conversation, { turns: 1, messages: 1, lastStopReason: { _tag: "Completed", by: "Answer", answer: `answered: ${texts[0]}` } })
        assert.isTrue(Option.isNone(awaiting!.stopReason), "a conversation has no RunFinished")
        // Killed inside turn 1: unfinished, its message counted, its turn not.
        const reached = yield* Deferred.make<void>()
        const sink = EventSink.layer((e) => (e._tag === "StepCompleted" && e.step === 2 ? Effect.zipRight(Deferred.succeed(reached, undefined), Effect.never) : Effect.void))
        const fiber = yield* Effect.fork(send(h.store, model, "m1", texts[1]!, { sink }))
        yield* Deferred.await(reached)
        yield* Fiber.interrupt(fiber)
        const running = yield* listed
        assert.strictEqual(running?.status, "Unfinished")
        assert.deepStrictEqual([running?.conversation?.turns, running?.conversation?.messages], [1, 2])
        assert.deepStrictEqual((yield* h.store.listRuns({ status: "AwaitingMessage" })).map((s) => s.runId), [])
        yield* send(h.store, model, "m1", texts[1]!)
        // Finished again: awaiting, the filter finds it, and a single-task run lists as before.
        yield* h.run(request("single-1", makeFixture().tools), { model: (yield* ScriptedModel.make(script)).layer })
        assert.deepStrictEqual((yield* h.store.listRuns({ status: "AwaitingMessage" })).map((s) => [s.runId, s.conversation?.turns]), [["conversation-1", 2]])
        assert.deepStrictEqual((yield* h.store.listRuns({ status: "Unfinished" })).map((s) => s.runId), [])
        const single = (yield* h.store.listRuns()).find((s) => s.runId === "single-1")!
        assert.strictEqual(single.status, "Finished")
        assert.isUndefined(single.conversation)
      }))

    test("a retried send returns its turn's result and appends nothing", (h) =>
      Effect.gen(function*() {
        const model = yield* ScriptedModel.make(script)
        yield* send(h.store, model, "m0", texts[0]!)
        const second = yield* send(h.store, model, "m1", texts[1]!)
        const size = RunLog.size(yield* h.log(Ids.runId("conversation-1")))
        const calls = yield* model.calls
        assert.deepStrictEqual(yield* send(h.store, model, "m1", texts[1]!), second)
        assert.strictEqual(RunLog.size(yield* h.log(Ids.runId("conversation-1"))), size)
        assert.strictEqual(yield* model.calls, calls)
      }))

    liveTest("the conversation's budget counts over every turn, across a kill; exhausted, a later message is recorded and its turn ends at once without a model call", (h) =>
      Effect.gen(function*() {
        const budget = { conversationBudget: { maxSteps: 3 } }
        const exhausted = { _tag: "BudgetExhausted", budget: "Steps", scope: "Conversation" } as const
        const model = yield* ScriptedModel.make(script)
        yield* send(h.store, model, "m0", texts[0]!, budget)
        // Killed after turn 1's first step (the conversation's third): the retried send counts on.
        const reached = yield* Deferred.make<void>()
        const sink = EventSink.layer((e) => (e._tag === "StepCompleted" && e.step === 2 ? Effect.zipRight(Deferred.succeed(reached, undefined), Effect.never) : Effect.void))
        const fiber = yield* Effect.fork(send(h.store, model, "m1", texts[1]!, { ...budget, sink }))
        yield* Deferred.await(reached)
        yield* Fiber.interrupt(fiber)
        const second = yield* send(h.store, model, "m1", texts[1]!, budget)
        assert.deepStrictEqual([second.turn, second.steps, second.stopReason], [1, 1, exhausted])
        const calls = yield* model.calls
        const third = yield* send(h.store, model, "m2", texts[2]!, budget)
        assert.deepStrictEqual([third.turn, third.steps, third.stopReason], [2, 0, exhausted])
        assert.strictEqual(yield* model.calls, calls, "no model call for the exhausted conversation")
        const log = yield* h.log(Ids.runId("conversation-1"))
        assert.deepStrictEqual(log.userMessages.map((m) => m.messageId), ["m1", "m2"])
        assert.deepStrictEqual(log.turns.map((t) => [t.turn, t.atStep, t.stopReason._tag]), [[0, 2, "Completed"], [1, 3, "BudgetExhausted"], [2, 3, "BudgetExhausted"]])
        assert.deepStrictEqual(log.turns[2]!.stopReason, exhausted, "the store keeps the stop reason's scope")
        assert.strictEqual(log.resumes.length, 1)
        assert.deepStrictEqual(yield* send(h.store, model, "m2", texts[2]!, budget), third)
      }))

    liveTest("a message while the conversation waits for a decision is held and answered Suspended; after the decision the turn finishes, then the held message's turn runs; nothing lost, the call run once", (h) =>
      Effect.gen(function*() {
        let refunds = 0
        const refund = Tool.make({
          name: "refund",
          description: "Refunds an order (a clerk approves each call).",
          parameters: Schema.Struct({ order: Schema.String }),
          replayPolicy: "Never",
          approval: "Required",
          handler: ({ order }) => Effect.sync(() => (refunds++, `refunded ${order}`))
        })
        const tools = ToolRegistry.make(refund)
        // A message asking for a refund calls it; anything else (or the refund's answer) is answered.
        const model = yield* ScriptedModel.make((request) => {
          const last = request.messages.at(-1)!
          return last._tag === "User" && last.text.includes("refund") ? call("refund", { order: "17" }) : say(`FINISH: answered: ${said(request).at(-1) ?? ""}`)
        })
        const runId = Ids.runId("conversation-1")
        const asked = ["Where is order 17?", "Please refund order 17.", "Also, is order 23 shipped?"]
        yield* send(h.store, model, "m0", asked[0]!, { tools })
        const suspended = yield* Effect.flip(send(h.store, model, "m1", asked[1]!, { tools }))
        if (suspended._tag !== "Suspended") return assert.fail(`expected Suspended, got ${suspended._tag}`)
        // The customer writes while the clerk has not decided: held (durable), answered Suspended, not a decision.
        const held = yield* Effect.flip(send(h.store, model, "m2", asked[2]!, { tools }))
        assert.strictEqual(held._tag, "Suspended")
        const waiting = yield* h.log(runId)
        assert.deepStrictEqual(waiting.userMessages.map((m) => [m.turn, m.messageId]), [[1, "m1"], [2, "m2"]])
        assert.deepStrictEqual(waiting.turns.map((t) => t.turn), [0])
        assert.deepStrictEqual(waiting.approvals.filter((a) => a._tag === "ApprovalDecided"), [])
        assert.strictEqual((yield* h.store.listRuns()).find((s) => s.runId === runId)?.status, "Suspended")
        // Sent again: held once.
        assert.strictEqual((yield* Effect.flip(send(h.store, model, "m2", asked[2]!, { tools })))._tag, "Suspended")
        assert.strictEqual((yield* h.log(runId)).userMessages.length, 2)
        assert.strictEqual(refunds, 0)
        const call0 = suspended.waiting[0]!
        yield* Approval.decide({ runId, callId: call0.callId, decision: { _tag: "Approve" }, by: "clerk", actionHash: call0.actionHash }).pipe(
          Effect.provideService(RunLogStore.RunLogStore, h.store)
        )
        // The retried send finishes the refund's turn, then answers the held message by its own turn.
        const answered = yield* send(h.store, model, "m2", asked[2]!, { tools })
        assert.deepStrictEqual([answered.turn, answered.stopReason._tag === "Completed" ? answered.stopReason.answer : answered.stopReason._tag], [2, `answered: ${asked[2]}`])
        const first = yield* send(h.store, model, "m1", asked[1]!, { tools })
        assert.deepStrictEqual([first.turn, first.stopReason._tag === "Completed" ? first.stopReason.answer : first.stopReason._tag], [1, `answered: ${asked[1]}`])
        const log = yield* h.log(runId)
        assert.deepStrictEqual(log.turns.map((t) => t.turn), [0, 1, 2])
        assert.deepStrictEqual(log.userMessages.map((m) => m.messageId), ["m1", "m2"])
        assert.strictEqual(refunds, 1, "the approved call ran once")
        assert.isTrue(log.results.some((r) => r.outcome.observation === "refunded 17"))
        for (const seen of yield* model.requests) assert.deepStrictEqual(Pairing.problems(seen.request.messages), [])
        assert.strictEqual((yield* h.store.listRuns()).find((s) => s.runId === runId)?.status, "AwaitingMessage")
      }))

    liveTest("a turn interrupted after its first step is finished by the retried send, with the requests of the conversation never interrupted", (h) =>
      Effect.gen(function*() {
        const reference = yield* ScriptedModel.make(script)
        const other = yield* RunLogStore.makeMemory
        for (const [i, text] of texts.entries()) yield* send(other, reference, `m${i}`, text)
        const expected = (yield* other.readLog(Ids.runId("conversation-1"))).replies.map((r) => r.requestHash)

        const model = yield* ScriptedModel.make(script)
        yield* send(h.store, model, "m0", texts[0]!)
        const reached = yield* Deferred.make<void>()
        const sink = EventSink.layer((e) => (e._tag === "StepCompleted" && e.step === 2 ? Effect.zipRight(Deferred.succeed(reached, undefined), Effect.never) : Effect.void))
        const fiber = yield* Effect.fork(send(h.store, model, "m1", texts[1]!, { sink }))
        yield* Deferred.await(reached)
        yield* Fiber.interrupt(fiber)
        const retried = yield* send(h.store, model, "m1", texts[1]!)
        assert.strictEqual(retried.turn, 1)
        yield* send(h.store, model, "m2", texts[2]!)
        const log = yield* h.log(Ids.runId("conversation-1"))
        assert.deepStrictEqual(log.replies.map((r) => r.requestHash), expected)
        assert.deepStrictEqual(log.userMessages.map((m) => m.messageId), ["m1", "m2"])
        assert.strictEqual(log.resumes.length, 1)
      }))

    liveTest("a message while a turn runs in this process waits for it and is answered by the next turn; nothing restarts", (h) =>
      Effect.gen(function*() {
        const gate = yield* Deferred.make<void>()
        const blocked = yield* Deferred.make<void>()
        // Turn 1's second model call (the conversation's step 3) waits for the gate.
        const model = yield* ScriptedModel.make(script, {
          onCall: (c) => (c.step === 3 ? Effect.zipRight(Deferred.succeed(blocked, undefined), Deferred.await(gate)) : Effect.void)
        })
        yield* send(h.store, model, "m0", texts[0]!)
        const first = yield* Effect.fork(send(h.store, model, "m1", texts[1]!))
        yield* Deferred.await(blocked)
        // Queued with the running turn — or, if that turn ends before this send reaches it (a
        // store's reads take their time), refused with RunBusy and sent again, as a caller does.
        const second = yield* Effect.fork(
          send(h.store, model, "m2", texts[2]!).pipe(Effect.retry({ while: (e) => e._tag === "RunBusy", schedule: Schedule.spaced("20 millis"), times: 100 }))
        )
        yield* Effect.sleep("100 millis")
        yield* Deferred.succeed(gate, undefined)
        const results = [yield* Fiber.join(first), yield* Fiber.join(second)]
        assert.deepStrictEqual(results.map((r) => r.turn), [1, 2])
        const log = yield* h.log(Ids.runId("conversation-1"))
        assert.deepStrictEqual(log.turns.map((t) => t.turn), [0, 1, 2])
        assert.strictEqual(log.resumes.length, 0)
        assert.deepStrictEqual(log.userMessages.map((m) => m.messageId), ["m1", "m2"])
      }))

    liveTest("a new configuration between two turns is recorded on the message; within a turn it is refused", (h) =>
      Effect.gen(function*() {
        const model = yield* ScriptedModel.make(script)
        yield* send(h.store, model, "m0", texts[0]!)
        yield* send(h.store, model, "m1", texts[1]!, { prompt: "You are a careful and polite agent." })
        const log = yield* h.log(Ids.runId("conversation-1"))
        assert.deepStrictEqual(log.userMessages[0]!.differences?.map((d) => d.path), ["agent.systemPrompt"])
        const reached = yield* Deferred.make<void>()
        const sink = EventSink.layer((e) => (e._tag === "StepCompleted" && e.step === 4 ? Effect.zipRight(Deferred.succeed(reached, undefined), Effect.never) : Effect.void))
        const fiber = yield* Effect.fork(send(h.store, model, "m2", texts[2]!, { prompt: "You are a careful and polite agent.", sink }))
        yield* Deferred.await(reached)
        yield* Fiber.interrupt(fiber)
        const refused = yield* Effect.flip(send(h.store, model, "m2", texts[2]!))
        assert.strictEqual(refused._tag, "SnapshotMismatch")
      }))
  })
}
