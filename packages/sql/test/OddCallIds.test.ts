/**
 * A sub-agent's child run id comes from the model's call id (design 0392): a hostile or broken
 * provider may send ids a store cannot keep as they are — a NUL (PostgreSQL refuses it in
 * text), lone surrogates (UTF-8 turns `\ud800` and `\ud801` alike into U+FFFD, so two calls
 * would name one child), other control characters. Each call must still get a child of its own,
 * stored and read back under the id the parent records, on every store, and the run resumes.
 */
import { assert, describe, it } from "@effect/vitest"
import * as Agent from "@polyloop/core/Agent"
import * as AgentDefinition from "@polyloop/core/AgentDefinition"
import * as EventSink from "@polyloop/core/EventSink"
import * as Ids from "@polyloop/core/Ids"
import * as ModelReply from "@polyloop/core/ModelReply"
import * as NativeToolCallParser from "@polyloop/core/NativeToolCallParser"
import * as RunLogStore from "@polyloop/core/RunLogStore"
import * as SubAgent from "@polyloop/core/SubAgent"
import * as ToolRegistry from "@polyloop/core/ToolRegistry"
import * as SqlRunLogStore from "@polyloop/sql/SqlRunLogStore"
import * as ScriptedModel from "@polyloop/testing/ScriptedModel"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Redacted from "effect/Redacted"
import * as Schema from "effect/Schema"
import type * as Scope from "effect/Scope"
import * as path from "node:path"
import * as F from "./fixtures.js"
import { freshSchemaUrl } from "./PgSupport.js"

const reader = AgentDefinition.make({ name: "reader", systemPrompt: "You read one file.", budget: { maxSteps: 6 } })
const read = SubAgent.tool({
  name: "read",
  description: "Hands a file to a reader.",
  parameters: Schema.Struct({ path: Schema.String }),
  agent: reader,
  tools: ToolRegistry.make(),
  task: ({ path }) => `Read ${path}.`
})
const tools = ToolRegistry.make(read)
const planner = AgentDefinition.make({ name: "planner", systemPrompt: "You plan.", budget: { maxSteps: 20 }, actionConcurrency: 2 })

/** Call ids a store cannot keep verbatim, and ordinary odd ones that are fine as they are. */
const oddIds = ["nul\u0000x", "\ud800", "\ud801", "tab\tx", "del\u007f", "\udc00lone", "a/b", "../../etc", "  ", "é😀"]

const script: ScriptedModel.Script = (request, call) => {
  const system = request.messages[0]
  if (system?._tag === "System" && system.text === "You read one file.") {
    const task = request.messages.find((m) => m._tag === "User")
    // The answer carries what JSON escapes as `\u…` (PostgreSQL's jsonb refuses a NUL's).
    return ModelReply.make({ text: `summary of ${task?._tag === "User" ? task.text : "?"}\u0000\ud800` })
  }
  if (call.step === 0) {
    return ModelReply.make({
      text: "",
      toolCalls: oddIds.map((id, i) => ({ id, name: "read", argumentsText: JSON.stringify({ path: `f${i}` }) }))
    })
  }
  return ModelReply.make({ text: request.messages.filter((m) => m._tag === "Tool").map((m) => (m._tag === "Tool" ? m.text : "")).join(" | ") })
}

type StoreUnderTest = Effect.Effect<Layer.Layer<RunLogStore.RunLogStore, unknown>, never, Scope.Scope>

/** The store the layer builds (for the test's scope), the scripted model, and the run's services over them. */
const worldOf = (layer: StoreUnderTest) =>
  Effect.gen(function*() {
    const store = yield* Effect.orDie(Effect.map(Layer.build(yield* layer), (ctx) => Context.get(ctx, RunLogStore.RunLogStore)))
    const model = yield* ScriptedModel.make(script)
    const services = Layer.mergeAll(
      NativeToolCallParser.layer(),
      Layer.orDie(ToolRegistry.layerExecutor(tools)),
      EventSink.layerNoop,
      Layer.succeed(RunLogStore.RunLogStore, store),
      model.layer
    )
    return { store, model, services }
  })

