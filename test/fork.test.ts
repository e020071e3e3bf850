/**
 * Forks (issue 17, design 0170): a fork at every step k of a 6-step run continues to the same
 * end as its parent, calling the model only for the steps from k; a fork under a changed
 * system prompt records the difference and continues under it; the parent's log is byte for
 * byte the same before and after; refused forks write nothing. On the memory, SQLite and
 * PostgreSQL stores.
 */
import { assert, describe, it } from "@effect/vitest"
import * as Agent from "@polyloop/core/Agent"
import * as Fork from "@polyloop/core/Fork"
import * as Ids from "@polyloop/core/Ids"
import * as LogFile from "@polyloop/core/LogFile"
import * as Replay from "@polyloop/core/Replay"
import * as RunLog from "@polyloop/core/RunLog"
import * as RunLogStore from "@polyloop/core/RunLogStore"
import * as FaultInjection from "@polyloop/testing/FaultInjection"
import * as ScriptedModel from "@polyloop/testing/ScriptedModel"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Research from "./support/research-agent.js"
import * as Stores from "./support/research-stores.js"

const STEPS = 6

const readLog = (runId: string) => Effect.flatMap(RunLogStore.RunLogStore, (store) => store.readLog(Ids.runId(runId)))

const runParent = Effect.gen(function*() {
  const result = yield* Agent.run(Research.request("parent")).pipe(Effect.provide(Layer.merge(Research.services, Research.model(STEPS))))
  assert.strictEqual(result.steps, STEPS)
  return result
})

