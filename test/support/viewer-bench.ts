/**
 * The viewer's pages at the size of real stores (issue 45): how long the first page (the runs
 * list) and the statistics page take to show in headless Chromium over a SQLite store of 10,000
 * finished runs of 50 agents with 1 to 40 snapshots each (`many-runs.ts`), plus a 1,000-step run,
 * and the screenshots of `docs/screenshots/` (the statistics at 10,000 runs, the 1,000-step run).
 *
 *   npx tsx --conditions=@polyloop/source test/support/viewer-bench.ts [--runs 10000] [--out bench/results.viewer-pages.json] [--screenshots docs/screenshots]
 *
 * Each figure is wall time from `page.goto` to the page's content being there (the list's first
 * row; the statistics' agents table and stop-reasons chart drawn; the run's last step reachable),
 * the first visit apart, then the median of 5 more. The API's answer times are measured apart
 * (the request only). The machine (cores, model, load average before and after) is recorded.
 * (Here and not under bench/: it shares the stores' making with the browser tests.)
 */
import * as NodeContext from "@effect/platform-node/NodeContext"
import * as Serve from "@polyloop/cli/Serve"
import * as SqlRunLogStore from "@polyloop/sql/SqlRunLogStore"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Layer from "effect/Layer"
import * as ManagedRuntime from "effect/ManagedRuntime"
import * as Scope from "effect/Scope"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { performance } from "node:perf_hooks"
import type { Page } from "playwright-core"
import * as Chromium from "./chromium.js"
import * as Many from "./many-runs.js"

const option = (name: string): string | undefined => {
  const at = process.argv.indexOf(name)
  return at < 0 ? undefined : process.argv[at + 1]
}
const runs = Number(option("--runs") ?? "10000")
const out = option("--out") ?? "bench/results.viewer-pages.json"
const shots = option("--screenshots")

const median = (values: ReadonlyArray<number>): number => {
  const sorted = [...values].sort((a, b) => a - b)
  return sorted.length % 2 === 1 ? sorted[(sorted.length - 1) / 2]! : (sorted[sorted.length / 2 - 1]! + sorted[sorted.length / 2]!) / 2
}
const round = (n: number): number => Math.round(n * 10) / 10
const machine = () => ({ cpus: os.cpus().length, model: os.cpus()[0]?.model ?? "?", node: process.version, loadavg: os.loadavg().map((l) => round(l)) })