const check = (layer: StoreUnderTest) =>
  Effect.gen(function*() {
    const { services, store } = yield* worldOf(layer)
    const runId = Ids.runId("odd-ids")
    const result = yield* Agent.run({ runId, agent: planner, task: "Read them all.", tools }).pipe(Effect.provide(services))
    // Every call read its own file through a child of its own.
    assert.strictEqual(result.stopReason._tag, "Completed")
    const answer = result.stopReason._tag === "Completed" ? result.stopReason.answer ?? "" : ""
    assert.deepStrictEqual(answer.split(" | "), oddIds.map((_, i) => `summary of Read f${i}.\u0000\ud800`))
    assert.strictEqual(result.children?.runs, oddIds.length)
    const log = yield* store.readLog(runId)
    const children = [...log.results].sort((a, b) => a.callIndex - b.callIndex).map((r) => r.child!.runId)
    assert.strictEqual(new Set(children).size, oddIds.length, "two calls share a child")
    for (const [i, child] of children.entries()) {
      // Stored and read back under the very id the parent records.
      const childLog = yield* store.readLog(child)
      assert.strictEqual(Option.getOrThrow(childLog.started).runId, child, `child of call ${i}`)
      assert.strictEqual(Option.getOrThrow(childLog.finished).stopReason._tag, "Completed", `child of call ${i}`)
      // An id a store keeps verbatim is the plain `<parent>/<step>/<callId>`; any other is hashed.
      const plain = `odd-ids/0/${oddIds[i]}`
      if (i >= 6) assert.strictEqual(child, plain)
      else assert.match(child, /^child-(u16-)?[0-9a-f]{64}$/, `call ${i}'s id ${JSON.stringify(oddIds[i])} is not kept verbatim by every store`)
    }
    // The store lists the parent and its children, finished.
    const listed = yield* store.listRuns()
    assert.strictEqual(listed.filter((r) => r.status === "Finished").length, oddIds.length + 1)
    // Asked again, the finished run returns its result and nothing runs.
    const again = yield* Agent.run({ runId, agent: planner, task: "Read them all.", tools }).pipe(Effect.provide(services))
    assert.deepStrictEqual(again.stopReason, result.stopReason)
  })

/** A new run or conversation under an id no store keeps: `InvalidRunRequest`, nothing written. */
const refuseNew = (layer: StoreUnderTest) =>
  Effect.gen(function*() {
    const { model, services, store } = yield* worldOf(layer)
    for (const id of ["nul\u0000run", "lone\ud800", "\udc00"]) {
      const ran = yield* Effect.flip(Agent.run({ runId: Ids.runId(id), agent: planner, task: "Read them all.", tools }).pipe(Effect.provide(services)))
      assert.strictEqual(ran._tag, "InvalidRunRequest", JSON.stringify(id))
      const sent = yield* Effect.flip(Agent.send({ runId: Ids.runId(id), messageId: "m1", text: "hello", agent: planner, tools }).pipe(Effect.provide(services)))
      assert.strictEqual(sent._tag, "InvalidRunRequest", JSON.stringify(id))
    }
    assert.deepStrictEqual(yield* store.listRuns(), [], "something was written")
    assert.strictEqual(yield* model.calls, 0)
    // Other control characters and any well-formed text are kept by every store: such a run runs.
    const fine = yield* Agent.run({ runId: Ids.runId("tab\tand é😀"), agent: planner, task: "Read them all.", tools }).pipe(Effect.provide(services))
    assert.strictEqual(fine.stopReason._tag, "Completed")
  })

describe("a new run under an id no store can keep (design 0392, decision 8)", () => {
  it.scoped("memory", () => refuseNew(Effect.map(RunLogStore.makeMemory, (store) => Layer.succeed(RunLogStore.RunLogStore, store))))
  it.scoped("SQLite", () => refuseNew(Effect.map(F.tempDir("polyloop-odd-"), (dir) => SqlRunLogStore.layerSqlite({ filename: path.join(dir, "runs.db") }))), 60_000)
  it.scoped("PostgreSQL", () => refuseNew(Effect.map(freshSchemaUrl, (url) => SqlRunLogStore.layerPg({ url: Redacted.make(url), maxConnections: 4 }))), 60_000)
})

describe("sub-agent calls with ids a store cannot keep verbatim (design 0392)", () => {
  it.scoped("memory", () => check(Effect.map(RunLogStore.makeMemory, (store) => Layer.succeed(RunLogStore.RunLogStore, store))))
  it.scoped("SQLite", () => check(Effect.map(F.tempDir("polyloop-odd-"), (dir) => SqlRunLogStore.layerSqlite({ filename: path.join(dir, "runs.db") }))), 60_000)
  it.scoped("PostgreSQL", () => check(Effect.map(freshSchemaUrl, (url) => SqlRunLogStore.layerPg({ url: Redacted.make(url), maxConnections: 4 }))), 60_000)
})
