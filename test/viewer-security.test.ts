/**
 * `polyloop serve` under attack (issue 34, design 0340), against real servers (`Serve.serve`)
 * over a real SQLite store: each attack of the issue is sent and its refusal asserted.
 *
 * - DNS rebinding with `--host` (the server bound to a wildcard, to `0::1`): a foreign `Host`
 *   is 403 even with the token; the attacker's own `Origin` (equal to its `Host`) decides nothing;
 * - no token, a wrong token or session (bearer, session header, `?session=`, a cookie): 401 for
 *   the API, the live streams and decisions; the page's HTML holds no data and asks for the login
 *   itself; the server sets no cookie (design 0370; the login itself: `viewer-origin.test.ts`);
 * - cross-site and same-site requests (`Origin` of another host or port, `Sec-Fetch-Site`): 403;
 * - oversized bodies: a declared 50 MB body is 413 before a byte is sent; a chunked body (no
 *   length) is 411, unread; fields over their bounds and an `actionHash` that is not 64 hex digits are 400 with one
 *   short line per field (never the schema) — and nothing is written;
 * - 200 live streams: the cap answers 503 (`Retry-After`) past it; closed streams free their
 *   slots; streams of one run share one poller (the store's reads counted);
 * - a wrong method is 405 with `Allow`; forks of an unknown run are 404.
 */
import * as NodeContext from "@effect/platform-node/NodeContext"
import { assert, describe, it, layer } from "@effect/vitest"
import * as Serve from "@polyloop/cli/Serve"
import * as RunLogStore from "@polyloop/core/RunLogStore"
import * as SqlRunLogStore from "@polyloop/sql/SqlRunLogStore"
import * as Context from "effect/Context"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import { spawn } from "node:child_process"
import * as fs from "node:fs"
import * as http from "node:http"
import * as os from "node:os"
import * as path from "node:path"
import { fileURLToPath } from "node:url"
import * as Scenario from "./support/viewer-scenario.js"

const token = "a".repeat(64)
const bearer = { authorization: `Bearer ${token}` }

/** How many times the viewer's store was asked for a log (to see the live streams share their polling). */
let logReads = 0

const storeLayer = Layer.unwrapScoped(
  Effect.gen(function*() {
    const dir = yield* Effect.acquireRelease(
      Effect.sync(() => fs.mkdtempSync(path.join(os.tmpdir(), "polyloop-viewer-security-"))),
      (dir) => Effect.sync(() => fs.rmSync(dir, { recursive: true, force: true }))
    )
    return SqlRunLogStore.layerSqlite({ filename: path.join(dir, "runs.db") })
  })
)

/** The store as the viewer sees it: the same, with its log reads counted. */
const countingStore = Layer.effect(
  RunLogStore.RunLogStore,
  Effect.map(RunLogStore.RunLogStore, (store): RunLogStore.RunLogStore.Service => ({
    ...store,
    readLog: (runId, options) =>
      Effect.suspend(() => {
        logReads++
        return store.readLog(runId, options)
      })
  }))
)

/** The servers under test: one on loopback, one bound to every interface (`--host 0.0.0.0`), one on `0::1`. */
class Servers extends Context.Tag("test/Servers")<Servers, {
  readonly loopback: Serve.Bound
  readonly wildcard: Serve.Bound
  readonly v6: Serve.Bound
  readonly waitingCall: { readonly callId: string; readonly actionHash: string }
}>() {}

const serversLayer = Layer.scoped(
  Servers,
  Effect.gen(function*() {
    yield* Scenario.run("hostile", "finished-1")
    yield* Scenario.suspend("approval-1")
    const common = { port: 0, interval: Duration.millis(50), token, decider: "tester" } as const
    // One client may take every slot here (the total cap is under test; the per-client cap: viewer-origin.test.ts).
    const loopback = yield* Serve.serve({ ...common, maxStreams: 64, maxStreamsPerClient: 64 }).pipe(Effect.provide(countingStore))
    const wildcard = yield* Serve.serve({ ...common, host: "0.0.0.0", exposed: true, allowedHosts: ["viewer.example.test"] })
    const v6 = yield* Serve.serve({ ...common, host: "0::1", exposed: true })
    const waiting = yield* request(loopback, "GET", "/api/runs/approval-1", { headers: bearer })
    const call = (JSON.parse(waiting.body) as { readonly waiting: ReadonlyArray<{ readonly callId: string; readonly actionHash: string }> }).waiting[0]!
    return { loopback, wildcard, v6, waitingCall: { callId: call.callId, actionHash: call.actionHash } }
  })
).pipe(Layer.provideMerge(storeLayer), Layer.provide(NodeContext.layer))

