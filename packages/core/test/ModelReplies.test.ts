/**
 * Design 0140 in the loop: a reply cut off at the output limit is never acted on or taken for an
 * answer (the snapshot's `truncated` text explains it to the model); the model retry waits at
 * least the provider's `retryAfter` and refuses at once a hint beyond `modelRetry.maxDelay`;
 * finish reasons are normalised and the pre-0140 reply shape still reads; an old snapshot
 * (without `truncated`) matches the current default one.
 */
import { assert, describe, it } from "@effect/vitest"
import * as Agent from "@polyloop/core/Agent"
import * as AgentDefinition from "@polyloop/core/AgentDefinition"
import { ModelError } from "@polyloop/core/Errors"
import * as EventSink from "@polyloop/core/EventSink"
import { runId } from "@polyloop/core/Ids"
import * as ModelClient from "@polyloop/core/ModelClient"
import * as ModelReply from "@polyloop/core/ModelReply"
import * as NativeToolCallParser from "@polyloop/core/NativeToolCallParser"
import * as RunLogStore from "@polyloop/core/RunLogStore"
import * as Snapshot from "@polyloop/core/Snapshot"
import * as SyntheticObservations from "@polyloop/core/SyntheticObservations"
import * as Tool from "@polyloop/core/Tool"
import * as ToolRegistry from "@polyloop/core/ToolRegistry"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Schema from "effect/Schema"
import * as TestClock from "effect/TestClock"

let executed: Array<string> = []
const write = Tool.make({
  name: "write_file",
  description: "Writes a file",
  parameters: Schema.Struct({ path: Schema.String, content: Schema.String }),
  handler: ({ path }) => Effect.sync(() => void executed.push(path)).pipe(Effect.as("written"))
})
const registry = ToolRegistry.make(write)

const agent = (fields: Partial<Parameters<typeof AgentDefinition.make>[0]> = {}) =>
  AgentDefinition.make({ name: "writer", systemPrompt: "Write.", budget: { maxSteps: 4 }, ...fields })

/** The services of a run whose model answers `generate`, on a fresh memory store. */
const services = (generate: ModelClient.ModelClient.Service["generate"]) =>
  Layer.mergeAll(
    ModelClient.layer(generate),
    NativeToolCallParser.layer(),
    ToolRegistry.layerExecutor(registry),
    EventSink.layerNoop,
    RunLogStore.layerMemory
  )

/** A model answering the replies in order, counting its calls. */
const scripted = (replies: ReadonlyArray<Effect.Effect<ModelReply.ModelReply, ModelError>>) => {
  let calls = 0
  const generate: ModelClient.ModelClient.Service["generate"] = () =>
    Effect.suspend(() => replies[Math.min(calls++, replies.length - 1)]!)
  return { generate, calls: () => calls }
}

const cutCall = ModelReply.make({
  toolCalls: [{ id: "call_1", name: "write_file", argumentsText: "{\"path\":\"a.txt\",\"content\":\"hello wor" }],
  finishReason: "length"
})
const cutButValidCall = ModelReply.make({
  toolCalls: [{ id: "call_2", name: "write_file", argumentsText: "{\"path\":\"b.txt\",\"content\":\"x\"}" }],
  finishReason: "max_tokens"
})
const cutText = ModelReply.make({ text: "The answer is forty", finishReason: "length" })
const answer = ModelReply.make({ text: "Done.", finishReason: "stop" })

