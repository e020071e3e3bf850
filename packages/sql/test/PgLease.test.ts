/**
 * Claims on PostgreSQL are leases: renewed while held, taken over after a holder stops renewing,
 * and a holder whose lease was taken over is fenced off at its next write — by the lease owner,
 * not only by the sequence number.
 */
import { assert, describe, it } from "@effect/vitest"
import * as Agent from "@polyloop/core/Agent"
import * as AgentDefinition from "@polyloop/core/AgentDefinition"
import type { ConcurrentWriter } from "@polyloop/core/Errors"
import * as EventSink from "@polyloop/core/EventSink"
import { runId } from "@polyloop/core/Ids"
import * as ModelReply from "@polyloop/core/ModelReply"
import * as NativeToolCallParser from "@polyloop/core/NativeToolCallParser"
import * as RunLog from "@polyloop/core/RunLog"
import * as RunLogStore from "@polyloop/core/RunLogStore"
import * as Tool from "@polyloop/core/Tool"
import * as ToolContext from "@polyloop/core/ToolContext"
import * as ToolRegistry from "@polyloop/core/ToolRegistry"
import * as SqlRunLogStore from "@polyloop/sql/SqlRunLogStore"
import * as ScriptedModel from "@polyloop/testing/ScriptedModel"
import { ActionExecutor } from "@polyloop/core/ActionExecutor"
import * as Context from "effect/Context"
import * as Deferred from "effect/Deferred"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Fiber from "effect/Fiber"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Redacted from "effect/Redacted"
import * as Ref from "effect/Ref"
import * as Schema from "effect/Schema"
import * as Scope from "effect/Scope"
import * as Supervisor from "effect/Supervisor"
import * as TestClock from "effect/TestClock"
import { freshSchemaUrl } from "./PgSupport.js"

/** A store instance (its own pool: another worker) over the database at `url`. */
const openStore = (url: string, options: { readonly leaseDuration: Duration.DurationInput; readonly heartbeatInterval: Duration.DurationInput }) =>
  Layer.build(SqlRunLogStore.layerPg({ url: Redacted.make(url), maxConnections: 3, ...options })).pipe(
    Effect.map(Context.get(RunLogStore.RunLogStore)),
    Effect.orDie
  )

const started = (id: string): RunLog.RunStarted => ({
  _tag: "RunStarted",
  seq: 0,
  runId: runId(id),
  task: "t",
  snapshot: { agent: { name: "lease-test" } },
  snapshotHash: "h",
  startedAt: 1
})

const replied = (seq: number, step: number): RunLog.ModelReplied => ({
  _tag: "ModelReplied",
  seq,
  step: step as RunLog.ModelReplied["step"],
  reply: ModelReply.make({ text: `reply ${step}` })
})

const isFenced = (error: unknown): error is ConcurrentWriter =>
  typeof error === "object" && error !== null && "_tag" in error && error._tag === "ConcurrentWriter"

/** Lets the database answer (real I/O) while the clock stands still. */
const settle = Effect.promise(() => new Promise<void>((resolve) => setTimeout(resolve, 10)))

/** Waits (in real time, at most 10 s) until a fiber sleeps on the TestClock until `millis`: a heartbeat that renewed and sleeps again. */
const untilSleepingUntil = (millis: number) =>
  Effect.gen(function*() {
    for (let i = 0; i < 1000; i++) {
      if (Array.from(yield* TestClock.sleeps()).includes(millis)) return
      yield* settle
    }
    return yield* Effect.dieMessage(`no heartbeat sleeps until ${millis} ms on the TestClock`)
  })

