/**
 * The PostgreSQL client's settings for the store: `@effect/sql-pg` loaded on demand (SQLite
 * users never load the PostgreSQL driver), the application name, a bounded `connectTimeout`
 * (the driver waits without end), and a server that cannot be reached as
 * `StoreError { reason: "Unavailable" }` naming it — by its URL without password or query.
 *
 * @internal
 */
import type * as SqlClient from "@effect/sql/SqlClient"
import type * as PgClient from "@effect/sql-pg/PgClient"
import type { StoreError } from "@polyloop/core/Errors"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Redacted from "effect/Redacted"
import * as Schedule from "effect/Schedule"
import type { PgClientOptions } from "./options.js"
import { storeError } from "./errors.js"

/** Where a PostgreSQL store lives, for messages: its URL without password or query. */
export const describe = (options: PgClientOptions): string => {
  if (options.url !== undefined) {
    try {
      const url = new URL(Redacted.value(options.url))
      url.password = ""
      url.search = ""
      return url.toString()
    } catch {
      return "postgres://(a URL that does not parse)"
    }
  }
  const user = options.username === undefined ? "" : `${options.username}@`
  return `postgres://${user}${options.host ?? "localhost"}:${options.port ?? 5432}/${options.database ?? ""}`
}

/** How long a PostgreSQL connection may take to get, unless `connectTimeout` says otherwise. */
export const defaultConnectTimeout: Duration.Duration = Duration.seconds(10)

/** The client layer with the store's settings; with `connectRetry`, built again under it while the first connection fails (design 0364). */
export const layer = (options: PgClientOptions): Layer.Layer<PgClient.PgClient | SqlClient.SqlClient, StoreError> => {
  const { connectRetry, ...client } = options
  const where = describe(client)
  const once = Layer.unwrapEffect(
    Effect.map(Effect.promise(() => import("@effect/sql-pg/PgClient")), (Pg) =>
      Pg.layer({ applicationName: "polyloop", ...client, connectTimeout: client.connectTimeout ?? defaultConnectTimeout }).pipe(
        Layer.mapError((error) => storeError(error, { operation: "connecting to PostgreSQL", path: where }, "Unavailable"))
      ))
  )
  if (connectRetry === undefined) return once
  return Layer.unwrapEffect(Effect.sync(() => {
    // Attempts counted per build of the layer.
    let attempt = 0
    const logged = Layer.tapError(once, (error) =>
      Effect.logWarning(`PostgreSQL at ${where}: connection attempt ${++attempt} failed: ${error.message}`).pipe(
        Effect.annotateLogs({ "polyloop.pg": where, "polyloop.attempt": attempt })
      ))
    const retried = Layer.retry(logged, Schedule.tapOutput(connectRetry, () => Effect.logInfo(`PostgreSQL at ${where}: trying again (attempt ${attempt + 1})`)))
    return Layer.tapError(retried, () => Effect.logError(`PostgreSQL at ${where}: giving up after ${attempt} attempts (the connectRetry schedule ended)`))
  }))
}

/** A schedule for `connectRetry` in long-lived processes (design 0364): exponential from 500 ms, waits of at most 10 s, for at most 5 minutes. */
export const defaultConnectRetry: Schedule.Schedule<unknown, StoreError> = Schedule.exponential("500 millis").pipe(
  Schedule.union(Schedule.spaced("10 seconds")),
  Schedule.upTo("5 minutes"),
  Schedule.asVoid
)
