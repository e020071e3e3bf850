/**
 * The viewer's login stays in its origin (issue 45, design 0370), against a real server
 * (`Serve.serve`) over a real SQLite store, in headless Chromium (`support/chromium.ts`) and over
 * raw HTTP:
 *
 * - a listener on another port of 127.0.0.1 that the person's browser visits records every
 *   header it is sent and replays them to the viewer: refused (cookies are not port-scoped, so a
 *   cookie holding the token was sent there and replayed with 200);
 * - the page's own credential (a session, not the token) is refused under another host or port;
 * - the printed URL leaves nothing usable in the browser's history (Chromium's `History`
 *   database, read after the browser closed): not the token, and a login code already spent;
 * - the login code is good for one exchange, even when 20 are sent at once;
 * - one client's 64 live streams do not keep another client from its live updates;
 * - `GET /assets/<unknown>` is 404.
 */
import * as NodeContext from "@effect/platform-node/NodeContext"
import * as SqlClient from "@effect/sql/SqlClient"
import * as SqliteClient from "@effect/sql-sqlite-node/SqliteClient"
import { afterAll, assert, beforeAll, describe, it } from "@effect/vitest"
import * as Serve from "@polyloop/cli/Serve"
import * as SqlRunLogStore from "@polyloop/sql/SqlRunLogStore"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Layer from "effect/Layer"
import * as ManagedRuntime from "effect/ManagedRuntime"
import * as Scope from "effect/Scope"
import * as fs from "node:fs"
import * as http from "node:http"
import * as os from "node:os"
import * as path from "node:path"
import * as Chromium from "./support/chromium.js"
import * as Scenario from "./support/viewer-scenario.js"

interface Answer {
  readonly status: number
  readonly headers: http.IncomingHttpHeaders
  readonly body: string
}

/** A raw request to 127.0.0.1:`port` with exactly these headers (`host` defaults to 127.0.0.1:`port`). */
const request = (port: number, method: string, pathname: string, headers: Record<string, string> = {}, body?: string): Promise<Answer> =>
  new Promise((resolve, reject) => {
    const all: Record<string, string> = { host: `127.0.0.1:${port}`, ...headers }
    if (body !== undefined) all["content-length"] = String(Buffer.byteLength(body))
    const req = http.request({ host: "127.0.0.1", port, method, path: pathname, headers: all, agent: false }, (response) => {
      let text = ""
      response.setEncoding("utf8").on("data", (chunk: string) => (text += chunk)).on("end", () =>
        resolve({ status: response.statusCode ?? 0, headers: response.headers, body: text })
      )
    })
    req.on("error", reject)
    req.end(body)
  })

/** Exchanges a login (`{ login }` or `{ token }`) for a session as the page does. */
const exchange = (port: number, login: Record<string, string>) =>
  request(port, "POST", "/api/session", { "content-type": "application/json", origin: `http://127.0.0.1:${port}` }, JSON.stringify(login))

/** A live stream held open: its status, a promise of its first event, and a way to close it. */
interface OpenStream {
  readonly status: number
  readonly body: () => string
  readonly firstEvent: Promise<boolean>
  readonly close: () => void
}

const openStream = (port: number, pathname: string, headers: Record<string, string>): Promise<OpenStream> =>
  new Promise((resolve, reject) => {
    const req = http.get({ host: "127.0.0.1", port, path: pathname, headers: { host: `127.0.0.1:${port}`, accept: "text/event-stream", ...headers }, agent: false }, (response) => {
      let text = ""
      const firstEvent = new Promise<boolean>((ready) => {
        response.setEncoding("utf8").on("data", (chunk: string) => {
          text += chunk
          if (/\nevent: /.test(`\n${text}`)) ready(true)
        })
        response.on("end", () => ready(/\nevent: /.test(`\n${text}`)))
        response.on("error", () => ready(false))
      })
      resolve({ status: response.statusCode ?? 0, body: () => text, firstEvent, close: () => req.destroy() })
    })
    req.on("error", (error) => reject(error))
  })

