import { assert, describe, it } from "@effect/vitest"
import * as Migrator from "@effect/sql/Migrator"
import * as SqlClient from "@effect/sql/SqlClient"
import { ConcurrentWriter, RunBusy, StoreError } from "@polyloop/core/Errors"
import type { RunId } from "@polyloop/core/Ids"
import * as RunLog from "@polyloop/core/RunLog"
import * as RunLogStore from "@polyloop/core/RunLogStore"
import * as SqlRunLogStore from "@polyloop/sql/SqlRunLogStore"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as fc from "effect/FastCheck"
import * as Fiber from "effect/Fiber"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as TestClock from "effect/TestClock"
import * as fs from "node:fs"
import * as path from "node:path"
import { migrations as sqliteMigrations } from "../src/internal/migrations/sqlite.js"
import * as F from "./fixtures.js"
import { openClient, openStore } from "./support/store.js"

const storeLayer = Layer.unwrapScoped(
  Effect.map(F.tempDir(), (dir) => SqlRunLogStore.layerSqlite({ filename: path.join(dir, "runs.db"), synchronous: "NORMAL" }))
)

let runCounter = 0
const freshRunId = (prefix: string): RunId => F.rid(`${prefix}-${++runCounter}`)

const fail = <A, E>(effect: Effect.Effect<A, E>) => Effect.flip(effect)

/** Same class and fields (errors are compared by their fields, not by structural equality). */
const sameError = (actual: { readonly _tag: string }, expected: { readonly _tag: string }) => {
  assert.strictEqual(actual._tag, expected._tag)
  assert.deepStrictEqual({ ...actual }, { ...expected })
}

/** A whole scripted run: steps, resumes before some steps, maybe finished. */
const planArbitrary = fc.record({
  startedAt: fc.integer({ min: 0, max: 2_000_000_000_000 }),
  agent: fc.string({ maxLength: 20 }),
  steps: fc.array(
    fc.record({
      status: fc.constantFrom<F.Status | null>(null, "Executed", "NotExecuted", "EnvError"),
      tokens: fc.nat({ max: 5_000 }),
      elapsed: fc.nat({ max: 100_000 }),
      resumeBefore: fc.boolean(),
      observation: fc.string({ maxLength: 200 })
    }),
    { maxLength: 10 }
  ),
  finish: fc.boolean()
})

// A store and its client on one file, for tests that look under the store.
const storeClientLayer = Layer.unwrapScoped(
  Effect.map(F.tempDir(), (dir) => {
    const client = SqlRunLogStore.layerSqliteClient({ filename: path.join(dir, "runs.db"), synchronous: "NORMAL" })
    return Layer.provideMerge(SqlRunLogStore.layer({ path: path.join(dir, "runs.db") }), client)
  })
)

