/**
 * The three stores the research tests run on: memory, a SQLite file in a scoped temporary
 * directory, a fresh PostgreSQL database on the test run's private server.
 */
import * as RunLogStore from "@polyloop/core/RunLogStore"
import * as SqlRunLogStore from "@polyloop/sql/SqlRunLogStore"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Redacted from "effect/Redacted"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { freshDatabaseUrl } from "./pg-database.js"

/** A SQLite store in a temporary directory removed when the layer is released. */
export const sqlite: Layer.Layer<RunLogStore.RunLogStore> = Layer.unwrapScoped(
  Effect.map(
    Effect.acquireRelease(
      Effect.sync(() => fs.mkdtempSync(path.join(os.tmpdir(), "polyloop-research-"))),
      (dir) => Effect.sync(() => fs.rmSync(dir, { recursive: true, force: true }))
    ),
    (dir) => SqlRunLogStore.layerSqlite({ filename: path.join(dir, "runs.db") })
  )
).pipe(Layer.orDie)

/** A PostgreSQL store on a fresh database (dropped when the layer is released). */
export const postgres: Layer.Layer<RunLogStore.RunLogStore> = Layer.unwrapScoped(
  Effect.map(freshDatabaseUrl("research"), (url) => SqlRunLogStore.layerPg({ url: Redacted.make(url) }))
).pipe(Layer.orDie)

export const all: ReadonlyArray<readonly [string, Layer.Layer<RunLogStore.RunLogStore>]> = [
  ["memory", RunLogStore.layerMemory],
  ["SQLite", sqlite],
  ["PostgreSQL", postgres]
]
