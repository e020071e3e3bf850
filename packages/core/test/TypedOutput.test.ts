/**
 * Typed final answers (issue 47, design 0400): an agent's answer decoded against its output
 * schema; an answer that does not decode is fed back with the parse error and the model tries
 * again, bounded by `outputAttempts`; the typed value in `RunResult`, the encoded one in
 * `RunFinished`; the schema in the snapshot; the provider asked to constrain its text.
 */
import { assert, describe, it } from "@effect/vitest"
import * as Agent from "@polyloop/core/Agent"
import * as AgentDefinition from "@polyloop/core/AgentDefinition"
import * as EventSink from "@polyloop/core/EventSink"
import * as Ids from "@polyloop/core/Ids"
import * as ModelReply from "@polyloop/core/ModelReply"
import * as NativeToolCallParser from "@polyloop/core/NativeToolCallParser"
import * as RunLog from "@polyloop/core/RunLog"
import * as RunLogAudit from "@polyloop/core/RunLogAudit"
import * as RunLogStore from "@polyloop/core/RunLogStore"
import * as Snapshot from "@polyloop/core/Snapshot"
import * as Tool from "@polyloop/core/Tool"
import * as ToolRegistry from "@polyloop/core/ToolRegistry"
import * as ScriptedModel from "@polyloop/testing/ScriptedModel"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as fc from "effect/FastCheck"
import * as Fiber from "effect/Fiber"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Schema from "effect/Schema"
import * as Stream from "effect/Stream"
import * as fs from "node:fs"

const lookup = Tool.make({
  name: "lookup",
  description: "Looks an order up.",
  parameters: Schema.Struct({ order: Schema.String }),
  replayPolicy: "Always",
  handler: ({ order }) => Effect.succeed(`order ${order}: shipped on 2026-12-01`)
})
const tools = ToolRegistry.make(lookup)

/** The answer's schema: its encoded side (JSON) differs from its type (`shippedOn` is a `Date`). */
const Status = Schema.Struct({
  order: Schema.String,
  status: Schema.Literal("shipped", "pending"),
  shippedOn: Schema.Date
})
const agent = AgentDefinition.make({ name: "desk", systemPrompt: "You look orders up.", budget: { maxSteps: 8 }, output: Status })
const plain = AgentDefinition.make({ name: "desk", systemPrompt: "You look orders up.", budget: { maxSteps: 8 } })

const valid = JSON.stringify({ order: "17", status: "shipped", shippedOn: "2026-12-01T00:00:00.000Z" })
const callLookup = ModelReply.make({ text: "", toolCalls: [{ id: "", name: "lookup", argumentsText: JSON.stringify({ order: "17" }) }] })

/** Step 0 looks the order up; then the answers in `answers`, one per step. */
const scriptOf = (answers: ReadonlyArray<string>): ScriptedModel.Script => (_request, call) =>
  call.step === 0 ? callLookup : ModelReply.make({ text: answers[Math.min(call.step - 1, answers.length - 1)]! })

const services = (store: RunLogStore.RunLogStore.Service, sink: Layer.Layer<EventSink.EventSink> = EventSink.layerNoop, registry = tools) =>
  Layer.mergeAll(NativeToolCallParser.layer(), Layer.orDie(ToolRegistry.layerExecutor(registry)), sink, Layer.succeed(RunLogStore.RunLogStore, store))

const decisions = (log: RunLog.RunLog) => log.steps.map((s) => s.decision)

