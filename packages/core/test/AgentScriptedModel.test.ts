/**
 * The scripted model the loop tests, examples and benchmarks run on: steps counted from the
 * history, requests recorded as they were, failures, latency on `Clock`, hooks.
 */
import { assert, describe, it } from "@effect/vitest"
import type * as Message from "@polyloop/core/Message"
import * as ModelClient from "@polyloop/core/ModelClient"
import * as ScriptedModel from "@polyloop/testing/ScriptedModel"
import * as Cause from "effect/Cause"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Fiber from "effect/Fiber"
import * as TestClock from "effect/TestClock"

const request = (messages: ReadonlyArray<Message.Message>): ModelClient.ModelRequest => ({ messages, tools: [], settings: {} })
const assistant: Message.Message = { _tag: "Assistant", text: "", toolCalls: [] }
const user: Message.Message = { _tag: "User", text: "obs" }

describe("ScriptedModel", () => {
  it.effect("serves the reply of the step (the number of Assistant messages), also on a new history array", () =>
    Effect.gen(function*() {
      const model = yield* ScriptedModel.make(["zero", "one", "two"])
      const history: Array<Message.Message> = [{ _tag: "System", text: "s" }, { _tag: "User", text: "task" }]
      assert.strictEqual((yield* model.client.generate(request(history))).text, "zero")
      history.push(assistant, user)
      assert.strictEqual((yield* model.client.generate(request(history))).text, "one")
      history.push(assistant, user)
      assert.strictEqual((yield* model.client.generate(request(history))).text, "two")
      // A resumed run renders a fresh array: counted from scratch.
      assert.strictEqual((yield* model.client.generate(request(history.slice(0, 4)))).text, "one")
      const seen = yield* model.requests
      assert.deepStrictEqual(seen.map((s) => [s.call.step, s.call.call, s.call.attempt]), [[0, 0, 0], [1, 1, 0], [2, 2, 0], [1, 3, 1]])
      // Requests are recorded as they were, not as the array grew afterwards.
      assert.deepStrictEqual(seen.map((s) => s.request.messages.length), [2, 4, 6, 4])
      const exit = yield* Effect.exit(model.client.generate(request([...history, assistant])))
      assert.isTrue(Exit.isFailure(exit) && Cause.isDie(exit.cause))
    }))

  it.effect("fails the given number of times, per step, with the given retryability", () =>
    Effect.gen(function*() {
      const model = yield* ScriptedModel.make(["a", "b"], {
        failures: [{ step: 1, times: 2, retryable: true, status: 503 }, { times: 1, retryable: false }]
      })
      const first = yield* Effect.flip(model.client.generate(request([])))
      assert.isFalse(first.retryable)
      assert.strictEqual((yield* model.client.generate(request([]))).text, "a")
      const second = yield* Effect.flip(model.client.generate(request([assistant])))
      assert.isTrue(second.retryable)
      assert.strictEqual(second.status, 503)
      yield* Effect.flip(model.client.generate(request([assistant])))
      assert.strictEqual((yield* model.client.generate(request([assistant]))).text, "b")
      assert.strictEqual(yield* model.calls, 5)
    }))

  it.effect("is slow on Clock when asked, and counts the calls interrupted in flight", () =>
    Effect.gen(function*() {
      const model = yield* ScriptedModel.make(["late"], { latency: "10 seconds" })
      const fiber = yield* Effect.fork(model.client.generate(request([])))
      yield* TestClock.adjust("9 seconds")
      assert.isTrue((yield* Fiber.poll(fiber))._tag === "None")
      yield* TestClock.adjust("1 second")
      assert.strictEqual((yield* Fiber.join(fiber)).text, "late")
      const slow = yield* Effect.fork(model.client.generate(request([])))
      yield* TestClock.adjust("1 second")
      yield* Fiber.interrupt(slow)
      assert.strictEqual(yield* model.interruptions, 1)
    }))

  it.effect("replies from a function of the request and the call; fills empty tool call ids by step", () =>
    Effect.gen(function*() {
      const model = yield* ScriptedModel.make((req, call) =>
        call.step === 0 ? ScriptedModel.toolCall("read", { path: `/${req.messages.length}` }) : Effect.succeed(ScriptedModel.text("done"))
      )
      const reply = yield* model.client.generate(request([user]))
      assert.deepStrictEqual(reply.toolCalls, [{ id: "call_s0_0", name: "read", argumentsText: "{\"path\":\"/1\"}" }])
      assert.strictEqual((yield* model.client.generate(request([user, assistant]))).text, "done")
      assert.strictEqual(ScriptedModel.code("python", "x = 1").text, "```python\nx = 1\n```")
    }))

  it.effect("unreachable dies when called", () =>
    Effect.gen(function*() {
      const client = yield* ModelClient.ModelClient
      const exit = yield* Effect.exit(client.generate(request([])))
      assert.isTrue(Exit.isFailure(exit) && Cause.isDie(exit.cause))
    }).pipe(Effect.provide(ScriptedModel.unreachable)))
})
