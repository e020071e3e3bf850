/**
 * A conversation's message id is an idempotency key (issue 44, items 1–4; design 0360): a send
 * of an id whose turn runs in this process waits for that turn and gets its result (never a
 * second turn, never a second `"Never"` call), on the memory store and on SQLite; the same id
 * with another text is `MessageIdReused`; an empty id or text is `InvalidRunRequest`; nothing is
 * written in either case; a fork of a conversation is a conversation.
 */
import { assert, describe, it } from "@effect/vitest"
import * as Agent from "@polyloop/core/Agent"
import * as AgentDefinition from "@polyloop/core/AgentDefinition"
import * as EventSink from "@polyloop/core/EventSink"
import * as Fork from "@polyloop/core/Fork"
import * as Ids from "@polyloop/core/Ids"
import * as ModelReply from "@polyloop/core/ModelReply"
import * as NativeToolCallParser from "@polyloop/core/NativeToolCallParser"
import * as RunLog from "@polyloop/core/RunLog"
import * as RunLogAudit from "@polyloop/core/RunLogAudit"
import * as RunLogStore from "@polyloop/core/RunLogStore"
import * as Tool from "@polyloop/core/Tool"
import * as ToolRegistry from "@polyloop/core/ToolRegistry"
import * as ScriptedModel from "@polyloop/testing/ScriptedModel"
import * as SqlRunLogStore from "@polyloop/sql/SqlRunLogStore"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Schema from "effect/Schema"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"

/** Counts its executions: a `"Never"` side effect (a charge) must run once per call, ever. */
const charges: Array<string> = []
const charge = Tool.make({
  name: "charge",
  description: "Charges an order (never run twice).",
  parameters: Schema.Struct({ order: Schema.String }),
  replayPolicy: "Never",
  handler: ({ order }) => Effect.sync(() => {
    charges.push(order)
    return `charged ${order}`
  })
})
const tools = ToolRegistry.make(charge)
const agent = AgentDefinition.make({ name: "till", systemPrompt: "You charge orders.", budget: { maxSteps: 4 } })

/** A turn charges the order its message names, then answers naming the message. */
const till: ScriptedModel.Script = (request) => {
  const last = request.messages.at(-1)!
  const question = request.messages.filter((m) => m._tag === "User").at(-1)!.text
  if (last._tag === "User") return ModelReply.make({ text: "", toolCalls: [{ id: "", name: "charge", argumentsText: JSON.stringify({ order: /\d+/.exec(question)?.[0] ?? "0" }) }] })
  return ModelReply.make({ text: `Answer to "${question}"` })
}

const services = (store: RunLogStore.RunLogStore.Service) =>
  Layer.mergeAll(NativeToolCallParser.layer(), Layer.orDie(ToolRegistry.layerExecutor(tools)), EventSink.layerNoop, Layer.succeed(RunLogStore.RunLogStore, store))

const send = (store: RunLogStore.RunLogStore.Service, model: ScriptedModel.ScriptedModel, runId: string, messageId: string, text: string) =>
  Agent.send({ runId: Ids.runId(runId), messageId, text, agent, tools }).pipe(Effect.provide(Layer.merge(services(store), model.layer)))

/** The memory store, and a SQLite file in a fresh directory. */
const stores: ReadonlyArray<readonly [string, Effect.Effect<RunLogStore.RunLogStore.Service, unknown, import("effect/Scope").Scope>]> = [
  ["memory", RunLogStore.makeMemory],
  ["SQLite", Effect.gen(function*() {
    const dir = yield* Effect.acquireRelease(
      Effect.sync(() => fs.mkdtempSync(path.join(os.tmpdir(), "polyloop-idem-"))),
      (dir) => Effect.sync(() => fs.rmSync(dir, { recursive: true, force: true }))
    )
    const context = yield* Layer.build(SqlRunLogStore.layerSqlite({ filename: path.join(dir, "runs.db") }))
    return yield* Effect.provide(RunLogStore.RunLogStore, context)
  })]
]

/** A model with nothing injected. */
const model0 = Effect.runSync(ScriptedModel.make(till))

/** Lets forked fibers run: yields, then a short real pause for SQLite's I/O. */
const settle = Effect.zipRight(Effect.repeatN(Effect.yieldNow(), 200), Effect.sleep("30 millis"))

