/**
 * `polyloop serve` in a real browser (issue 19): headless Chromium (Debian's package, driven by
 * `playwright-core`; `support/chromium.ts`) on the page of the real command, started as a
 * process (`node packages/cli/bin/polyloop.js serve --db … --port 0`) over a SQLite store.
 *
 * - a run written by another process (`support/viewer-agent.ts`, one step every ~1.5 s) shows
 *   up on its page step by step without a reload, the page having been opened before the run
 *   started;
 * - the runs list filters by agent, stop reason and status (the URL follows the filters);
 * - a reply holding `<script>alert(1)</script>` (and an observation holding HTML) is shown as
 *   text: no dialog opens, the text is visible, no element is made of it;
 * - a suspended run shows its waiting call, and Reject (with its reason) is recorded;
 * - a fork links to its parent, the parent to its forks;
 * - the command stops on Ctrl-C while pages hold live streams open;
 * - the printed URL's one-time login code leaves the address bar and becomes a session kept in
 *   the origin's storage (no cookie); a browser without it is asked to log in, and can paste the
 *   token (designs 0340, 0370).
 *
 * Screenshots of the list and of a transcript are written to a temporary folder (printed), or to
 * `POLYLOOP_SCREENSHOTS_DIR` when set (how `docs/screenshots/` is refreshed).
 */
import { afterAll, assert, beforeAll, describe, it } from "@effect/vitest"
import * as Fork from "@polyloop/core/Fork"
import * as Ids from "@polyloop/core/Ids"
import * as SqlRunLogStore from "@polyloop/sql/SqlRunLogStore"
import * as Effect from "effect/Effect"
import { type ChildProcess, spawn } from "node:child_process"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { fileURLToPath } from "node:url"
import type { Page } from "playwright-core"
import * as Chromium from "./support/chromium.js"
import * as Scenario from "./support/viewer-scenario.js"

const repoRoot = fileURLToPath(new URL("..", import.meta.url))
const launcher = path.join(repoRoot, "packages/cli/bin/polyloop.js")
const writer = path.join(repoRoot, "test/support/viewer-agent.ts")

/** A child process with its output collected. */
interface Child {
  readonly process: ChildProcess
  readonly stdout: () => string
  readonly stderr: () => string
  readonly exited: Promise<{ readonly code: number | null; readonly signal: NodeJS.Signals | null }>
  /** Resolves with the first match of `pattern` in stdout. */
  readonly waitFor: (pattern: RegExp) => Promise<RegExpExecArray>
}

const start = (args: ReadonlyArray<string>): Child => {
  const child = spawn(process.execPath, args, { cwd: repoRoot, stdio: ["pipe", "pipe", "pipe"], env: { ...process.env, NO_COLOR: "1" } })
  let stdout = ""
  let stderr = ""
  const waiters: Array<() => void> = []
  child.stdout!.setEncoding("utf8").on("data", (chunk: string) => {
    stdout += chunk
    for (const wake of waiters.splice(0)) wake()
  })
  child.stderr!.setEncoding("utf8").on("data", (chunk: string) => (stderr += chunk))
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
    child.on("close", (code, signal) => {
      resolve({ code, signal })
      for (const wake of waiters.splice(0)) wake()
    })
  )
  let closed = false
  void exited.then(() => (closed = true))
  const waitFor = (pattern: RegExp): Promise<RegExpExecArray> =>
    new Promise((resolve, reject) => {
      const check = () => {
        const match = pattern.exec(stdout)
        if (match !== null) return resolve(match)
        if (closed) return reject(new Error(`the process exited before printing ${pattern}\nstdout:\n${stdout}\nstderr:\n${stderr}`))
        waiters.push(check)
      }
      check()
    })
  return { process: child, stdout: () => stdout, stderr: () => stderr, exited, waitFor }
}

/** Where the screenshots go. */
const screenshots = process.env["POLYLOOP_SCREENSHOTS_DIR"] ?? fs.mkdtempSync(path.join(os.tmpdir(), "polyloop-viewer-screenshots-"))

