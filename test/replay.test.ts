/**
 * Request fingerprints and replay (issue 17, design 0170): a 20-step run replayed under
 * `Replay.model` reproduces its log byte for byte (apart from ids and timestamps) on the
 * memory, SQLite and PostgreSQL stores; one-character changes of the system prompt, a tool's
 * description, a setting, or an observation fail with `ReplayDiverged` naming the step and the
 * path; the incremental fingerprint equals the hash of the whole canonical request.
 */
import { assert, describe, it } from "@effect/vitest"
import * as Ids from "@polyloop/core/Ids"
import type * as ModelClient from "@polyloop/core/ModelClient"
import * as Replay from "@polyloop/core/Replay"
import * as RunLog from "@polyloop/core/RunLog"
import * as RunLogStore from "@polyloop/core/RunLogStore"
import * as Snapshot from "@polyloop/core/Snapshot"
import * as Tool from "@polyloop/core/Tool"
import * as ToolRegistry from "@polyloop/core/ToolRegistry"
import * as Agent from "@polyloop/core/Agent"
import * as ScriptedModel from "@polyloop/testing/ScriptedModel"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Schema from "effect/Schema"
import * as Research from "./support/research-agent.js"
import * as Stores from "./support/research-stores.js"

const STEPS = 20

/** Records a `STEPS`-step run under `runId` and returns its log. */
const record = (runId: string) =>
  Effect.gen(function*() {
    const result = yield* Agent.run(Research.request(runId)).pipe(Effect.provide(Layer.merge(Research.services, Research.model(STEPS))))
    assert.strictEqual(result.steps, STEPS)
    assert.strictEqual(result.stopReason._tag, "Completed")
    const store = yield* RunLogStore.RunLogStore
    return yield* store.readLog(Ids.runId(runId))
  })

/** The log's records as stored, with the run id, timestamps and elapsed times set to constants. */
const bytes = (log: RunLog.RunLog): string =>
  RunLog.records(log).map((record) => {
    switch (record._tag) {
      case "RunStarted":
        return RunLogStore.encodeRecord({ ...record, runId: Ids.runId("X"), startedAt: 0 })
      case "StepCompleted":
        return RunLogStore.encodeRecord({ ...record, elapsed: 0, ...(record.modelElapsed === undefined ? {} : { modelElapsed: 0 }) })
      case "ModelReplied":
        return RunLogStore.encodeRecord({ ...record, ...(record.modelElapsed === undefined ? {} : { modelElapsed: 0 }) })
      case "RunFinished":
        return RunLogStore.encodeRecord({ ...record, finishedAt: 0, counters: { ...record.counters, elapsed: 0 } })
      default:
        return RunLogStore.encodeRecord(record)
    }
  }).join("\n")

const replayUnder = (recorded: RunLog.RunLog, request: Agent.RunRequest) =>
  Replay.run({ recorded, request }).pipe(Effect.provide(Research.services))