interface Answer {
  readonly status: number
  readonly headers: http.IncomingHttpHeaders
  readonly body: string
}

/**
 * A raw request to `bound` (on 127.0.0.1, or on ::1 for a server bound to `0::1`) with exactly
 * these headers (`host` defaults to the server's own), and a body: text, or `declared` bytes
 * announced in `content-length` and never sent, or `chunked` bytes sent without a length.
 */
const request = (
  bound: Serve.Bound,
  method: string,
  pathname: string,
  options: {
    readonly headers?: Record<string, string>
    readonly body?: string
    readonly declared?: number
    readonly chunked?: boolean
  } = {}
) =>
  Effect.async<Answer>((resume) => {
    const address = bound.host === "0::1" ? "::1" : "127.0.0.1"
    const headers: Record<string, string> = { host: `${bound.host === "0::1" ? "[::1]" : "127.0.0.1"}:${bound.port}`, ...options.headers }
    if (options.body !== undefined) headers["content-length"] = String(Buffer.byteLength(options.body))
    if (options.declared !== undefined) headers["content-length"] = String(options.declared)
    if (options.chunked === true) headers["transfer-encoding"] = "chunked"
    let answered = false
    const req = http.request({ host: address, port: bound.port, method, path: pathname, headers, agent: false }, (response) => {
      answered = true
      let body = ""
      response.setEncoding("utf8").on("data", (chunk: string) => (body += chunk)).on("end", () =>
        resume(Effect.succeed({ status: response.statusCode ?? 0, headers: response.headers, body }))
      )
    })
    // A server that answers before the body is sent may close the connection under the writes.
    req.on("error", (error) => {
      if (!answered) resume(Effect.die(error))
    })
    if (options.body !== undefined) req.end(options.body)
    else if (options.declared !== undefined || options.chunked === true) req.flushHeaders() // the body never comes
    else req.end()
    return Effect.sync(() => req.destroy())
  })

const errorOf = (answer: Answer): { readonly _tag: string; readonly message: string } =>
  (JSON.parse(answer.body) as { readonly error: { readonly _tag: string; readonly message: string } }).error

const decisionHeaders = (bound: Serve.Bound, extra: Record<string, string> = {}) => ({
  "content-type": "application/json",
  origin: `http://127.0.0.1:${bound.port}`,
  ...bearer,
  ...extra
})

/** Is the call still waiting (no decision was written)? */
const stillWaiting = (bound: Serve.Bound) =>
  Effect.map(request(bound, "GET", "/api/runs/approval-1", { headers: bearer }), (answer) =>
    (JSON.parse(answer.body) as { readonly waiting: ReadonlyArray<unknown> }).waiting.length === 1)

/** Opens a live stream; resolves once its status is known (the stream stays open until `close`). */
const openStream = (bound: Serve.Bound, pathname: string, headers: Record<string, string> = bearer) =>
  Effect.async<{ readonly status: number; readonly retryAfter: string | undefined; readonly firstEvent: Promise<void>; readonly close: () => void }>(
    (resume) => {
      const req = http.get({ host: "127.0.0.1", port: bound.port, path: pathname, headers: { accept: "text/event-stream", ...headers }, agent: false }, (response) => {
        const firstEvent = new Promise<void>((ready) => {
          let text = ""
          response.setEncoding("utf8").on("data", (chunk: string) => {
            text += chunk
            if (/\nevent: /.test(`\n${text}`)) ready()
          })
          response.on("end", () => ready())
        })
        resume(Effect.succeed({
          status: response.statusCode ?? 0,
          retryAfter: response.headers["retry-after"],
          firstEvent,
          close: () => req.destroy()
        }))
      })
      req.on("error", () => undefined)
    }
  )