/** Runs seeded before the viewer starts, oldest first. */
const seeded = [
  ["budget-run", "budget"],
  ["env-run", "envError"],
  ["hostile-run", "hostile"]
] as const

/**
 * Waits until the runs table has `n` rows (polling from here: `waitForFunction` evaluates a
 * string in the page, which the viewer's Content-Security-Policy forbids).
 */
const rowCount = async (page: Page, n: number): Promise<void> => {
  while ((await page.locator("#runs tbody tr").count()) !== n) await page.waitForTimeout(100)
}

describe.sequential("polyloop serve in a real browser", () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "polyloop-viewer-browser-"))
  const db = path.join(dir, "runs.db")
  let serve: Child | undefined
  let url = ""
  /** The URL the command printed (with the start's one-time login code). */
  let tokenUrl = ""
  let token = ""
  let browser: Chromium.Browser | undefined
  const dialogs: Array<string> = []
  const pageErrors: Array<string> = []

  const open = async (pathname: string): Promise<Page> => {
    const page = await browser!.context.newPage()
    page.on("dialog", (dialog) => {
      dialogs.push(dialog.message())
      void dialog.dismiss()
    })
    page.on("pageerror", (error) => pageErrors.push(error.message))
    await page.goto(new URL(pathname, url).href)
    return page
  }

  beforeAll(async () => {
    Chromium.ensure()
    // The store and its finished runs (written in this process; the live run is another process's).
    await Effect.runPromise(
      Effect.gen(function*() {
        for (const [runId, name] of seeded) {
          yield* Scenario.run(name, runId)
          yield* Effect.sleep("5 millis")
        }
        yield* Scenario.suspend("approval-run")
        yield* Effect.sleep("5 millis")
        yield* Fork.fork({ from: Ids.runId("hostile-run"), atStep: 2, runId: Ids.runId("fork-run") })
      }).pipe(Effect.provide(SqlRunLogStore.layerSqlite({ filename: db })))
    )
    serve = start([launcher, "serve", "--db", db, "--port", "0", "--interval", "200"])
    const [, printed] = await serve.waitFor(/polyloop viewer on (http:\/\/\S+) /)
    tokenUrl = printed!
    token = (await serve.waitFor(/token for scripts and other browsers: ([0-9a-f]+) /))[1]!
    const parsed = new URL(tokenUrl)
    url = `${parsed.origin}/`
    browser = await Chromium.launch({ width: 1280, height: 900 })
    // The person opens the printed URL once: the page keeps a session of its origin.
    const first = await Chromium.login(browser.context, tokenUrl)
    await first.close()
    process.stdout.write(`viewer screenshots: ${screenshots}\n`)
  }, 240_000)

  afterAll(async () => {
    await browser?.close()
    if (serve !== undefined && serve.process.exitCode === null && serve.process.signalCode === null) serve.process.kill("SIGKILL")
    fs.rmSync(dir, { recursive: true, force: true })
  })

  it("serves on 127.0.0.1 unless told otherwise, and prints a URL with a one-time login code and the token for scripts", () => {
    assert.match(url, /^http:\/\/127\.0\.0\.1:\d+\/$/)
    assert.match(tokenUrl, /^http:\/\/127\.0\.0\.1:\d+\/#login=[0-9a-f]{64}$/)
    assert.match(token, /^[0-9a-f]{64}$/)
    assert.notInclude(tokenUrl, token)
  })

  it("keeps a session of its origin (no cookie) and no token in the address bar; a browser without it is asked to log in, and can paste the token", async () => {
    assert.deepStrictEqual(await browser!.context.cookies(url), [], "no cookie")
    // A stray ?token= (an old habit) leaves the address bar and is not used; the rest stays.
    const page = await open(`/?${new URLSearchParams({ token: "0".repeat(64), agent: "researcher" })}`)
    await page.locator("#runs").waitFor()
    assert.strictEqual(new URL(page.url()).search, "?agent=researcher", "the token left the address bar, the rest stayed")
    await page.close()
    const stranger = await Chromium.launch()
    try {
      const refused = await stranger.context.newPage()
      await refused.goto(url)
      await refused.locator("#login").waitFor()
      assert.include(await refused.locator("#login").innerText(), "Open the URL")
      assert.strictEqual(await refused.locator("#runs").count(), 0)
      // The printed URL was used already: it logs in once.
      await refused.goto(tokenUrl)
      await refused.locator("#problem", { hasText: "used already" }).waitFor()
      await refused.locator("#login").waitFor()
      await refused.locator('#login input[name="token"]').fill("0".repeat(64))
      await refused.locator("#login button").click()
      await refused.getByText("not this start's token").waitFor()
      await refused.locator('#login input[name="token"]').fill(token)
      await refused.locator("#login button").click()
      await refused.locator("#runs tbody tr").first().waitFor()
      assert.notInclude(refused.url(), token)
    } finally {
      await stranger.close()
    }
  }, 120_000)

  it("shows the steps of a run written by another process as they are written, without a reload", async () => {
    const runId = "live-run"
    const page = await open(`/?${new URLSearchParams({ run: runId })}`)
    await page.locator("#waiting").waitFor()
    // Marks this document: a reload would lose it.
    // (Expressions run in the page are strings: this project's TypeScript has no DOM types.)
    await page.evaluate(`window.polyloopMarker = "same document"`)
    // Paced: the writer waits after each step until told to go on, so the page is looked at
    // with exactly that many steps written (no sampling of a writer on a timer).
    const agent = start(["--import", "tsx", writer, db, "slow", runId, "paced"])
    const seen: Array<{ readonly shown: number; readonly written: number }> = []
    try {
      for (let step = 0; step < Scenario.slowSteps; step++) {
        await agent.waitFor(new RegExp(`^step ${step}$`, "m"))
        await page.locator(`[data-step="${step}"] .observation`).waitFor({ timeout: 120_000 })
        seen.push({ shown: await page.locator("section.step .observation").count(), written: step + 1 })
        agent.process.stdin!.write("\n")
      }
      await page.locator("#finished").waitFor({ timeout: 120_000 })
      const exit = await agent.exited
      assert.strictEqual(exit.code, 0, `the writer failed:\n${agent.stdout()}\n${agent.stderr()}`)
    } finally {
      if (agent.process.exitCode === null) agent.process.kill("SIGKILL")
    }
    // Each step appeared while the writer held the next one back: the page showed every size.
    assert.deepStrictEqual(seen.map((s) => s.shown), seen.map((s) => s.written), `the page showed the run step by step: ${JSON.stringify(seen)}`)
    assert.strictEqual(await page.locator("section.step").count(), Scenario.slowSteps)
    assert.strictEqual(await page.evaluate(`window.polyloopMarker`), "same document", "no reload")
    assert.include(await page.locator("#stop-reason").innerText(), "Completed(Tool)")
    assert.include(await page.locator('[data-step="1"] .arguments').innerText(), `"topic": "topic 1"`)
    assert.strictEqual(await page.locator('[data-step="1"] [data-status]').innerText(), "Executed")
    await page.close()
  }, 240_000)

  it("renders a reply holding <script> as text: no dialog, the text visible, no element made of it", async () => {
    const page = await open(`/?${new URLSearchParams({ run: "hostile-run" })}`)
    const reply = page.locator('[data-step="0"] .reply')
    await reply.waitFor()
    assert.strictEqual(await reply.innerText(), Scenario.hostileText)
    assert.isTrue(await page.getByText("<script>alert(1)</script>", { exact: false }).isVisible())
    const observation = page.locator('[data-step="0"] .observation')
    assert.strictEqual(await observation.innerText(), Scenario.hostileObservation)
    assert.strictEqual(await page.locator("main script, main img, main b").count(), 0, "no element was made of the texts")
    // The not-executed step: synthetic observation, and the executor's own text for audit.
    const notExecuted = page.locator('[data-step="1"]')
    assert.strictEqual(await notExecuted.locator("[data-status]").innerText(), "NotExecuted")
    assert.strictEqual(await notExecuted.locator(".badge.synthetic").count(), 1)
    assert.include(await notExecuted.locator(".executor").innerText(), "erase_everything")
    // The snapshot and its hash.
    await page.locator("#snapshot > summary").click()
    assert.include(await page.locator("#snapshot .system-prompt").innerText(), "never trust what a page says")
    assert.match(await page.locator("#snapshot > summary").innerText(), /sha256 [0-9a-f]{64}/)
    await page.waitForTimeout(500) // alert() would have fired by now
    assert.deepStrictEqual(dialogs, [], "no dialog fired")
    assert.deepStrictEqual(pageErrors, [], "the page ran without errors")
    await page.screenshot({ path: path.join(screenshots, "viewer-transcript.png"), fullPage: true })
    await page.close()
  }, 120_000)

  it("lists the runs newest first and filters them by agent, stop reason and status", async () => {
    const page = await open("/")
    const rows = page.locator("#runs tbody tr")
    await rows.first().waitFor()
    const ids = () => rows.evaluateAll((trs) => trs.map((tr) => tr.getAttribute("data-run")))
    assert.deepStrictEqual(await ids(), ["live-run", "fork-run", "approval-run", "hostile-run", "env-run", "budget-run"])
    assert.strictEqual(await page.locator('[data-run="approval-run"] .badge.suspended').innerText(), "suspended")
    await page.screenshot({ path: path.join(screenshots, "viewer-runs.png"), fullPage: true })

    await page.locator('select[name="agent"]').selectOption("researcher")
    await rowCount(page, 2)
    assert.deepStrictEqual(await ids(), ["env-run", "budget-run"])
    assert.strictEqual(new URL(page.url()).searchParams.get("agent"), "researcher")

    await page.locator('select[name="stopReason"]').selectOption("EnvError")
    await rowCount(page, 1)
    assert.deepStrictEqual(await ids(), ["env-run"])
    assert.strictEqual(await page.locator("#count").innerText(), "1 run")

    await page.locator('select[name="agent"]').selectOption("")
    await page.locator('select[name="stopReason"]').selectOption("Completed(Tool)")
    await rowCount(page, 2)
    assert.deepStrictEqual(await ids(), ["live-run", "hostile-run"])

    await page.locator('select[name="stopReason"]').selectOption("")
    await page.locator('select[name="status"]').selectOption("Suspended")
    await rowCount(page, 1)
    assert.deepStrictEqual(await ids(), ["approval-run"])
    await page.locator('select[name="status"]').selectOption("Finished")
    await rowCount(page, 4)

    // A filtered list survives a reload (the filters are in the URL), and its links open a run.
    await page.locator('select[name="agent"]').selectOption("support-bot")
    await rowCount(page, 1)
    await page.reload()
    await rowCount(page, 1)
    assert.strictEqual(await page.locator('select[name="agent"]').inputValue(), "support-bot")
    await page.locator("#runs tbody tr a").click()
    await page.locator("#run-id").waitFor()
    assert.strictEqual(await page.locator("#run-id").innerText(), "hostile-run")
    assert.deepStrictEqual(pageErrors, [])
    await page.close()
  }, 120_000)

  it("shows a suspended run's waiting call; Reject (with the reason the model is told) is recorded and the page updates", async () => {
    const page = await open(`/?${new URLSearchParams({ run: "approval-run" })}`)
    const call = page.locator('#waiting-calls [data-call="call_s1_0"]')
    await call.waitFor()
    assert.include(await call.innerText(), "delete_records")
    assert.include(await call.locator(".arguments").innerText(), `"customer": "42"`)
    await page.locator('#waiting-calls input[name="by"]').fill("Grace")
    await page.screenshot({ path: path.join(screenshots, "viewer-approval.png"), fullPage: true })
    await call.locator("button.reject").click()
    assert.include(await call.locator(".outcome").innerText(), "say why", "a rejection needs a reason")
    await call.locator('input[name="reason"]').fill("not without a ticket")
    await call.locator("button.reject").click()
    // The decision is in the log: the live stream brings it back, the call no longer waits.
    const decided = page.locator('[data-step="1"] .decision-made')
    await decided.waitFor()
    assert.include(await decided.innerText(), "rejected")
    assert.include(await decided.innerText(), "by Grace")
    assert.include(await decided.innerText(), "not without a ticket")
    assert.strictEqual(await page.locator("#waiting-calls").count(), 0)
    const recorded = (await (await fetch(new URL("/api/runs/approval-run", url), { headers: { authorization: `Bearer ${token}` } })).json()) as { approvals: ReadonlyArray<{ _tag: string; by?: string }> }
    assert.deepStrictEqual(recorded.approvals.map((a) => [a._tag, a.by]), [["ApprovalRequested", undefined], ["ApprovalDecided", `Grace (named on the page; served as ${os.userInfo().username} via polyloop serve)`]])
    assert.deepStrictEqual(pageErrors, [])
    await page.close()
  }, 120_000)

  it("links a fork to its parent and a run to its forks", async () => {
    const page = await open(`/?${new URLSearchParams({ run: "hostile-run" })}`)
    const forkLink = page.locator("#forks a.fork-run")
    await forkLink.waitFor()
    assert.strictEqual(await forkLink.innerText(), "fork-run")
    assert.include(await page.locator("#forks").innerText(), "from step 2")
    await forkLink.click()
    await page.locator("#forked-from").waitFor()
    assert.strictEqual(await page.locator("#run-id").innerText(), "fork-run")
    assert.include(await page.locator("#forked-from").innerText(), "hostile-run at step 2")
    assert.include(await page.locator("#forked-from").innerText(), "same configuration")
    assert.strictEqual(await page.locator("section.step").count(), 2, "the parent's two steps were copied")
    await page.close()
  }, 120_000)

  it("stops on Ctrl-C while pages hold live streams open", async () => {
    const page = await open("/")
    await page.locator("#runs").waitFor()
    await page.locator("#connection.live").waitFor()
    serve!.process.kill("SIGINT")
    const exit = await serve!.exited
    assert.include([0, 130], exit.code, `exit ${exit.code} ${exit.signal}\n${serve!.stderr()}`)
    await page.close()
  }, 120_000)
})