describe.each(stores)("a retried send while its turn runs in this process (%s)", (_, makeStore) => {
  it.live("answers the second caller with the first turn's result: one turn, one charge", () =>
    Effect.scoped(Effect.gen(function*() {
      const store = yield* makeStore
      charges.length = 0
      const gate = yield* Deferred.make<void>()
      const blocked = yield* Deferred.make<void>()
      // Turn 1's first model call waits for the gate.
      const model = yield* ScriptedModel.make(till, {
        onCall: (call) => (call.step === 2 ? Effect.zipRight(Deferred.succeed(blocked, undefined), Deferred.await(gate)) : Effect.void)
      })
      yield* send(store, model, "chat", "a", "Charge order 1.")
      const first = yield* Effect.fork(send(store, model, "chat", "b", "Charge order 2."))
      yield* Deferred.await(blocked)
      const second = yield* Effect.fork(send(store, model, "chat", "b", "Charge order 2."))
      yield* settle
      yield* Deferred.succeed(gate, undefined)
      const [r1, r2] = [yield* Fiber.join(first), yield* Fiber.join(second)]
      assert.deepStrictEqual(r2, r1)
      assert.strictEqual(r1.turn, 1)
      const log = yield* store.readLog(Ids.runId("chat"))
      assert.deepStrictEqual(log.userMessages.map((m) => [m.turn, m.messageId]), [[1, "b"]])
      assert.deepStrictEqual(log.turns.map((t) => t.turn), [0, 1])
      assert.deepStrictEqual(charges, ["1", "2"], "the charge of turn 1 ran once")
      assert.deepStrictEqual(RunLogAudit.logProblems(log), [])
    })), { timeout: 30_000 })

  it.live("a message queued twice behind a running turn, and two first sends at once, each get one turn", () =>
    Effect.scoped(Effect.gen(function*() {
      const store = yield* makeStore
      charges.length = 0
      const gate = yield* Deferred.make<void>()
      const blocked = yield* Deferred.make<void>()
      const model = yield* ScriptedModel.make(till, {
        onCall: (call) => (call.step === 2 ? Effect.zipRight(Deferred.succeed(blocked, undefined), Deferred.await(gate)) : Effect.void)
      })
      // Two sends of the conversation's first message at once.
      const [a1, a2] = yield* Effect.all([send(store, model, "chat", "a", "Charge order 1."), send(store, model, "chat", "a", "Charge order 1.")], { concurrency: 2 })
      assert.deepStrictEqual(a2, a1)
      const running = yield* Effect.fork(send(store, model, "chat", "b", "Charge order 2."))
      yield* Deferred.await(blocked)
      // "c" sent twice while "b"'s turn runs: queued once, answered twice.
      const c1 = yield* Effect.fork(send(store, model, "chat", "c", "Charge order 3."))
      const c2 = yield* Effect.fork(send(store, model, "chat", "c", "Charge order 3."))
      yield* settle
      yield* Deferred.succeed(gate, undefined)
      yield* Fiber.join(running)
      const [r1, r2] = [yield* Fiber.join(c1), yield* Fiber.join(c2)]
      assert.deepStrictEqual(r2, r1)
      assert.strictEqual(r1.turn, 2)
      const log = yield* store.readLog(Ids.runId("chat"))
      assert.deepStrictEqual(log.userMessages.map((m) => [m.turn, m.messageId]), [[1, "b"], [2, "c"]])
      assert.deepStrictEqual(log.turns.map((t) => t.turn), [0, 1, 2])
      assert.deepStrictEqual(charges, ["1", "2", "3"])
      assert.deepStrictEqual(RunLogAudit.logProblems(log), [])
    })), { timeout: 30_000 })

  it.live("a retried send of a new message while the attempt finishes an interrupted turn first: one message, one turn", () =>
    Effect.scoped(Effect.gen(function*() {
      const store = yield* makeStore
      charges.length = 0
      yield* send(store, model0, "chat", "a", "Charge order 1.")
      // Turn 1 interrupted after its first step (its charge done and recorded).
      const reached = yield* Deferred.make<void>()
      const cut = yield* ScriptedModel.make(till, {
        onCall: (call) => (call.step === 3 ? Effect.zipRight(Deferred.succeed(reached, undefined), Effect.never) : Effect.void)
      })
      const interrupted = yield* Effect.fork(send(store, cut, "chat", "b", "Charge order 2."))
      yield* Deferred.await(reached)
      yield* Fiber.interrupt(interrupted)
      // "c" is sent (twice): the attempt finishes turn 1 first, then writes "c" for turn 2.
      const gate = yield* Deferred.make<void>()
      const blocked = yield* Deferred.make<void>()
      const model = yield* ScriptedModel.make(till, {
        onCall: (call) => (call.step === 3 ? Effect.zipRight(Deferred.succeed(blocked, undefined), Deferred.await(gate)) : Effect.void)
      })
      const first = yield* Effect.fork(send(store, model, "chat", "c", "Charge order 3."))
      yield* Deferred.await(blocked)
      const second = yield* Effect.fork(send(store, model, "chat", "c", "Charge order 3."))
      yield* settle
      yield* Deferred.succeed(gate, undefined)
      const [r1, r2] = [yield* Fiber.join(first), yield* Fiber.join(second)]
      assert.deepStrictEqual(r2, r1)
      assert.strictEqual(r1.turn, 2)
      const log = yield* store.readLog(Ids.runId("chat"))
      assert.deepStrictEqual(log.userMessages.map((m) => [m.turn, m.messageId]), [[1, "b"], [2, "c"]])
      assert.deepStrictEqual(log.turns.map((t) => t.turn), [0, 1, 2])
      assert.deepStrictEqual(charges, ["1", "2", "3"])
      assert.deepStrictEqual(RunLogAudit.logProblems(log), [])
    })), { timeout: 30_000 })

  it.live("20 sends of one id and 20 of another, all at once while a turn runs: two turns, each charge once, every caller its turn's result", () =>
    Effect.scoped(Effect.gen(function*() {
      const store = yield* makeStore
      charges.length = 0
      const gate = yield* Deferred.make<void>()
      const blocked = yield* Deferred.make<void>()
      const model = yield* ScriptedModel.make(till, {
        onCall: (call) => (call.step === 2 ? Effect.zipRight(Deferred.succeed(blocked, undefined), Deferred.await(gate)) : Effect.void)
      })
      yield* send(store, model, "chat", "a", "Charge order 1.")
      const sends = [...Array.from({ length: 20 }, () => ["b", "Charge order 2."] as const), ...Array.from({ length: 20 }, () => ["c", "Charge order 3."] as const)]
      const fibers = yield* Effect.forEach(sends, ([id, text]) => Effect.fork(send(store, model, "chat", id, text)))
      yield* Deferred.await(blocked)
      yield* settle
      yield* Deferred.succeed(gate, undefined)
      const results = yield* Effect.forEach(fibers, Fiber.join)
      const log = yield* store.readLog(Ids.runId("chat"))
      assert.deepStrictEqual(log.userMessages.map((m) => m.messageId).sort(), ["b", "c"])
      assert.deepStrictEqual(log.turns.map((t) => t.turn), [0, 1, 2])
      assert.deepStrictEqual([...charges].sort(), ["1", "2", "3"])
      const turnOf = new Map(log.userMessages.map((m) => [m.messageId, m.turn]))
      for (const [i, [id]] of sends.entries()) assert.strictEqual(results[i]!.turn, turnOf.get(id), `send ${i} (${id})`)
      assert.deepStrictEqual(RunLogAudit.logProblems(log), [])
    })), { timeout: 30_000 })

  it.live("the same id with another text is MessageIdReused, in the log or while its turn runs; nothing is written", () =>
    Effect.scoped(Effect.gen(function*() {
      const store = yield* makeStore
      const gate = yield* Deferred.make<void>()
      const blocked = yield* Deferred.make<void>()
      const model = yield* ScriptedModel.make(till, {
        onCall: (call) => (call.step === 4 ? Effect.zipRight(Deferred.succeed(blocked, undefined), Deferred.await(gate)) : Effect.void)
      })
      yield* send(store, model, "chat", "a", "Charge order 1.")
      yield* send(store, model, "chat", "b", "Charge order 2.")
      const size = RunLog.size(yield* store.readLog(Ids.runId("chat")))
      const reusedTask = yield* Effect.flip(send(store, model, "chat", "a", "Charge order 9."))
      assert.strictEqual(reusedTask._tag, "MessageIdReused")
      if (reusedTask._tag === "MessageIdReused") assert.deepStrictEqual([reusedTask.messageId, reusedTask.turn], ["a", 0])
      const reused = yield* Effect.flip(send(store, model, "chat", "b", "Charge order 9."))
      assert.strictEqual(reused._tag, "MessageIdReused")
      assert.strictEqual(RunLog.size(yield* store.readLog(Ids.runId("chat"))), size)
      // While the turn of "c" runs here: its id with another text, and a queued id with another text.
      const running = yield* Effect.fork(send(store, model, "chat", "c", "Charge order 3."))
      yield* Deferred.await(blocked)
      const queued = yield* Effect.fork(send(store, model, "chat", "d", "Charge order 4."))
      yield* settle
      assert.strictEqual((yield* Effect.flip(send(store, model, "chat", "c", "Charge order 3!")))._tag, "MessageIdReused")
      assert.strictEqual((yield* Effect.flip(send(store, model, "chat", "d", "Charge order 4!")))._tag, "MessageIdReused")
      yield* Deferred.succeed(gate, undefined)
      yield* Fiber.join(running)
      yield* Fiber.join(queued)
      const log = yield* store.readLog(Ids.runId("chat"))
      assert.deepStrictEqual(log.userMessages.map((m) => [m.messageId, m.text]), [["b", "Charge order 2."], ["c", "Charge order 3."], ["d", "Charge order 4."]])
    })), { timeout: 30_000 })

  it.live("an empty message id or text is InvalidRunRequest, nothing written", () =>
    Effect.scoped(Effect.gen(function*() {
      const store = yield* makeStore
      const model = yield* ScriptedModel.make(till)
      for (const [id, text] of [["", "Charge order 1."], ["a", ""], ["a", " \n\t"], ["x".repeat(201), "Charge order 1."]] as const) {
        const refused = yield* Effect.flip(send(store, model, "new", id, text))
        assert.strictEqual(refused._tag, "InvalidRunRequest", JSON.stringify([id, text]))
        assert.isTrue(RunLog.isEmpty(yield* store.readLog(Ids.runId("new"))))
      }
      yield* send(store, model, "chat", "a", "Charge order 1.")
      const size = RunLog.size(yield* store.readLog(Ids.runId("chat")))
      assert.strictEqual((yield* Effect.flip(send(store, model, "chat", "", "Charge order 2.")))._tag, "InvalidRunRequest")
      assert.strictEqual((yield* Effect.flip(send(store, model, "chat", "b", "")))._tag, "InvalidRunRequest")
      assert.strictEqual(RunLog.size(yield* store.readLog(Ids.runId("chat"))), size)
      assert.strictEqual(yield* model.calls, 2)
    })), { timeout: 30_000 })
})

