import { assert, describe, it } from "@effect/vitest"
import * as SqlClient from "@effect/sql/SqlClient"
import { RunBusy, StoreError } from "@polyloop/core/Errors"
import * as RunLog from "@polyloop/core/RunLog"
import * as SqlRunLogStore from "@polyloop/sql/SqlRunLogStore"
import * as Cause from "effect/Cause"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Fiber from "effect/Fiber"
import * as Option from "effect/Option"
import * as Schedule from "effect/Schedule"
import * as fs from "node:fs"
import * as path from "node:path"
import * as F from "./fixtures.js"
import { runScript, scopedChild, script } from "./support/child.js"
import { openClient, openStore } from "./support/store.js"

const fail = <A, E>(effect: Effect.Effect<A, E>) => Effect.flip(effect)

const assertStoreError = (error: unknown, reason: StoreError["reason"], file: string): StoreError => {
  assert.instanceOf(error, StoreError)
  const e = error as StoreError
  assert.strictEqual(e.reason, reason, e.message)
  assert.strictEqual(e.path, file)
  assert.include(e.message, file)
  return e
}

describe.sequential("SqlRunLogStore: failures are typed StoreErrors and lose nothing", () => {
  it.scoped("a file that is not a database: Corrupt, with the path; the file is left as it was", () =>
    Effect.gen(function*() {
      const dir = yield* F.tempDir()
      const file = path.join(dir, "notes.txt")
      const content = "these are my notes, not a database\n".repeat(200)
      fs.writeFileSync(file, content)
      const error = yield* fail(Effect.scoped(openStore(file)))
      const e = assertStoreError(error, "Corrupt", file)
      assert.include(e.message, "not a database")
      assert.strictEqual(fs.readFileSync(file, "utf8"), content)
      assert.isFalse(fs.existsSync(`${file}-wal`))
    }))

  it.scoped("a database whose pages are corrupted: Corrupt, with the path", () =>
    Effect.gen(function*() {
      const dir = yield* F.tempDir()
      const file = path.join(dir, "runs.db")
      const runId = F.rid("doomed")
      yield* Effect.scoped(
        Effect.gen(function*() {
          const store = yield* openStore(file)
          yield* store.start(F.started(runId))
          yield* F.writeSteps(store, runId, 1, 0, [{ status: "Executed", tokens: 1, elapsed: 1 }])
        })
      )
      // Closing the last connection checkpoints the WAL into the file; now scribble over every
      // page but the first (the header and the schema stay readable).
      const bytes = fs.readFileSync(file)
      const pageSize = bytes.readUInt16BE(16)
      for (let i = pageSize; i < bytes.length; i++) bytes[i] = 0xa5
      fs.writeFileSync(file, bytes)
      const error = yield* fail(Effect.scoped(Effect.flatMap(openStore(file), (store) => store.readLog(runId))))
      assertStoreError(error, "Corrupt", file)
    }))

  it.scoped("a directory that does not exist: Unavailable, with the path; nothing is created", () =>
    Effect.gen(function*() {
      const dir = yield* F.tempDir()
      const file = path.join(dir, "missing", "runs.db")
      const error = yield* fail(Effect.scoped(openStore(file)))
      const e = assertStoreError(error, "Unavailable", file)
      assert.include(e.message, "does not exist")
      assert.isFalse(fs.existsSync(path.join(dir, "missing")))
    }))

  it.scoped("a path that is a directory: Unavailable, with the path", () =>
    Effect.gen(function*() {
      const dir = yield* F.tempDir()
      const error = yield* fail(Effect.scoped(openStore(dir)))
      assertStoreError(error, "Unavailable", dir)
    }))

  it.live("a read-only directory: ReadOnly, with the path, for a new and for an existing store; the existing one keeps its records", () =>
    Effect.scoped(
      Effect.gen(function*() {
        // Root ignores permissions: the child runs as `nobody` then.
        const asRoot = process.getuid?.() === 0
        const user = asRoot ? { uid: 65534, gid: 65534 } : {}
        const dir = yield* F.tempDir()
        fs.chmodSync(dir, 0o755)
        const existingDir = path.join(dir, "existing")
        const emptyDir = path.join(dir, "empty")
        fs.mkdirSync(existingDir)
        fs.mkdirSync(emptyDir)
        const existing = path.join(existingDir, "runs.db")
        const created = yield* runScript(script("open-store.ts"), [existing, "write"])
        assert.deepStrictEqual(created.lines, ['{"ok":true,"records":2}'])
        if (asRoot) {
          fs.chownSync(existing, 65534, 65534)
          fs.chownSync(existingDir, 65534, 65534)
        }
        fs.chmodSync(existingDir, 0o555)
        fs.chmodSync(emptyDir, 0o555)
        yield* Effect.addFinalizer(() =>
          Effect.sync(() => {
            fs.chmodSync(existingDir, 0o755)
            fs.chmodSync(emptyDir, 0o755)
          })
        )

        const fresh = path.join(emptyDir, "runs.db")
        for (const [file, mode] of [[fresh, "write"], [existing, "write"], [existing, "read"]] as const) {
          const out = yield* runScript(script("open-store.ts"), [file, mode], user)
          assert.strictEqual(out.lines.length, 1, out.lines.join("\n"))
          const result = JSON.parse(out.lines[0]!) as { error?: { _tag: string; reason: string; path: string; message: string } }
          assert.strictEqual(result.error?._tag, "StoreError", out.lines[0])
          assert.strictEqual(result.error?.reason, "ReadOnly", out.lines[0])
          assert.strictEqual(result.error?.path, file)
        }
        assert.isFalse(fs.existsSync(fresh))
        const readBack = yield* runScript(script("open-store.ts"), [existing, "read"])
        assert.deepStrictEqual(readBack.lines, ['{"ok":true,"records":2}'])
      })
    ), 60_000)

  it.scoped("a full disk (max_page_count): DiskFull, with the path; every returned write is kept, the failed one left nothing; the run continues once there is room", () =>
    Effect.gen(function*() {
      const dir = yield* F.tempDir()
      const file = path.join(dir, "full.db")
      const sql = yield* openClient(file)
      const withSql = Effect.provideService(SqlClient.SqlClient, sql)
      yield* withSql(SqlRunLogStore.migrate({ path: file }))
      const store = yield* withSql(SqlRunLogStore.make({ path: file }))
      const pages = yield* sql<{ page_count: number }>`PRAGMA page_count`
      yield* sql.unsafe(`PRAGMA max_page_count = ${(pages[0]?.page_count ?? 0) + 12}`)

      const runId = F.rid("filling")
      const written: Array<RunLog.RunRecord> = []
      const start = F.started(runId)
      yield* store.start(start)
      written.push(start)
      let seq = 1
      let step = 0
      let failure: { readonly error: unknown; readonly during: string; readonly seq: number; readonly step: number } | undefined
      while (failure === undefined && step < 500) {
        const reply = F.replied(seq, step, 5)
        const replyExit = yield* Effect.either(store.appendReply(runId, reply))
        if (replyExit._tag === "Left") {
          failure = { error: replyExit.left, during: "reply", seq, step }
          break
        }
        written.push(reply)
        const result = F.resulted(seq + 1, step, "Executed", `${step}:`.padEnd(1500, "o"))
        const done = F.completed(seq + 2, step, true)
        const stepExit = yield* Effect.either(store.completeStep(runId, [result], done))
        if (stepExit._tag === "Left") {
          failure = { error: stepExit.left, during: "completeStep", seq: seq + 1, step }
          break
        }
        written.push(result, done)
        seq += 3
        step++
      }
      assert.isDefined(failure, "the page limit must be reached")
      console.log(`full disk during ${failure!.during} of step ${failure!.step}`)
      const e = assertStoreError(failure!.error, "DiskFull", file)
      assert.include(e.message, "full")
      assert.strictEqual(e.runId, runId)
      // Nothing half-written: the log is exactly the writes that returned.
      assert.deepStrictEqual(RunLog.records(yield* store.readLog(runId)), written)
      // Room again: the failed write is simply retried and the run goes on.
      yield* sql.unsafe("PRAGMA max_page_count = 1073741823")
      let next = failure!.seq
      const nextStep = failure!.step
      if (failure!.during === "reply") {
        yield* store.appendReply(runId, F.replied(next, nextStep, 5))
        next++
      }
      yield* store.completeStep(runId, [F.resulted(next, nextStep, "Executed", "fits")], F.completed(next + 1, nextStep, true))
      const log = yield* store.readLog(runId)
      assert.strictEqual(RunLog.size(log), next + 2)
      assert.strictEqual(log.steps.length, nextStep + 1)
    }))

  it.scoped("a full disk while the schema is created: DiskFull with the path (not a defect: Migrator dies on a failing migration), nothing half-created; with room, the store opens", () =>
    Effect.gen(function*() {
      const dir = yield* F.tempDir()
      // Every page limit at which creating the schema runs out of room, from the first page on.
      let limit = 1
      for (;; limit++) {
        const file = path.join(dir, `schema-${limit}.db`)
        const sql = yield* openClient(file)
        const withSql = Effect.provideService(SqlClient.SqlClient, sql)
        yield* sql.unsafe(`PRAGMA max_page_count = ${limit}`)
        const exit = yield* Effect.exit(withSql(SqlRunLogStore.migrate({ path: file })))
        if (Exit.isSuccess(exit)) break
        const error = Cause.failureOption(exit.cause)
        assert.isTrue(Option.isSome(error), `page limit ${limit}: a typed failure, not ${Cause.pretty(exit.cause)}`)
        const e = assertStoreError(Option.getOrThrow(error), "DiskFull", file)
        assert.include(e.message, "migrating the schema")
        // Room again: every migration is applied now, so none was left half-applied.
        yield* sql.unsafe("PRAGMA max_page_count = 1073741823")
        const applied = yield* withSql(SqlRunLogStore.migrate({ path: file }))
        assert.deepStrictEqual(applied.map(([id]) => id), [1, 2, 3, 4, 5], `page limit ${limit}`)
        const store = yield* withSql(SqlRunLogStore.make({ path: file }))
        const runId = F.rid("roomy")
        yield* store.start(F.started(runId))
        assert.strictEqual(RunLog.size(yield* store.readLog(runId)), 1)
      }
      assert.isAbove(limit, 4, "the schema needs several pages: the failures above covered creating it partway")
    }))

  it.scoped("a database locked by another writer: Unavailable after the busy timeout, with the path; nothing written; readers go on; it works once the lock is gone", () =>
    Effect.gen(function*() {
      const dir = yield* F.tempDir()
      const file = path.join(dir, "locked.db")
      const store = yield* openStore(file, { busyTimeout: "150 millis" })
      const runId = F.rid("blocked")
      yield* store.start(F.started(runId))
      yield* store.appendReply(runId, F.replied(1, 0))
      const before = yield* store.readLog(runId)

      const other = yield* openClient(file)
      const locked = yield* Deferred.make<void>()
      const holder = yield* Effect.fork(
        other.withTransaction(
          other`INSERT INTO polyloop_claims (run_id, owner, expires_at) VALUES ('lock', 'holder', 0)`.pipe(
            Effect.zipRight(Deferred.succeed(locked, undefined)),
            Effect.zipRight(Effect.never)
          )
        )
      )
      yield* Deferred.await(locked)

      const error = yield* fail(store.completeStep(runId, [F.resulted(2, 0)], F.completed(3, 0, true)))
      const e = assertStoreError(error, "Unavailable", file)
      assert.include(e.message, "locked")
      // A claim is a write too: it fails with the store's error, never with RunBusy.
      const claimError = yield* fail(Effect.scoped(store.claim(runId)))
      assert.notInstanceOf(claimError, RunBusy)
      assertStoreError(claimError, "Unavailable", file)
      // Readers are not blocked by a writer in WAL mode.
      assert.deepStrictEqual(yield* store.readLog(runId), before)

      yield* Fiber.interrupt(holder)
      yield* store.completeStep(runId, [F.resulted(2, 0)], F.completed(3, 0, true))
      assert.strictEqual(RunLog.size(yield* store.readLog(runId)), 4)
    }))
})