describe("SqlRunLogStore on SQLite", () => {
  it.layer(storeLayer)("one store", (it) => {
    it.effect("an unknown run has the empty log and no summary", () =>
      Effect.gen(function*() {
        const store = yield* RunLogStore.RunLogStore
        const log = yield* store.readLog(F.rid("never-written"))
        assert.isTrue(RunLog.isEmpty(log))
        const runs = yield* store.listRuns()
        assert.isFalse(runs.some((r) => r.runId === "never-written"))
      }))

    it.effect.prop(
      "every prefix of appends reads back as written, and the summary matches the log",
      { plan: planArbitrary },
      ({ plan }) =>
        Effect.gen(function*() {
          const store = yield* RunLogStore.RunLogStore
          const runId = freshRunId("prop")
          const written: Array<RunLog.RunRecord> = []
          const check = Effect.gen(function*() {
            const log = yield* store.readLog(runId)
            assert.deepStrictEqual(RunLog.records(log), written)
          })
          const start = F.started(runId, { startedAt: plan.startedAt, agent: plan.agent })
          yield* store.start(start)
          written.push(start)
          yield* check
          let seq = 1
          let step = 0
          for (const s of plan.steps) {
            if (s.resumeBefore) {
              const r = F.resumed(seq++, step)
              yield* store.appendResume(runId, r)
              written.push(r)
              yield* check
            }
            const reply = F.replied(seq++, step, s.tokens)
            yield* store.appendReply(runId, reply)
            written.push(reply)
            yield* check
            const result = s.status === null ? null : F.resulted(seq++, step, s.status, s.observation)
            const done = F.completed(seq++, step, result !== null, s.elapsed, s.tokens, s.status === "Executed")
            yield* store.completeStep(runId, result === null ? [] : [result], done)
            if (result !== null) written.push(result)
            written.push(done)
            yield* check
            step++
          }
          if (plan.finish) {
            const f = F.finished(seq++, { _tag: "BudgetExhausted", budget: "Steps" }, plan.startedAt + 1)
            yield* store.finish(runId, f)
            written.push(f)
            yield* check
          }
          const log = yield* store.readLog(runId)
          const expected = Option.getOrThrow(RunLogStore.summarize(log))
          const listed = (yield* store.listRuns()).filter((r) => r.runId === runId)
          assert.deepStrictEqual(listed, [expected])
        }),
      { fastCheck: { numRuns: 40 } }
    )

    it.effect("listRuns: status filter, limit, newest first (ties by run id) — as the reference applyQuery", () =>
      Effect.gen(function*() {
        const store = yield* RunLogStore.RunLogStore
        const agent = `list-${++runCounter}`
        const summaries: Array<RunLogStore.RunSummary> = []
        const startedAts = [5_000_000_000_000, 5_000_000_000_300, 5_000_000_000_100, 5_000_000_000_300, 5_000_000_000_200]
        for (let i = 0; i < startedAts.length; i++) {
          const runId = F.rid(`${agent}-${String.fromCharCode(101 - i)}`)
          yield* store.start(F.started(runId, { agent, startedAt: startedAts[i]! }))
          const next = yield* F.writeSteps(store, runId, 1, 0, [{ status: "Executed", tokens: i + 1, elapsed: 10 * i }])
          if (i % 2 === 0) yield* store.finish(runId, F.finished(next, { _tag: "EnvError", message: "down" }, startedAts[i]! + 7))
          summaries.push(Option.getOrThrow(RunLogStore.summarize(yield* store.readLog(runId))))
        }
        const mine = (runs: ReadonlyArray<RunLogStore.RunSummary>) => runs.filter((r) => r.agent === agent)
        for (const query of [{}, { status: "Finished" as const }, { status: "Unfinished" as const }]) {
          assert.deepStrictEqual(mine(yield* store.listRuns(query)), RunLogStore.applyQuery(summaries, query))
        }
        // These runs are the newest in the store, so a limit cuts among them.
        assert.deepStrictEqual(yield* store.listRuns({ limit: 3 }), RunLogStore.applyQuery(summaries, { limit: 3 }))
        assert.deepStrictEqual(
          yield* store.listRuns({ limit: 2, status: "Finished" }),
          RunLogStore.applyQuery(summaries, { limit: 2, status: "Finished" })
        )
        assert.deepStrictEqual(yield* store.listRuns({ limit: 0 }), [])
      }))

    it.effect("a duplicate or a gap is ConcurrentWriter, and the log is unchanged", () =>
      Effect.gen(function*() {
        const store = yield* RunLogStore.RunLogStore
        const runId = freshRunId("conflict")
        yield* store.start(F.started(runId))
        const next = yield* F.writeSteps(store, runId, 1, 0, [{ status: "Executed", tokens: 3, elapsed: 1 }])
        const before = yield* store.readLog(runId)
        const summaryBefore = (yield* store.listRuns()).filter((r) => r.runId === runId)

        const again = yield* fail(store.start(F.started(runId)))
        sameError(again, new ConcurrentWriter({ runId, expectedSeq: next, actualSeq: 0 }))
        const duplicate = yield* fail(store.appendReply(runId, F.replied(1, 0)))
        sameError(duplicate, new ConcurrentWriter({ runId, expectedSeq: next, actualSeq: 1 }))
        const gap = yield* fail(store.appendReply(runId, F.replied(next + 2, 1)))
        sameError(gap, new ConcurrentWriter({ runId, expectedSeq: next, actualSeq: next + 2 }))
        const gapStep = yield* fail(store.completeStep(runId, [F.resulted(next + 1, 1)], F.completed(next + 2, 1, true)))
        sameError(gapStep, new ConcurrentWriter({ runId, expectedSeq: next, actualSeq: next + 1 }))
        const notStarted = freshRunId("not-started")
        const orphan = yield* fail(store.appendReply(notStarted, F.replied(0, 0)))
        sameError(orphan, new ConcurrentWriter({ runId: notStarted, expectedSeq: 0, actualSeq: 0 }))
        const orphan2 = yield* fail(store.appendReply(notStarted, F.replied(1, 0)))
        sameError(orphan2, new ConcurrentWriter({ runId: notStarted, expectedSeq: 0, actualSeq: 1 }))

        assert.deepStrictEqual(yield* store.readLog(runId), before)
        assert.deepStrictEqual((yield* store.listRuns()).filter((r) => r.runId === runId), summaryBefore)
        assert.isTrue(RunLog.isEmpty(yield* store.readLog(notStarted)))
        // The right next record is still accepted.
        yield* store.appendReply(runId, F.replied(next, 1))
      }))
  })
})

