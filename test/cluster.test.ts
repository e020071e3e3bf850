/**
 * `@polyloop/cluster` in one process (design 0200): a runner on loopback over a fresh
 * PostgreSQL database, used as its own client. Submitted runs finish and `await` returns their
 * results; `submit` is idempotent by run id; `status` and `list` read the run index; a payload
 * that does not decode fails the run with its error kept; a run whose resolve failed is run again
 * by `Cluster.retry`; a run whose call needs approval is `Suspended` (live and in the index)
 * until `Cluster.decide` delivers the decision, then finishes — the approved charge runs once; a
 * decision recorded outside the cluster (`Agent.decide`) is found by the suspended run's poll; a
 * conversation's messages (`Cluster.send`) are answered once each, a retried send a duplicate.
 */
import { assert, describe, it } from "@effect/vitest"
import * as Cluster from "@polyloop/cluster/Cluster"
import * as ClusterRunner from "@polyloop/cluster/ClusterRunner"
import * as RunIndex from "@polyloop/cluster/RunIndex"
import type * as Agent from "@polyloop/core/Agent"
import * as AgentDefinition from "@polyloop/core/AgentDefinition"
import * as Approval from "@polyloop/core/Approval"
import * as EventSink from "@polyloop/core/EventSink"
import { runId } from "@polyloop/core/Ids"
import * as NativeToolCallParser from "@polyloop/core/NativeToolCallParser"
import * as RunLogStore from "@polyloop/core/RunLogStore"
import * as Tool from "@polyloop/core/Tool"
import * as ToolContext from "@polyloop/core/ToolContext"
import * as ToolRegistry from "@polyloop/core/ToolRegistry"
import * as SqlRunLogStore from "@polyloop/sql/SqlRunLogStore"
import * as ScriptedModel from "@polyloop/testing/ScriptedModel"
import * as Data from "effect/Data"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Redacted from "effect/Redacted"
import * as Schedule from "effect/Schedule"
import * as Schema from "effect/Schema"
import { freshDatabaseUrl } from "./support/pg-database.js"
import { freePort } from "./support/pg-server.js"

const Task = Schema.Struct({ amount: Schema.Int })

class NotReady extends Data.TaggedError("NotReady")<{ readonly reason: string }> {}

/** Charges recorded by the tool, per run. */
const charged: Array<string> = []
/** Runs whose resolve fails (until removed). */
const broken = new Set<string>(["run-broken"])

const charge = Tool.make({
  name: "charge",
  description: "charges an amount",
  parameters: Schema.Struct({ amount: Schema.Int }),
  replayPolicy: "Never",
  approval: Tool.approvalWhen("amounts over 10", (args: { readonly amount: number }) => args.amount > 10),
  handler: ({ amount }) =>
    Effect.flatMap(ToolContext.ToolContext, (ctx) => Effect.sync(() => charged.push(`${ctx.runId}:${amount}`))).pipe(
      Effect.as(`charged ${amount}`)
    )
})
const tools = ToolRegistry.make(charge)
const agent = AgentDefinition.make({ name: "cluster", systemPrompt: "charge, then answer", budget: { maxSteps: 4 } })

const model = Layer.unwrapEffect(
  Effect.map(
    // A turn (a run's task, or a conversation's message): charge the amount its text names, then answer.
    ScriptedModel.make((request) => {
      const said = request.messages.filter((m) => m._tag === "User").at(-1)
      const amount = Number(/amount (\d+)/.exec(said?._tag === "User" ? said.text : "")?.[1] ?? 0)
      return request.messages.at(-1)?._tag === "User" ? ScriptedModel.toolCall("charge", { amount }, { id: "c" }) : ScriptedModel.text(`done ${amount}`)
    }),
    (m) => m.layer
  )
)

const timings = {
  shardLockExpiration: Duration.seconds(5),
  shardLockRefreshInterval: Duration.seconds(1),
  refreshAssignmentsInterval: Duration.seconds(1),
  entityMessagePollInterval: Duration.millis(500)
}

const runnerLayer = (url: string, port: number) => {
  const sql = SqlRunLogStore.layerPgClient({ url: Redacted.make(url), maxConnections: 8 })
  const services = Layer.mergeAll(
    SqlRunLogStore.layer({ leaseDuration: Duration.seconds(2), heartbeatInterval: Duration.millis(500) }),
    NativeToolCallParser.layer(),
    EventSink.layerNoop,
    model
  )
  const runner = ClusterRunner.layer({
    payload: Task,
    resolve: (task, id) =>
      Effect.gen(function*() {
        if (broken.has(id)) return yield* new NotReady({ reason: `${id} is not configured yet` })
        const executor = yield* tools.executor()
        return { request: { runId: runId(id), agent, task: `charge amount ${task.amount}`, tools } satisfies Agent.RunRequest, executor }
      }),
    suspendedPollInterval: Duration.seconds(1),
    retryBaseDelay: Duration.millis(100)
  })
  const layer = runner.pipe(
    Layer.provideMerge(
      ClusterRunner.layerSocket({ host: "127.0.0.1", port, timings }).pipe(
        Layer.provide(SqlRunLogStore.layerPgClient({ url: Redacted.make(url), maxConnections: 4 }))
      )
    ),
    Layer.provideMerge(services),
    Layer.provideMerge(sql)
  )
  return layer
}

