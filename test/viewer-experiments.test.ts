/**
 * The viewer's experiments page (design 0320) in a real Chromium (`support/chromium.ts`), served
 * by the real command (`polyloop serve` over a SQLite store holding the example experiment):
 * the list links to the experiment; its page shows the results table, the plot of each
 * configuration's mean with its CI, and the per-sample grid (20 samples × 2 configurations × 3
 * epochs) coloured by score, whose cells link to the runs' transcripts; another scorer is one
 * click away; the JSON API answers the same, and an unknown experiment is a 404.
 */
import { afterAll, assert, beforeAll, describe, it } from "@effect/vitest"
import * as Experiment from "@polyloop/eval/Experiment"
import * as ExperimentStore from "@polyloop/eval/ExperimentStore"
import { experiment } from "@polyloop/examples/experiment"
import * as SqlRunLogStore from "@polyloop/sql/SqlRunLogStore"
import * as NodeContext from "@effect/platform-node/NodeContext"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import { type ChildProcess, spawn } from "node:child_process"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { fileURLToPath } from "node:url"
import type { Page } from "playwright-core"
import * as Chromium from "./support/chromium.js"

const repoRoot = fileURLToPath(new URL("..", import.meta.url))
const launcher = path.join(repoRoot, "packages/cli/bin/polyloop.js")

describe.sequential("the experiments page in a real browser", () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "polyloop-viewer-experiments-"))
  const db = path.join(dir, "runs.db")
  let serve: ChildProcess | undefined
  let origin = ""
  let browser: Chromium.Browser | undefined
  const pageErrors: Array<string> = []

  const open = async (pathname: string): Promise<Page> => {
    const page = await browser!.context.newPage()
    page.on("pageerror", (error) => pageErrors.push(error.message))
    page.on("console", (message) => (message.type() === "error" ? pageErrors.push(message.text()) : undefined))
    await page.goto(new URL(pathname, origin).href)
    return page
  }

  beforeAll(async () => {
    Chromium.ensure()
    const store = SqlRunLogStore.layerSqlite({ filename: db })
    await Effect.runPromise(
      Experiment.run(experiment).pipe(Effect.provide(Layer.mergeAll(Layer.provideMerge(ExperimentStore.layer, store), NodeContext.layer)))
    )
    serve = spawn(process.execPath, [launcher, "serve", "--db", db, "--port", "0"], { cwd: repoRoot, stdio: ["ignore", "pipe", "pipe"], env: { ...process.env, NO_COLOR: "1" } })
    const printed = await new Promise<string>((resolve, reject) => {
      let out = ""
      serve!.stdout!.setEncoding("utf8").on("data", (chunk: string) => {
        out += chunk
        const match = /polyloop viewer on (http:\/\/\S+) /.exec(out)
        if (match !== null) resolve(match[1]!)
      })
      serve!.on("close", () => reject(new Error(`serve exited: ${out}`)))
    })
    origin = new URL(printed).origin
    browser = await Chromium.launch({ width: 1280, height: 1000 })
    const first = await Chromium.login(browser.context, printed)
    await first.close()
  }, 240_000)

  afterAll(async () => {
    await browser?.close()
    if (serve !== undefined && serve.exitCode === null && serve.signalCode === null) serve.kill("SIGKILL")
    fs.rmSync(dir, { recursive: true, force: true })
  })

  it("lists the experiment; its page shows the results, the plot and the grid; a cell opens its run", async () => {
    const list = await open("/experiments")
    await list.locator("#experiments a").first().waitFor()
    assert.deepStrictEqual(await list.locator("#experiments a").allTextContents(), ["multiplication"])
    await list.locator("#experiments a").first().click()
    await list.locator("#results").waitFor()
    const rows = await list.locator("#results tbody tr").allInnerTexts()
    assert.strictEqual(rows.length, 4)
    assert.match(rows.find((r) => r.startsWith("guess\tnumeric"))!, /^guess\tnumeric\t0\.750\t0\.099\t\[0\.550, 0\.900\]\t60\/60\t0\t1\.0\t48$/)
    assert.isTrue(await list.locator("canvas#plot").isVisible())
    assert.strictEqual(await list.locator("#grid tbody tr").count(), 20)
    assert.strictEqual(await list.locator("#grid tbody tr").first().locator("td").count(), 6)
    // q04: 16 × 5 (16 % 4 = 0): the guess is off by 10 in every epoch, scored 0 (red).
    const q04 = list.locator("#grid tbody tr", { hasText: "q04" })
    assert.deepStrictEqual(await q04.locator("td").allTextContents(), ["1", "1", "1", "0", "0", "0"])
    /** A cell's computed background (the page's window, typed here without the DOM library). */
    const background = (n: number) =>
      q04.locator("td").nth(n).evaluate((td) => (globalThis as unknown as { getComputedStyle: (e: unknown) => { backgroundColor: string } }).getComputedStyle(td).backgroundColor)
    const red = await background(3)
    const green = await background(0)
    assert.strictEqual(red, "rgb(239, 179, 179)", "hsl(0, 65%, 82%): a score of 0")
    assert.notStrictEqual(red, green)
    // Another scorer.
    await list.locator("a", { hasText: /^short $/ }).click()
    await list.locator("#grid").waitFor()
    assert.include(await list.locator("h2").last().innerText(), "(short)")
    // A cell opens its run's transcript.
    await list.locator("#grid tbody tr", { hasText: "q04" }).locator("td").nth(4).locator("a").click()
    await list.waitForURL(/\?run=multiplication%2Fguess%2Fq04%2F2/)
    await list.getByText("multiplication/guess/q04/2").first().waitFor()
    await list.close()
    assert.deepStrictEqual(pageErrors, [])
  })

  it("the JSON API: the list, one experiment (results and grid), an unknown one is a 404", async () => {
    const page = await open("/experiments")
    // As the page asks: with the session it keeps in its origin's storage (design 0370).
    const fetchJson = (url: string) => page.evaluate(async (u) => {
      const storage = (globalThis as unknown as { readonly localStorage: { getItem: (key: string) => string | null } }).localStorage
      const response = await fetch(u, { headers: { "x-polyloop-session": storage.getItem("polyloop-session") ?? "" } })
      return { status: response.status, body: await response.json() as unknown }
    }, url)
    assert.deepStrictEqual((await fetchJson("/api/experiments")).body, { experiments: ["multiplication"] })
    const one = await fetchJson("/api/experiments/multiplication?scorer=numeric")
    assert.strictEqual(one.status, 200)
    const body = one.body as { readonly results: { readonly experiment: string }; readonly grid: { readonly scorer: string; readonly epochs: number; readonly samples: ReadonlyArray<string> } }
    assert.strictEqual(body.results.experiment, "multiplication")
    assert.deepStrictEqual([body.grid.scorer, body.grid.epochs, body.grid.samples.length], ["numeric", 3, 20])
    assert.strictEqual((await fetchJson("/api/experiments/nope")).status, 404)
    await page.close()
  })
})
