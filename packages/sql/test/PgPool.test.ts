/**
 * The PostgreSQL store on an exhausted pool: an operation that cannot get a connection within
 * `connectTimeout` fails with a typed `StoreError`; one interrupted while it waits stops within
 * that bound (the store's wait for a connection is shielded from interruption, so that
 * `@effect/sql-pg` cannot lose the connection it is handed); the pool loses nothing.
 */
import { assert, describe, it } from "@effect/vitest"
import * as SqlClient from "@effect/sql/SqlClient"
import { runId } from "@polyloop/core/Ids"
import * as RunLog from "@polyloop/core/RunLog"
import * as RunLogStore from "@polyloop/core/RunLogStore"
import * as SqlRunLogStore from "@polyloop/sql/SqlRunLogStore"
import * as Context from "effect/Context"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Fiber from "effect/Fiber"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Redacted from "effect/Redacted"
import * as Scope from "effect/Scope"
import { freshSchemaUrl } from "./PgSupport.js"

describe.sequential("the PostgreSQL store on an exhausted pool", () => {
  it.scopedLive("waits at most connectTimeout: a typed StoreError, an interruption that takes effect, nothing lost", () =>
    Effect.gen(function*() {
      const url = yield* freshSchemaUrl
      const client = SqlRunLogStore.layerPgClient({ url: Redacted.make(url), maxConnections: 1, connectTimeout: Duration.millis(400) })
      const context = yield* Layer.build(Layer.provideMerge(SqlRunLogStore.layer(), client))
      const store = Context.get(context, RunLogStore.RunLogStore)
      const sql = Context.get(context, SqlClient.SqlClient)
      const id = runId("pool")
      assert.strictEqual(RunLog.size(yield* store.readLog(id)), 0)

      // Someone else holds the pool's only connection.
      const held = yield* Scope.make()
      yield* Scope.extend(sql.reserve, held)

      const waited = yield* Effect.flip(store.readLog(id))
      assert.strictEqual(waited._tag, "StoreError")
      assert.strictEqual(waited.reason, "Unavailable")
      assert.include(waited.message, "timeout")

      const waiting = yield* Effect.fork(store.readLog(id))
      yield* Effect.sleep(Duration.millis(50))
      const stopped = yield* Fiber.interrupt(waiting).pipe(Effect.timeoutOption(Duration.seconds(10)))
      assert.isTrue(Option.isSome(stopped), "the interrupted operation did not stop within the connect timeout")
      assert.isTrue(Exit.isInterrupted(Option.getOrThrow(stopped)))

      // The connection is given back: the pool of one serves the store again, every time.
      yield* Scope.close(held, Exit.void)
      for (let i = 0; i < 3; i++) assert.strictEqual(RunLog.size(yield* store.readLog(id)), 0)
    }))
})
