/**
 * The history model in the log (issue 30, design 0300): logs of version 2 (written before
 * `HistoryCompacted`, kept as a fixture in `fixtures/log-v2/`) read, resume, replay and show
 * unchanged under version 3; a compacting run's log exports and imports byte for byte, verifies
 * clean, and `polyloop show` says per step what was sent (dropped, summarised, masked, verbatim).
 */
import { assert, describe, it } from "@effect/vitest"
import * as Transcript from "@polyloop/cli/Transcript"
import * as Style from "@polyloop/cli/Style"
import * as Agent from "@polyloop/core/Agent"
import * as AgentDefinition from "@polyloop/core/AgentDefinition"
import * as EventSink from "@polyloop/core/EventSink"
import * as HistoryPolicy from "@polyloop/core/HistoryPolicy"
import * as Ids from "@polyloop/core/Ids"
import * as LogFile from "@polyloop/core/LogFile"
import * as ModelReply from "@polyloop/core/ModelReply"
import * as NativeToolCallParser from "@polyloop/core/NativeToolCallParser"
import * as Replay from "@polyloop/core/Replay"
import * as RunLog from "@polyloop/core/RunLog"
import * as RunLogAudit from "@polyloop/core/RunLogAudit"
import * as RunLogStore from "@polyloop/core/RunLogStore"
import * as Tool from "@polyloop/core/Tool"
import * as ToolRegistry from "@polyloop/core/ToolRegistry"
import * as ScriptedModel from "@polyloop/testing/ScriptedModel"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Schema from "effect/Schema"
import * as fs from "node:fs"

const fixture = (name: string) => fs.readFileSync(new URL(`./fixtures/log-v2/${name}`, import.meta.url), "utf8")

// The fixture's agent (fixtures/log-v2/make.ts), as today's code defines it.
const read = Tool.make({
  name: "read_file",
  description: "Reads a file.",
  parameters: Schema.Struct({ path: Schema.String }),
  replayPolicy: "Always",
  handler: ({ path }) => Effect.succeed(Array.from({ length: 100 }, (_, i) => `${path}:${String(i).padStart(4, "0")} ${"x".repeat(29)}`).join("\n"))
})
const tools = ToolRegistry.make(read)
const v2Agent = AgentDefinition.make({ name: "reader", systemPrompt: "Read files.", budget: { maxSteps: 20 }, history: HistoryPolicy.maskObservations({ keepLast: 2, every: 3 }) })
const v2Model = ScriptedModel.make((_, call) =>
  call.step < 10
    ? ModelReply.make({ text: "", toolCalls: [{ id: `call_${call.step}`, name: "read_file", argumentsText: JSON.stringify({ path: `f${call.step}` }) }], usage: { inputTokens: 100 + call.step, outputTokens: 5 } })
    : ModelReply.make({ text: "done", usage: { inputTokens: 100 + call.step, outputTokens: 1 } }))
const services = Layer.mergeAll(NativeToolCallParser.layer(), Layer.orDie(ToolRegistry.layerExecutor(tools)), EventSink.layerNoop)

describe("version-2 logs under the current version", () => {
  it.effect("read (no compactions), verify clean, resume with the requests the old code sent, replay as identical, export the same bytes", () =>
    Effect.gen(function*() {
      const ids = yield* LogFile.importText(fixture("v2-masked-finished.jsonl") + fixture("v2-masked-crashed.jsonl"))
      assert.deepStrictEqual(ids, ["v2-masked-finished", "v2-masked-crashed"])
      const store = yield* RunLogStore.RunLogStore
      const finished = yield* store.readLog(Ids.runId("v2-masked-finished"), { verify: true })
      assert.strictEqual(Option.getOrThrow(finished.started).logVersion, 2)
      assert.deepStrictEqual(finished.compactions, [])
      assert.deepStrictEqual(RunLogAudit.logProblems(finished), [])
      assert.strictEqual(LogFile.toJsonl(finished), fixture("v2-masked-finished.jsonl"))

      // Resumed by today's code: the requests after the resume are the ones the old code sent.
      const expected = JSON.parse(fixture("v2-masked.hashes.json")) as Array<string | undefined>
      const model = yield* v2Model
      const result = yield* Agent.run({ runId: Ids.runId("v2-masked-crashed"), agent: v2Agent, task: "Read everything.", tools }).pipe(
        Effect.provide(Layer.merge(services, model.layer))
      )
      assert.strictEqual(result.stopReason._tag, "Completed")
      const resumed = yield* store.readLog(Ids.runId("v2-masked-crashed"), { verify: true })
      assert.deepStrictEqual(resumed.replies.map((r) => r.requestHash), expected)
      assert.strictEqual(resumed.resumes[0]!.logVersion, RunLog.logVersion)
      assert.deepStrictEqual(RunLogAudit.logProblems(resumed), [])

      // Replayed: identical.
      const comparison = yield* Replay.run({
        recorded: finished,
        request: { runId: Ids.runId("v2-replayed"), agent: v2Agent, task: "Read everything.", tools }
      }).pipe(Effect.provide(services))
      assert.deepStrictEqual(comparison, { _tag: "Identical", records: RunLog.size(finished) })

      // Shown: the policy, and per step what was sent.
      const shown = Transcript.render(Style.plain, yield* Transcript.read(Ids.runId("v2-masked-finished")))
      assert.include(shown, "history      maskObservations(keepLast 2, every 3)")
      assert.include(shown, "sent         0–5 observations masked · 6–7 verbatim")
    }).pipe(Effect.provide(RunLogStore.layerMemory)))
})

