/**
 * Schema migrations on PostgreSQL: a fresh database, a schema-1 database (its runs are
 * backfilled into summaries), a newer schema refused, and many workers starting at once.
 */
import { assert, describe, it } from "@effect/vitest"
import * as Migrator from "@effect/sql/Migrator"
import * as SqlClient from "@effect/sql/SqlClient"
import { ConcurrentWriter } from "@polyloop/core/Errors"
import * as RunLog from "@polyloop/core/RunLog"
import * as RunLogStore from "@polyloop/core/RunLogStore"
import * as SqlRunLogStore from "@polyloop/sql/SqlRunLogStore"
import * as SqlMigration from "@polyloop/sql/SqlMigration"
import * as ConfigProvider from "effect/ConfigProvider"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Redacted from "effect/Redacted"
import { migrations as pgMigrations } from "../src/internal/migrations/pg.js"
import * as F from "./fixtures.js"
import { freshSchemaUrl } from "./PgSupport.js"

const openStore = (url: string) =>
  Layer.build(SqlRunLogStore.layerPg({ url: Redacted.make(url), maxConnections: 2 })).pipe(
    Effect.map(Context.get(RunLogStore.RunLogStore))
  )

const client = (url: string) => SqlRunLogStore.layerPgClient({ url: Redacted.make(url), maxConnections: 2 })

/** A client that stays open for the rest of the test. */
const openClient = (url: string) => Layer.build(client(url)).pipe(Effect.map(Context.get(SqlClient.SqlClient)))