describe.sequential("SqlRunLogStore: claims across processes", () => {
  it.live("a live process keeps its claim by heartbeat; once it is SIGKILLed its lease expires and another process takes the run", () =>
    Effect.scoped(
      Effect.gen(function*() {
        const dir = yield* F.tempDir()
        const file = path.join(dir, "claims.db")
        const store = yield* openStore(file, { leaseDuration: "2 seconds", reclaimDeadLocalOwners: false })
        const runId = F.rid("contested")
        const lease = 2_000
        const child = yield* scopedChild(script("claim-holder.ts"), [file, runId, String(lease)])
        yield* Effect.promise(() => child.waitFor((line) => line === "claimed"))
        const busy = yield* fail(Effect.scoped(store.claim(runId)))
        assert.instanceOf(busy, RunBusy)
        const owner = (busy as RunBusy).owner ?? ""
        assert.include(owner, `:${child.process.pid}:`)
        // Well past the lease: the holder's heartbeat keeps it.
        yield* Effect.sleep(lease * 2)
        const stillBusy = yield* fail(Effect.scoped(store.claim(runId)))
        assert.strictEqual((stillBusy as RunBusy).owner, owner)
        // The holder dies without releasing: its lease outlives it, then expires.
        child.process.kill("SIGKILL")
        yield* Effect.promise(() => child.exited)
        const justDead = yield* fail(Effect.scoped(store.claim(runId)))
        assert.strictEqual((justDead as RunBusy).owner, owner)
        yield* Effect.scoped(store.claim(runId)).pipe(
          Effect.retry({ schedule: Schedule.spaced("250 millis"), times: 60, while: (e) => e._tag === "RunBusy" })
        )
      })
    ), 60_000)

  it.live("by default a SQLite store takes over at once the claim of a local process that was SIGKILLed; a live one keeps it", () =>
    Effect.scoped(
      Effect.gen(function*() {
        const dir = yield* F.tempDir()
        const file = path.join(dir, "claims.db")
        // A long lease: only the dead-owner check can free the claim within this test.
        const store = yield* openStore(file, { leaseDuration: "10 minutes" })
        const runId = F.rid("reclaimed")
        const child = yield* scopedChild(script("claim-holder.ts"), [file, runId, String(600_000)])
        yield* Effect.promise(() => child.waitFor((line) => line === "claimed"))
        const busy = yield* fail(Effect.scoped(store.claim(runId)))
        assert.instanceOf(busy, RunBusy)
        const owner = (busy as RunBusy).owner ?? ""
        assert.isFalse(SqlRunLogStore.isDeadLocalOwner(owner))
        child.process.kill("SIGKILL")
        yield* Effect.promise(() => child.exited)
        assert.isTrue(SqlRunLogStore.isDeadLocalOwner(owner))
        yield* Effect.scoped(store.claim(runId))
        // Owners of other machines, or not in the store's format, never count as dead.
        assert.isFalse(SqlRunLogStore.isDeadLocalOwner(`another-host-${process.pid}:999999:1:abc`))
        assert.isFalse(SqlRunLogStore.isDeadLocalOwner("this process"))
      })
    ), 60_000)
})