it.effect("the database itself rejects a duplicate (run_id, seq)", () =>
  Effect.gen(function*() {
    const store = yield* RunLogStore.RunLogStore
    const sql = yield* SqlClient.SqlClient
    const runId = freshRunId("constraint")
    yield* store.start(F.started(runId))
    const inserted = yield* Effect.either(
      sql`INSERT INTO polyloop_records (run_id, seq, kind, step, payload) VALUES (${runId}, 0, 'RunStarted', NULL, '{}')`
    )
    assert.isTrue(Either.isLeft(inserted))
  }).pipe(Effect.provide(storeClientLayer)))

describe("SqlRunLogStore: atomic steps under injected faults", () => {
  type Where = "BetweenRecords" | "BeforeCommit"
  const faults: { failAt: Where | null; hang: Deferred.Deferred<void> | null } = { failAt: null, hang: null }
  const faultPoint: SqlRunLogStore.FaultPoint = ({ index, runId, stage }) =>
    Effect.suspend(() => {
      const where: Where | null = stage === "BeforeCommit" ? "BeforeCommit" : index === 1 ? "BetweenRecords" : null
      if (faults.hang !== null && where === "BetweenRecords") {
        return Effect.zipRight(Deferred.succeed(faults.hang, undefined), Effect.never)
      }
      return where !== null && where === faults.failAt
        ? Effect.fail(new StoreError({ reason: "Unavailable", runId, message: `injected fault at ${where}` }))
        : Effect.void
    })
  const layer = Layer.unwrapScoped(
    Effect.map(F.tempDir(), (dir) =>
      SqlRunLogStore.layerSqlite({ filename: path.join(dir, "runs.db"), synchronous: "NORMAL", faultPoint }))
  )

  it.layer(layer)((it) => {
    for (const stage of ["BetweenRecords", "BeforeCommit"] as const) {
      it.effect(`a failure at ${stage} leaves neither record of the step, and the step can be written again`, () =>
        Effect.gen(function*() {
          const store = yield* RunLogStore.RunLogStore
          const runId = freshRunId(`fault-${stage}`)
          yield* store.start(F.started(runId))
          yield* store.appendReply(runId, F.replied(1, 0, 7))
          const before = yield* store.readLog(runId)
          const summaryBefore = yield* store.listRuns()
          faults.failAt = stage
          const error = yield* fail(store.completeStep(runId, [F.resulted(2, 0)], F.completed(3, 0, true)))
          faults.failAt = null
          assert.strictEqual(error._tag, "StoreError")
          assert.deepStrictEqual(yield* store.readLog(runId), before)
          assert.deepStrictEqual(yield* store.listRuns(), summaryBefore)
          yield* store.completeStep(runId, [F.resulted(2, 0)], F.completed(3, 0, true))
          const after = yield* store.readLog(runId)
          assert.strictEqual(after.results.length, 1)
          assert.strictEqual(after.steps.length, 1)
        }))
    }

    it.effect("interrupting a step between its two writes leaves neither record, and the store stays usable", () =>
      Effect.gen(function*() {
        const store = yield* RunLogStore.RunLogStore
        const runId = freshRunId("interrupt")
        yield* store.start(F.started(runId))
        yield* store.appendReply(runId, F.replied(1, 0))
        const reached = yield* Deferred.make<void>()
        faults.hang = reached
        const fiber = yield* Effect.fork(store.completeStep(runId, [F.resulted(2, 0)], F.completed(3, 0, true)))
        yield* Deferred.await(reached)
        faults.hang = null
        yield* Fiber.interrupt(fiber)
        const log = yield* store.readLog(runId)
        assert.strictEqual(RunLog.size(log), 2)
        assert.strictEqual(log.results.length, 0)
        assert.strictEqual(log.steps.length, 0)
        yield* store.completeStep(runId, [F.resulted(2, 0)], F.completed(3, 0, true))
        assert.strictEqual(RunLog.size(yield* store.readLog(runId)), 4)
      }))
  })
})

