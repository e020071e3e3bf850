/**
 * A process started while its PostgreSQL is down (issue 44, item 11; design 0364): with
 * `connectRetry`, the client connects again under the schedule, logging each attempt, and the
 * store is up once the database is; without it, the first failure is the answer; a schedule that
 * ends gives the last `StoreError`. The database "comes up" as a TCP forwarder to the test
 * server, opened on a port where nothing listened.
 */
import { assert, describe, it } from "@effect/vitest"
import { runId } from "@polyloop/core/Ids"
import * as RunLog from "@polyloop/core/RunLog"
import * as RunLogStore from "@polyloop/core/RunLogStore"
import * as SqlRunLogStore from "@polyloop/sql/SqlRunLogStore"
import * as Context from "effect/Context"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as Layer from "effect/Layer"
import * as Logger from "effect/Logger"
import * as Redacted from "effect/Redacted"
import * as Schedule from "effect/Schedule"
import * as net from "node:net"
import { freshSchemaUrl } from "./PgSupport.js"

/** A port nothing listens on (taken from the system, then let go). */
const freePort = Effect.promise(() =>
  new Promise<number>((resolve, reject) => {
    const server = net.createServer()
    server.once("error", reject)
    server.listen(0, "127.0.0.1", () => {
      const port = (server.address() as net.AddressInfo).port
      server.close(() => resolve(port))
    })
  })
)

/** Forwards `port` to `target` until the scope closes: the database coming up at that address. */
const forward = (port: number, target: URL) =>
  Effect.acquireRelease(
    Effect.promise(() =>
      new Promise<net.Server>((resolve, reject) => {
        const sockets = new Set<net.Socket>()
        const server = net.createServer((socket) => {
          const upstream = net.connect(Number(target.port || 5432), target.hostname)
          sockets.add(socket).add(upstream)
          socket.pipe(upstream).pipe(socket)
          socket.on("error", () => upstream.destroy())
          upstream.on("error", () => socket.destroy())
        })
        server.on("close", () => sockets.forEach((s) => s.destroy()))
        server.once("error", reject)
        server.listen(port, "127.0.0.1", () => resolve(server))
      })
    ),
    (server) => Effect.promise(() => new Promise<void>((resolve) => {
      server.close(() => resolve())
      server.emit("close")
    }))
  )

/** The log lines written while `effect` runs, kept in `lines`. */
const capturing = (lines: Array<string>) =>
  Logger.replace(Logger.defaultLogger, Logger.make(({ logLevel, message }) => void lines.push(`${logLevel.label} ${Array.isArray(message) ? message.join(" ") : String(message)}`)))

const at = (url: string, port: number): string => {
  const parsed = new URL(url)
  parsed.hostname = "127.0.0.1"
  parsed.port = String(port)
  return parsed.toString()
}

describe.sequential("connecting to a PostgreSQL that is not up yet", () => {
  it.scopedLive("with connectRetry: each attempt logged, and the store is up once the database is", () =>
    Effect.gen(function*() {
      const url = yield* freshSchemaUrl
      const port = yield* freePort
      const lines: Array<string> = []
      const client = SqlRunLogStore.layerPgClient({
        url: Redacted.make(at(url, port)),
        maxConnections: 2,
        connectTimeout: Duration.seconds(2),
        connectRetry: Schedule.spaced("100 millis")
      })
      const building = yield* Effect.fork(Layer.build(Layer.provideMerge(SqlRunLogStore.layer(), client)).pipe(Effect.provide(capturing(lines))))
      // Two failed attempts while nothing listens, then the database comes up.
      for (let i = 0; i < 500 && lines.filter((l) => l.includes("connection attempt")).length < 2; i++) yield* Effect.sleep("20 millis")
      assert.isAtLeast(lines.filter((l) => l.includes("connection attempt")).length, 2, "two failed attempts logged while the database is down")
      yield* forward(port, new URL(url))
      const context = yield* Fiber.join(building)
      const store = Context.get(context, RunLogStore.RunLogStore)
      assert.strictEqual(RunLog.size(yield* store.readLog(runId("after-retry"))), 0)
      const failed = lines.filter((l) => l.includes("connection attempt"))
      assert.isAtLeast(failed.length, 2)
      assert.match(failed[0]!, /^WARN PostgreSQL at postgres:\/\/[^@]*@?127\.0\.0\.1:\d+\/\S* connection attempt 1 failed: /)
      assert.match(failed[1]!, /connection attempt 2 failed/)
      assert.isTrue(lines.some((l) => /^INFO .*trying again \(attempt 2\)/.test(l)))
      assert.isFalse(lines.some((l) => l.includes("giving up")))
    }), { timeout: 60_000 })

  it.scopedLive("without connectRetry the first failure is the answer; a schedule that ends gives its last StoreError, every attempt logged", () =>
    Effect.gen(function*() {
      const url = yield* freshSchemaUrl
      const port = yield* freePort
      const once: Array<string> = []
      const error = yield* Effect.flip(Layer.build(SqlRunLogStore.layerPgClient({ url: Redacted.make(at(url, port)) })).pipe(Effect.provide(capturing(once))))
      assert.strictEqual(error.reason, "Unavailable")
      assert.deepStrictEqual(once, [])
      const lines: Array<string> = []
      const bounded = yield* Effect.flip(
        Layer.build(SqlRunLogStore.layerPgClient({ url: Redacted.make(at(url, port)), connectRetry: Schedule.spaced("50 millis").pipe(Schedule.intersect(Schedule.recurs(2))) })).pipe(
          Effect.provide(capturing(lines))
        )
      )
      assert.strictEqual(bounded.reason, "Unavailable")
      assert.strictEqual(lines.filter((l) => l.includes("connection attempt")).length, 3)
      assert.match(lines.at(-1)!, /^ERROR .*giving up after 3 attempts/)
    }), { timeout: 60_000 })
})
