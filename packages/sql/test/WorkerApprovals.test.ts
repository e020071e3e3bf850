/**
 * `Worker.run` and approvals (design 0160), on SQLite and PostgreSQL: a run that suspends leaves
 * its worker — the entry is `Suspended`, not failed, not retried, and nothing more is written to
 * the run while it waits — and once every waiting call is decided (here through `Agent.decide`,
 * as the command line does) an idle worker takes it up again and finishes it: an approved charge
 * runs once, a rejected one never. Also: queue migration 2 keeps the entries of a queue table
 * made by migration 1.
 */
import { assert, describe, it } from "@effect/vitest"
import * as SqlClient from "@effect/sql/SqlClient"
import * as Agent from "@polyloop/core/Agent"
import * as AgentDefinition from "@polyloop/core/AgentDefinition"
import * as Approval from "@polyloop/core/Approval"
import * as EventSink from "@polyloop/core/EventSink"
import { runId } from "@polyloop/core/Ids"
import * as NativeToolCallParser from "@polyloop/core/NativeToolCallParser"
import * as RunLog from "@polyloop/core/RunLog"
import * as RunLogStore from "@polyloop/core/RunLogStore"
import * as Tool from "@polyloop/core/Tool"
import * as ToolContext from "@polyloop/core/ToolContext"
import * as ToolRegistry from "@polyloop/core/ToolRegistry"
import * as SqlRunLogStore from "@polyloop/sql/SqlRunLogStore"
import * as Worker from "@polyloop/sql/Worker"
import * as ScriptedModel from "@polyloop/testing/ScriptedModel"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Redacted from "effect/Redacted"
import * as Ref from "effect/Ref"
import * as Schedule from "effect/Schedule"
import * as Schema from "effect/Schema"
import * as path from "node:path"
import * as F from "./fixtures.js"
import { freshSchemaUrl } from "./PgSupport.js"

const Task = Schema.Struct({ amount: Schema.Int })

const model = Layer.unwrapEffect(
  Effect.map(
    ScriptedModel.make((request, call) => {
      const task = request.messages.find((m) => m._tag === "User")
      const amount = Number(/amount (\d+)/.exec(task?._tag === "User" ? task.text : "")?.[1] ?? 0)
      return call.step === 0 ? ScriptedModel.toolCall("charge", { amount }, { id: "c" }) : ScriptedModel.text(`done ${amount}`)
    }),
    (m) => m.layer
  )
)

const clients: ReadonlyArray<readonly [string, () => Layer.Layer<SqlClient.SqlClient, unknown>]> = [
  ["SQLite", () => Layer.unwrapScoped(Effect.map(F.tempDir("polyloop-worker-approvals-"), (dir) => SqlRunLogStore.layerSqliteClient({ filename: path.join(dir, "runs.db") })))],
  ["PostgreSQL", () => Layer.unwrapScoped(Effect.map(freshSchemaUrl, (url) => SqlRunLogStore.layerPgClient({ url: Redacted.make(url), maxConnections: 6 })))]
]

const fast = { pollInterval: Duration.millis(20), heartbeatInterval: Duration.millis(100), retryDelay: Duration.millis(100) } as const

const waitFor = (done: (entries: ReadonlyArray<Worker.QueueEntry>) => boolean) =>
  Worker.entries().pipe(
    Effect.filterOrFail(done, () => "not yet" as const),
    Effect.retry({ while: (e) => e === "not yet", schedule: Schedule.spaced(Duration.millis(25)) }),
    Effect.timeoutFail({ duration: Duration.seconds(60), onTimeout: () => new Error("the queue did not settle in time") }),
    Effect.orDie
  )

const makeResolver = (charged: Ref.Ref<ReadonlyArray<string>>) => {
  const charge = Tool.make({
    name: "charge",
    description: "charges an amount",
    parameters: Schema.Struct({ amount: Schema.Int }),
    approval: Tool.approvalWhen("amounts over 10", (args: { readonly amount: number }) => args.amount > 10),
    handler: ({ amount }) =>
      Effect.flatMap(ToolContext.ToolContext, (ctx) => Ref.update(charged, (xs) => [...xs, `${ctx.runId}:${amount}`])).pipe(Effect.as(`ok ${amount}`))
  })
  const tools = ToolRegistry.make(charge)
  const agent = AgentDefinition.make({ name: "worker-approvals", systemPrompt: "charge, then answer", budget: { maxSteps: 4 } })
  return (task: typeof Task.Type, job: Worker.Job) =>
    Effect.map(tools.executor(), (executor) => ({
      request: { runId: job.runId, agent, task: `charge amount ${task.amount}`, tools } satisfies Agent.RunRequest,
      executor
    }))
}