describe.sequential("polyloop serve: the attacks of issue 34 are refused", () => {
  layer(serversLayer, { timeout: 120_000, excludeTestServices: true })((it) => {
    it.effect("DNS rebinding with --host: a foreign Host is refused on a wildcard and on 0::1, token or not", () =>
      Effect.gen(function*() {
        const { v6, wildcard } = yield* Servers
        for (const bound of [wildcard, v6]) {
          const rebound = yield* request(bound, "GET", "/api/runs", { headers: { host: `evil.example:${bound.port}`, ...bearer } })
          assert.deepStrictEqual([rebound.status, errorOf(rebound)._tag], [403, "ForeignHost"], bound.host)
          const page = yield* request(bound, "GET", "/", { headers: { host: `evil.example:${bound.port}` } })
          assert.strictEqual(page.status, 403)
        }
        // The bound address (normalised: 0::1 is ::1), loopback names and --allowed-host are answered.
        assert.strictEqual((yield* request(v6, "GET", "/api/runs", { headers: { host: `[::1]:${v6.port}`, ...bearer } })).status, 200)
        assert.strictEqual((yield* request(v6, "GET", "/api/runs", { headers: { host: `[0:0::1]:${v6.port}`, ...bearer } })).status, 200)
        assert.strictEqual((yield* request(wildcard, "GET", "/api/runs", { headers: { host: `viewer.example.test:${wildcard.port}`, ...bearer } })).status, 200)
        assert.strictEqual((yield* request(wildcard, "GET", "/api/runs", { headers: { host: `localhost:${wildcard.port}`, ...bearer } })).status, 200)
        // Host headers that are not a host: user info, a path.
        for (const host of [`evil.example@127.0.0.1:${wildcard.port}`, `127.0.0.1:${wildcard.port}/x`]) {
          assert.strictEqual((yield* request(wildcard, "GET", "/api/runs", { headers: { host, ...bearer } })).status, 403, host)
        }
      }))

    it.effect("DNS rebinding with --host: the attacker's Origin, equal to its Host, approves nothing", () =>
      Effect.gen(function*() {
        const { waitingCall, wildcard } = yield* Servers
        const body = JSON.stringify({ ...waitingCall, decision: "Approve" })
        const evil = `evil.example:${wildcard.port}`
        const answer = yield* request(wildcard, "POST", "/api/runs/approval-1/decisions", {
          headers: decisionHeaders(wildcard, { host: evil, origin: `http://${evil}` }),
          body
        })
        assert.strictEqual(answer.status, 403)
        assert.isTrue(yield* stillWaiting(wildcard))
      }))

    it.effect("no token or a wrong one: 401 for the API, the live streams and decisions", () =>
      Effect.gen(function*() {
        const { loopback, waitingCall } = yield* Servers
        const wrong = "b".repeat(64)
        const attempts: ReadonlyArray<readonly [string, string, Record<string, string>]> = [
          ["GET", "/api/runs", {}],
          ["GET", "/api/runs", { authorization: `Bearer ${wrong}` }],
          ["GET", "/api/runs", { authorization: token }],
          ["GET", "/api/runs", { "x-polyloop-session": token }],
          ["GET", `/api/runs?session=${token}`, {}],
          ["GET", "/api/runs", { cookie: `polyloop-000000000000=${token}` }],
          ["GET", `/api/live?session=${"0".repeat(32)}.${"0".repeat(64)}`, {}],
          ["GET", "/api/runs/finished-1", {}],
          ["GET", "/api/runs/finished-1/forks", {}],
          ["GET", "/api/runs/finished-1/live", {}],
          ["GET", "/api/live", {}]
        ]
        for (const [method, pathname, headers] of attempts) {
          const answer = yield* request(loopback, method, pathname, { headers })
          assert.strictEqual(answer.status, 401, `${method} ${pathname} ${JSON.stringify(headers)}`)
          assert.notInclude(answer.body, "finished-1", "nothing of the runs")
        }
        const { authorization: _, ...noToken } = decisionHeaders(loopback)
        const decision = yield* request(loopback, "POST", "/api/runs/approval-1/decisions", {
          headers: noToken,
          body: JSON.stringify({ ...waitingCall, decision: "Approve" })
        })
        assert.strictEqual(decision.status, 401)
        assert.isTrue(yield* stillWaiting(loopback))
        // The page's files and HTML hold no data: served without the token, and no cookie is set.
        for (const pathname of ["/assets/viewer.js", "/", `/?token=${token}&run=finished-1`, "/experiments"]) {
          const answer = yield* request(loopback, "GET", pathname)
          assert.strictEqual(answer.status, 200, pathname)
          assert.notInclude(answer.body, "finished-1", "nothing of the runs")
          assert.strictEqual(answer.headers["set-cookie"], undefined, pathname)
        }
      }))

    it.effect("cross-site and same-site requests are refused: another host or port in Origin, Sec-Fetch-Site", () =>
      Effect.gen(function*() {
        const { loopback, waitingCall } = yield* Servers
        const body = JSON.stringify({ ...waitingCall, decision: "Approve" })
        const origins = ["http://evil.example", `http://127.0.0.1:${loopback.port + 1}`, `https://127.0.0.1:${loopback.port}`, "null", "not a url"]
        for (const origin of origins) {
          const answer = yield* request(loopback, "POST", "/api/runs/approval-1/decisions", { headers: decisionHeaders(loopback, { origin }), body })
          assert.strictEqual(answer.status, 403, origin)
        }
        for (const site of ["cross-site", "same-site"]) {
          const post = yield* request(loopback, "POST", "/api/runs/approval-1/decisions", { headers: decisionHeaders(loopback, { "sec-fetch-site": site }), body })
          assert.strictEqual(post.status, 403, site)
          const read = yield* request(loopback, "GET", "/api/runs", { headers: { ...bearer, "sec-fetch-site": site } })
          assert.strictEqual(read.status, 403, `a ${site} read`)
        }
        const form = yield* request(loopback, "POST", "/api/runs/approval-1/decisions", {
          headers: decisionHeaders(loopback, { "content-type": "application/x-www-form-urlencoded" }),
          body: "decision=Approve"
        })
        assert.strictEqual(form.status, 415)
        assert.isTrue(yield* stillWaiting(loopback))
      }))

    it.effect("oversized bodies: 413 from content-length before reading, 411 for a body of no stated length; nothing written", () =>
      Effect.gen(function*() {
        const { loopback } = yield* Servers
        const declared = yield* request(loopback, "POST", "/api/runs/approval-1/decisions", { headers: decisionHeaders(loopback), declared: 50 * 1024 * 1024 })
        assert.deepStrictEqual([declared.status, errorOf(declared)._tag], [413, "TooLarge"])
        // A body of no stated length (chunked, as big as it likes) is not read either.
        const chunked = yield* request(loopback, "POST", "/api/runs/approval-1/decisions", { headers: decisionHeaders(loopback), chunked: true })
        assert.deepStrictEqual([chunked.status, errorOf(chunked)._tag], [411, "LengthRequired"])
        assert.isTrue(yield* stillWaiting(loopback))
      }))

    it.effect("bounded fields and a 64-hex actionHash: 400 with one short line per field, never the schema; nothing written", () =>
      Effect.gen(function*() {
        const { loopback, waitingCall } = yield* Servers
        const good = { ...waitingCall, decision: "Reject", reason: "no" }
        const cases: ReadonlyArray<readonly [unknown, RegExp]> = [
          [{ ...good, reason: "r".repeat(1001) }, /^reason: must be text of at most 1000 characters$/],
          [{ ...good, by: "n".repeat(101) }, /^by: must be a name of at most 100 characters, on one line$/],
          [{ ...good, by: "Grace\nApproved by: the CFO" }, /^by: must be a name/],
          [{ ...good, callId: "c".repeat(201) }, /^callId: must be a call id/],
          [{ ...good, actionHash: "0".repeat(63) }, /^actionHash: must be 64 hexadecimal digits/],
          [{ ...good, actionHash: "Z".repeat(64) }, /^actionHash: must be 64 hexadecimal digits/],
          [{ ...good, decision: "Maybe" }, /^decision: must be "Approve" or "Reject"$/],
          [{ ...good, extra: 1 }, /^extra: is not a field of a decision$/],
          [[1, 2], /^the body must be a JSON object/],
          [{ decision: "Approve" }, /callId: is required/]
        ]
        for (const [body, message] of cases) {
          const answer = yield* request(loopback, "POST", "/api/runs/approval-1/decisions", { headers: decisionHeaders(loopback), body: JSON.stringify(body) })
          const error = errorOf(answer)
          assert.deepStrictEqual([answer.status, error._tag], [400, "InvalidBody"], JSON.stringify(body).slice(0, 100))
          assert.match(error.message, message)
          assert.isBelow(error.message.length, 300, "short")
          assert.notMatch(error.message, /readonly|\{ |Struct|filter/, "no schema in the message")
        }
        assert.isTrue(yield* stillWaiting(loopback))
      }))

    it.effect("200 live streams: the cap answers 503 with Retry-After; closed streams free their slots", () =>
      Effect.gen(function*() {
        const { loopback } = yield* Servers
        const streams = yield* Effect.forEach(Array.from({ length: 200 }, (_, i) => i), (i) =>
          openStream(loopback, i % 2 === 0 ? "/api/live" : "/api/runs/approval-1/live"), { concurrency: 20 })
        try {
          const open = streams.filter((s) => s.status === 200)
          const refused = streams.filter((s) => s.status === 503)
          assert.deepStrictEqual([open.length, refused.length], [64, 136])
          assert.isTrue(refused.every((s) => s.retryAfter === "5"))
        } finally {
          for (const stream of streams) stream.close()
        }
        // The slots come back once the server has seen the connections close.
        let again = yield* openStream(loopback, "/api/live")
        for (let tries = 0; again.status !== 200 && tries < 400; tries++) {
          again.close()
          yield* Effect.sleep("50 millis")
          again = yield* openStream(loopback, "/api/live")
        }
        assert.strictEqual(again.status, 200)
        again.close()
      }))

    it.effect("live streams of one run share one poller: 40 open streams read the log about as often as one", () =>
      Effect.gen(function*() {
        const { loopback } = yield* Servers
        yield* Effect.sleep("1500 millis") // the previous test's pollers linger 1 s, then stop
        const streams = yield* Effect.forEach(Array.from({ length: 40 }, () => 0), () => openStream(loopback, "/api/runs/approval-1/live"), { concurrency: 10 })
        try {
          assert.isTrue(streams.every((s) => s.status === 200))
          yield* Effect.promise(() => Promise.all(streams.map((s) => s.firstEvent)))
          const before = logReads
          yield* Effect.sleep("500 millis") // ~10 polls at 50 ms
          const reads = logReads - before
          // Unshared, 40 streams would read 40 times per poll (~400 here); shared, once per poll.
          assert.isAbove(reads, 0, "the poller polls")
          assert.isBelow(reads, 40, `${reads} reads for 40 streams: fewer than one per stream`)
        } finally {
          for (const stream of streams) stream.close()
        }
      }))

    it.effect("a wrong method is 405 with Allow; forks of an unknown run are 404", () =>
      Effect.gen(function*() {
        const { loopback } = yield* Servers
        const cases: ReadonlyArray<readonly [string, string, string]> = [
          ["DELETE", "/api/runs", "GET"],
          ["POST", "/api/runs/finished-1", "GET"],
          ["GET", "/api/runs/approval-1/decisions", "POST"],
          ["PUT", "/", "GET"]
        ]
        for (const [method, pathname, allow] of cases) {
          const answer = yield* request(loopback, method, pathname, { headers: { ...bearer, "content-type": "application/json" }, body: "{}" })
          assert.deepStrictEqual([answer.status, answer.headers.allow], [405, allow], `${method} ${pathname}`)
        }
        assert.strictEqual((yield* request(loopback, "GET", "/api/nothing", { headers: bearer })).status, 404)
        const forks = yield* request(loopback, "GET", "/api/runs/nobody/forks", { headers: bearer })
        assert.deepStrictEqual([forks.status, errorOf(forks)._tag], [404, "RunNotFound"])
        const known = yield* request(loopback, "GET", "/api/runs/finished-1/forks", { headers: bearer })
        assert.deepStrictEqual([known.status, known.body], [200, `{"forks":[]}`])
      }))
  })
})

describe("polyloop serve: the options of design 0340", () => {
  it.live("an --allowed-host that is not a host is refused before anything is bound", () =>
    Effect.gen(function*() {
      const refused = yield* Effect.flip(Effect.scoped(Serve.serve({ port: 0, token, allowedHosts: ["evil.example/path"] })))
      assert.strictEqual(refused.reason, "InvalidOption")
    }).pipe(Effect.provide(Layer.mergeAll(storeLayer, NodeContext.layer))))

  it.live("each start makes its own 256-bit token and a login code for the page's URL (not the token)", () =>
    Effect.gen(function*() {
      const first = yield* Effect.scoped(Serve.serve({ port: 0 }))
      const second = yield* Effect.scoped(Serve.serve({ port: 0 }))
      assert.match(first.token, /^[0-9a-f]{64}$/)
      assert.notStrictEqual(first.token, second.token)
      assert.match(first.url, new RegExp(`^${first.baseUrl.replace(/[.]/g, "\\.")}#login=[0-9a-f]{64}$`))
      assert.notInclude(first.url, first.token)
      assert.notStrictEqual(new URL(first.url).hash, new URL(second.url).hash)
    }).pipe(Effect.provide(Layer.mergeAll(storeLayer, NodeContext.layer))))
})

/** A raw request through the Unix socket `socketPath`, with exactly these headers (`host` defaults to `localhost`). */
const overSocket = (socketPath: string, method: string, pathname: string, headers: Record<string, string> = {}, body?: string) =>
  Effect.async<Answer>((resume) => {
    const all: Record<string, string> = { host: "localhost", ...headers }
    if (body !== undefined) all["content-length"] = String(Buffer.byteLength(body))
    const req = http.request({ socketPath, method, path: pathname, headers: all, agent: false }, (response) => {
      let text = ""
      response.setEncoding("utf8").on("data", (chunk: string) => (text += chunk)).on("end", () =>
        resume(Effect.succeed({ status: response.statusCode ?? 0, headers: response.headers, body: text }))
      )
    })
    req.on("error", (error) => resume(Effect.die(error)))
    req.end(body)
    return Effect.sync(() => req.destroy())
  })

describe("polyloop serve --socket (design 0340, amended): a Unix socket only its owner can open", () => {
  const socketDir = () =>
    Effect.acquireRelease(
      Effect.sync(() => fs.mkdtempSync(path.join(os.tmpdir(), "polyloop-viewer-socket-"))),
      (dir) => Effect.sync(() => fs.rmSync(dir, { recursive: true, force: true }))
    )

  it.scopedLive("the socket is created with mode 0600 (whatever the umask), answers without a token, keeps the Host and Origin checks, and is removed on stop", () =>
    Effect.gen(function*() {
      yield* Scenario.run("hostile", "socket-run")
      yield* Scenario.suspend("socket-approval")
      const dir = yield* socketDir()
      const socket = path.join(dir, "viewer.sock")
      const umask = process.umask(0o000)
      const bound = yield* Effect.scoped(Effect.gen(function*() {
        const bound = yield* Serve.serve({ socket, interval: Duration.millis(50), decider: "tester" })
        // The process's umask is back as it was; the socket was made 0600 regardless of it.
        assert.strictEqual(process.umask(0o000), 0o000)
        const stat = fs.statSync(socket)
        assert.isTrue(stat.isSocket())
        assert.strictEqual(stat.mode & 0o777, 0o600)
        assert.strictEqual(bound.socket, socket)
        // No token: reaching the socket is the authentication.
        const runs = yield* overSocket(socket, "GET", "/api/runs")
        assert.strictEqual(runs.status, 200, runs.body)
        assert.include((JSON.parse(runs.body) as { readonly runs: ReadonlyArray<{ readonly runId: string }> }).runs.map((r) => r.runId), "socket-run")
        assert.strictEqual((yield* overSocket(socket, "GET", "/")).status, 200)
        // A rebinding name is still refused, and so is another site's Origin on a decision.
        const foreign = yield* overSocket(socket, "GET", "/api/runs", { host: "evil.example" })
        assert.deepStrictEqual([foreign.status, errorOf(foreign)._tag], [403, "ForeignHost"])
        const waiting = yield* overSocket(socket, "GET", "/api/runs/socket-approval")
        const call = (JSON.parse(waiting.body) as { readonly waiting: ReadonlyArray<{ readonly callId: string; readonly actionHash: string }> }).waiting[0]!
        const decision = JSON.stringify({ callId: call.callId, actionHash: call.actionHash, decision: "Approve" })
        const crossSite = yield* overSocket(socket, "POST", "/api/runs/socket-approval/decisions", { "content-type": "application/json", origin: "http://evil.example" }, decision)
        assert.strictEqual(crossSite.status, 403, crossSite.body)
        const still = yield* overSocket(socket, "GET", "/api/runs/socket-approval")
        assert.strictEqual((JSON.parse(still.body) as { readonly waiting: ReadonlyArray<unknown> }).waiting.length, 1)
        // The owner's own client (no Origin, as curl) decides.
        const approved = yield* overSocket(socket, "POST", "/api/runs/socket-approval/decisions", { "content-type": "application/json" }, decision)
        assert.strictEqual(approved.status, 200, approved.body)
        const decided = yield* overSocket(socket, "GET", "/api/runs/socket-approval")
        assert.strictEqual((JSON.parse(decided.body) as { readonly waiting: ReadonlyArray<unknown> }).waiting.length, 0)
        return bound
      })).pipe(Effect.ensuring(Effect.sync(() => process.umask(umask))))
      assert.strictEqual(bound.port, 0)
      assert.isFalse(fs.existsSync(socket), "the socket file is removed when the server stops")
    }).pipe(Effect.provide(Layer.mergeAll(storeLayer, NodeContext.layer))))

  it.scopedLive("a path that exists is never replaced, and --socket excludes --host", () =>
    Effect.gen(function*() {
      const dir = yield* socketDir()
      const taken = path.join(dir, "taken")
      fs.writeFileSync(taken, "someone's file")
      const exists = yield* Effect.flip(Effect.scoped(Serve.serve({ socket: taken })))
      assert.deepStrictEqual([exists.reason, fs.readFileSync(taken, "utf8")], ["InvalidOption", "someone's file"])
      assert.include(exists.message, "exists")
      const both = yield* Effect.flip(Effect.scoped(Serve.serve({ socket: path.join(dir, "s.sock"), host: "127.0.0.1" })))
      assert.strictEqual(both.reason, "InvalidOption")
      assert.isFalse(fs.existsSync(path.join(dir, "s.sock")))
    }).pipe(Effect.provide(Layer.mergeAll(storeLayer, NodeContext.layer))))
})

describe("polyloop serve --socket, the command", () => {
  it.scopedLive("prints the socket and answers through it without a token; the file is 0600", () =>
    Effect.gen(function*() {
      const dir = yield* Effect.acquireRelease(
        Effect.sync(() => fs.mkdtempSync(path.join(os.tmpdir(), "polyloop-viewer-socket-cli-"))),
        (dir) => Effect.sync(() => fs.rmSync(dir, { recursive: true, force: true }))
      )
      const db = path.join(dir, "runs.db")
      yield* Scenario.run("budget", "cli-socket-run").pipe(Effect.provide(SqlRunLogStore.layerSqlite({ filename: db })))
      const socket = path.join(dir, "viewer.sock")
      const launcher = path.join(path.dirname(fileURLToPath(import.meta.url)), "..", "packages/cli/bin/polyloop.js")
      const child = yield* Effect.acquireRelease(
        Effect.sync(() => spawn(process.execPath, [launcher, "serve", "--db", db, "--socket", socket], { stdio: ["ignore", "pipe", "pipe"], env: { ...process.env, NO_COLOR: "1" } })),
        (child) => Effect.sync(() => child.kill("SIGKILL"))
      )
      const printed = yield* Effect.async<string>((resume) => {
        let stdout = ""
        child.stdout!.setEncoding("utf8").on("data", (chunk: string) => {
          stdout += chunk
          if (stdout.includes("no token is asked for")) resume(Effect.succeed(stdout))
        })
        child.on("close", (code) => resume(Effect.dieMessage(`serve exited (${code}): ${stdout}`)))
      })
      assert.include(printed, `polyloop viewer on the Unix socket ${socket}`)
      assert.notInclude(printed, "token=")
      assert.strictEqual(fs.statSync(socket).mode & 0o777, 0o600)
      const runs = yield* overSocket(socket, "GET", "/api/runs")
      assert.strictEqual(runs.status, 200, runs.body)
      assert.deepStrictEqual((JSON.parse(runs.body) as { readonly runs: ReadonlyArray<{ readonly runId: string }> }).runs.map((r) => r.runId), ["cli-socket-run"])
    }))
})