describe("a compacting run's log", () => {
  it.effect("exports and imports byte for byte, verifies clean, and show says what each request held", () =>
    Effect.gen(function*() {
      const history = HistoryPolicy.compose(
        HistoryPolicy.maskObservations({ keepLast: 2, every: 2 }),
        HistoryPolicy.summarise({ triggerTokens: 2_500, keepLast: 2 }),
        HistoryPolicy.fitTokens({ window: 5_000, headroom: 500 })
      )
      const model = yield* ScriptedModel.make((request, call) =>
        request.tools.length === 0
          ? ModelReply.make({ text: `summary written at step ${call.step}`, usage: { inputTokens: 500, outputTokens: 10 } })
          : call.step < 16
          ? ModelReply.make({ text: "", toolCalls: [{ id: "", name: "read_file", argumentsText: JSON.stringify({ path: `f${call.step}` }) }] })
          : ModelReply.make({ text: "done" }))
      const id = Ids.runId("compacting")
      yield* Agent.run({ runId: id, agent: AgentDefinition.make({ name: "reader", systemPrompt: "Read files.", budget: { maxSteps: 20 }, history }), task: "Read everything.", tools }).pipe(
        Effect.provide(Layer.merge(services, model.layer))
      )
      const store = yield* RunLogStore.RunLogStore
      const log = yield* store.readLog(id, { verify: true })
      assert.isTrue(log.compactions.some((c) => c.summary !== undefined))
      assert.strictEqual(Option.getOrThrow(log.started).logVersion, RunLog.logVersion, "a compacting run is written by the current version (3 or later)")
      assert.deepStrictEqual(RunLogAudit.logProblems(log), [])
      const exported = LogFile.toJsonl(log)
      assert.include(exported, "\"_tag\":\"HistoryCompacted\"")
      const [again] = yield* LogFile.parse(exported)
      assert.strictEqual(LogFile.toJsonl(RunLog.fromRecords(again!.records)), exported)

      const shown = Transcript.render(Style.plain, yield* Transcript.read(id))
      const summary = log.compactions.find((c) => c.summary !== undefined)!
      const range = summary.toStep === 1 ? "0" : `0–${summary.toStep - 1}`
      assert.include(shown, `compacted    steps ${range} summarised before this request (Threshold: ${summary.requestTokens} tokens counted)`)
      assert.include(shown, `summary      ${summary.summary}`)
      assert.match(shown, new RegExp(`sent {9}steps ${range} summarised`))
      assert.include(shown, "history      maskObservations(keepLast 2, every 2) + summarise(triggerTokens 2500, keepLast 2, approximate) + fitTokens(window 5000, headroom 500, approximate, trimTo 0.75)")
    }).pipe(Effect.provide(RunLogStore.layerMemory)))

  it.effect("a compaction that does not fit the log is reported by verify and refused on resume", () =>
    Effect.gen(function*() {
      const records = fixture("v2-masked-crashed.jsonl").trim().split("\n").map((line) => JSON.parse(line) as Record<string, unknown>)
      // A compaction for step 9 in a log whose next request is step 6: written out of place.
      const bad = { _tag: "HistoryCompacted", seq: records.length, step: 9, reason: "Budget", toStep: 3, requestTokens: 100 }
      const text = [...records.map((r) => JSON.stringify(r)), JSON.stringify(bad)].join("\n") + "\n"
      const [parsed] = yield* LogFile.parse(text)
      const log = RunLog.fromRecords(parsed!.records)
      assert.isTrue(RunLogAudit.logProblems(log).some((p) => p.includes("HistoryCompacted for step 9")))
      yield* LogFile.importText(text)
      const model = yield* v2Model
      const error = yield* Effect.flip(
        Agent.run({ runId: Ids.runId("v2-masked-crashed"), agent: v2Agent, task: "Read everything.", tools }).pipe(Effect.provide(Layer.merge(services, model.layer)))
      )
      assert.strictEqual(error._tag, "StoreError")
      if (error._tag === "StoreError") assert.strictEqual(error.reason, "Corrupt")
    }).pipe(Effect.provide(RunLogStore.layerMemory)))
})