describe("a reply cut off at the output limit", () => {
  it.effect("is never executed nor taken for the answer: InvalidDecision with the snapshot's truncated text", () =>
    Effect.gen(function*() {
      executed = []
      const model = scripted([cutCall, cutButValidCall, cutText, answer].map(Effect.succeed))
      const store = yield* RunLogStore.makeMemory
      const result = yield* Agent.run({ runId: runId("cut"), agent: agent(), task: "write", tools: registry }).pipe(
        Effect.provide(Layer.merge(services(model.generate), Layer.succeed(RunLogStore.RunLogStore, store)))
      )
      assert.deepStrictEqual(result.stopReason, { _tag: "Completed", by: "Answer", answer: "Done." })
      assert.deepStrictEqual(executed, [], "no cut-off call ran, even one whose arguments happen to parse")
      const log = yield* store.readLog(runId("cut"))
      const text = SyntheticObservations.defaults.truncated!
      assert.deepStrictEqual(log.steps.map((step) => step.decision), [
        { _tag: "InvalidDecision", explanation: text },
        { _tag: "InvalidDecision", explanation: text },
        { _tag: "InvalidDecision", explanation: text },
        { _tag: "Finish", answer: "Done." }
      ])
      assert.deepStrictEqual(log.replies[1]!.reply.finishReason, "length")
      assert.deepStrictEqual(log.replies[1]!.reply.rawFinishReason, "max_tokens")
    }))

  it.effect("the truncated text is the agent's own (in the snapshot), with {tool} filled", () =>
    Effect.gen(function*() {
      executed = []
      const model = scripted([cutCall, answer].map(Effect.succeed))
      const custom = agent({ syntheticObservations: { truncated: "CUT ({tool}); tools: {tools}" } })
      const store = yield* RunLogStore.makeMemory
      yield* Agent.run({ runId: runId("custom"), agent: custom, task: "write", tools: registry }).pipe(
        Effect.provide(Layer.merge(services(model.generate), Layer.succeed(RunLogStore.RunLogStore, store)))
      )
      const log = yield* store.readLog(runId("custom"))
      assert.deepStrictEqual(log.steps[0]!.decision, { _tag: "InvalidDecision", explanation: "CUT (write_file); tools: write_file" })
      const snapshot = Option.getOrThrow(log.started).snapshot as { agent: { syntheticObservations: { truncated: string } } }
      assert.strictEqual(snapshot.agent.syntheticObservations.truncated, "CUT ({tool}); tools: {tools}")
      assert.deepStrictEqual(executed, [])
    }))
})

const rateLimited = (retryAfter: Duration.DurationInput) =>
  Effect.fail(
    new ModelError({
      retryable: true,
      status: 429,
      message: "answered 429 Too Many Requests",
      retryAfter: Duration.decode(retryAfter),
      code: "rate_limit_exceeded",
      requestId: "req_123"
    })
  )

describe("the model retry and the provider's retryAfter", () => {
  it.effect("waits at least the hint (2 s), then succeeds", () =>
    Effect.gen(function*() {
      const model = scripted([rateLimited("2 seconds"), Effect.succeed(answer)])
      const fiber = yield* Agent.run({ runId: runId("hint"), agent: agent(), task: "write", tools: registry }).pipe(
        Effect.provide(services(model.generate)),
        Effect.fork
      )
      yield* TestClock.adjust("1999 millis")
      assert.strictEqual(model.calls(), 1, "not retried before the hint")
      assert.isTrue(Option.isNone(yield* Fiber.poll(fiber)))
      yield* TestClock.adjust("1 millis")
      const result = yield* Fiber.join(fiber)
      assert.strictEqual(model.calls(), 2)
      assert.deepStrictEqual(result.stopReason, { _tag: "Completed", by: "Answer", answer: "Done." })
    }))

  it.effect("a hint beyond modelRetry.maxDelay fails at once, typed, saying why", () =>
    Effect.gen(function*() {
      const model = scripted([rateLimited("3600 seconds"), Effect.succeed(answer)])
      const error = yield* Agent.run({ runId: runId("long"), agent: agent(), task: "write", tools: registry }).pipe(
        Effect.provide(services(model.generate)),
        Effect.flip
      )
      assert.strictEqual(model.calls(), 1)
      assert.instanceOf(error, ModelError)
      if (!(error instanceof ModelError)) return
      assert.strictEqual(error.status, 429)
      assert.strictEqual(error.code, "rate_limit_exceeded")
      assert.strictEqual(error.requestId, "req_123")
      assert.deepStrictEqual(error.retryAfter, Duration.seconds(3600))
      assert.match(error.message, /asked to retry after 1h.*longer than modelRetry\.maxDelay \(10s\): not retried/)
      assert.include(error.providerDetails, "code rate_limit_exceeded")
    }))

  it.effect("the schedule's delay is the larger of the backoff and the hint", () =>
    Effect.gen(function*() {
      const retry = { maxAttempts: 3, baseDelay: Duration.millis(100), maxDelay: Duration.seconds(30) }
      const model = scripted([rateLimited("5 seconds"), rateLimited("20 seconds"), Effect.succeed(answer)])
      const fiber = yield* Agent.run({ runId: runId("two"), agent: agent({ modelRetry: retry }), task: "w", tools: registry }).pipe(
        Effect.provide(services(model.generate)),
        Effect.fork
      )
      yield* TestClock.adjust("4999 millis")
      assert.strictEqual(model.calls(), 1)
      yield* TestClock.adjust("1 millis")
      assert.strictEqual(model.calls(), 2)
      yield* TestClock.adjust("19999 millis")
      assert.strictEqual(model.calls(), 2)
      yield* TestClock.adjust("1 millis")
      yield* Fiber.join(fiber)
      assert.strictEqual(model.calls(), 3)
    }))

  it("the ModelError's new fields round-trip through its schema (retryAfter as milliseconds)", () => {
    const error = new ModelError({
      retryable: false,
      message: "m",
      status: 429,
      retryAfter: Duration.millis(1500),
      code: "insufficient_quota",
      type: "insufficient_quota",
      param: "model",
      requestId: "req_1"
    })
    const encoded = Schema.encodeSync(ModelError)(error)
    assert.strictEqual((encoded as unknown as { retryAfter: number }).retryAfter, 1500)
    const decoded = Schema.decodeSync(ModelError)(encoded)
    assert.deepStrictEqual(decoded.retryAfter, Duration.millis(1500))
    assert.strictEqual(decoded.providerDetails, "code insufficient_quota · type insufficient_quota · param model · retry after 1s 500ms · request req_1")
  })
})