const until = <A, E, R>(what: string, effect: Effect.Effect<A, E, R>, done: (a: A) => boolean) =>
  effect.pipe(
    Effect.filterOrFail(done, () => "not yet" as const),
    Effect.retry({ while: (e) => e === "not yet", schedule: Schedule.spaced(Duration.millis(100)) }),
    Effect.timeoutFail({ duration: Duration.seconds(90), onTimeout: () => new Error(`timed out waiting for ${what}`) })
  )

describe.sequential("@polyloop/cluster in one process", () => {
  it.scopedLive("submit, await, status, list, idempotent submit, failures kept, retry, approvals", () =>
    Effect.gen(function*() {
      const url = yield* freshDatabaseUrl("cluster")
      const port = yield* Effect.promise(() => freePort())
      yield* Effect.gen(function*() {
        // Ordinary runs: submitted once, awaited, listed.
        const ids = ["run-a", "run-b", "run-c"]
        for (const [i, id] of ids.entries()) assert.isTrue(yield* Cluster.submit(id, { amount: i + 1 }))
        assert.isFalse(yield* Cluster.submit("run-a", { amount: 99 }), "a second submit is a duplicate")
        const results = yield* Effect.forEach(ids, (id) => Cluster.await(id), { concurrency: "unbounded" })
        assert.deepStrictEqual(results.map((r) => r.stopReason), [1, 2, 3].map((n) => ({ _tag: "Completed" as const, by: "Answer" as const, answer: `done ${n}` })))
        const status = yield* Cluster.status("run-a")
        assert.strictEqual(status._tag, "Finished")
        if (status._tag === "Finished") {
          assert.deepStrictEqual(status.result, results[0])
          assert.strictEqual(status.entry.attempts, 1)
          assert.isTrue(Option.contains(status.entry.runner, `127.0.0.1:${port}`))
          assert.deepStrictEqual(status.entry.payload, { amount: 1 }, "the first payload stands")
        }
        assert.deepStrictEqual(charged.filter((c) => c.startsWith("run-a:")), ["run-a:1"], "run-a charged once, with its first payload")
        assert.deepStrictEqual((yield* Cluster.status("run-never"))._tag, "NotSubmitted")
        const notSubmitted = yield* Effect.flip(Cluster.await("run-never"))
        assert.strictEqual(notSubmitted._tag, "NotSubmitted")

        // A payload that does not decode: Failed at once, its error kept.
        yield* Cluster.submit("run-bad", { amount: "many" })
        const bad = yield* Effect.flip(Cluster.await("run-bad"))
        assert.strictEqual(bad._tag, "RunFailed")
        if (bad._tag === "RunFailed") {
          assert.strictEqual(bad.reason, "Payload")
          assert.include(bad.error, "amount")
        }

        // A failing resolve: Failed with its error; once fixed, `retry` runs it again.
        yield* Cluster.submit("run-broken", { amount: 4 })
        const brokenFailure = yield* Effect.flip(Cluster.await("run-broken"))
        assert.strictEqual(brokenFailure._tag, "RunFailed")
        if (brokenFailure._tag === "RunFailed") {
          assert.strictEqual(brokenFailure.reason, "Resolve")
          assert.include(brokenFailure.error, "NotReady")
        }
        const failed = yield* Cluster.list({ status: "Failed" })
        assert.deepStrictEqual(failed.map((e) => e.runId).sort(), ["run-bad", "run-broken"])
        assert.isFalse(yield* Cluster.retry("run-a"), "a finished run is not retried")
        broken.delete("run-broken")
        assert.isTrue(yield* Cluster.retry("run-broken"))
        const fixed = yield* Cluster.await("run-broken")
        assert.deepStrictEqual(fixed.stopReason, { _tag: "Completed", by: "Answer", answer: "done 4" })

        // A call that needs approval: the run is Suspended (live and in the index) until decided.
        yield* Cluster.submit("run-big", { amount: 50 })
        yield* until("run-big to suspend", Cluster.status("run-big"), (s) => s._tag === "Suspended")
        const live = yield* Cluster.live("run-big")
        assert.strictEqual(live.state, "Suspended")
        assert.strictEqual(live.runner, `127.0.0.1:${port}`)
        assert.deepStrictEqual(charged.filter((c) => c.startsWith("run-big:")), [], "nothing charged before the decision")
        const store = yield* RunLogStore.RunLogStore
        const waiting = Approval.waiting(yield* store.readLog(runId("run-big")))
        assert.deepStrictEqual(waiting.map((w) => w.callId), ["c"])
        const unknown = yield* Effect.flip(Cluster.decide("run-big", { callId: "nope", decision: Approval.approve, by: "ops" }))
        assert.strictEqual(unknown._tag, "UnknownCall")
        const decided = yield* Cluster.decide("run-big", { callId: "c", decision: Approval.approve, by: "ops", actionHash: waiting[0]!.actionHash })
        assert.strictEqual(decided.by, "ops")
        const big = yield* Cluster.await("run-big")
        assert.deepStrictEqual(big.stopReason, { _tag: "Completed", by: "Answer", answer: "done 50" })
        assert.deepStrictEqual(charged.filter((c) => c.startsWith("run-big:")), ["run-big:50"])
        const again = yield* Effect.flip(Cluster.decide("run-big", { callId: "c", decision: Approval.reject("late"), by: "ops" }))
        assert.strictEqual(again._tag, "AlreadyDecided", "a second decision is refused; the first stands")

        // A decision recorded outside the cluster (`Agent.decide`, as `polyloop approve` does): the
        // suspended run finds it in its log and finishes; the rejected charge never runs.
        yield* Cluster.submit("run-big2", { amount: 60 })
        yield* until("run-big2 to suspend", Cluster.status("run-big2"), (s) => s._tag === "Suspended")
        yield* Approval.decide({ runId: runId("run-big2"), callId: "c", decision: Approval.reject("too much"), by: "cli" })
        const big2 = yield* Cluster.await("run-big2")
        assert.deepStrictEqual(big2.stopReason, { _tag: "Completed", by: "Answer", answer: "done 60" })
        assert.deepStrictEqual(charged.filter((c) => c.startsWith("run-big2:")), [], "a rejected charge never runs")

        // A conversation hosted on the cluster (design 0300): each message a persisted `Send` to the
        // conversation's entity, answered by `Agent.send` on the runner; a retried send is a
        // duplicate with the first reply, and its charge ran once.
        const first = yield* Cluster.send("chat-1", { messageId: "m1", text: "please charge amount 3" }, { amount: 0 })
        assert.deepStrictEqual([first.turn, first.stopReason], [0, { _tag: "Completed", by: "Answer", answer: "done 3" }])
        const second = yield* Cluster.send("chat-1", { messageId: "m2", text: "and charge amount 4" }, { amount: 0 })
        assert.deepStrictEqual([second.turn, second.stopReason], [1, { _tag: "Completed", by: "Answer", answer: "done 4" }])
        assert.deepStrictEqual(yield* Cluster.send("chat-1", { messageId: "m2", text: "and charge amount 4" }, { amount: 0 }), second)
        assert.deepStrictEqual(charged.filter((c) => c.startsWith("chat-1:")), ["chat-1:3", "chat-1:4"])
        const conversation = yield* Effect.flatMap(RunLogStore.RunLogStore, (store) => store.readLog(runId("chat-1")))
        assert.deepStrictEqual(conversation.userMessages.map((m) => m.messageId), ["m2"])
        assert.deepStrictEqual(conversation.turns.map((t) => t.turn), [0, 1])

        const all = yield* Cluster.list()
        assert.deepStrictEqual(all.map((e) => e.runId).sort(), ["chat-1", "run-a", "run-b", "run-bad", "run-big", "run-big2", "run-broken", "run-c"])
      }).pipe(Effect.provide(runnerLayer(url, port)))
    }), 180_000)

  it.scopedLive("the run index before its migration: a typed StoreError saying what to run, not a crash", () =>
    Effect.gen(function*() {
      const url = yield* freshDatabaseUrl("cluster_unmigrated")
      const error = yield* Effect.flip(RunIndex.list().pipe(Effect.provide(SqlRunLogStore.layerPgClient({ url: Redacted.make(url) }))))
      assert.strictEqual(error._tag, "StoreError")
      assert.strictEqual(error.reason, "SchemaVersion")
      assert.include(error.message, "RunIndex.migrate")
      const entries = yield* Effect.gen(function*() {
        yield* RunIndex.migrate
        yield* RunIndex.migrate
        return yield* RunIndex.list()
      }).pipe(Effect.provide(SqlRunLogStore.layerPgClient({ url: Redacted.make(url) })))
      assert.deepStrictEqual(entries, [])
    }))
})
