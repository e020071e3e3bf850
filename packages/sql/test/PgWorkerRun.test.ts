/**
 * `Worker.run` end to end on PostgreSQL: queued payloads resolved to requests and run with
 * `Agent.run` on `SqlRunLogStore`; what each kind of failure does to the queue entry.
 */
import { assert, describe, it } from "@effect/vitest"
import * as Agent from "@polyloop/core/Agent"
import * as AgentDefinition from "@polyloop/core/AgentDefinition"
import * as EventSink from "@polyloop/core/EventSink"
import { runId } from "@polyloop/core/Ids"
import * as NativeToolCallParser from "@polyloop/core/NativeToolCallParser"
import * as RunLogStore from "@polyloop/core/RunLogStore"
import * as Tool from "@polyloop/core/Tool"
import * as ToolContext from "@polyloop/core/ToolContext"
import * as ToolRegistry from "@polyloop/core/ToolRegistry"
import * as SqlRunLogStore from "@polyloop/sql/SqlRunLogStore"
import * as Worker from "@polyloop/sql/Worker"
import * as ScriptedModel from "@polyloop/testing/ScriptedModel"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Fiber from "effect/Fiber"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Redacted from "effect/Redacted"
import * as Ref from "effect/Ref"
import * as Schedule from "effect/Schedule"
import * as Schema from "effect/Schema"
import * as Scope from "effect/Scope"
import { freshSchemaUrl } from "./PgSupport.js"

const Task = Schema.Struct({ amount: Schema.Int, prompt: Schema.optional(Schema.String) })

/** Store, client (shared with the queue), parser, sink and a scripted model: call `charge` once, then answer. */
const services = Layer.unwrapScoped(
  Effect.map(freshSchemaUrl, (url) =>
    Layer.mergeAll(
      SqlRunLogStore.layer({ path: "test" }),
      NativeToolCallParser.layer(),
      EventSink.layerNoop,
      Layer.unwrapEffect(
        Effect.map(
          ScriptedModel.make((request, call) => {
            const task = request.messages.find((m) => m._tag === "User")
            const amount = Number(/amount (\d+)/.exec(task?._tag === "User" ? task.text : "")?.[1] ?? 0)
            return call.step === 0 ? ScriptedModel.toolCall("charge", { amount }) : ScriptedModel.text(`charged ${amount}`)
          }),
          (model) => model.layer
        )
      )
    ).pipe(Layer.provideMerge(SqlRunLogStore.layerPgClient({ url: Redacted.make(url), maxConnections: 6 })))
  )
)

const fast = { pollInterval: Duration.millis(20), heartbeatInterval: Duration.millis(100), retryDelay: Duration.millis(100) } as const

const waitFor = (done: (entries: ReadonlyArray<Worker.QueueEntry>) => boolean) =>
  Worker.entries().pipe(
    Effect.filterOrFail(done, () => "not yet" as const),
    Effect.retry({ while: (e) => e === "not yet", schedule: Schedule.spaced(Duration.millis(25)) }),
    Effect.timeoutFail({ duration: Duration.seconds(30), onTimeout: () => new Error("the queue did not settle in time") }),
    Effect.orDie
  )

const makeResolver = (charged: Ref.Ref<ReadonlyArray<string>>, systemPrompt = "charge, then answer") => {
  const charge = Tool.make({
    name: "charge",
    description: "charges an amount",
    parameters: Schema.Struct({ amount: Schema.Int }),
    handler: ({ amount }) =>
      Effect.flatMap(ToolContext.ToolContext, (ctx) => Ref.update(charged, (xs) => [...xs, `${ctx.runId}:${amount}`])).pipe(
        Effect.as(`ok ${amount}`)
      )
  })
  const tools = ToolRegistry.make(charge)
  const agent = AgentDefinition.make({ name: "worker-run", systemPrompt, budget: { maxSteps: 4 } })
  return (task: typeof Task.Type, job: Worker.Job) =>
    Effect.map(tools.executor(), (executor) => ({
      request: {
        runId: runId(task.prompt === "wrong id" ? `${job.runId}-other` : job.runId),
        agent,
        task: `charge amount ${task.amount}`,
        tools
      } satisfies Agent.RunRequest,
      executor
    }))
}