describe.sequential("claims on PostgreSQL are leases", () => {
  // Leases are measured with the store's `Clock` (expiry times and the heartbeat's sleeps), so these
  // run on TestClock: the verdict cannot depend on how long a loaded machine took between two lines.
  it.scoped("a held claim is renewed by its heartbeat: another worker stays RunBusy past the lease duration (TestClock)", () =>
    Effect.gen(function*() {
      const url = yield* freshSchemaUrl
      const a = yield* openStore(url, { leaseDuration: Duration.millis(1000), heartbeatInterval: Duration.millis(100) })
      const b = yield* openStore(url, { leaseDuration: Duration.millis(1000), heartbeatInterval: Duration.millis(100) })
      const r = runId("renewed")
      const scope = yield* Scope.make()
      yield* a.claim(r).pipe(Scope.extend(scope))
      // 2.5 lease durations, a heartbeat at a time: each renews the lease, then sleeps again.
      for (let beat = 1; beat <= 25; beat++) {
        yield* untilSleepingUntil(beat * 100)
        yield* TestClock.adjust(Duration.millis(100))
      }
      yield* untilSleepingUntil(2600)
      assert.strictEqual(yield* TestClock.currentTimeMillis, 2500)
      const busy = yield* Effect.flip(Effect.scoped(b.claim(r)))
      assert.strictEqual(busy._tag, "RunBusy")
      yield* Scope.close(scope, Exit.void)
      yield* Effect.scoped(b.claim(r))
    }))

  it.scoped("one heartbeat for the store (design 0350): 30 claims held sleep as one fiber on the TestClock, and each beat renews every lease — another worker stays RunBusy on all of them past the lease duration", () =>
    Effect.gen(function*() {
      const url = yield* freshSchemaUrl
      const a = yield* openStore(url, { leaseDuration: Duration.millis(1000), heartbeatInterval: Duration.millis(100) })
      const b = yield* openStore(url, { leaseDuration: Duration.millis(1000), heartbeatInterval: Duration.millis(100) })
      const runs = Array.from({ length: 30 }, (_, i) => runId(`beat-${i}`))
      const scope = yield* Scope.make()
      // Every fiber the claims start (the heartbeat) is tracked: none may outlive the last release.
      const tracker = yield* Supervisor.track
      yield* Effect.forEach(runs, (r) => a.claim(r).pipe(Scope.extend(scope)), { concurrency: "unbounded", discard: true }).pipe(Effect.supervised(tracker))
      yield* untilSleepingUntil(100)
      // One heartbeat sleeps for the 30 claims (a fiber a claim slept 30 times over).
      assert.strictEqual(Array.from(yield* TestClock.sleeps()).filter((t) => t === 100).length, 1)
      for (let beat = 1; beat <= 25; beat++) {
        yield* untilSleepingUntil(beat * 100)
        yield* TestClock.adjust(Duration.millis(100))
      }
      yield* untilSleepingUntil(2600)
      const busy = yield* Effect.forEach(runs, (r) => Effect.flip(Effect.scoped(b.claim(r))))
      assert.deepStrictEqual(busy.map((e) => e._tag), runs.map(() => "RunBusy"))
      assert.isAbove((yield* tracker.value).length, 0)
      yield* Scope.close(scope, Exit.void)
      yield* Effect.forEach(runs, (r) => Effect.scoped(b.claim(r)), { discard: true })
      // The last release stopped the heartbeat: no fiber of the claims is left (no timer keeps a process alive).
      for (let i = 0; i < 100 && (yield* tracker.value).length > 0; i++) yield* settle
      assert.deepStrictEqual((yield* tracker.value).length, 0)
    }))

  it.scoped("a holder that stops renewing loses the run after its lease expires; its next write is fenced by the lease owner (TestClock)", () =>
    Effect.gen(function*() {
      const url = yield* freshSchemaUrl
      // A hangs: it holds its claim's scope open but never renews (as a stopped or partitioned worker).
      const a = yield* openStore(url, { leaseDuration: Duration.millis(300), heartbeatInterval: Duration.hours(1) })
      const b = yield* openStore(url, { leaseDuration: Duration.seconds(30), heartbeatInterval: Duration.seconds(10) })
      const r = runId("taken-over")
      const aScope = yield* Scope.make()
      yield* a.claim(r).pipe(Scope.extend(aScope))
      yield* a.start(started(r))
      const early = yield* Effect.flip(Effect.scoped(b.claim(r)))
      assert.strictEqual(early._tag, "RunBusy")

      yield* TestClock.adjust(Duration.millis(450))
      const bScope = yield* Scope.make()
      yield* b.claim(r).pipe(Scope.extend(bScope))

      // A's write carries the right next sequence number (1): only the lease owner fences it.
      const fenced = yield* Effect.flip(a.appendReply(r, replied(1, 0)))
      assert.isTrue(isFenced(fenced), `expected ConcurrentWriter, got ${fenced._tag}`)
      const fencedWriter = fenced as ConcurrentWriter
      assert.isDefined(fencedWriter.leaseHolder)
      assert.notStrictEqual(fencedWriter.leaseHolder, "")
      assert.deepStrictEqual([fencedWriter.expectedSeq, fencedWriter.actualSeq], [1, 1])
      assert.match(fencedWriter.message, /claim expired and is now held by/)
      assert.strictEqual(RunLog.size(yield* b.readLog(r)), 1)

      // The new holder writes on; the old one stays fenced, also when nobody holds the run.
      yield* b.appendReply(r, replied(1, 0))
      yield* Scope.close(bScope, Exit.void)
      const orphan = yield* Effect.flip(a.appendReply(r, replied(2, 1)))
      assert.isTrue(isFenced(orphan))
      assert.strictEqual((orphan as ConcurrentWriter).leaseHolder, "")
      const log = yield* a.readLog(r)
      assert.deepStrictEqual(log.replies.map((x) => x.reply.text), ["reply 0"])
      yield* Scope.close(aScope, Exit.void)
    }))

  it.scoped("a RunStarted written after the lease was taken over is fenced (one statement, design 0350): nothing of it is written, the writer is told the new holder; a second RunStarted is refused (TestClock)", () =>
    Effect.gen(function*() {
      const url = yield* freshSchemaUrl
      const a = yield* openStore(url, { leaseDuration: Duration.millis(300), heartbeatInterval: Duration.hours(1) })
      const b = yield* openStore(url, { leaseDuration: Duration.seconds(30), heartbeatInterval: Duration.seconds(10) })
      const r = runId("start-fenced")
      const aScope = yield* Scope.make()
      yield* a.claim(r).pipe(Scope.extend(aScope))
      yield* TestClock.adjust(Duration.millis(450))
      const bScope = yield* Scope.make()
      yield* b.claim(r).pipe(Scope.extend(bScope))
      const fenced = yield* Effect.flip(a.start(started(r)))
      assert.isTrue(isFenced(fenced), `expected ConcurrentWriter, got ${fenced._tag}`)
      assert.notStrictEqual((fenced as ConcurrentWriter).leaseHolder ?? "", "")
      // Nothing of the refused start: no record, no summary row.
      assert.strictEqual(RunLog.size(yield* b.readLog(r)), 0)
      assert.deepStrictEqual((yield* b.listRuns()).map((run) => run.runId), [])
      // The holder starts it: the summary row and the record, in one statement.
      yield* b.start(started(r))
      assert.strictEqual(RunLog.size(yield* b.readLog(r)), 1)
      const [row] = yield* b.listRuns()
      assert.deepStrictEqual([row?.runId, row?.status, row?.steps], [r, "Unfinished", 0])
      const again = yield* Effect.flip(b.start(started(r)))
      assert.isTrue(isFenced(again), `expected ConcurrentWriter, got ${again._tag}`)
      assert.strictEqual(RunLog.size(yield* b.readLog(r)), 1)
      yield* Scope.close(bScope, Exit.void)
      yield* Scope.close(aScope, Exit.void)
    }))

  it.scopedLive("Agent.run: a worker whose lease was taken over stops at its next write; the new holder finishes the run once", () =>
    Effect.gen(function*() {
      const url = yield* freshSchemaUrl
      const a = yield* openStore(url, { leaseDuration: Duration.millis(300), heartbeatInterval: Duration.hours(1) })
      const b = yield* openStore(url, { leaseDuration: Duration.seconds(30), heartbeatInterval: Duration.seconds(10) })
      const r = runId("agent-takeover")
      const executions = yield* Ref.make<ReadonlyArray<string>>([])
      const charge = Tool.make({
        name: "charge",
        description: "a side effect that must not run twice",
        parameters: Schema.Struct({ amount: Schema.Int }),
        handler: ({ amount }) =>
          Effect.flatMap(ToolContext.ToolContext, (ctx) =>
            Ref.update(executions, (xs) => [...xs, `${ctx.step}:${amount}`]).pipe(Effect.as(`charged ${amount}`)))
      })
      const tools = ToolRegistry.make(charge)
      const executor = yield* tools.executor()
      const agent = AgentDefinition.make({ name: "takeover", systemPrompt: "charge twice", budget: { maxSteps: 6 } })
      const request: Agent.RunRequest = { runId: r, agent, task: "charge", tools }
      const script = (_: unknown, call: ScriptedModel.Call) =>
        call.step < 2 ? ScriptedModel.toolCall("charge", { amount: call.step + 1 }) : ScriptedModel.text("done")
      // A's model hangs at step 1 (after step 0 completed) until released.
      const aAtStep1 = yield* Deferred.make<void>()
      const releaseA = yield* Deferred.make<void>()
      const modelA = yield* ScriptedModel.make(script, {
        onCall: (call) => (call.step === 1 ? Deferred.succeed(aAtStep1, undefined).pipe(Effect.zipRight(Deferred.await(releaseA))) : Effect.void)
      })
      const modelB = yield* ScriptedModel.make(script)
      const services = (store: RunLogStore.RunLogStore.Service, model: ScriptedModel.ScriptedModel) =>
        Layer.mergeAll(
          Layer.succeed(RunLogStore.RunLogStore, store),
          model.layer,
          NativeToolCallParser.layer(),
          EventSink.layerNoop,
          Layer.succeed(ActionExecutor, executor)
        )
      const runA = yield* Effect.fork(Agent.run(request).pipe(Effect.provide(services(a, modelA))))
      yield* Deferred.await(aAtStep1)
      yield* Effect.sleep(Duration.millis(450))
      const resultB = yield* Agent.run(request).pipe(Effect.provide(services(b, modelB)))
      assert.deepStrictEqual(resultB.stopReason, { _tag: "Completed", by: "Answer", answer: "done" })
      assert.strictEqual(resultB.resumedCount, 1)

      // A wakes up with its step-1 reply and must not write it.
      yield* Deferred.succeed(releaseA, undefined)
      const exitA = yield* Fiber.await(runA)
      assert.isTrue(Exit.isFailure(exitA))
      const errorA = yield* Effect.flip(exitA)
      assert.isTrue(isFenced(errorA), `A failed with ${String((errorA as { _tag?: string })._tag)}`)
      assert.isDefined((errorA as ConcurrentWriter).leaseHolder)

      const log = yield* b.readLog(r)
      assert.deepStrictEqual(log.steps.map((s) => s.step), [0, 1, 2])
      assert.strictEqual(log.resumes.length, 1)
      assert.isTrue(Option.isSome(log.finished))
      assert.deepStrictEqual(yield* Ref.get(executions), ["0:1", "1:2"])
    }))
})