describe("SqlRunLogStore: claims", () => {
  it.scoped("a claim is exclusive across two stores on one file, and free again once released", () =>
    Effect.gen(function*() {
      const dir = yield* F.tempDir()
      const file = path.join(dir, "runs.db")
      const a = yield* openStore(file)
      const b = yield* openStore(file)
      const runId = F.rid("claimed")
      const held = yield* Effect.scoped(
        Effect.gen(function*() {
          yield* a.claim(runId)
          const busy = yield* fail(Effect.scoped(b.claim(runId)))
          assert.instanceOf(busy, RunBusy)
          assert.strictEqual(busy.runId, runId)
          assert.include(busy.owner ?? "", `:${process.pid}:`)
          // The holder itself cannot claim twice either.
          const again = yield* fail(Effect.scoped(a.claim(runId)))
          sameError(again, busy)
          // Another run is independent.
          yield* Effect.scoped(b.claim(F.rid("other")))
          return busy.owner
        })
      )
      assert.isDefined(held)
      yield* Effect.scoped(b.claim(runId))
      yield* Effect.scoped(a.claim(runId))
    }))

  it.scoped("a held claim is renewed by its heartbeat; a dead owner's lease expires and can be taken", () =>
    Effect.gen(function*() {
      const dir = yield* F.tempDir()
      const file = path.join(dir, "runs.db")
      const lease = { leaseDuration: "10 seconds", heartbeatInterval: "2 seconds" } as const
      const a = yield* openStore(file, lease)
      const b = yield* openStore(file, lease)
      const sql = yield* openClient(file)
      const live = F.rid("alive")
      yield* Effect.scoped(
        Effect.gen(function*() {
          yield* a.claim(live)
          yield* TestClock.adjust("1 minute")
          const busy = yield* fail(Effect.scoped(b.claim(live)))
          assert.instanceOf(busy, RunBusy)
        })
      )
      // A lease row whose owner died: nobody renews it.
      const dead = F.rid("dead")
      const now = yield* TestClock.currentTimeMillis
      yield* sql`INSERT INTO polyloop_claims (run_id, owner, expires_at) VALUES (${dead}, 'dead-owner', ${now + 10_000})`
      const busy = yield* fail(Effect.scoped(b.claim(dead)))
      sameError(busy, new RunBusy({ runId: dead, owner: "dead-owner" }))
      yield* TestClock.adjust("9 seconds")
      assert.instanceOf(yield* fail(Effect.scoped(b.claim(dead))), RunBusy)
      yield* TestClock.adjust("1 second")
      yield* Effect.scoped(
        Effect.gen(function*() {
          yield* b.claim(dead)
          const rows = yield* sql<{ owner: string }>`SELECT owner FROM polyloop_claims WHERE run_id = ${dead}`
          assert.strictEqual(rows.length, 1)
          assert.notStrictEqual(rows[0]?.owner, "dead-owner")
        })
      )
      const rows = yield* sql`SELECT owner FROM polyloop_claims WHERE run_id = ${dead}`
      assert.strictEqual(rows.length, 0, "released claims leave no row")
    }))

  it.scoped("interrupting the claimant releases the claim", () =>
    Effect.gen(function*() {
      const dir = yield* F.tempDir()
      const file = path.join(dir, "runs.db")
      const a = yield* openStore(file)
      const b = yield* openStore(file)
      const runId = F.rid("interrupted-claim")
      const claimed = yield* Deferred.make<void>()
      const fiber = yield* Effect.fork(
        Effect.scoped(Effect.zipRight(a.claim(runId), Effect.zipRight(Deferred.succeed(claimed, undefined), Effect.never)))
      )
      yield* Deferred.await(claimed)
      assert.instanceOf(yield* fail(Effect.scoped(b.claim(runId))), RunBusy)
      yield* Fiber.interrupt(fiber)
      yield* Effect.scoped(b.claim(runId))
    }))

  it.live("many runs at once on one store (claims, heartbeats, appends, reads and listings interleaved) all complete, each log whole", () =>
    Effect.scoped(
      Effect.gen(function*() {
        const dir = yield* F.tempDir()
        const file = path.join(dir, "runs.db")
        // A heartbeat every few milliseconds, so renewals land between the runs' appends.
        const store = yield* openStore(file, { leaseDuration: "2 seconds", heartbeatInterval: "3 millis" })
        const runs = Array.from({ length: 40 }, (_, i) => F.rid(`concurrent-${i}`))
        const plan = (i: number) =>
          Array.from({ length: 15 }, (_, k) => ({
            status: ([null, "Executed", "NotExecuted", "EnvError"] as const)[(i + k) % 4]!,
            tokens: i + k,
            elapsed: k
          }))
        const writer = (runId: RunId, i: number) =>
          Effect.scoped(
            Effect.gen(function*() {
              yield* store.claim(runId)
              yield* store.start(F.started(runId, { startedAt: i }))
              const next = yield* F.writeSteps(store, runId, 1, 0, plan(i))
              yield* store.finish(runId, F.finished(next, { _tag: "Completed", by: "Tool" }, 1_000 + i))
            })
          )
        let listings = 0
        const reader = Effect.gen(function*() {
          const summaries = yield* store.listRuns()
          for (const summary of summaries.slice(0, 3)) yield* store.readLog(F.rid(summary.runId))
          listings++
          yield* Effect.yieldNow()
        }).pipe(Effect.forever)
        const readerFiber = yield* Effect.fork(reader)
        yield* Effect.forEach(runs, writer, { concurrency: "unbounded", discard: true })
        yield* Fiber.interrupt(readerFiber)
        assert.isAbove(listings, 0)
        const summaries = yield* store.listRuns()
        assert.strictEqual(summaries.length, runs.length)
        for (const [i, runId] of runs.entries()) {
          const log = yield* store.readLog(runId, { verify: true })
          assert.strictEqual(RunLog.size(log), 1 + plan(i).reduce((n, p) => n + (p.status === null ? 2 : 3), 0) + 1)
          assert.deepStrictEqual(
            summaries.find((s) => s.runId === runId),
            Option.getOrThrow(RunLogStore.summarize(log))
          )
        }
        // Every claim was released.
        const sql = yield* openClient(file)
        assert.deepStrictEqual(yield* sql`SELECT run_id FROM polyloop_claims`, [])
      })
    ))

  it.scoped("appends of several runs committed together (group commit): one run's refused append fails only that run's", () =>
    Effect.gen(function*() {
      const dir = yield* F.tempDir()
      const file = path.join(dir, "runs.db")
      const store = yield* openStore(file)
      const sql = yield* openClient(file)
      const runs = [F.rid("group-a"), F.rid("group-b"), F.rid("group-c"), F.rid("group-d")]
      for (const runId of runs) {
        yield* store.claim(runId)
        yield* store.start(F.started(runId))
      }
      // Group commit is on with more than one claimed run. B's lease is taken over; D's next
      // record has a gap.
      yield* sql`UPDATE polyloop_claims SET owner = 'other-host:1:1:x' WHERE run_id = ${runs[1]!}`
      const [a, b, c, d] = runs as [RunId, RunId, RunId, RunId]
      const outcomes = yield* Effect.all(
        [
          Effect.either(store.completeStep(a, [F.resulted(1, 0)], F.completed(2, 0, true))),
          Effect.either(store.completeStep(b, [F.resulted(1, 0)], F.completed(2, 0, true))),
          Effect.either(store.appendReply(c, F.replied(1, 0, 7))),
          Effect.either(store.appendReply(d, F.replied(5, 0)))
        ],
        { concurrency: "unbounded" }
      )
      assert.isTrue(Either.isRight(outcomes[0]))
      assert.isTrue(Either.isRight(outcomes[2]))
      sameError(
        Either.getLeft(outcomes[1]).pipe(Option.getOrThrow),
        new ConcurrentWriter({ runId: b, expectedSeq: 1, actualSeq: 1, leaseHolder: "other-host:1:1:x" })
      )
      sameError(Either.getLeft(outcomes[3]).pipe(Option.getOrThrow), new ConcurrentWriter({ runId: d, expectedSeq: 1, actualSeq: 5 }))
      assert.strictEqual(RunLog.size(yield* store.readLog(a)), 3)
      assert.strictEqual(RunLog.size(yield* store.readLog(b)), 1)
      assert.strictEqual(RunLog.size(yield* store.readLog(c)), 2)
      assert.strictEqual(RunLog.size(yield* store.readLog(d)), 1)
      const summaries = yield* store.listRuns()
      for (const runId of runs) {
        assert.deepStrictEqual(
          summaries.find((s) => s.runId === runId),
          Option.getOrThrow(RunLogStore.summarize(yield* store.readLog(runId)))
        )
      }
    }))

  it.scoped("a group-committed append returns only once its rows are committed: another connection sees them then", () =>
    Effect.gen(function*() {
      const dir = yield* F.tempDir()
      const file = path.join(dir, "runs.db")
      const store = yield* openStore(file)
      const other = yield* openClient(file)
      const runs = Array.from({ length: 8 }, (_, i) => F.rid(`committed-${i}`))
      for (const runId of runs) {
        yield* store.claim(runId)
        yield* store.start(F.started(runId))
      }
      const visible = (runId: RunId, seq: number) =>
        Effect.map(
          other<{ n: number }>`SELECT count(*) AS n FROM polyloop_records WHERE run_id = ${runId} AND seq = ${seq}`,
          (rows) => Number(rows[0]?.n ?? 0)
        )
      // Each step: the replies of all runs at once, then their results and completions at once.
      const appends: ReadonlyArray<readonly [string, (runId: RunId, step: number) => Effect.Effect<void, unknown>, (step: number) => number]> = [
        ["reply", (runId, step) => store.appendReply(runId, F.replied(1 + 3 * step, step)), (step) => 1 + 3 * step],
        ["completion", (runId, step) => store.completeStep(runId, [F.resulted(2 + 3 * step, step)], F.completed(3 + 3 * step, step, true)), (step) => 3 + 3 * step]
      ]
      for (let step = 0; step < 5; step++) {
        for (const [name, write, lastSeq] of appends) {
          const seen = yield* Effect.forEach(runs, (runId) => Effect.zipRight(write(runId, step), visible(runId, lastSeq(step))), {
            concurrency: "unbounded"
          })
          assert.deepStrictEqual(seen, runs.map(() => 1), `step ${step}, ${name}: every append was visible to another connection when it returned`)
        }
      }
      for (const runId of runs) assert.strictEqual(RunLog.size(yield* store.readLog(runId)), 16)
    }))

  it.scoped("a holder whose lease was taken over, or is gone, is fenced off at its next append; nothing is written", () =>
    Effect.gen(function*() {
      const dir = yield* F.tempDir()
      const file = path.join(dir, "runs.db")
      const a = yield* openStore(file)
      const sql = yield* openClient(file)
      const runId = F.rid("fenced")
      yield* Effect.scoped(
        Effect.gen(function*() {
          yield* a.claim(runId)
          yield* a.start(F.started(runId))
          yield* a.appendReply(runId, F.replied(1, 0, 7))
          const before = yield* a.readLog(runId)
          const summaryBefore = yield* a.listRuns()
          // Another process took the lease over (as after an expiry).
          yield* sql`UPDATE polyloop_claims SET owner = 'other-host:1:1:x' WHERE run_id = ${runId}`
          const taken = yield* fail(a.completeStep(runId, [F.resulted(2, 0)], F.completed(3, 0, true)))
          sameError(taken, new ConcurrentWriter({ runId, expectedSeq: 2, actualSeq: 2, leaseHolder: "other-host:1:1:x" }))
          // The lease row is gone altogether.
          yield* sql`DELETE FROM polyloop_claims WHERE run_id = ${runId}`
          const gone = yield* fail(a.completeStep(runId, [F.resulted(2, 0)], F.completed(3, 0, true)))
          sameError(gone, new ConcurrentWriter({ runId, expectedSeq: 2, actualSeq: 2, leaseHolder: "" }))
          assert.deepStrictEqual(yield* a.readLog(runId), before)
          assert.deepStrictEqual(yield* a.listRuns(), summaryBefore)
        })
      )
      // Without a claim the store does not fence: the next record fits.
      yield* a.completeStep(runId, [F.resulted(2, 0)], F.completed(3, 0, true))
      assert.strictEqual(RunLog.size(yield* a.readLog(runId)), 4)
    }))
})