const main = async () => {
  const before = machine()
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "polyloop-viewer-bench-"))
  const runtime = ManagedRuntime.make(Layer.mergeAll(SqlRunLogStore.layerSqlite({ filename: path.join(dir, "runs.db") }), NodeContext.layer))
  const scope = Effect.runSync(Scope.make())
  const fillStarted = performance.now()
  await runtime.runPromise(Many.seedMany({ runs, agents: 50, startAt: Date.UTC(2026, 0, 1) }))
  await runtime.runPromise(Many.longRun({ runId: "long-1000", steps: 1000, observationBytes: 2000 }))
  const fillSeconds = round((performance.now() - fillStarted) / 1000)
  const bound = await runtime.runPromise(
    Serve.serve({ port: 0, interval: Duration.millis(500), prices: { currency: "USD", models: { "*": { input: 3, output: 15 } } } }).pipe(Scope.extend(scope))
  )
  const browser = await Chromium.launch({ width: 1280, height: 900 })
  try {
    await (await Chromium.login(browser.context, bound.url)).close()
    const timePage = async (pathname: string, ready: (page: Page) => Promise<void>) => {
      const samples: Array<number> = []
      let first = 0
      for (let rep = 0; rep < 6; rep++) {
        const page = await browser.context.newPage()
        const started = performance.now()
        await page.goto(new URL(pathname, bound.baseUrl).href)
        await ready(page)
        const took = performance.now() - started
        if (rep === 0) first = took
        else samples.push(took)
        await page.close()
      }
      return { path: pathname, firstMs: round(first), medianMs: round(median(samples)), minMs: round(Math.min(...samples)), maxMs: round(Math.max(...samples)) }
    }
    const timeApi = async (pathname: string) => {
      const samples: Array<number> = []
      let bytes = 0
      for (let rep = 0; rep < 6; rep++) {
        const started = performance.now()
        const response = await fetch(new URL(pathname, bound.baseUrl), { headers: { authorization: `Bearer ${bound.token}` } })
        bytes = (await response.text()).length
        if (rep > 0) samples.push(performance.now() - started)
      }
      return { path: pathname, bytes, medianMs: round(median(samples)) }
    }
    const drawn = async (page: Page, id: string) => {
      for (let tries = 0; tries < 2000; tries++) {
        if (await page.evaluate(`window.Chart?.getChart(document.getElementById(${JSON.stringify(id)})) !== undefined`)) return
        await page.waitForTimeout(5)
      }
      throw new Error(`chart ${id} never drawn`)
    }
    const firstPage = await timePage("/", async (page) => {
      await page.locator("#runs tbody tr").first().waitFor({ timeout: 120_000 })
    })
    const statistics = await timePage("/?view=stats", async (page) => {
      await page.locator("#stats-agents tbody tr").first().waitFor({ timeout: 120_000 })
      await drawn(page, "chart-stop-reasons")
    })
    const longRun = await timePage("/?run=long-1000", async (page) => {
      await page.locator('section.step[data-step="0"]').waitFor({ timeout: 120_000 })
      await page.locator("#finished").waitFor({ timeout: 120_000 })
    })
    const api = {
      runs: await timeApi("/api/runs"),
      stats: await timeApi("/api/stats"),
      run1000: await timeApi("/api/runs/long-1000")
    }
    if (shots !== undefined) {
      const stats = await browser.context.newPage()
      await stats.goto(new URL("/?view=stats", bound.baseUrl).href)
      await stats.locator("#stats-agents tbody tr").first().waitFor()
      await drawn(stats, "chart-stop-reasons")
      await stats.locator('#stats-agents tr.agent-row[data-agent="agent-03"] button.expand').click()
      await stats.locator('#stats-agents tr.snapshot-row[data-agent="agent-03"]').first().waitFor()
      await stats.waitForTimeout(300)
      await stats.screenshot({ path: path.join(shots, "viewer-stats-10000.png"), fullPage: true })
      const run = await browser.context.newPage()
      await run.goto(new URL("/?run=long-1000", bound.baseUrl).href)
      await run.locator("#finished").waitFor()
      await run.locator('#jump input[name="step"]').fill("640")
      await run.locator("#jump").press("Enter")
      await run.locator('section.step[data-step="640"]').waitFor()
      await run.waitForTimeout(500)
      await run.evaluate(`document.getElementById("step-640").scrollIntoView({ block: "start" }); window.scrollBy(0, -40)`)
      await run.waitForTimeout(300)
      await run.screenshot({ path: path.join(shots, "viewer-run-1000-steps.png"), fullPage: false })
      await run.evaluate("window.scrollTo(0, 0)")
      await run.waitForTimeout(300)
      await run.locator("#timeline").scrollIntoViewIfNeeded()
      await run.screenshot({ path: path.join(shots, "viewer-run-1000-timeline.png"), fullPage: false })
    }
    const result = {
      at: new Date().toISOString(),
      machine: { before, after: machine() },
      runs,
      agents: 50,
      fillSeconds,
      pages: { firstPage, statistics, longRun },
      api,
      target: "first page and statistics at 10,000 runs < 1 s each"
    }
    fs.writeFileSync(out, `${JSON.stringify(result, null, 2)}\n`)
    process.stdout.write(`${JSON.stringify(result, null, 2)}\n`)
  } finally {
    await browser.close()
    await Effect.runPromise(Scope.close(scope, Exit.void))
    await runtime.dispose()
    fs.rmSync(dir, { recursive: true, force: true })
  }
}

main().catch((error: unknown) => {
  process.stderr.write(`viewer-bench: ${error instanceof Error ? error.stack ?? error.message : String(error)}\n`)
  process.exitCode = 1
})