describe.sequential("the viewer's login stays in its origin (design 0370)", () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "polyloop-viewer-origin-"))
  const runtime = ManagedRuntime.make(Layer.mergeAll(SqlRunLogStore.layerSqlite({ filename: path.join(dir, "runs.db") }), NodeContext.layer))
  const scope = Effect.runSync(Scope.make())
  /** The viewer, started without a token: it makes its own, as `polyloop serve` does. */
  let bound: Serve.Bound
  /** Another start over the same store (another token), for sessions that are not its own. */
  let other: Serve.Bound

  beforeAll(async () => {
    Chromium.ensure()
    await runtime.runPromise(Scenario.run("hostile", "run-1"))
    bound = await runtime.runPromise(Serve.serve({ port: 0, interval: Duration.millis(100), maxStreams: 64 }).pipe(Scope.extend(scope)))
    other = await runtime.runPromise(Serve.serve({ port: 0, interval: Duration.millis(100) }).pipe(Scope.extend(scope)))
  }, 240_000)

  afterAll(async () => {
    await Effect.runPromise(Scope.close(scope, Exit.void))
    await runtime.dispose()
    fs.rmSync(dir, { recursive: true, force: true })
  })

  it("a listener on another port of 127.0.0.1 that the browser visits gets nothing it can replay", async () => {
    const recorded: Array<http.IncomingHttpHeaders> = []
    const listener = http.createServer((req, res) => {
      recorded.push(req.headers)
      res.writeHead(200, { "content-type": "text/html" }).end("<!doctype html><p>a dev server</p>")
    })
    await new Promise<void>((listening) => listener.listen(0, "127.0.0.1", listening))
    const listenerPort = (listener.address() as { readonly port: number }).port
    const browser = await Chromium.launch()
    try {
      // The person opens the printed URL and uses the viewer.
      const page = await browser.context.newPage()
      await page.goto(bound.url)
      await page.locator('#runs tbody tr[data-run="run-1"]').waitFor({ timeout: 60_000 })
      // Then visits a dev server on another port of the same machine, by address and by name.
      for (const host of ["127.0.0.1", "localhost"]) {
        const visit = await browser.context.newPage()
        await visit.goto(`http://${host}:${listenerPort}/`)
        await visit.close()
      }
      assert.isAtLeast(recorded.length, 2)
      for (const headers of recorded) {
        assert.notInclude(JSON.stringify(headers), bound.token, "the token reached the other port")
        // The listener replays everything it was sent (but the Host) to the viewer.
        const replayed: Record<string, string> = {}
        for (const [name, value] of Object.entries(headers)) if (typeof value === "string" && name !== "host") replayed[name] = value
        for (const pathname of ["/api/runs", "/api/runs/run-1"]) {
          const answer = await request(bound.port, "GET", pathname, replayed)
          assert.include([401, 403], answer.status, `${pathname} replayed from the other port: ${answer.status} ${answer.body.slice(0, 200)}`)
        }
      }
      // What the page keeps is not the token, works at its own origin, and nowhere else.
      const session = String(await page.evaluate(`localStorage.getItem("polyloop-session")`))
      assert.notInclude(session, bound.token)
      assert.strictEqual((await request(bound.port, "GET", "/api/runs", { "x-polyloop-session": session })).status, 200)
      for (const host of [`localhost:${bound.port}`, `127.0.0.1:${listenerPort}`, `127.0.0.2:${bound.port}`]) {
        const answer = await request(bound.port, "GET", "/api/runs", { host, "x-polyloop-session": session })
        assert.strictEqual(answer.status, 401, `the session under Host ${host}`)
      }
      assert.strictEqual((await request(other.port, "GET", "/api/runs", { "x-polyloop-session": session })).status, 401, "another start")
      await page.close()
    } finally {
      await browser.close()
      listener.close()
    }
  }, 180_000)

  it("the printed URL leaves no usable secret in the browser's history", async () => {
    const fresh = await runtime.runPromise(Serve.serve({ port: 0, interval: Duration.millis(100) }).pipe(Scope.extend(scope)))
    assert.notInclude(fresh.url, fresh.token, "the printed URL does not hold the bearer token")
    const browser = await Chromium.launch()
    let closed = false
    try {
      const page = await browser.context.newPage()
      await page.goto(fresh.url)
      await page.locator('#runs tbody tr[data-run="run-1"]').waitFor({ timeout: 60_000 })
      // The address bar and this tab's history entry lost the code.
      assert.strictEqual(page.url(), fresh.baseUrl)
      await page.goto(new URL("/?view=stats", fresh.baseUrl).href)
      await page.goBack()
      assert.strictEqual(page.url(), fresh.baseUrl)
      await page.locator('#runs tbody tr[data-run="run-1"]').waitFor({ timeout: 60_000 })
      await browser.context.close() // writes the History database out
      closed = true
      const urls = await Effect.runPromise(
        Effect.flatMap(SqlClient.SqlClient, (sql) => sql<{ readonly url: string }>`SELECT url FROM urls`).pipe(
          Effect.map((rows) => rows.map((row) => row.url)),
          Effect.provide(SqliteClient.layer({ filename: path.join(browser.profile, "Default", "History") }))
        )
      )
      // Chromium records the URL opened, fragment and all (replaceState cannot take it back):
      // the code in it must be spent.
      assert.isTrue(urls.some((url) => url.includes("#login=")), `the history: ${JSON.stringify(urls)}`)
      for (const url of urls) {
        assert.notInclude(url, fresh.token, `the token is in the history: ${url}`)
        const code = /[#&?]login=([^&]+)/.exec(url)?.[1]
        if (code !== undefined) {
          const again = await exchange(fresh.port, { login: decodeURIComponent(code) })
          assert.strictEqual(again.status, 401, `the login code in the history still works: ${again.body}`)
        }
      }
    } finally {
      if (!closed) await browser.close()
      else fs.rmSync(browser.profile, { recursive: true, force: true })
    }
  }, 180_000)

  it("the login code is good for one exchange, even when 20 race for it; the token logs in any number of times", async () => {
    const fresh = await runtime.runPromise(Serve.serve({ port: 0, interval: Duration.millis(100) }).pipe(Scope.extend(scope)))
    const code = new URL(fresh.url).hash.replace(/^#login=/, "")
    assert.match(code, /^[0-9a-f]{64}$/)
    const answers = await Promise.all(Array.from({ length: 20 }, () => exchange(fresh.port, { login: code })))
    assert.deepStrictEqual(answers.map((a) => a.status).sort(), [200, ...Array<number>(19).fill(401)])
    const won = JSON.parse(answers.find((a) => a.status === 200)!.body) as { readonly session: string }
    assert.strictEqual((await request(fresh.port, "GET", "/api/runs", { "x-polyloop-session": won.session })).status, 200)
    for (let i = 0; i < 2; i++) assert.strictEqual((await exchange(fresh.port, { token: fresh.token })).status, 200)
    for (const wrong of [{ token: "0".repeat(64) }, { login: "0".repeat(64) }, { login: "" }, { other: "x" }]) {
      assert.include([400, 401], (await exchange(fresh.port, wrong)).status, JSON.stringify(wrong))
    }
    // From another site's page: refused before anything is looked at.
    const foreign = await request(fresh.port, "POST", "/api/session", { "content-type": "application/json", origin: "http://127.0.0.1:1" }, JSON.stringify({ token: fresh.token }))
    assert.strictEqual(foreign.status, 403)
    // Odd session values are 401, never a failure of the server.
    for (const odd of ["", ".", "x.y", `${"0".repeat(32)}.${"0".repeat(64)}`, "\u00e9.\u00ff", won.session.toUpperCase(), `${won.session}0`]) {
      assert.strictEqual((await request(fresh.port, "GET", "/api/runs", { "x-polyloop-session": odd })).status, 401, JSON.stringify(odd))
    }
  }, 60_000)

  it("one client's 64 live streams leave room for another client's live updates", async () => {
    const bearer = { authorization: `Bearer ${bound.token}` }
    const greedy = await Promise.all(Array.from({ length: 64 }, () => openStream(bound.port, "/api/live", bearer)))
    try {
      const taken = greedy.filter((s) => s.status === 200).length
      assert.isAtLeast(taken, 1)
      assert.isAtMost(taken, 16, "one client takes a fair share, not every slot")
      const refused = greedy.filter((s) => s.status === 503)
      assert.strictEqual(refused.length, 64 - taken)
      assert.include(refused[0]!.body(), "TooManyStreamsForClient")
      // Another person, logged in from their own browser, still gets the live list and a run's stream.
      const login = await exchange(bound.port, { token: bound.token })
      const { session } = JSON.parse(login.body) as { readonly session: string }
      for (const pathname of [`/api/live?session=${encodeURIComponent(session)}`, `/api/runs/run-1/live?session=${encodeURIComponent(session)}`]) {
        const stream = await openStream(bound.port, pathname, {})
        assert.strictEqual(stream.status, 200, pathname)
        assert.isTrue(await stream.firstEvent, pathname)
        stream.close()
      }
    } finally {
      for (const stream of greedy) stream.close()
    }
  }, 60_000)

  it("an unknown asset is 404; an asset with another method is 405", async () => {
    const unknown = await request(bound.port, "GET", "/assets/nothing-here.js")
    assert.strictEqual(unknown.status, 404)
    assert.strictEqual(unknown.headers["allow"], undefined)
    const post = await request(bound.port, "POST", "/assets/viewer.js", { "content-type": "text/plain" }, "x")
    assert.strictEqual(post.status, 405)
    assert.strictEqual(post.headers["allow"], "GET")
  }, 30_000)
})