describe("a fork of a conversation", () => {
  it.effect("is a conversation: forked at a step or at a turn boundary, it takes further messages", () =>
    Effect.gen(function*() {
      const store = yield* RunLogStore.makeMemory
      const model = yield* ScriptedModel.make(till)
      yield* send(store, model, "chat", "a", "Charge order 1.")
      yield* send(store, model, "chat", "b", "Charge order 2.")
      const parent = yield* store.readLog(Ids.runId("chat"))
      assert.deepStrictEqual(parent.turns.map((t) => t.atStep), [2, 4])
      // At step 1 (inside turn 0), at step 2 (turn 0's end) and at step 4 (turn 1's end).
      for (const atStep of [1, 2, 4]) {
        const runId = Ids.runId(`fork-${atStep}`)
        yield* Fork.fork({ from: Ids.runId("chat"), atStep, runId }).pipe(Effect.provideService(RunLogStore.RunLogStore, store))
        const forked = yield* store.readLog(runId)
        assert.deepStrictEqual(Option.map(forked.started, (s) => s.conversation), Option.some({ messageId: "a" }), `at ${atStep}`)
        const result = yield* send(store, model, runId, "z", "Charge order 9.")
        assert.strictEqual(result.stopReason._tag === "Completed" ? result.stopReason.answer : "", `Answer to "Charge order 9."`, `at ${atStep}`)
        const log = yield* store.readLog(runId)
        assert.strictEqual(log.userMessages.at(-1)!.messageId, "z")
        assert.strictEqual(result.turn, log.userMessages.at(-1)!.turn)
        assert.deepStrictEqual(RunLogAudit.logProblems(log), [], `at ${atStep}`)
        // A retried send of a message the parent held, on the fork: its recorded turn, nothing appended.
        if (atStep >= 2) {
          const size = RunLog.size(log)
          const again = yield* send(store, model, runId, "b", "Charge order 2.")
          assert.strictEqual(again.turn, 1)
          assert.strictEqual(RunLog.size(yield* store.readLog(runId)), size)
        }
      }
    }))
})