describe("finish reasons", () => {
  it("are normalised to one vocabulary, the raw word kept", () => {
    const cases: ReadonlyArray<readonly [string, ModelReply.FinishReason]> = [
      ["stop", "stop"],
      ["end_turn", "stop"],
      ["STOP", "stop"],
      ["length", "length"],
      ["max_tokens", "length"],
      ["MAX_TOKENS", "length"],
      ["tool_calls", "tool-calls"],
      ["tool-calls", "tool-calls"],
      ["tool_use", "tool-calls"],
      ["function_call", "tool-calls"],
      ["content_filter", "content-filter"],
      ["SAFETY", "content-filter"],
      ["pause_turn", "other"],
      ["unknown", "other"],
      // Words that name a property of every object are words like any other.
      ["constructor", "other"],
      ["__proto__", "other"],
      ["toString", "other"]
    ]
    for (const [raw, normalised] of cases) {
      assert.strictEqual(ModelReply.normaliseFinishReason(raw), normalised, raw)
      const reply = ModelReply.make({ finishReason: raw })
      assert.strictEqual(reply.finishReason, normalised)
      assert.strictEqual(reply.rawFinishReason, raw === normalised ? undefined : raw)
    }
  })

  it("a reply logged before design 0140 (a raw finish reason) reads, normalised with the raw word kept", () => {
    const decode = Schema.decodeUnknownSync(ModelReply.ModelReply)
    const old = { text: "", toolCalls: [], usage: { inputTokens: 1, outputTokens: 2 }, finishReason: "tool_calls" }
    assert.deepStrictEqual(decode(old), { ...old, finishReason: "tool-calls", rawFinishReason: "tool_calls" })
    assert.deepStrictEqual(decode({ ...old, finishReason: "stop" }), { ...old, finishReason: "stop" })
    assert.deepStrictEqual(decode({ ...old, finishReason: "unknown" }), { ...old, finishReason: "other", rawFinishReason: "unknown" })
    // The new shape is written.
    assert.deepStrictEqual(Schema.encodeSync(ModelReply.ModelReply)(decode(old)), {
      ...old,
      finishReason: "tool-calls",
      rawFinishReason: "tool_calls"
    })
  })
})

describe("snapshots recorded before the truncated text", () => {
  it("match the current snapshot when its truncated text is the default, and only then", () => {
    const input = { agent: agent(), task: "t", tools: registry, parserId: "p" }
    const current = Snapshot.encode(Snapshot.make(input))
    const value = current.value as { agent: { syntheticObservations: Record<string, unknown> } }
    const { truncated: _t, ...older } = value.agent.syntheticObservations
    const recorded = { ...value, agent: { ...value.agent, syntheticObservations: older } }
    assert.notStrictEqual(Snapshot.hash(recorded), current.hash)
    assert.isTrue(Snapshot.matches(Snapshot.hash(recorded), current))
    const custom = Snapshot.encode(Snapshot.make({ ...input, agent: agent({ syntheticObservations: { truncated: "cut" } }) }))
    assert.isFalse(Snapshot.matches(Snapshot.hash(recorded), custom))
  })
})
