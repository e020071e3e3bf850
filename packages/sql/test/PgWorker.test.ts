import { assert, describe, it } from "@effect/vitest"
import * as SqlClient from "@effect/sql/SqlClient"
import { runId } from "@polyloop/core/Ids"
import * as Data from "effect/Data"
import * as Deferred from "effect/Deferred"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Fiber from "effect/Fiber"
import * as Option from "effect/Option"
import * as Ref from "effect/Ref"
import * as Schedule from "effect/Schedule"
import * as Cause from "effect/Cause"
import * as Worker from "../src/Worker.js"
import { layerFreshClient } from "./PgSupport.js"

class Flaky extends Data.TaggedError("Flaky")<{ readonly message: string }> {}
class Fatal extends Data.TaggedError("Fatal")<{ readonly message: string }> {}
class Busy extends Data.TaggedError("Busy")<{ readonly message: string }> {}

/** Polls the queue until `done` holds (fails the test after `timeout`). */
const waitFor = (
  done: (entries: ReadonlyArray<Worker.QueueEntry>) => boolean,
  timeout: Duration.DurationInput = Duration.seconds(20)
) =>
  Worker.entries().pipe(
    Effect.filterOrFail(done, () => "not yet" as const),
    Effect.retry({ while: (e) => e === "not yet", schedule: Schedule.spaced(Duration.millis(25)) }),
    Effect.timeoutFail({ duration: timeout, onTimeout: () => new Error("the queue did not reach the expected state in time") }),
    Effect.orDie
  )

const statuses = (entries: ReadonlyArray<Worker.QueueEntry>) => entries.map((e) => e.status)

const fast = { pollInterval: Duration.millis(20), heartbeatInterval: Duration.millis(50) } as const

