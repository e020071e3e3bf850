/**
 * Logs written before request fingerprints and forks (kept in `fixtures/log-v0.1`, made with
 * the code before issue 17) still import, read (also with full schema decoding), show, export
 * byte for byte, replay (checked against the request rebuilt from the log, as they carry no
 * fingerprint), fork, and resume.
 */
import { assert, describe, it } from "@effect/vitest"
import * as NodeFileSystem from "@effect/platform-node/NodeFileSystem"
import * as Transcript from "@polyloop/cli/Transcript"
import * as Agent from "@polyloop/core/Agent"
import * as EventSink from "@polyloop/core/EventSink"
import * as Ids from "@polyloop/core/Ids"
import * as JsonActionParser from "@polyloop/core/JsonActionParser"
import * as LogFile from "@polyloop/core/LogFile"
import * as Replay from "@polyloop/core/Replay"
import * as RunLog from "@polyloop/core/RunLog"
import * as RunLogStore from "@polyloop/core/RunLogStore"
import * as Snapshot from "@polyloop/core/Snapshot"
import * as ToolRegistry from "@polyloop/core/ToolRegistry"
import * as GovDoc from "@polyloop/cli/GovDoc"
import * as ScriptedModel from "@polyloop/testing/ScriptedModel"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"

const fixture = (name: string) => fs.readFileSync(new URL(`./fixtures/log-v0.1/${name}`, import.meta.url), "utf8")
const finished = fixture("demo-finished.jsonl")
const crashed = fixture("demo-crashed.jsonl")

/** A fresh seeded GovDoc workspace, removed when the scope closes; its tools and the demo's parser. */
const govdoc = Effect.gen(function*() {
  const root = yield* Effect.acquireRelease(
    Effect.sync(() => fs.mkdtempSync(path.join(os.tmpdir(), "polyloop-v01-"))),
    (dir) => Effect.sync(() => fs.rmSync(dir, { recursive: true, force: true }))
  )
  yield* GovDoc.seed(root).pipe(Effect.provide(NodeFileSystem.layer), Effect.orDie)
  const tools = GovDoc.makeTools(root)
  const services = Layer.mergeAll(JsonActionParser.layer(), ToolRegistry.layerExecutor(tools), EventSink.layerNoop).pipe(
    Layer.provide(NodeFileSystem.layer),
    Layer.orDie
  )
  return { tools, services }
})