describe.sequential("SqlRunLogStore migrations on PostgreSQL", () => {
  it.scopedLive("a fresh database gets the whole schema, and opening it again applies nothing", () =>
    Effect.gen(function*() {
      const url = yield* freshSchemaUrl
      yield* Effect.scoped(openStore(url))
      yield* Effect.scoped(openStore(url))
      const sql = yield* openClient(url)
      const versions = yield* sql<{ migration_id: number }>`SELECT migration_id FROM polyloop_migrations ORDER BY migration_id`
      assert.deepStrictEqual(versions.map((v) => v.migration_id), [1, 2, 3, 4, 5])
      assert.strictEqual(SqlRunLogStore.latestVersion(pgMigrations), 5)
      const tables = yield* sql<{ tablename: string }>`SELECT tablename FROM pg_tables
        WHERE schemaname = current_schema() AND tablename LIKE 'polyloop_%' ORDER BY tablename`
      assert.deepStrictEqual(tables.map((t) => t.tablename), ["polyloop_blobs", "polyloop_claims", "polyloop_migrations", "polyloop_records", "polyloop_refs", "polyloop_runs"])
    }))

  it.scopedLive("a schema-1 database is migrated: its runs are summarised and their logs continue", () =>
    Effect.gen(function*() {
      const url = yield* freshSchemaUrl
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
      // A database as version 1 of the schema left it.
      yield* Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const applied = yield* Migrator.make({})({
          loader: Migrator.fromRecord({ "1_create_records": pgMigrations["1_create_records"]! }),
          table: SqlRunLogStore.migrationsTable
        })
        assert.deepStrictEqual(applied, [[1, "create_records"]])
        for (const [runId, rs] of Object.entries(records)) {
          for (const r of rs) {
            const stored = RunLogStore.toStored(r)
            yield* sql`INSERT INTO polyloop_records (run_id, seq, kind, step, payload) VALUES (${runId}, ${stored.seq}, ${stored.kind}, NULL, ${stored.json})`
          }
        }
      }).pipe(Effect.provide(client(url)), Effect.scoped)

      const store = yield* openStore(url)
      for (const [runId, rs] of Object.entries(records)) {
        assert.deepStrictEqual(RunLog.records(yield* store.readLog(F.rid(runId))), rs)
      }
      const expected = [
        Option.getOrThrow(RunLogStore.summarize(yield* store.readLog(open))),
        Option.getOrThrow(RunLogStore.summarize(yield* store.readLog(done)))
      ]
      assert.deepStrictEqual(yield* store.listRuns(), expected)
      assert.strictEqual(expected[1]?.agent, "veteran")
      assert.strictEqual(expected[1]?.tokens, 40 + 20 + 2 + 1)
      // The backfilled next sequence number is right: the next record fits, a gap does not.
      const gap = yield* Effect.flip(store.appendReply(open, F.replied(4, 0)))
      assert.instanceOf(gap, ConcurrentWriter)
      assert.deepStrictEqual([gap._tag, (gap as ConcurrentWriter).expectedSeq, (gap as ConcurrentWriter).actualSeq], ["ConcurrentWriter", 3, 4])
      yield* store.completeStep(open, [F.resulted(3, 0)], F.completed(4, 0, true, 8, 9))
      const summary = (yield* store.listRuns({ status: "Unfinished" }))[0]
      assert.deepStrictEqual(summary, Option.getOrThrow(RunLogStore.summarize(yield* store.readLog(open))))
    }))

  it.scopedLive("a database with a newer schema is refused with StoreError SchemaVersion and left alone", () =>
    Effect.gen(function*() {
      const url = yield* freshSchemaUrl
      const runId = F.rid("kept")
      yield* Effect.scoped(Effect.flatMap(openStore(url), (store) => store.start(F.started(runId))))
      const sql = yield* openClient(url)
      yield* sql`INSERT INTO polyloop_migrations (migration_id, name) VALUES (6, 'from_the_future')`
      const error = yield* Effect.flip(Effect.scoped(openStore(url)))
      assert.strictEqual(error.reason, "SchemaVersion")
      assert.include(error.message, "schema version 6")
      assert.notInclude(error.path ?? "", "password")
      const rows = yield* sql`SELECT seq FROM polyloop_records WHERE run_id = ${runId}`
      assert.strictEqual(rows.length, 1)
    }))

  it.scopedLive("many workers starting at once on an empty database all get the schema (store, and a package's own tables through SqlMigration)", () =>
    Effect.gen(function*() {
      const url = yield* freshSchemaUrl
      const stores = yield* Effect.all(
        Array.from({ length: 8 }, () => Effect.either(Effect.scoped(openStore(url)))),
        { concurrency: "unbounded" }
      )
      assert.deepStrictEqual(stores.filter(Either.isLeft).map((e) => e.left.message), [])
      // A package with its own tables (as @polyloop/cluster's run index): 8 processes migrate it
      // at once; each migration is applied once.
      const own = SqlMigration.run({
        table: "own_migrations",
        what: "own tables",
        loader: Migrator.fromRecord({
          "1_create": Effect.flatMap(SqlClient.SqlClient, (sql) => sql`CREATE TABLE own_items (id integer PRIMARY KEY)`),
          "2_fill": Effect.flatMap(SqlClient.SqlClient, (sql) => sql`INSERT INTO own_items (id) VALUES (1)`)
        })
      })
      const owns = yield* Effect.all(
        Array.from({ length: 8 }, () => Effect.either(own.pipe(Effect.provide(client(url))))),
        { concurrency: "unbounded" }
      )
      assert.deepStrictEqual(owns.filter(Either.isLeft).map((e) => e.left.message), [])
      const sql = yield* openClient(url)
      assert.deepStrictEqual(yield* sql`SELECT id FROM own_items`, [{ id: 1 }])
      assert.deepStrictEqual((yield* sql`SELECT migration_id FROM own_migrations ORDER BY migration_id`).map((r) => r["migration_id"]), [1, 2])
    }))

  it.scopedLive("migrators starting at once, each on a pool of one connection, apply every migration exactly once", () =>
    Effect.gen(function*() {
      const url = yield* freshSchemaUrl
      const onePool = SqlRunLogStore.layerPgClient({ url: Redacted.make(url), maxConnections: 1 })
      const applied = yield* Effect.all(
        Array.from({ length: 8 }, () => SqlRunLogStore.migrate().pipe(Effect.provide(onePool))),
        { concurrency: "unbounded" }
      )
      // Serialised: one of them applied every migration, the others found nothing left to do.
      assert.deepStrictEqual(
        applied.filter((a) => a.length > 0),
        [[[1, "create_records"], [2, "run_summaries"], [3, "append_view"], [4, "blobs"], [5, "summary_details"]]]
      )
      const sql = yield* openClient(url)
      const versions = yield* sql<{ migration_id: number }>`SELECT migration_id FROM polyloop_migrations ORDER BY migration_id`
      assert.deepStrictEqual(versions.map((v) => v.migration_id), [1, 2, 3, 4, 5])
    }))

  it.scopedLive("an unreachable server is a StoreError Unavailable that names it without its password", () =>
    Effect.gen(function*() {
      const error = yield* Effect.flip(
        Effect.scoped(
          Layer.build(
            SqlRunLogStore.layerPg({
              url: Redacted.make("postgres://someone:s3cret@127.0.0.1:1/nowhere"),
              connectTimeout: "2 seconds"
            })
          )
        )
      )
      assert.strictEqual(error._tag, "StoreError")
      assert.strictEqual(error.reason, "Unavailable")
      assert.include(error.message, "127.0.0.1:1/nowhere")
      assert.notInclude(error.message, "s3cret")
      assert.notInclude(error.path ?? "", "s3cret")
    }))

  it.scopedLive("layerPgConfig reads the connection from Config (POLYLOOP_PG_URL by default); a missing one is a ConfigError", () =>
    Effect.gen(function*() {
      const url = yield* freshSchemaUrl
      const store = yield* Layer.build(SqlRunLogStore.layerPgConfig()).pipe(
        Effect.map(Context.get(RunLogStore.RunLogStore)),
        Effect.withConfigProvider(ConfigProvider.fromMap(new Map([["POLYLOOP_PG_URL", url]])))
      )
      yield* store.start(F.started(F.rid("configured")))
      assert.strictEqual((yield* store.listRuns()).length, 1)
      const missing = yield* Effect.flip(
        Effect.scoped(Layer.build(SqlRunLogStore.layerPgConfig())).pipe(Effect.withConfigProvider(ConfigProvider.fromMap(new Map())))
      )
      assert.strictEqual(missing._tag, "ConfigError" as string)
    }))
})