describe.sequential("Worker queue on PostgreSQL", () => {
  it.scopedLive("enqueue is idempotent by run id; entries read back what was enqueued", () =>
    Effect.gen(function*() {
      yield* Worker.migrate
      yield* Worker.migrate // a second migration is a no-op
      assert.isTrue(yield* Worker.enqueue(runId("a"), { task: "first", n: 1 }))
      assert.isFalse(yield* Worker.enqueue(runId("a"), { task: "second" }))
      assert.isTrue(yield* Worker.enqueue(runId("b"), ["x"], { delay: Duration.minutes(5) }))
      const entries = yield* Worker.entries()
      assert.deepStrictEqual(entries.map((e) => [e.runId, e.payload, e.status, e.attempts, e.failures]), [
        ["a", { task: "first", n: 1 }, "Pending", 0, 0],
        ["b", ["x"], "Pending", 0, 0]
      ])
      const b = entries[1]!
      assert.isTrue(b.availableAt - b.enqueuedAt >= 5 * 60_000)
      assert.deepStrictEqual(Option.map(yield* Worker.entry(runId("a")), (e) => e.payload), Option.some({ task: "first", n: 1 }))
      assert.isTrue(Option.isNone(yield* Worker.entry(runId("nope"))))
    }).pipe(Effect.provide(layerFreshClient())))

  it.scopedLive("a payload with no JSON form is refused with a typed StoreError and nothing is written", () =>
    Effect.gen(function*() {
      yield* Worker.migrate
      const error = yield* Effect.flip(Worker.enqueue(runId("big"), { n: BigInt(1) }))
      assert.strictEqual(error._tag, "StoreError")
      assert.strictEqual(error.reason, "Encode")
      assert.strictEqual(error.runId, "big")
      assert.deepStrictEqual(yield* Worker.entries(), [])
    }).pipe(Effect.provide(layerFreshClient())))

  it.scopedLive("using the queue before it exists fails with a StoreError that says how to create it", () =>
    Effect.gen(function*() {
      const error = yield* Effect.flip(Worker.enqueue(runId("a"), {}))
      assert.strictEqual(error._tag, "StoreError")
      assert.match(error.message, /Worker\.migrate/)
    }).pipe(Effect.provide(layerFreshClient())))

  it.scopedLive("two workers take every entry exactly once (FOR UPDATE SKIP LOCKED)", () =>
    Effect.gen(function*() {
      yield* Worker.migrate
      const ids = Array.from({ length: 40 }, (_, i) => `run-${String(i).padStart(2, "0")}`)
      for (const id of ids) yield* Worker.enqueue(runId(id), { id })
      const handled = yield* Ref.make<ReadonlyArray<readonly [string, string]>>([])
      const handle = (job: Worker.Job) =>
        Effect.gen(function*() {
          yield* Ref.update(handled, (xs) => [...xs, [job.runId, job.workerId] as const])
          yield* Effect.sleep(Duration.millis(5 + (job.runId.charCodeAt(job.runId.length - 1) % 4) * 5))
          return { echoed: job.payload, attempt: job.attempt }
        })
      const a = yield* Effect.fork(Worker.serve({ ...fast, concurrency: 3, workerId: "A", handle, outcome: (o) => o }))
      const b = yield* Effect.fork(Worker.serve({ ...fast, concurrency: 3, workerId: "B", handle, outcome: (o) => o }))
      const entries = yield* waitFor((es) => es.length === 40 && es.every((e) => e.status === "Done"))
      yield* Fiber.interrupt(a)
      yield* Fiber.interrupt(b)
      const runs = (yield* Ref.get(handled)).map(([id]) => id)
      assert.deepStrictEqual([...runs].sort(), ids)
      for (const e of entries) {
        assert.deepStrictEqual(e.outcome, Option.some({ echoed: { id: e.runId }, attempt: 1 }))
        assert.strictEqual(e.attempts, 1)
        assert.isTrue(Option.isSome(e.finishedAt))
      }
      const workers = new Set((yield* Ref.get(handled)).map(([, w]) => w))
      assert.isTrue([...workers].every((w) => w === "A" || w === "B"))
    }).pipe(Effect.provide(layerFreshClient())))

  it.scopedLive("interrupting a worker is a graceful shutdown: runs in flight go back to Pending and run again later", () =>
    Effect.gen(function*() {
      yield* Worker.migrate
      for (const id of ["x", "y", "z"]) yield* Worker.enqueue(runId(id), {})
      const started = yield* Ref.make(0)
      const interrupted = yield* Ref.make(0)
      const allStarted = yield* Deferred.make<void>()
      const blocking = (_: Worker.Job) =>
        Ref.updateAndGet(started, (n) => n + 1).pipe(
          Effect.tap((n) => (n === 3 ? Deferred.succeed(allStarted, undefined) : Effect.void)),
          Effect.zipRight(Effect.never),
          Effect.onInterrupt(() => Ref.update(interrupted, (n) => n + 1))
        )
      const first = yield* Effect.fork(Worker.serve({ ...fast, concurrency: 3, workerId: "first", handle: blocking }))
      yield* Deferred.await(allStarted)
      assert.deepStrictEqual(statuses(yield* Worker.entries()), ["Running", "Running", "Running"])
      yield* Fiber.interrupt(first)
      assert.strictEqual(yield* Ref.get(interrupted), 3)
      const back = yield* Worker.entries()
      assert.deepStrictEqual(statuses(back), ["Pending", "Pending", "Pending"])
      assert.deepStrictEqual(back.map((e) => [e.attempts, e.failures]), [[1, 0], [1, 0], [1, 0]])
      const second = yield* Effect.fork(
        Worker.serve({ ...fast, concurrency: 1, workerId: "second", handle: (job) => Effect.succeed(job.attempt), outcome: (n) => n })
      )
      const done = yield* waitFor((es) => es.every((e) => e.status === "Done"))
      yield* Fiber.interrupt(second)
      assert.deepStrictEqual(done.map((e) => e.outcome), [Option.some(2), Option.some(2), Option.some(2)])
    }).pipe(Effect.provide(layerFreshClient())))

  it.scopedLive("an entry whose worker stopped heart-beating is taken over, and the old worker's late end is fenced off", () =>
    Effect.gen(function*() {
      yield* Worker.migrate
      yield* Worker.enqueue(runId("r"), {})
      const startedA = yield* Deferred.make<void>()
      // A never heart-beats (as if it hung or lost the network) and never finishes by itself.
      const a = yield* Effect.fork(
        Worker.serve({
          pollInterval: Duration.millis(20),
          heartbeatInterval: Duration.hours(1),
          concurrency: 1,
          workerId: "A",
          handle: () => Effect.zipRight(Deferred.succeed(startedA, undefined), Effect.never)
        })
      )
      yield* Deferred.await(startedA)
      const b = yield* Effect.fork(
        Worker.serve({
          ...fast,
          staleAfter: Duration.millis(300),
          concurrency: 1,
          workerId: "B",
          handle: (job) => Effect.succeed(`B ran attempt ${job.attempt}`),
          outcome: (s) => s
        })
      )
      const [done] = yield* waitFor((es) => es[0]?.status === "Done")
      assert.deepStrictEqual(done!.outcome, Option.some("B ran attempt 2"))
      assert.deepStrictEqual(done!.worker, Option.some("B"))
      // A shuts down: its attempt is interrupted, and giving the entry back is fenced by its token.
      yield* Fiber.interrupt(a)
      yield* Fiber.interrupt(b)
      const [after] = yield* Worker.entries()
      assert.strictEqual(after!.status, "Done")
      assert.deepStrictEqual(after!.outcome, Option.some("B ran attempt 2"))
    }).pipe(Effect.provide(layerFreshClient())))

  it.scopedLive("a live worker whose entry was taken over stops that attempt at its next heartbeat and keeps serving", () =>
    Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      yield* Worker.migrate
      yield* Worker.enqueue(runId("stolen"), {})
      const started = yield* Deferred.make<void>()
      const stopped = yield* Deferred.make<void>()
      const worker = yield* Effect.fork(
        Worker.serve({
          ...fast,
          concurrency: 1,
          workerId: "A",
          handle: (job) =>
            job.runId === "stolen"
              ? Deferred.succeed(started, undefined).pipe(
                Effect.zipRight(Effect.never),
                Effect.onInterrupt(() => Deferred.succeed(stopped, undefined))
              )
              : Effect.succeed("ok"),
          outcome: (s) => s
        })
      )
      yield* Deferred.await(started)
      // Another worker takes the entry over (as after a stale heartbeat).
      yield* sql`UPDATE polyloop_queue SET worker = 'B', token = 'b-token' WHERE run_id = 'stolen'`
      yield* Deferred.await(stopped).pipe(Effect.timeout(Duration.seconds(5)))
      const [stolen] = yield* Worker.entries()
      assert.deepStrictEqual([stolen!.status, stolen!.worker], ["Running", Option.some("B")])
      yield* Worker.enqueue(runId("next"), {})
      const entries = yield* waitFor((es) => es.find((e) => e.runId === "next")?.status === "Done")
      yield* Fiber.interrupt(worker)
      assert.deepStrictEqual(entries.find((e) => e.runId === "next")!.outcome, Option.some("ok"))
    }).pipe(Effect.provide(layerFreshClient())))

  it.scopedLive("failed attempts: Retry waits and counts, Requeue waits without counting, Fail and maxFailures end in Failed", () =>
    Effect.gen(function*() {
      yield* Worker.migrate
      for (const id of ["always", "busy-once", "fatal", "flaky-once"]) yield* Worker.enqueue(runId(id), {})
      const handle = (job: Worker.Job): Effect.Effect<string, Flaky | Fatal | Busy> => {
        switch (job.runId) {
          case "always":
            return Effect.fail(new Flaky({ message: `attempt ${job.attempt}` }))
          case "busy-once":
            return job.attempt === 1 ? Effect.fail(new Busy({ message: "someone else" })) : Effect.succeed("done")
          case "fatal":
            return Effect.fail(new Fatal({ message: "no point retrying" }))
          default:
            return job.attempt === 1 ? Effect.fail(new Flaky({ message: "once" })) : Effect.succeed("done")
        }
      }
      const worker = yield* Effect.fork(
        Worker.serve({
          ...fast,
          concurrency: 2,
          retryDelay: Duration.millis(100),
          maxFailures: 3,
          handle,
          outcome: (s) => s,
          classify: (e) => (e._tag === "Fatal" ? "Fail" : e._tag === "Busy" ? "Requeue" : "Retry")
        })
      )
      const entries = yield* waitFor((es) => es.every((e) => e.status === "Done" || e.status === "Failed"))
      yield* Fiber.interrupt(worker)
      const byId = Object.fromEntries(entries.map((e) => [e.runId, e]))
      assert.deepStrictEqual(
        [byId["always"]!.status, byId["always"]!.attempts, byId["always"]!.failures, byId["always"]!.error],
        ["Failed", 3, 3, Option.some("Flaky: attempt 3")]
      )
      assert.deepStrictEqual([byId["busy-once"]!.status, byId["busy-once"]!.attempts, byId["busy-once"]!.failures], ["Done", 2, 0])
      assert.deepStrictEqual([byId["fatal"]!.status, byId["fatal"]!.attempts, byId["fatal"]!.failures], ["Failed", 1, 1])
      assert.deepStrictEqual([byId["flaky-once"]!.status, byId["flaky-once"]!.failures], ["Done", 1])
      // A failed entry can be put back by hand.
      assert.isTrue(yield* Worker.requeue(runId("fatal")))
      assert.isFalse(yield* Worker.requeue(runId("flaky-once")))
      const fatal = Option.getOrThrow(yield* Worker.entry(runId("fatal")))
      assert.deepStrictEqual([fatal.status, fatal.failures], ["Pending", 0])
    }).pipe(Effect.provide(layerFreshClient())))

  it.scopedLive("a defect is recorded as Failed with its cause and ends the worker (a bug is not retried)", () =>
    Effect.gen(function*() {
      yield* Worker.migrate
      yield* Worker.enqueue(runId("buggy"), {})
      const exit = yield* Worker.serve({
        ...fast,
        concurrency: 1,
        handle: () => Effect.dieMessage("parser bug")
      }).pipe(Effect.exit)
      assert.isTrue(Exit.isFailure(exit) && Cause.isDie(exit.cause))
      const entry = Option.getOrThrow(yield* Worker.entry(runId("buggy")))
      assert.strictEqual(entry.status, "Failed")
      assert.match(Option.getOrElse(entry.error, () => ""), /parser bug/)
    }).pipe(Effect.provide(layerFreshClient())))
})