describe("logs written by polyloop 0.1", () => {
  it.scoped("import (version-1 records upgraded on read, design 0150), read with full decoding, show, and export stably", () =>
    Effect.gen(function*() {
      const ids = yield* LogFile.importText(finished + crashed)
      assert.deepStrictEqual(ids, ["demo-finished", "demo-crashed"])
      const store = yield* RunLogStore.RunLogStore
      for (const [id, text] of [["demo-finished", finished], ["demo-crashed", crashed]] as const) {
        const log = yield* store.readLog(Ids.runId(id), { verify: true })
        // The export is the log as read: its version-1 records in today's shape (design 0150,
        // decision 7), so it differs from the 0.1 file; read again, it exports the same bytes.
        const exported = LogFile.toJsonl(log)
        assert.strictEqual(text.split("\n").length, exported.split("\n").length)
        assert.strictEqual(Transcript.exportLog(Ids.runId(id), log, "jsonl"), exported)
        const [again] = yield* LogFile.parse(exported)
        assert.strictEqual(LogFile.toJsonl(RunLog.fromRecords(again!.records)), exported)
        assert.isTrue(log.replies.every((r) => r.requestHash === undefined))
      }
      const transcript = yield* Transcript.read(Ids.runId("demo-finished"))
      assert.strictEqual(transcript.steps.length, 7)
    }).pipe(Effect.provide(RunLogStore.layerMemory)))

  it.scoped("a finished 0.1 run replays identically, checked against the requests rebuilt from its log", () =>
    Effect.gen(function*() {
      yield* LogFile.importText(finished)
      const store = yield* RunLogStore.RunLogStore
      const recorded = yield* store.readLog(Ids.runId("demo-finished"))
      const { services, tools } = yield* govdoc
      const comparison = yield* Replay.run({
        recorded,
        // A 0.1 run took one action per step: its configuration, stated (design 0150, decision 5).
        request: { runId: Ids.runId("replay"), agent: { ...GovDoc.agent, parallelToolCalls: false }, task: GovDoc.task, tools }
      }).pipe(Effect.provide(services))
      const replayed = yield* store.readLog(Ids.runId("replay"))
      // Snapshots of this version hold synthetic texts added since 0.1 (e.g. \`truncated\`): the
      // RunStarted records differ there and only there; every later record is identical.
      if (comparison._tag === "Differs") {
        assert.strictEqual(comparison.index, 0, JSON.stringify(comparison))
        const paths = Snapshot.diff(Option.getOrThrow(recorded.started).snapshot, Option.getOrThrow(replayed.started).snapshot).map(([p]) => p)
        assert.isTrue(paths.every((p) => p.startsWith("agent.syntheticObservations.") || p === "agent.parallelToolCalls"), paths.join(", "))
      }
      const withoutStart = (log: typeof recorded) => ({ ...log, started: Option.none() })
      assert.strictEqual(Replay.compare(withoutStart(recorded), withoutStart(replayed))._tag, "Identical")
      // The replay records fingerprints the old run did not have.
      assert.isTrue(replayed.replies.every((r) => /^[0-9a-f]{64}$/.test(r.requestHash ?? "")))
    }).pipe(Effect.provide(RunLogStore.layerMemory)))

  it.scoped("a 0.1 run replayed under a changed system prompt diverges at step 0, found from the rebuilt request", () =>
    Effect.gen(function*() {
      yield* LogFile.importText(finished)
      const store = yield* RunLogStore.RunLogStore
      const recorded = yield* store.readLog(Ids.runId("demo-finished"))
      const { services, tools } = yield* govdoc
      const agent = { ...GovDoc.agent, systemPrompt: GovDoc.agent.systemPrompt.replace("tools.", "tools!") }
      const error = yield* Effect.flip(
        Replay.run({ recorded, request: { runId: Ids.runId("replay"), agent, task: GovDoc.task, tools } }).pipe(Effect.provide(services))
      )
      assert.strictEqual(error._tag, "ReplayDiverged")
      if (error._tag !== "ReplayDiverged") throw error
      assert.strictEqual(error.step, 0)
      assert.strictEqual(error.path, "messages[0].text")
    }).pipe(Effect.provide(RunLogStore.layerMemory)))

  it.scoped("a crashed 0.1 run resumes to its end; a 0.1 run can be forked", () =>
    Effect.gen(function*() {
      yield* LogFile.importText(crashed + finished)
      const { services, tools } = yield* govdoc
      const request = { runId: Ids.runId("demo-crashed"), agent: GovDoc.agent, task: GovDoc.task, tools }
      const result = yield* Agent.run(request).pipe(Effect.provide(Layer.merge(services, ScriptedModel.layer(GovDoc.script))))
      assert.strictEqual(result.stopReason._tag, "Completed")
      assert.strictEqual(result.resumedCount, 1)
      const forked = yield* Agent.fork({ from: Ids.runId("demo-finished"), atStep: 2, runId: Ids.runId("fork") })
      assert.deepStrictEqual(forked.forkedFrom.differences, [])
      const store = yield* RunLogStore.RunLogStore
      const fork = yield* store.readLog(Ids.runId("fork"))
      assert.strictEqual(fork.steps.length, 2)
      assert.strictEqual(Option.getOrThrow(fork.started).forkedFrom?.runId, "demo-finished")
    }).pipe(Effect.provide(RunLogStore.layerMemory)))
})