describe("Agent.fork", () => {
  for (const [name, store] of Stores.all) {
    it.scoped(`a fork at every step k of a ${STEPS}-step run continues to the parent's end (${name} store)`, () =>
      Effect.gen(function*() {
        const parentResult = yield* runParent
        const parent = yield* readLog("parent")
        const before = LogFile.toJsonl(parent)
        for (let k = 0; k <= STEPS; k++) {
          const runId = `fork-${k}`
          const forked = yield* Agent.fork({ from: Ids.runId("parent"), atStep: k, runId: Ids.runId(runId) })
          assert.deepStrictEqual<unknown>(forked.forkedFrom, {
            runId: "parent",
            step: k,
            snapshotHash: Option.getOrThrow(parent.started).snapshotHash,
            differences: []
          })
          assert.strictEqual(forked.snapshotHash, Option.getOrThrow(parent.started).snapshotHash)
          const copied = yield* readLog(runId)
          assert.strictEqual(copied.steps.length, k)
          assert.strictEqual(copied.replies.length, k)
          assert.isTrue(Fork.isUntouched(copied))
          const model = yield* ScriptedModel.make((_request, call) => Research.replyAt(call.step, STEPS))
          const result = yield* Agent.run(Research.request(runId)).pipe(Effect.provide(Layer.merge(Research.services, model.layer)))
          assert.deepStrictEqual({ ...result, runId: "parent" }, parentResult, `fork at ${k}`)
          // Only the steps from k were asked of the model; the copied ones were not re-executed.
          assert.deepStrictEqual((yield* model.requests).map((r) => r.call.step), Array.from({ length: STEPS - k }, (_, i) => k + i))
          const log = yield* readLog(runId)
          assert.strictEqual(log.resumes.length, 0)
          assert.deepStrictEqual(Replay.compare(parent, log), { _tag: "Identical", records: RunLog.size(parent) })
          assert.deepStrictEqual(Option.getOrThrow(log.started).forkedFrom, forked.forkedFrom)
        }
        assert.strictEqual(LogFile.toJsonl(yield* readLog("parent")), before)
      }).pipe(Effect.provide(store)), { timeout: 180_000 })
  }

  it.scoped("a fork under a changed system prompt records the difference and continues under it", () =>
    Effect.gen(function*() {
      yield* runParent
      const before = LogFile.toJsonl(yield* readLog("parent"))
      const changed = Research.agent({ systemPrompt: "You add numbers. One tool per reply." })
      const forked = yield* Agent.fork({ from: Ids.runId("parent"), atStep: 3, runId: Ids.runId("ablation"), agent: changed })
      assert.deepStrictEqual(forked.forkedFrom.differences, [
        { path: "agent.systemPrompt", parent: Research.systemPrompt, fork: "You add numbers. One tool per reply." }
      ])
      const fork = yield* readLog("ablation")
      assert.deepStrictEqual(Option.getOrThrow(fork.started).forkedFrom?.differences, forked.forkedFrom.differences)
      // The parent's configuration no longer fits the fork…
      const mismatch = yield* Effect.flip(
        Agent.run(Research.request("ablation")).pipe(Effect.provide(Layer.merge(Research.services, Research.model(STEPS))))
      )
      assert.strictEqual(mismatch._tag, "SnapshotMismatch")
      // …the changed one does, and the model sees the new prompt from step 3 on.
      const model = yield* ScriptedModel.make((_request, call) => Research.replyAt(call.step, STEPS))
      const result = yield* Agent.run({ ...Research.request("ablation"), agent: changed }).pipe(
        Effect.provide(Layer.merge(Research.services, model.layer))
      )
      assert.strictEqual(result.steps, STEPS)
      const requests = yield* model.requests
      assert.strictEqual(requests[0]!.call.step, 3)
      assert.deepStrictEqual(requests[0]!.request.messages[0], { _tag: "System", text: "You add numbers. One tool per reply." })
      assert.strictEqual(LogFile.toJsonl(yield* readLog("parent")), before)
    }).pipe(Effect.provide(RunLogStore.layerMemory)))

  it.scoped("a fork may change the task and the tools; each difference is recorded", () =>
    Effect.gen(function*() {
      yield* runParent
      const forked = yield* Agent.fork({ from: Ids.runId("parent"), atStep: 2, runId: Ids.runId("f"), task: "Add 1 and 2." })
      assert.deepStrictEqual(forked.forkedFrom.differences.map((d) => d.path), ["task"])
      const fork = yield* readLog("f")
      assert.strictEqual(Option.getOrThrow(fork.started).task, "Add 1 and 2.")
    }).pipe(Effect.provide(RunLogStore.layerMemory)))

  it.scoped("refused forks are typed and write nothing; the parent is untouched", () =>
    Effect.gen(function*() {
      yield* runParent
      const before = LogFile.toJsonl(yield* readLog("parent"))
      const refuse = (options: Fork.ForkOptions) => Effect.flip(Agent.fork(options))
      const noParent = yield* refuse({ from: Ids.runId("nobody"), atStep: 0, runId: Ids.runId("x") })
      assert.strictEqual(noParent._tag === "InvalidFork" && noParent.reason, "NoParent")
      const tooFar = yield* refuse({ from: Ids.runId("parent"), atStep: STEPS + 1, runId: Ids.runId("x") })
      assert.strictEqual(tooFar._tag === "InvalidFork" && tooFar.reason, "StepOutOfRange")
      const negative = yield* refuse({ from: Ids.runId("parent"), atStep: -1, runId: Ids.runId("x") })
      assert.strictEqual(negative._tag === "InvalidFork" && negative.reason, "StepOutOfRange")
      assert.isTrue(RunLog.isEmpty(yield* readLog("x")))
      const exists = yield* refuse({ from: Ids.runId("parent"), atStep: 1, runId: Ids.runId("parent") })
      assert.strictEqual(exists._tag === "InvalidFork" && exists.reason, "RunExists")
      assert.strictEqual(LogFile.toJsonl(yield* readLog("parent")), before)
    }).pipe(Effect.provide(RunLogStore.layerMemory)))

  it.scoped("a fork is written in one atomic append: a store failure on a copied record leaves no fork", () =>
    Effect.gen(function*() {
      yield* runParent
      const plan = yield* FaultInjection.makePlan
      yield* plan.arm({ runId: "f", seq: 4 })
      const store = FaultInjection.store(yield* RunLogStore.RunLogStore, plan)
      const error = yield* Effect.flip(
        Agent.fork({ from: Ids.runId("parent"), atStep: 3, runId: Ids.runId("f") }).pipe(Effect.provideService(RunLogStore.RunLogStore, store))
      )
      assert.strictEqual(error._tag, "StoreError")
      assert.strictEqual((yield* plan.fired).length, 1)
      assert.isTrue(RunLog.isEmpty(yield* readLog("f")))
      yield* plan.disarm
      yield* Agent.fork({ from: Ids.runId("parent"), atStep: 3, runId: Ids.runId("f") }).pipe(Effect.provideService(RunLogStore.RunLogStore, store))
      assert.strictEqual((yield* readLog("f")).steps.length, 3)
    }).pipe(Effect.provide(RunLogStore.layerMemory)))

  it.scoped("a fork that crashed after its first new step resumes like any run", () =>
    Effect.gen(function*() {
      yield* runParent
      yield* Agent.fork({ from: Ids.runId("parent"), atStep: 2, runId: Ids.runId("f") })
      // The model fails at step 3 (not retryable): step 2 is recorded, the run stops unfinished.
      const failing = ScriptedModel.layer((_request, call) => Research.replyAt(call.step, STEPS), { failures: [{ step: 3, times: 1, retryable: false }] })
      yield* Effect.flip(Agent.run(Research.request("f")).pipe(Effect.provide(Layer.merge(Research.services, failing))))
      const stopped = yield* readLog("f")
      assert.strictEqual(stopped.steps.length, 3)
      assert.isFalse(Fork.isUntouched(stopped))
      const result = yield* Agent.run(Research.request("f")).pipe(Effect.provide(Layer.merge(Research.services, Research.model(STEPS))))
      assert.strictEqual(result.resumedCount, 1)
      assert.strictEqual(result.steps, STEPS)
    }).pipe(Effect.provide(RunLogStore.layerMemory)))
})
