/**
 * A SQLite store whose records table was dropped (by hand, by another tool): reading and
 * writing fail with `StoreError { reason: "SchemaVersion" }` naming the path, as PostgreSQL's
 * missing relation (42P01) does, not `Unknown`.
 */
import { assert, describe, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Path from "node:path"
import * as F from "./fixtures.js"
import { openClient, openStore } from "./support/store.js"

describe("SQLite: a store whose tables are gone", () => {
  it.scoped("a dropped records table: reads and writes fail with SchemaVersion, with the path", () =>
    Effect.gen(function*() {
      const dir = yield* F.tempDir()
      const file = Path.join(dir, "runs.db")
      const id = F.rid("dropped")
      yield* Effect.scoped(Effect.gen(function*() {
        const store = yield* openStore(file)
        yield* store.start(F.started(id))
      }))
      yield* Effect.scoped(Effect.gen(function*() {
        const sql = yield* openClient(file)
        yield* sql`DROP TABLE polyloop_records`
      }))
      const store = yield* openStore(file)
      for (const attempt of [store.readLog(id), store.appendReply(id, F.replied(1, 0))]) {
        const error = yield* Effect.flip(attempt)
        assert.strictEqual(error._tag, "StoreError")
        if (error._tag === "StoreError") {
          assert.strictEqual(error.reason, "SchemaVersion", error.message)
          assert.strictEqual(error.path, file)
        }
      }
    }))
})