describe("SqlRunLogStore: migrations", () => {
  it.scoped("a fresh file gets the whole schema", () =>
    Effect.gen(function*() {
      const dir = yield* F.tempDir()
      const file = path.join(dir, "fresh.db")
      yield* Effect.scoped(openStore(file))
      assert.isTrue(fs.existsSync(file))
      const sql = yield* openClient(file)
      const versions = yield* sql<{ migration_id: number }>`SELECT migration_id FROM polyloop_migrations ORDER BY migration_id`
      assert.deepStrictEqual(versions.map((v) => v.migration_id), [1, 2, 3, 4, 5])
      assert.strictEqual(SqlRunLogStore.latestVersion(sqliteMigrations), 5)
      const tables = yield* sql<{ name: string }>`SELECT name FROM sqlite_master WHERE type = 'table' AND name LIKE 'polyloop_%' ORDER BY name`
      assert.deepStrictEqual(tables.map((t) => t.name), ["polyloop_blobs", "polyloop_claims", "polyloop_migrations", "polyloop_records", "polyloop_refs", "polyloop_runs"])
      const appendPath = yield* sql<{ type: string; name: string }>`SELECT type, name FROM sqlite_master WHERE type IN ('view', 'trigger') ORDER BY type, name`
      assert.deepStrictEqual(appendPath.map((o) => [o.type, o.name]), [["trigger", "polyloop_append_insert"], ["view", "polyloop_append"]])
      const mode = yield* sql<{ journal_mode: string }>`PRAGMA journal_mode`
      assert.strictEqual(mode[0]?.journal_mode, "wal")
      // Opening again applies nothing.
      yield* Effect.scoped(openStore(file))
      const again = yield* sql`SELECT migration_id FROM polyloop_migrations`
      assert.strictEqual(again.length, 5)
    }))

  it.scoped("a schema-1 database is migrated: its runs are summarised and their logs continue", () =>
    Effect.gen(function*() {
      const dir = yield* F.tempDir()
      const file = path.join(dir, "old.db")
      const done = F.rid("old-finished")
      const open = F.rid("old-open")
      const records: Record<string, ReadonlyArray<RunLog.RunRecord>> = {
        [done]: [
          F.started(done, { agent: "veteran", startedAt: 100 }),
          F.replied(1, 0, 40),
          F.resulted(2, 0, "Executed"),
          F.completed(3, 0, true, 12),
          F.replied(4, 1, 2),
          F.resulted(5, 1, "NotExecuted"),
          F.completed(6, 1, true, 3, 10, false),
          F.finished(7, { _tag: "Completed", by: "Tool" }, 500)
        ],
        [open]: [F.started(open, { agent: "rookie", startedAt: 200 }), F.resumed(1, 0), F.replied(2, 0, 9)]
      }
      // Build a database as version 1 of the schema left it.
      yield* Effect.scoped(
        Effect.gen(function*() {
          const sql = yield* openClient(file)
          const applied = yield* Migrator.make({})({
            loader: Migrator.fromRecord({ "1_create_records": sqliteMigrations["1_create_records"]! }),
            table: SqlRunLogStore.migrationsTable
          }).pipe(Effect.provideService(SqlClient.SqlClient, sql))
          assert.deepStrictEqual(applied, [[1, "create_records"]])
          for (const [runId, rs] of Object.entries(records)) {
            for (const r of rs) {
              const stored = RunLogStore.toStored(r)
              yield* sql`INSERT INTO polyloop_records (run_id, seq, kind, step, payload) VALUES (${runId}, ${stored.seq}, ${stored.kind}, NULL, ${stored.json})`
            }
          }
        })
      )
      const store = yield* openStore(file)
      for (const [runId, rs] of Object.entries(records)) {
        const log = yield* store.readLog(F.rid(runId))
        assert.deepStrictEqual(RunLog.records(log), rs)
      }
      const expected = [
        Option.getOrThrow(RunLogStore.summarize(yield* store.readLog(open))),
        Option.getOrThrow(RunLogStore.summarize(yield* store.readLog(done)))
      ]
      assert.deepStrictEqual(yield* store.listRuns(), expected)
      assert.strictEqual(expected[1]?.agent, "veteran")
      assert.strictEqual(expected[1]?.tokens, 40 + 20 + 2 + 1)
      // The backfilled next sequence number is right: the next record fits, a gap does not.
      const gap = yield* fail(store.appendReply(open, F.replied(4, 0)))
      sameError(gap, new ConcurrentWriter({ runId: open, expectedSeq: 3, actualSeq: 4 }))
      yield* store.completeStep(open, [F.resulted(3, 0)], F.completed(4, 0, true, 8, 9))
      const summary = (yield* store.listRuns({ status: "Unfinished" }))[0]
      assert.deepStrictEqual(summary, Option.getOrThrow(RunLogStore.summarize(yield* store.readLog(open))))
    }))

  it.scoped("a database with a newer schema is refused with StoreError SchemaVersion and left alone", () =>
    Effect.gen(function*() {
      const dir = yield* F.tempDir()
      const file = path.join(dir, "future.db")
      const runId = F.rid("kept")
      yield* Effect.scoped(
        Effect.gen(function*() {
          const store = yield* openStore(file)
          yield* store.start(F.started(runId))
        })
      )
      yield* Effect.scoped(
        Effect.gen(function*() {
          const sql = yield* openClient(file)
          yield* sql`INSERT INTO polyloop_migrations (migration_id, name) VALUES (6, 'from_the_future')`
        })
      )
      const error = yield* fail(Effect.scoped(openStore(file)))
      assert.strictEqual(error.reason, "SchemaVersion")
      assert.strictEqual(error.path, file)
      assert.include(error.message, "schema version 6")
      assert.include(error.message, "version 5")
      const sql = yield* openClient(file)
      const versions = yield* sql<{ migration_id: number }>`SELECT migration_id FROM polyloop_migrations ORDER BY migration_id`
      assert.deepStrictEqual(versions.map((v) => v.migration_id), [1, 2, 3, 4, 5, 6])
      const rows = yield* sql`SELECT seq FROM polyloop_records WHERE run_id = ${runId}`
      assert.strictEqual(rows.length, 1)
    }))
})