describe("typed final answers", () => {
  it.effect("an answer that decodes: the typed value in RunResult, the encoded one in RunFinished", () =>
    Effect.gen(function*() {
      const store = yield* RunLogStore.makeMemory
      const model = yield* ScriptedModel.make(scriptOf([valid]))
      const result = yield* Agent.run({ runId: Ids.runId("typed"), agent, task: "Where is order 17?", tools }).pipe(
        Effect.provide(Layer.merge(services(store), model.layer))
      )
      assert.strictEqual(result.stopReason._tag, "Completed")
      // Typed: `output` is the schema's type (a Date), no cast.
      const output: { readonly order: string; readonly status: "shipped" | "pending"; readonly shippedOn: Date } | undefined = result.output
      assert.isDefined(output)
      assert.strictEqual(output!.status, "shipped")
      assert.isTrue(output!.shippedOn instanceof Date)
      assert.strictEqual(output!.shippedOn.toISOString(), "2026-12-01T00:00:00.000Z")
      assert.deepStrictEqual(result.encodedOutput, JSON.parse(valid))
      const log = yield* store.readLog(Ids.runId("typed"))
      const finished = Option.getOrThrow(log.finished)
      assert.deepStrictEqual(finished.output, JSON.parse(valid), "RunFinished holds the encoded output")
      assert.strictEqual(Option.getOrThrow(log.started).logVersion, 4)
      assert.deepStrictEqual(RunLogAudit.logProblems(log), [])
      // The encoded RunResult (what the cluster and the CLI send) carries the encoded output only.
      const wire = Schema.decodeUnknownSync(Agent.RunResult)(Schema.encodeSync(Agent.RunResult)(result))
      assert.deepStrictEqual(wire.encodedOutput, JSON.parse(valid))
      assert.isFalse("output" in wire)
      // …and is typed again on the other side.
      const typedAgain = yield* Agent.decodeOutput(agent, wire)
      assert.deepStrictEqual(typedAgain, result)
    }))

  it.effect("Agent.stream ends with the run's typed result: the output is the schema's type, as Agent.run gives it", () =>
    Effect.gen(function*() {
      const store = yield* RunLogStore.makeMemory
      const model = yield* ScriptedModel.make(scriptOf([valid]))
      const items = yield* Stream.runCollect(Agent.stream({ runId: Ids.runId("typed-stream"), agent, task: "Where is order 17?", tools })).pipe(
        Effect.provide(Layer.merge(services(store), model.layer))
      )
      const last = [...items].at(-1)
      assert.strictEqual(last?._tag, "RunCompleted")
      if (last?._tag !== "RunCompleted") return
      // Typed without a cast: `result.output` is the schema's type (a Date inside).
      const output: { readonly order: string; readonly status: "shipped" | "pending"; readonly shippedOn: Date } | undefined = last.result.output
      assert.isTrue(output?.shippedOn instanceof Date)
      assert.strictEqual(output?.shippedOn.toISOString(), "2026-12-01T00:00:00.000Z")
      assert.deepStrictEqual(last.result.encodedOutput, JSON.parse(valid))
      // A model delta was streamed before it (streaming is on by default for Agent.stream).
      assert.isTrue(items.pipe((chunk) => [...chunk].some((item) => item._tag === "ModelDelta")))
    }))

  it.effect("an answer that does not decode is fed back with the parse error; the model tries again and succeeds", () =>
    Effect.gen(function*() {
      const store = yield* RunLogStore.makeMemory
      const model = yield* ScriptedModel.make(scriptOf(["It shipped.", JSON.stringify({ order: 17, status: "shipped", shippedOn: "2026-12-01" }), valid]))
      const runId = Ids.runId("retried")
      const result = yield* Agent.run({ runId, agent, task: "Where is order 17?", tools }).pipe(Effect.provide(Layer.merge(services(store), model.layer)))
      assert.deepStrictEqual(result.stopReason, { _tag: "Completed", by: "Answer", answer: valid })
      assert.strictEqual(result.steps, 4)
      assert.strictEqual(result.output?.order, "17")
      const log = yield* store.readLog(runId)
      const [, first, second, third] = decisions(log)
      assert.strictEqual(first!._tag, "InvalidDecision")
      assert.strictEqual(second!._tag, "InvalidDecision")
      assert.strictEqual(third!._tag, "Finish")
      if (first!._tag !== "InvalidDecision" || second!._tag !== "InvalidDecision") return
      assert.include(first!.invalidOutput!, "JSON", "a text that is not JSON: the parse error says so")
      assert.include(second!.invalidOutput!, "[\"order\"]", "the member that does not decode is named")
      assert.include(second!.invalidOutput!, "Expected string, actual 17")
      assert.include(second!.explanation, second!.invalidOutput!, "the model is told the parse error")
      // The model saw the explanation after its second answer.
      const requests = yield* model.requests
      const lastSeen = requests[3]!.request.messages
      const fed = lastSeen[lastSeen.length - 1]!
      assert.isTrue("text" in fed && fed.text.includes("Expected string, actual 17"))
      assert.deepStrictEqual(RunLogAudit.logProblems(log), [])
    }))

  it.effect("attempts exhausted: the run stops with InvalidOutput, the last parse error in it", () =>
    Effect.gen(function*() {
      const store = yield* RunLogStore.makeMemory
      const two = AgentDefinition.make({ name: "desk", systemPrompt: "You look orders up.", budget: { maxSteps: 8 }, output: Status, outputAttempts: 2 })
      const model = yield* ScriptedModel.make(scriptOf(["It shipped.", "{\"order\":\"17\"}", valid]))
      const runId = Ids.runId("exhausted")
      const result = yield* Agent.run({ runId, agent: two, task: "Where is order 17?", tools }).pipe(Effect.provide(Layer.merge(services(store), model.layer)))
      assert.strictEqual(result.stopReason._tag, "InvalidOutput")
      if (result.stopReason._tag !== "InvalidOutput") return
      assert.strictEqual(result.stopReason.by, "Answer")
      assert.strictEqual(result.stopReason.attempts, 2)
      assert.include(result.stopReason.issues, "[\"status\"]")
      assert.strictEqual(result.steps, 3, "two answers, no third")
      assert.isUndefined(result.output)
      assert.isUndefined(result.encodedOutput)
      const log = yield* store.readLog(runId, { verify: true })
      assert.deepStrictEqual(Option.getOrThrow(log.finished).stopReason, result.stopReason)
      assert.deepStrictEqual(RunLogAudit.logProblems(log), [])
    }))

  it.effect("a run interrupted mid-retry resumes to the same log and the same typed value", () =>
    Effect.gen(function*() {
      const script = scriptOf(["It shipped.", "{\"order\":\"17\"}", valid])
      const runId = Ids.runId("resumed")
      const reference = yield* RunLogStore.makeMemory
      const whole = yield* ScriptedModel.make(script)
      const expected = yield* Agent.run({ runId, agent, task: "Where is order 17?", tools }).pipe(Effect.provide(Layer.merge(services(reference), whole.layer)))
      const expectedLog = yield* reference.readLog(runId)

      // Cut once step 2's reply (the second invalid answer) is logged, before its step completes.
      const store = yield* RunLogStore.makeMemory
      const reached = yield* Deferred.make<void>()
      const sink = EventSink.layer((e) => (e._tag === "ModelReplied" && e.step === 2 ? Effect.zipRight(Deferred.succeed(reached, undefined), Effect.never) : Effect.void))
      const first = yield* ScriptedModel.make(script)
      const cut = yield* Effect.fork(Agent.run({ runId, agent, task: "Where is order 17?", tools }).pipe(Effect.provide(Layer.merge(services(store, sink), first.layer))))
      yield* Deferred.await(reached)
      yield* Fiber.interrupt(cut)
      const again = yield* ScriptedModel.make(script)
      const result = yield* Agent.run({ runId, agent, task: "Where is order 17?", tools }).pipe(Effect.provide(Layer.merge(services(store), again.layer)))
      const log = yield* store.readLog(runId)
      assert.strictEqual(log.resumes.length, 1)
      assert.deepStrictEqual(decisions(log), decisions(expectedLog))
      assert.deepStrictEqual(result.output, expected.output)
      assert.deepStrictEqual(result.stopReason, expected.stopReason)
      assert.deepStrictEqual(Option.getOrThrow(log.finished).output, Option.getOrThrow(expectedLog.finished).output)

      // Exhausted across a resume: the count is rebuilt from the log.
      const two = AgentDefinition.make({ name: "desk", systemPrompt: "You look orders up.", budget: { maxSteps: 8 }, output: Status, outputAttempts: 2 })
      const cutStore = yield* RunLogStore.makeMemory
      const reached2 = yield* Deferred.make<void>()
      const sink2 = EventSink.layer((e) => (e._tag === "StepCompleted" && e.step === 1 ? Effect.zipRight(Deferred.succeed(reached2, undefined), Effect.never) : Effect.void))
      const m1 = yield* ScriptedModel.make(script)
      const cut2 = yield* Effect.fork(Agent.run({ runId, agent: two, task: "Where is order 17?", tools }).pipe(Effect.provide(Layer.merge(services(cutStore, sink2), m1.layer))))
      yield* Deferred.await(reached2)
      yield* Fiber.interrupt(cut2)
      const m2 = yield* ScriptedModel.make(script)
      const stopped = yield* Agent.run({ runId, agent: two, task: "Where is order 17?", tools }).pipe(Effect.provide(Layer.merge(services(cutStore), m2.layer)))
      assert.strictEqual(stopped.stopReason._tag, "InvalidOutput")
      assert.strictEqual(stopped.steps, 3)
    }))

  it.effect("a finished run returns the same typed value without calling anything; a schema that no longer decodes it is refused", () =>
    Effect.gen(function*() {
      const store = yield* RunLogStore.makeMemory
      const runId = Ids.runId("finished")
      const model = yield* ScriptedModel.make(scriptOf([valid]))
      const first = yield* Agent.run({ runId, agent, task: "Where is order 17?", tools }).pipe(Effect.provide(Layer.merge(services(store), model.layer)))
      const idle = yield* ScriptedModel.make(() => Effect.die("the model must not be called"))
      const again = yield* Agent.run({ runId, agent, task: "Where is order 17?", tools }).pipe(Effect.provide(Layer.merge(services(store), idle.layer)))
      assert.strictEqual(yield* idle.calls, 0)
      assert.deepStrictEqual(again, first)
      assert.isTrue(again.output!.shippedOn instanceof Date)

      const Other = Schema.Struct({ order: Schema.Number })
      const changed = AgentDefinition.make({ name: "desk", systemPrompt: "You look orders up.", budget: { maxSteps: 8 }, output: Other })
      const refused = yield* Effect.flip(Agent.run({ runId, agent: changed, task: "Where is order 17?", tools }).pipe(Effect.provide(Layer.merge(services(store), idle.layer))))
      assert.strictEqual(refused._tag, "InvalidRunRequest")
      assert.include(refused.message, "Expected number")
    }))

  it.effect("resuming under a changed output schema is a SnapshotMismatch naming agent.output", () =>
    Effect.gen(function*() {
      const store = yield* RunLogStore.makeMemory
      const runId = Ids.runId("changed")
      const reached = yield* Deferred.make<void>()
      const sink = EventSink.layer((e) => (e._tag === "StepCompleted" && e.step === 0 ? Effect.zipRight(Deferred.succeed(reached, undefined), Effect.never) : Effect.void))
      const first = yield* ScriptedModel.make(scriptOf([valid]))
      const cut = yield* Effect.fork(Agent.run({ runId, agent, task: "Where is order 17?", tools }).pipe(Effect.provide(Layer.merge(services(store, sink), first.layer))))
      yield* Deferred.await(reached)
      yield* Fiber.interrupt(cut)
      const Wider = Schema.Struct({ order: Schema.String, status: Schema.Literal("shipped", "pending", "lost"), shippedOn: Schema.Date })
      const changed = AgentDefinition.make({ name: "desk", systemPrompt: "You look orders up.", budget: { maxSteps: 8 }, output: Wider })
      const again = yield* ScriptedModel.make(scriptOf([valid]))
      const mismatch = yield* Effect.flip(Agent.run({ runId, agent: changed, task: "Where is order 17?", tools }).pipe(Effect.provide(Layer.merge(services(store), again.layer))))
      assert.strictEqual(mismatch._tag, "SnapshotMismatch")
      if (mismatch._tag !== "SnapshotMismatch") return
      assert.isTrue(mismatch.differences.some(([path]) => path.startsWith("agent.output.schema")))
      // Without any output schema: also a mismatch (the snapshot had one).
      const none = yield* Effect.flip(Agent.run({ runId, agent: plain, task: "Where is order 17?", tools }).pipe(Effect.provide(Layer.merge(services(store), again.layer))))
      assert.strictEqual(none._tag, "SnapshotMismatch")
    }))

  it("the snapshot holds the output's JSON Schema; an agent without one keeps the snapshot it had", () => {
    const typed = Snapshot.make({ agent, task: "t", tools, parserId: "p" })
    assert.deepStrictEqual(typed.agent.output?.schema, JSON.parse(JSON.stringify(AgentDefinition.jsonSchemaOf(Status))))
    assert.strictEqual(typed.agent.output?.attempts, 3)
    assert.strictEqual(typed.agent.output?.constrain, true)
    const untyped = Snapshot.encode(Snapshot.make({ agent: plain, task: "t", tools, parserId: "p" }))
    assert.isFalse("output" in (untyped.value as { agent: object }).agent)
  })

  it.effect("the model request asks the provider to constrain its text", () =>
    Effect.gen(function*() {
      const store = yield* RunLogStore.makeMemory
      const model = yield* ScriptedModel.make(scriptOf([valid]))
      yield* Agent.run({ runId: Ids.runId("constrained"), agent, task: "Where is order 17?", tools }).pipe(Effect.provide(Layer.merge(services(store), model.layer)))
      const requests = yield* model.requests
      assert.deepStrictEqual(requests[0]!.request.output, { name: "answer", schema: AgentDefinition.jsonSchemaOf(Status), strict: false })
      // constrainOutput: false (a text action language): nothing asked.
      const loose = AgentDefinition.make({ name: "desk", systemPrompt: "s", budget: { maxSteps: 8 }, output: Status, constrainOutput: false })
      const other = yield* ScriptedModel.make(scriptOf([valid]))
      yield* Agent.run({ runId: Ids.runId("loose"), agent: loose, task: "Where is order 17?", tools }).pipe(Effect.provide(Layer.merge(services(store), other.layer)))
      assert.isUndefined((yield* other.requests)[0]!.request.output)
      const untyped = yield* ScriptedModel.make(scriptOf(["done"]))
      yield* Agent.run({ runId: Ids.runId("untyped"), agent: plain, task: "Where is order 17?", tools }).pipe(Effect.provide(Layer.merge(services(store), untyped.layer)))
      assert.isFalse("output" in (yield* untyped.requests)[0]!.request)
    }))

  it.effect("a completing tool's answer is decoded too; one that does not decode stops the run with InvalidOutput by Tool", () =>
    Effect.gen(function*() {
      const submit = (returns: (args: { readonly order: string }) => string) =>
        Tool.make({
          name: "submit",
          description: "Submits the answer.",
          parameters: Schema.Struct({ order: Schema.String }),
          completesRun: true,
          handler: (args) => Effect.succeed(returns(args))
        })
      const call = ModelReply.make({ text: "", toolCalls: [{ id: "", name: "submit", argumentsText: JSON.stringify({ order: "17" }) }] })
      const good = ToolRegistry.make(submit(() => valid))
      const store = yield* RunLogStore.makeMemory
      const m1 = yield* ScriptedModel.make([call])
      const ok = yield* Agent.run({ runId: Ids.runId("tool-ok"), agent, task: "t", tools: good }).pipe(Effect.provide(Layer.merge(services(store, EventSink.layerNoop, good), m1.layer)))
      assert.strictEqual(ok.stopReason._tag, "Completed")
      assert.strictEqual(ok.output?.order, "17")
      const bad = ToolRegistry.make(submit(({ order }) => `order ${order} submitted`))
      const m2 = yield* ScriptedModel.make([call])
      const stopped = yield* Agent.run({ runId: Ids.runId("tool-bad"), agent, task: "t", tools: bad }).pipe(Effect.provide(Layer.merge(services(store, EventSink.layerNoop, bad), m2.layer)))
      assert.strictEqual(stopped.stopReason._tag, "InvalidOutput")
      if (stopped.stopReason._tag !== "InvalidOutput") return
      assert.strictEqual(stopped.stopReason.by, "Tool")
      assert.isUndefined(stopped.output)
    }))

  it.effect("a finished log written by the previous version (log version 3) reads and returns its result", () =>
    Effect.gen(function*() {
      const texts = fs.readFileSync(new URL("./fixtures/pre-output-log.jsonl", import.meta.url), "utf8").trim().split("\n")
      const backend = RunLogStore.makeMemoryBackend()
      const store = RunLogStore.make(backend)
      const runId = Ids.runId("pre-output")
      for (const text of texts) {
        const record = JSON.parse(text) as RunLog.RunRecord
        yield* backend.append(runId, [{ seq: record.seq, kind: record._tag, json: text, record }])
      }
      const log = yield* store.readLog(runId)
      assert.strictEqual(Option.getOrThrow(log.started).logVersion, 3, "the fixture is the previous version's")
      assert.isUndefined(Option.getOrThrow(log.finished).output)
      const idle = yield* ScriptedModel.make(() => Effect.die("the model must not be called"))
      const result = yield* Agent.run({ runId, agent: plain, task: "Where is order 17?", tools }).pipe(Effect.provide(Layer.merge(services(store), idle.layer)))
      assert.deepStrictEqual(result.stopReason, { _tag: "Completed", by: "Answer", answer: "{\"order\":\"17\",\"status\":\"shipped\"}" })
      assert.isUndefined(result.encodedOutput)
      assert.isUndefined(result.output)
      assert.deepStrictEqual(RunLogAudit.logProblems(log), [])
    }))

  it.effect("a conversation: each turn's answer is typed; the attempts count per turn", () =>
    Effect.gen(function*() {
      const store = yield* RunLogStore.makeMemory
      const two = AgentDefinition.make({ name: "desk", systemPrompt: "You look orders up.", budget: { maxSteps: 8 }, output: Status, outputAttempts: 2 })
      const answer = (order: string) => JSON.stringify({ order, status: "pending", shippedOn: "2026-12-02T00:00:00.000Z" })
      // Turn 0: one invalid answer, then a valid one. Turn 1: one invalid answer, then a valid one
      // (with two attempts per run, not per turn, turn 1 would stop at its first invalid answer).
      const replies = ["nope", answer("17"), "still nope", answer("18")]
      const model = yield* ScriptedModel.make((_request, call) => ModelReply.make({ text: replies[Math.min(call.call, replies.length - 1)]! }))
      const runId = Ids.runId("conversation")
      const send = (messageId: string, text: string) =>
        Agent.send({ runId, messageId, text, agent: two, tools }).pipe(Effect.provide(Layer.merge(services(store), model.layer)))
      const first = yield* send("m0", "Where is order 17?")
      const second = yield* send("m1", "And order 18?")
      assert.strictEqual(first.output?.order, "17")
      assert.strictEqual(second.stopReason._tag, "Completed")
      assert.strictEqual(second.output?.order, "18")
      const log = yield* store.readLog(runId)
      assert.deepStrictEqual(log.turns.map((t) => (t.output as { order: string } | undefined)?.order), ["17", "18"])
      // A retried send returns the same typed value.
      const retried = yield* send("m1", "And order 18?")
      assert.deepStrictEqual(retried, second)
    }))

  it.prop("decoding an answer never throws, whatever the text (odd bytes, lone surrogates, deep nesting)", [
    fc.oneof(fc.string({ unit: "binary" }), fc.json(), fc.nat(5000).map((n) => "[".repeat(n) + "]".repeat(n)))
  ], ([text]) => {
    const decoded = agent.output!.decodeAnswer(text)
    assert.isTrue(Either.isLeft(decoded) ? typeof decoded.left === "string" : decoded.right.value.order !== undefined)
  }, { fastCheck: { numRuns: 300 } })

  it("a deep or huge answer: refused with a short reason, or its parse error cut; a huge valid answer decodes", () => {
    const output = agent.output!
    const deep = output.decodeAnswer("[".repeat(100_000) + "]".repeat(100_000))
    assert.isTrue(Either.isLeft(deep) && deep.left.includes("deeper than 256"))
    const long = "x".repeat(1_000_000)
    // Not an object: the error shows the whole value, which is cut.
    const wrong = output.decodeAnswer(JSON.stringify([long, long]))
    assert.isTrue(Either.isLeft(wrong))
    assert.isTrue(Either.isLeft(wrong) && wrong.left.length < 4100 && wrong.left.includes("more characters"))
    const big = output.decodeAnswer(JSON.stringify({ order: long, status: "shipped", shippedOn: "2026-12-01T00:00:00.000Z" }))
    assert.isTrue(Either.isRight(big) && big.right.value.order.length === 1_000_000)
  })
})
