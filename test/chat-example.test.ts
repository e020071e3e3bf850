/**
 * `examples/chat-server.ts` in a real browser (issue 31): headless Chromium (Debian's,
 * `support/chromium.ts`) on the page of the example started as a user starts it (`tsx`), on a
 * SQLite file of its own. A person sends a message and a follow-up and reads both answers; then
 * sends a third and the server is killed (SIGKILL) in the middle of its turn; started again on
 * the same port, it finishes the turn, the page (its `EventSource` reconnecting by itself) shows
 * the answer, and the log holds each message once and every turn finished.
 */
import { afterAll, assert, beforeAll, describe, it } from "@effect/vitest"
import * as Ids from "@polyloop/core/Ids"
import * as RunLogAudit from "@polyloop/core/RunLogAudit"
import { RunLogStore } from "@polyloop/core/RunLogStore"
import * as SqlRunLogStore from "@polyloop/sql/SqlRunLogStore"
import * as Effect from "effect/Effect"
import { type ChildProcess, spawn } from "node:child_process"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { fileURLToPath } from "node:url"
import type { Page } from "playwright-core"
import * as Chromium from "./support/chromium.js"

const root = fileURLToPath(new URL("..", import.meta.url))

interface Server {
  readonly child: ChildProcess
  readonly url: string
  readonly output: () => string
}

const startServer = (db: string, port: number): Promise<Server> =>
  new Promise((resolve, reject) => {
    const env: NodeJS.ProcessEnv = { ...process.env, CHAT_DB: db, CHAT_PORT: String(port), NO_COLOR: "1", CHAT_MODEL_LATENCY_MS: "1200" }
    for (const name of ["POLYLOOP_API_KEY", "POLYLOOP_BASE_URL", "POLYLOOP_MODEL"]) delete env[name]
    // node itself with tsx's loader (not the tsx launcher, whose child would outlive a SIGKILL of it).
    const child = spawn(process.execPath, ["--import", "tsx", path.join(root, "examples", "chat-server.ts")], { cwd: root, env, stdio: ["ignore", "pipe", "pipe"] })
    let output = ""
    const collect = (chunk: Buffer) => {
      output += chunk.toString("utf8")
      const match = /polyloop chat on (http:\/\/127\.0\.0\.1:\d+\/)/.exec(output)
      if (match !== null) resolve({ child, url: match[1]!, output: () => output })
    }
    child.stdout!.on("data", collect)
    child.stderr!.on("data", collect)
    child.on("exit", (code, signal) => reject(new Error(`the chat server exited (${code ?? signal}) before it listened:\n${output}`)))
  })

/** Waits (polling from here) until the page shows `text` in an element of `kind`. */
const shows = async (page: Page, kind: string, text: string): Promise<void> => {
  for (let tries = 0; tries < 600; tries++) {
    const texts = await page.locator(`#log div.${kind}`).allInnerTexts()
    if (texts.some((t) => t.includes(text))) return
    await page.waitForTimeout(50)
  }
  throw new Error(`the page never showed ${kind} "${text}": ${(await page.locator("#log").innerText()).slice(-2000)}`)
}

const say = async (page: Page, text: string): Promise<void> => {
  await page.locator("#text:not([disabled])").waitFor()
  await page.fill("#text", text)
  await page.click("#go")
}

describe.sequential("the chat example in a real browser", () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "polyloop-chat-example-"))
  const db = path.join(dir, "chat.db")
  let server: Server | undefined
  let browser: Chromium.Browser | undefined

  beforeAll(async () => {
    Chromium.ensure()
    browser = await Chromium.launch({ width: 900, height: 900 })
  }, 240_000)

  afterAll(async () => {
    await browser?.close()
    if (server !== undefined && server.child.exitCode === null) server.child.kill("SIGKILL")
    fs.rmSync(dir, { recursive: true, force: true })
  })

  it("send, follow up, kill the server mid-turn, start it again: the page shows the finished turn, no message lost", async () => {
    server = await startServer(db, 0)
    const port = Number(new URL(server.url).port)
    const page = await browser!.context.newPage()
    const errors: Array<string> = []
    page.on("pageerror", (error) => errors.push(error.message))
    await page.goto(server.url)

    await say(page, "Where is order 17?")
    await shows(page, "assistant", `You asked: "Where is order 17?". order 17: shipped`)
    await say(page, "And order 23?")
    await shows(page, "assistant", `You asked: "And order 23?". order 23: shipped`)

    // The third turn: killed once its lookup is on the page (its answer is a model call away:
    // 1.2 s, against the page's 200 ms polling).
    await say(page, "One more: order 41?")
    await shows(page, "tool", "order 41: shipped")
    server.child.kill("SIGKILL")
    await new Promise((resolve) => server!.child.once("exit", resolve))
    assert.notInclude((await page.locator("#log").innerText()), `You asked: "One more: order 41?"`, "killed before the turn's answer")

    server = await startServer(db, port)
    assert.include(server.output(), "finishing the turn that was running when the server stopped")
    await shows(page, "assistant", `You asked: "One more: order 41?". order 41: shipped`)
    await shows(page, "turn-end", "turn 2 ended: Completed(Answer)")
    // Each record once on the page: the reconnection continued where it stopped.
    const seqs = await page.locator("#log div").evaluateAll((nodes) => nodes.map((n) => (n as unknown as { dataset: { seq: string } }).dataset.seq))
    assert.strictEqual(new Set(seqs).size, seqs.length)
    assert.deepStrictEqual(errors, [])
    await page.close()
    server.child.kill("SIGTERM")
    await new Promise((resolve) => server!.child.once("exit", resolve))

    const log = await Effect.runPromise(
      Effect.flatMap(RunLogStore, (store) => store.readLog(Ids.runId("chat"), { verify: true })).pipe(Effect.provide(SqlRunLogStore.layerSqlite({ filename: db })))
    )
    assert.strictEqual(log.started._tag === "Some" ? log.started.value.task : "", "Where is order 17?")
    assert.deepStrictEqual(log.userMessages.map((m) => m.text), ["And order 23?", "One more: order 41?"])
    assert.deepStrictEqual(log.turns.map((t) => t.turn), [0, 1, 2])
    assert.isAbove(log.resumes.length, 0)
    assert.deepStrictEqual(RunLogAudit.logProblems(log), [])
  }, 180_000)
})