describe.sequential("Worker.run on PostgreSQL", () => {
  it.scopedLive("runs queued runs with Agent.run; each entry ends Done with the encoded RunResult", () =>
    Effect.gen(function*() {
      const charged = yield* Ref.make<ReadonlyArray<string>>([])
      yield* Worker.migrate
      for (const n of [1, 2, 3, 4, 5]) yield* Worker.enqueue(runId(`r${n}`), { amount: n })
      const worker = yield* Effect.fork(
        Worker.run({ ...fast, concurrency: 2, payload: Task, resolve: makeResolver(charged) })
      )
      const entries = yield* waitFor((es) => es.length === 5 && es.every((e) => e.status === "Done"))
      yield* Fiber.interrupt(worker)
      assert.deepStrictEqual([...(yield* Ref.get(charged))].sort(), ["r1:1", "r2:2", "r3:3", "r4:4", "r5:5"])
      for (const e of entries) {
        const result = Schema.decodeUnknownSync(Agent.RunResult)(Option.getOrThrow(e.outcome))
        assert.deepStrictEqual(result.stopReason, { _tag: "Completed", by: "Answer", answer: `charged ${e.runId.slice(1)}` })
        assert.deepStrictEqual([result.runId, result.steps, result.effectiveSteps], [e.runId, 2, 1])
      }
      const store = yield* RunLogStore.RunLogStore
      assert.strictEqual((yield* store.listRuns({ status: "Finished" })).length, 5)
    }).pipe(Effect.provide(services)))

  it.scopedLive("a payload that does not decode and a request for another run fail the entry at once, writing nothing", () =>
    Effect.gen(function*() {
      const charged = yield* Ref.make<ReadonlyArray<string>>([])
      yield* Worker.migrate
      const store = yield* RunLogStore.RunLogStore
      yield* Worker.enqueue(runId("bad-payload"), { amount: "three" })
      yield* Worker.enqueue(runId("wrong-id"), { amount: 1, prompt: "wrong id" })
      const worker = yield* Effect.fork(Worker.run({ ...fast, concurrency: 1, payload: Task, resolve: makeResolver(charged) }))
      const entries = yield* waitFor((es) => es.every((e) => e.status === "Failed"))
      yield* Fiber.interrupt(worker)
      const byId = Object.fromEntries(entries.map((e) => [e.runId, e]))
      assert.deepStrictEqual([byId["bad-payload"]!.attempts, byId["bad-payload"]!.failures], [1, 1])
      assert.match(Option.getOrElse(byId["bad-payload"]!.error, () => ""), /payload does not decode/)
      assert.deepStrictEqual([byId["wrong-id"]!.attempts, byId["wrong-id"]!.failures], [1, 1])
      assert.match(Option.getOrElse(byId["wrong-id"]!.error, () => ""), /InvalidRunRequest.*wrong-id-other/)
      assert.deepStrictEqual(yield* store.listRuns(), [])
      assert.deepStrictEqual(yield* Ref.get(charged), [])
    }).pipe(Effect.provide(services)))

  it.scopedLive("a run resumed under another configuration fails its entry with SnapshotMismatch, without retries", () =>
    Effect.gen(function*() {
      const charged = yield* Ref.make<ReadonlyArray<string>>([])
      yield* Worker.migrate
      const store = yield* RunLogStore.RunLogStore
      yield* Worker.enqueue(runId("changed"), { amount: 2 })
      // The first worker starts the run and is shut down while the run waits on its model.
      const model = yield* ScriptedModel.make((_r, call) =>
        call.step === 0 ? Effect.never : ScriptedModel.text("never reached")
      )
      const first = yield* Effect.fork(
        Worker.run({ ...fast, concurrency: 1, payload: Task, resolve: makeResolver(charged, "the old prompt") }).pipe(
          Effect.provide(model.layer)
        )
      )
      yield* Effect.sync(() => undefined).pipe(
        Effect.zipRight(store.readLog(runId("changed"))),
        Effect.filterOrFail((log) => Option.isSome(log.started), () => "not yet" as const),
        Effect.retry({ while: (e) => e === "not yet", schedule: Schedule.spaced(Duration.millis(20)) })
      )
      yield* Fiber.interrupt(first)
      const back = Option.getOrThrow(yield* Worker.entry(runId("changed")))
      assert.deepStrictEqual([back.status, back.failures], ["Pending", 0])
      // A second worker with another system prompt may not continue it.
      const second = yield* Effect.fork(
        Worker.run({ ...fast, concurrency: 1, payload: Task, resolve: makeResolver(charged, "a new prompt") })
      )
      const [entry] = yield* waitFor((es) => es[0]?.status === "Failed")
      yield* Fiber.interrupt(second)
      assert.deepStrictEqual([entry!.attempts, entry!.failures], [2, 1])
      assert.match(Option.getOrElse(entry!.error, () => ""), /SnapshotMismatch/)
      assert.deepStrictEqual(yield* Ref.get(charged), [])
    }).pipe(Effect.provide(services)))

  it.scopedLive("a run claimed elsewhere (RunBusy) goes back to Pending without counting a failure, and runs once free", () =>
    Effect.gen(function*() {
      const charged = yield* Ref.make<ReadonlyArray<string>>([])
      yield* Worker.migrate
      const store = yield* RunLogStore.RunLogStore
      const scope = yield* Scope.make()
      yield* store.claim(runId("busy")).pipe(Scope.extend(scope))
      yield* Worker.enqueue(runId("busy"), { amount: 7 })
      const worker = yield* Effect.fork(
        Worker.run({ ...fast, concurrency: 1, payload: Task, resolve: makeResolver(charged) })
      )
      const [requeued] = yield* waitFor((es) => es[0]?.status === "Pending" && es[0].attempts >= 1)
      assert.strictEqual(requeued!.failures, 0)
      assert.match(Option.getOrElse(requeued!.error, () => ""), /RunBusy/)
      yield* Scope.close(scope, Exit.void)
      const [done] = yield* waitFor((es) => es[0]?.status === "Done")
      yield* Fiber.interrupt(worker)
      assert.strictEqual(done!.failures, 0)
      assert.isAtLeast(done!.attempts, 2)
      assert.deepStrictEqual(yield* Ref.get(charged), ["busy:7"])
    }).pipe(Effect.provide(services)))
})