describe("SqlRunLogStore: storage", () => {
  it.scoped("storage per step stays constant as a run grows (100 vs 1000 steps)", () =>
    Effect.gen(function*() {
      const dir = yield* F.tempDir()
      const file = path.join(dir, "growth.db")
      const store = yield* openStore(file)
      const sql = yield* openClient(file)
      const bytes = Effect.gen(function*() {
        yield* sql`PRAGMA wal_checkpoint(TRUNCATE)`
        const pages = yield* sql<{ page_count: number }>`PRAGMA page_count`
        const size = yield* sql<{ page_size: number }>`PRAGMA page_size`
        return (pages[0]?.page_count ?? 0) * (size[0]?.page_size ?? 0)
      })
      const runId = F.rid("long")
      yield* store.start(F.started(runId))
      const plan = (n: number): ReadonlyArray<F.StepPlan> =>
        Array.from({ length: n }, () => ({ status: "Executed" as const, tokens: 100, elapsed: 10, observation: "x".repeat(200) }))
      let seq = yield* F.writeSteps(store, runId, 1, 0, plan(100))
      const at100 = yield* bytes
      seq = yield* F.writeSteps(store, runId, seq, 100, plan(100))
      const at200 = yield* bytes
      seq = yield* F.writeSteps(store, runId, seq, 200, plan(800))
      const at1000 = yield* bytes
      seq = yield* F.writeSteps(store, runId, seq, 1000, plan(100))
      const at1100 = yield* bytes
      const early = (at200 - at100) / 100
      const late = (at1100 - at1000) / 100
      const record = RunLogStore.encodeRecord(F.resulted(0, 0, "Executed", "x".repeat(200))).length
      // eslint-disable-next-line no-console
      console.log(`bytes per step: ${early.toFixed(0)} around step 100, ${late.toFixed(0)} around step 1000`)
      assert.isAbove(early, record, "a step stores at least its result record")
      assert.isAtMost(late, early * 1.25, "per-step growth must not grow with the run")
      assert.strictEqual(RunLog.size(yield* store.readLog(runId)), seq)
      const summaries = yield* sql`SELECT run_id FROM polyloop_runs`
      assert.strictEqual(summaries.length, 1)
    }))
})
