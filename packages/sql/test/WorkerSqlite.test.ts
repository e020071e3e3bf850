/**
 * The worker queue is dialect-neutral: on SQLite (one file shared by two workers) entries are
 * taken by one serialised `UPDATE … RETURNING` and run exactly once.
 */
import { assert, describe, it } from "@effect/vitest"
import { runId } from "@polyloop/core/Ids"
import * as SqlRunLogStore from "@polyloop/sql/SqlRunLogStore"
import * as Worker from "@polyloop/sql/Worker"
import * as SqlClient from "@effect/sql/SqlClient"
import * as Cause from "effect/Cause"
import * as Context from "effect/Context"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Fiber from "effect/Fiber"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Ref from "effect/Ref"
import * as Schedule from "effect/Schedule"
import * as TestClock from "effect/TestClock"
import * as TestServices from "effect/TestServices"
import * as path from "node:path"
import * as F from "./fixtures.js"

const sqliteClient = Layer.unwrapScoped(
  Effect.map(F.tempDir("polyloop-queue-"), (dir) => SqlRunLogStore.layerSqliteClient({ filename: path.join(dir, "queue.db") }))
).pipe(Layer.orDie)

describe.sequential("Worker queue on SQLite", () => {
  it.scopedLive("a full disk while the queue table is created: StoreError DiskFull (not a defect); with room, the queue works", () =>
    Effect.gen(function*() {
      const dir = yield* F.tempDir("polyloop-queue-full-")
      let failures = 0
      for (let limit = 1;; limit++) {
        const context = yield* Layer.build(SqlRunLogStore.layerSqliteClient({ filename: path.join(dir, `queue-${limit}.db`) }))
        const sql = Context.get(context, SqlClient.SqlClient)
        yield* sql.unsafe(`PRAGMA max_page_count = ${limit}`)
        const exit = yield* Effect.exit(Effect.provide(Worker.migrate, context))
        if (Exit.isSuccess(exit)) break
        const error = Cause.failureOption(exit.cause)
        assert.isTrue(Option.isSome(error), `page limit ${limit}: a typed failure, not ${Cause.pretty(exit.cause)}`)
        const e = Option.getOrThrow(error)
        assert.strictEqual(e.reason, "DiskFull", e.message)
        assert.include(e.message, "worker queue")
        failures++
        yield* sql.unsafe("PRAGMA max_page_count = 1073741823")
        yield* Effect.provide(Worker.migrate, context)
        assert.isTrue(yield* Effect.provide(Worker.enqueue(runId(`room-${limit}`), { limit }), context))
      }
      assert.isAbove(failures, 1, "creating the queue's tables ran out of room partway")
    }))

  it.scoped("a worker whose queue fails keeps retrying, yet stops at once when interrupted (the retries' sleeps are interruptible)", () =>
    Effect.gen(function*() {
      yield* Worker.migrate
      const sql = yield* SqlClient.SqlClient
      // The queue table gone behind the migrator's back: every attempt to take a run fails.
      yield* sql.unsafe("DROP TABLE polyloop_queue")
      const worker = yield* Effect.fork(Worker.serve({ concurrency: 2, handle: () => Effect.void }))
      // On the test clock the retry schedule's sleeps never end: the fibers wait in them.
      yield* TestClock.adjust(Duration.seconds(1))
      const stopped = yield* Fiber.interrupt(worker).pipe(Effect.timeoutOption(Duration.seconds(20)), TestServices.provideLive)
      assert.isTrue(Option.isSome(stopped), "interrupting the worker did not stop it: it waits out its retries uninterruptibly")
      assert.isTrue(Exit.isInterrupted(Option.getOrThrow(stopped)))
    }).pipe(Effect.provide(sqliteClient)))

  it.scopedLive("two workers take every entry exactly once; interruption gives entries back", () =>
    Effect.gen(function*() {
      yield* Worker.migrate
      const ids = Array.from({ length: 20 }, (_, i) => `q${String(i).padStart(2, "0")}`)
      for (const id of ids) yield* Worker.enqueue(runId(id), { id })
      assert.isFalse(yield* Worker.enqueue(runId("q00"), { id: "again" }))
      const handled = yield* Ref.make<ReadonlyArray<string>>([])
      const handle = (job: Worker.Job) =>
        Ref.update(handled, (xs) => [...xs, job.runId]).pipe(Effect.zipRight(Effect.sleep(Duration.millis(5))), Effect.as(job.payload))
      const options = { concurrency: 2, pollInterval: Duration.millis(10), handle, outcome: (p: unknown) => p }
      const a = yield* Effect.fork(Worker.serve({ ...options, workerId: "A" }))
      const b = yield* Effect.fork(Worker.serve({ ...options, workerId: "B" }))
      const entries = yield* Worker.entries().pipe(
        Effect.filterOrFail((es) => es.every((e) => e.status === "Done"), () => "not yet" as const),
        Effect.retry({ while: (e) => e === "not yet", schedule: Schedule.spaced(Duration.millis(20)) }),
        Effect.timeout(Duration.seconds(20))
      )
      yield* Fiber.interrupt(a)
      yield* Fiber.interrupt(b)
      assert.deepStrictEqual([...(yield* Ref.get(handled))].sort(), ids)
      for (const e of entries) assert.deepStrictEqual(e.outcome, Option.some({ id: e.runId }))

      // A worker interrupted mid-run gives its entry back.
      yield* Worker.enqueue(runId("blocked"), {})
      const blocked = yield* Effect.fork(
        Worker.serve({ concurrency: 1, pollInterval: Duration.millis(10), handle: () => Effect.never })
      )
      yield* Worker.entry(runId("blocked")).pipe(
        Effect.filterOrFail((e) => Option.exists(e, (x) => x.status === "Running"), () => "not yet" as const),
        Effect.retry({ while: (e) => e === "not yet", schedule: Schedule.spaced(Duration.millis(10)) })
      )
      yield* Fiber.interrupt(blocked)
      const back = Option.getOrThrow(yield* Worker.entry(runId("blocked")))
      assert.deepStrictEqual([back.status, back.attempts, back.failures], ["Pending", 1, 0])
    }).pipe(Effect.provide(sqliteClient)))
})