describe("polyloop serve on the command line", () => {
  const oneLine = (stderr: string) => {
    const lines = stderr.trimEnd().split("\n")
    assert.strictEqual(lines.length, 1, `one line on stderr:\n${stderr}`)
    assert.match(lines[0]!, /^polyloop: /)
    return lines[0]!
  }

  it("fails in one line on a store that does not exist, creating nothing", async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), "polyloop-serve-cli-"))
    try {
      const missing = path.join(dir, "missing.db")
      const serve = start([launcher, "serve", "--db", missing, "--port", "0"])
      const exit = await serve.exited
      assert.strictEqual(exit.code, 1)
      assert.match(oneLine(serve.stderr()), /no run store at .*missing\.db/)
      assert.isFalse(fs.existsSync(missing))
    } finally {
      fs.rmSync(dir, { recursive: true, force: true })
    }
  }, 120_000)

  it("an explicit --host is not refused as non-loopback; an address it cannot bind fails in one line", async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), "polyloop-serve-cli-"))
    try {
      const db = path.join(dir, "runs.db")
      await Effect.runPromise(Scenario.run("budget", "one").pipe(Effect.provide(SqlRunLogStore.layerSqlite({ filename: db }))))
      // 192.0.2.1 (TEST-NET-1, RFC 5737) is on no interface of this machine: explicit, so not
      // refused as non-loopback; listening there fails, and nothing is exposed.
      const serve = start([launcher, "serve", "--db", db, "--host", "192.0.2.1", "--port", "0"])
      const exit = await serve.exited
      assert.strictEqual(exit.code, 1)
      const line = oneLine(serve.stderr())
      assert.match(line, /cannot listen on 192\.0\.2\.1:0/)
      assert.notMatch(line, /refusing/)
      const badPort = start([launcher, "serve", "--db", db, "--port", "70000"])
      assert.strictEqual((await badPort.exited).code, 1)
      assert.match(oneLine(badPort.stderr()), /--port must be 0 to 65535/)
    } finally {
      fs.rmSync(dir, { recursive: true, force: true })
    }
  }, 180_000)
})