describe("replay", () => {
  for (const [name, store] of Stores.all) {
    it.scoped(`a ${STEPS}-step run replays byte for byte on the ${name} store`, () =>
      Effect.gen(function*() {
        const recorded = yield* record("recorded")
        for (const replied of recorded.replies) assert.match(replied.requestHash ?? "", /^[0-9a-f]{64}$/)
        const comparison = yield* replayUnder(recorded, Research.request("replayed"))
        assert.deepStrictEqual(comparison, { _tag: "Identical", records: RunLog.size(recorded) })
        const replayed = yield* Effect.flatMap(RunLogStore.RunLogStore, (s) => s.readLog(Ids.runId("replayed")))
        assert.strictEqual(bytes(replayed), bytes(recorded))
        // The model was not called: Replay served every reply (a second replay is identical too).
        assert.strictEqual((yield* replayUnder(recorded, Research.request("replayed-2")))._tag, "Identical")
      }).pipe(Effect.provide(store)), { timeout: 120_000 })
  }

  const diverges = (request: Agent.RunRequest, services = Research.services) =>
    Effect.gen(function*() {
      const recorded = yield* record("recorded")
      const error = yield* Effect.flip(Replay.run({ recorded, request }).pipe(Effect.provide(services)))
      assert.strictEqual(error._tag, "ReplayDiverged", String(error))
      if (error._tag !== "ReplayDiverged") throw error
      assert.strictEqual(error.runId, "recorded")
      assert.notStrictEqual(error.expected, error.actual)
      // The replayed run stopped at the divergence: its log holds the steps before it, unfinished.
      const replayed = yield* Effect.flatMap(RunLogStore.RunLogStore, (s) => s.readLog(request.runId))
      assert.strictEqual(replayed.steps.length, error.step)
      assert.isTrue(Option.isNone(replayed.finished))
      return error
    }).pipe(Effect.provide(RunLogStore.layerMemory))

  it.effect("a one-character change of the system prompt diverges at step 0, messages[0].text", () =>
    Effect.gen(function*() {
      const error = yield* diverges(Research.request("changed", { systemPrompt: `${Research.systemPrompt}!` }))
      assert.strictEqual(error.step, 0)
      assert.strictEqual(error.path, "messages[0].text")
      assert.strictEqual(error.recorded, Research.systemPrompt)
      assert.strictEqual(error.current, `${Research.systemPrompt}!`)
      assert.match(error.message, /diverged at step 0: messages\[0\]\.text differs/)
    }))

  it.effect("a one-character change of a tool's description diverges at step 0, tools[1].description", () =>
    Effect.gen(function*() {
      const note: typeof Research.note = { ...Research.note, description: "Writes a note!" }
      const tools = ToolRegistry.make(Research.add, note, Research.submit)
      const services = Research.servicesFor(tools)
      const error = yield* diverges(Research.request("changed", {}, tools), services)
      assert.strictEqual(error.step, 0)
      assert.strictEqual(error.path, "tools[1].description")
      assert.strictEqual(error.recorded, "Writes a note.")
      assert.strictEqual(error.current, "Writes a note!")
    }))

  it.effect("a one-character change of a setting diverges at step 0, settings.temperature", () =>
    Effect.gen(function*() {
      const error = yield* diverges(Research.request("changed", { temperature: 1 }))
      assert.strictEqual(error.step, 0)
      assert.strictEqual(error.path, "settings.temperature")
      assert.strictEqual(error.recorded, 0)
      assert.strictEqual(error.current, 1)
    }))

  it.effect("a one-character change of an observation diverges at the next step, naming its message", () =>
    Effect.gen(function*() {
      // The note tool answers "noted:" → "Noted:"; its first call is step 3, so step 4's request differs
      // at the tool message of step 3: System, User, then Assistant + Tool per step → messages[2 + 3*2 + 1].
      const note = Tool.withHandler(Research.note, ({ text }) => Effect.succeed(`Noted: ${text}`))
      const tools = ToolRegistry.make(Research.add, note, Research.submit)
      const services = Research.servicesFor(tools)
      const error = yield* diverges(Research.request("changed", {}, tools), services)
      assert.strictEqual(error.step, 4)
      assert.strictEqual(error.path, "messages[9].text")
      assert.strictEqual(error.recorded, "noted: step 3")
      assert.strictEqual(error.current, "Noted: step 3")
    }))

  it.effect("a replay that goes on longer than the recorded run diverges: no recorded reply for the step", () =>
    Effect.gen(function*() {
      const recorded = yield* record("recorded")
      // A log cut after 3 steps (as a fork at step 3 holds them): step 3 has no recorded reply.
      const cut = RunLog.fromRecords([Option.getOrThrow(recorded.started), ...RunLog.recordsBeforeStep(recorded, 3)])
      const error = yield* Effect.flip(Replay.run({ recorded: cut, request: Research.request("longer") }).pipe(Effect.provide(Research.services)))
      assert.strictEqual(error._tag, "ReplayDiverged")
      if (error._tag !== "ReplayDiverged") throw error
      assert.strictEqual(error.step, 3)
      assert.strictEqual(error.expected, "")
    }).pipe(Effect.provide(RunLogStore.layerMemory)))

  it.effect("the recorded fingerprint is the SHA-256 of the whole canonical request the model received", () =>
    Effect.gen(function*() {
      const seen: Array<string> = []
      const model = ScriptedModel.layer((request: ModelClient.ModelRequest, call) => {
        seen.push(Snapshot.sha256(Snapshot.canonicalJson(Schema.encodeSync(Schema.Struct({
          messages: Schema.Array(Schema.Unknown),
          tools: Schema.Array(Schema.Unknown),
          settings: Schema.Unknown
        }))({ messages: [...request.messages], tools: request.tools, settings: request.settings }))))
        return Research.replyAt(call.step, 8)
      })
      yield* Agent.run(Research.request("fp")).pipe(Effect.provide(Layer.merge(Research.services, model)))
      const log = yield* Effect.flatMap(RunLogStore.RunLogStore, (s) => s.readLog(Ids.runId("fp")))
      assert.deepStrictEqual(log.replies.map((r) => r.requestHash), seen)
      assert.strictEqual(new Set(seen).size, 8)
    }).pipe(Effect.provide(RunLogStore.layerMemory)))
})