for (const [name, client] of clients) {
  describe.sequential(`Worker.run with approvals on ${name}`, () => {
    it.scopedLive("a suspended run leaves its worker (entry Suspended, nothing written while it waits) and is taken up again once decided", () =>
      Effect.gen(function*() {
        const charged = yield* Ref.make<ReadonlyArray<string>>([])
        const store = yield* RunLogStore.RunLogStore
        yield* Worker.migrate
        yield* Worker.enqueue(runId("small"), { amount: 5 })
        yield* Worker.enqueue(runId("big-yes"), { amount: 50 })
        yield* Worker.enqueue(runId("big-no"), { amount: 70 })
        const worker = yield* Effect.fork(Worker.run({ ...fast, concurrency: 2, payload: Task, resolve: makeResolver(charged) }))
        const parked = yield* waitFor((es) => es.length === 3 && es.filter((e) => e.status === "Suspended").length === 2 && es.some((e) => e.status === "Done"))
        const byId = Object.fromEntries(parked.map((e) => [e.runId, e]))
        assert.deepStrictEqual([byId["big-yes"]!.failures, byId["big-no"]!.failures], [0, 0])
        assert.match(Option.getOrElse(byId["big-yes"]!.error, () => ""), /Suspended: run big-yes is suspended: waiting for a decision on c \(charge\)/)
        assert.deepStrictEqual(yield* Ref.get(charged), ["small:5"])
        assert.deepStrictEqual((yield* store.listRuns({ status: "Suspended" })).map((s) => s.runId).sort(), ["big-no", "big-yes"])
        // While they wait, idle workers poll: nothing is written to the suspended runs.
        const before = yield* store.readLog(runId("big-yes"))
        yield* Effect.sleep(Duration.millis(300))
        assert.deepStrictEqual(RunLog.size(yield* store.readLog(runId("big-yes"))), RunLog.size(before))
        assert.strictEqual(Option.getOrThrow(yield* Worker.entry(runId("big-yes"))).status, "Suspended")

        yield* Agent.decide({ runId: runId("big-yes"), callId: "c", decision: Approval.approve, by: "ana" })
        yield* Agent.decide({ runId: runId("big-no"), callId: "c", decision: Approval.reject("too much"), by: "ana" })
        const done = yield* waitFor((es) => es.every((e) => e.status === "Done"))
        yield* Fiber.interrupt(worker)
        assert.deepStrictEqual([...(yield* Ref.get(charged))].sort(), ["big-yes:50", "small:5"])
        for (const e of done) {
          const result = Schema.decodeUnknownSync(Agent.RunResult)(Option.getOrThrow(e.outcome))
          assert.strictEqual(result.stopReason._tag, "Completed")
        }
        const rejected = yield* store.readLog(runId("big-no"))
        assert.strictEqual(rejected.results[0]!.outcome.status, "NotExecuted")
      }).pipe(
        Effect.provide(Layer.mergeAll(SqlRunLogStore.layer({ path: "test" }), NativeToolCallParser.layer(), EventSink.layerNoop, model).pipe(Layer.provideMerge(client())))
      ), 180_000)

    it.scopedLive("queue migration 2 keeps the entries of a table made by migration 1", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        yield* sql`CREATE TABLE polyloop_queue (
          run_id text PRIMARY KEY, payload text NOT NULL,
          status text NOT NULL CHECK (status IN ('Pending', 'Running', 'Done', 'Failed')),
          enqueued_at bigint NOT NULL, available_at bigint NOT NULL, attempts integer NOT NULL DEFAULT 0,
          failures integer NOT NULL DEFAULT 0, worker text, token text, heartbeat_at bigint, finished_at bigint, outcome text, error text)`
        yield* sql`CREATE TABLE polyloop_queue_migrations (migration_id integer PRIMARY KEY, created_at timestamp NOT NULL DEFAULT CURRENT_TIMESTAMP, name text NOT NULL)`
        yield* sql`INSERT INTO polyloop_queue_migrations (migration_id, name) VALUES (1, 'create_queue')`
        yield* sql`INSERT INTO polyloop_queue (run_id, payload, status, enqueued_at, available_at, attempts, failures, error) VALUES ('old', '{"amount":1}', 'Failed', 1, 1, 3, 3, 'boom')`
        yield* Worker.migrate
        const old = Option.getOrThrow(yield* Worker.entry(runId("old")))
        assert.deepStrictEqual([old.status, old.attempts, old.failures, old.error], ["Failed", 3, 3, Option.some("boom")])
        yield* sql`UPDATE polyloop_queue SET status = 'Suspended' WHERE run_id = 'old'`
        assert.strictEqual(Option.getOrThrow(yield* Worker.entry(runId("old"))).status, "Suspended")
      }).pipe(Effect.provide(client())), 60_000)
  })
}
