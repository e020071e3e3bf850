/**
 * The pictures of `polyloop serve` in a real browser (issue 34): headless Chromium (Debian's,
 * `support/chromium.ts`) on the page of the real command over a SQLite store of its own.
 *
 * - a run's timeline: one bar per completed step, its length the step's recorded duration; a
 *   resumed run's step is marked; tokens per step;
 * - two runs compared, aligned by step: a fork and its parent (the fork continued with other
 *   replies) — the first differing step is marked, with the diff of the replies and the note on
 *   the request the model saw;
 * - the statistics plots: the stacked stop-reason bars hold exactly the counts of
 *   `polyloop stats --json` (run as a process on the same store), for the whole store and for
 *   one agent; the histograms count every finished run;
 * - search from the header's box: the store's own query, hits with the match marked (as text),
 *   paged, each opening its run;
 * - costs from the price table given with `--prices`: a run's, and the store's total;
 * - nothing from a run becomes markup on these pages (the hostile run's reply is text).
 *
 * Screenshots go to `POLYLOOP_SCREENSHOTS_DIR` when set (how `docs/screenshots/` is refreshed),
 * else to a temporary folder.
 */
import { afterAll, assert, beforeAll, describe, it } from "@effect/vitest"
import * as Fork from "@polyloop/core/Fork"
import * as Ids from "@polyloop/core/Ids"
import * as SqlRunLogStore from "@polyloop/sql/SqlRunLogStore"
import * as Effect from "effect/Effect"
import { type ChildProcess, spawn, spawnSync } from "node:child_process"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { fileURLToPath } from "node:url"
import type { Page } from "playwright-core"
import * as Chromium from "./support/chromium.js"
import * as Scenario from "./support/viewer-scenario.js"

const repoRoot = fileURLToPath(new URL("..", import.meta.url))
const launcher = path.join(repoRoot, "packages/cli/bin/polyloop.js")
const screenshots = process.env["POLYLOOP_SCREENSHOTS_DIR"] ?? fs.mkdtempSync(path.join(os.tmpdir(), "polyloop-viewer-pictures-"))

/** A chart's data as Chart.js holds it (read in the page: the bars are what it draws). */
interface ChartData {
  readonly labels: ReadonlyArray<string>
  readonly datasets: ReadonlyArray<{ readonly label: string; readonly data: ReadonlyArray<number | ReadonlyArray<number> | null> }>
}

/** The data of the chart drawn on canvas `#id` (an expression string: the project has no DOM types). */
const chartData = (page: Page, id: string): Promise<ChartData> =>
  page.evaluate(`(() => {
    const chart = window.Chart.getChart(document.getElementById(${JSON.stringify(id)}))
    return chart === undefined ? null : { labels: chart.data.labels, datasets: chart.data.datasets.map((d) => ({ label: d.label, data: d.data })) }
  })()`) as Promise<ChartData>

/** Waits (polling from here: the page's CSP forbids `waitForFunction`'s evaluated strings) until chart `#id` is drawn. */
const drawn = async (page: Page, id: string): Promise<ChartData> => {
  for (let tries = 0; tries < 1200; tries++) {
    const data = await chartData(page, id)
    if (data !== null) return data
    await page.waitForTimeout(50)
  }
  throw new Error(`chart #${id} was never drawn`)
}

interface StatsGroup {
  readonly agent: string
  readonly snapshotHash: string
  readonly runs: number
  readonly stopReasons: Record<string, number>
}

describe.sequential("polyloop serve's pictures in a real browser", () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "polyloop-viewer-pictures-"))
  const db = path.join(dir, "runs.db")
  const pricesFile = path.join(dir, "prices.json")
  /** The price table's formula: EUR 3 per million input tokens, 15 per million output tokens. */
  const priced = (input: number, output: number) => (input * 3 + output * 15) / 1_000_000
  let serve: ChildProcess | undefined
  let url = ""
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

  const statsJson = (...args: ReadonlyArray<string>): ReadonlyArray<StatsGroup> => {
    const result = spawnSync(process.execPath, [launcher, "stats", "--json", "--db", db, ...args], { cwd: repoRoot, encoding: "utf8", env: { ...process.env, NO_COLOR: "1" } })
    assert.strictEqual(result.status, 0, result.stderr)
    return JSON.parse(result.stdout) as ReadonlyArray<StatsGroup>
  }

  beforeAll(async () => {
    Chromium.ensure()
    await Effect.runPromise(
      Effect.gen(function*() {
        for (const [runId, name] of [["budget-a", "budget"], ["budget-b", "budget"], ["env-a", "envError"], ["hostile-a", "hostile"], ["hostile-b", "hostile"]] as const) {
          yield* Scenario.run(name, runId)
          yield* Effect.sleep("5 millis")
        }
        // Stopped at step 1, then resumed: its step 1 is marked on the timeline.
        yield* Effect.flip(Scenario.run("hostile", "resumed-a", { failFromStep: 1 }))
        yield* Scenario.run("hostile", "resumed-a")
        // A fork of hostile-a at step 1, continued with other replies: it differs from step 1 on.
        yield* Fork.fork({ from: Ids.runId("hostile-a"), atStep: 1, runId: Ids.runId("fork-alt") })
        yield* Scenario.run("hostileAlt", "fork-alt")
      }).pipe(Effect.provide(SqlRunLogStore.layerSqlite({ filename: db })))
    )
    fs.writeFileSync(pricesFile, JSON.stringify({ currency: "EUR", models: { "*": { input: 3, output: 15 } } }))
    const child = spawn(process.execPath, [launcher, "serve", "--db", db, "--port", "0", "--prices", pricesFile], { cwd: repoRoot, stdio: ["ignore", "pipe", "pipe"], env: { ...process.env, NO_COLOR: "1" } })
    serve = child
    const [printed, printedToken] = await new Promise<readonly [string, string]>((resolve, reject) => {
      let stdout = ""
      child.stdout!.setEncoding("utf8").on("data", (chunk: string) => {
        stdout += chunk
        const match = /polyloop viewer on (http:\/\/\S+) [\s\S]*token for scripts and other browsers: ([0-9a-f]+) /.exec(stdout)
        if (match !== null) resolve([match[1]!, match[2]!])
      })
      child.on("close", (code) => reject(new Error(`serve exited (${code}):\n${stdout}`)))
    })
    const parsed = new URL(printed)
    token = printedToken
    url = `${parsed.origin}/`
    browser = await Chromium.launch({ width: 1280, height: 900 })
    const first = await Chromium.login(browser.context, printed)
    await first.close()
    process.stdout.write(`viewer screenshots: ${screenshots}\n`)
  }, 240_000)

  afterAll(async () => {
    await browser?.close()
    if (serve !== undefined && serve.exitCode === null) serve.kill("SIGKILL")
    fs.rmSync(dir, { recursive: true, force: true })
  })

  it("draws a run's timeline: a bar per step as long as its recorded duration, a resume marked, tokens per step", async () => {
    const transcript = (await (await fetch(new URL("/api/runs/resumed-a", url), { headers: { authorization: `Bearer ${token}` } })).json()) as {
      readonly steps: ReadonlyArray<{ readonly step: number; readonly completion: { readonly elapsed: number; readonly modelElapsed?: number }; readonly tokens: { readonly input: number; readonly output: number } }>
      readonly resumes: ReadonlyArray<{ readonly fromStep: number }>
    }
    assert.deepStrictEqual(transcript.resumes.map((r) => r.fromStep), [1])
    const page = await open(`/?${new URLSearchParams({ run: "resumed-a" })}`)
    const timeline = await drawn(page, "chart-timeline")
    assert.deepStrictEqual(timeline.labels, ["step 0", "step 1 ↻", "step 2"])
    // Every step is a bar from the end of the step before, split into its model call and its
    // tools (the tools' part in the dataset of its status); a step resumed after its reply was
    // logged has no recorded model time: one bar.
    let clock = 0
    let split = 0
    transcript.steps.forEach((step, i) => {
      const bars = timeline.datasets.map((d) => d.data[i]).filter((bar) => bar !== null && bar !== undefined)
      const { elapsed, modelElapsed } = step.completion
      if (modelElapsed === undefined) assert.deepStrictEqual(bars, [[clock, clock + elapsed]], `step ${step.step}`)
      else {
        split++
        assert.deepStrictEqual(bars, [[clock, clock + modelElapsed], [clock + modelElapsed, clock + elapsed]], `step ${step.step}`)
      }
      clock += elapsed
    })
    assert.isAbove(split, 0, "the live steps record their model time")
    assert.strictEqual(timeline.datasets[0]!.label, "model call")
    const tokens = await drawn(page, "chart-step-tokens")
    assert.deepStrictEqual(tokens.datasets.map((d) => d.data), [transcript.steps.map((s) => s.tokens.input), transcript.steps.map((s) => s.tokens.output)])
    assert.strictEqual(await page.locator('#timeline-table [data-marks="resumed here"]').count(), 1)
    assert.strictEqual(await page.locator("#timeline-table tbody tr:nth-child(2) [data-marks]").getAttribute("data-marks"), "resumed here")
    // Its cost, from the price table given with --prices.
    const input = transcript.steps.reduce((sum, s) => sum + s.tokens.input, 0)
    const output = transcript.steps.reduce((sum, s) => sum + s.tokens.output, 0)
    assert.closeTo(Number(await page.locator("#run-cost").getAttribute("data-cost")), priced(input, output), 1e-12)
    assert.include(await page.locator("#run-cost").innerText(), "EUR")
    await page.locator("#timeline").screenshot({ path: path.join(screenshots, "viewer-timeline.png") })
    assert.deepStrictEqual(pageErrors, [])
    await page.close()
  }, 120_000)

  it("compares a fork with its parent, aligned by step: the first differing step is marked, with the diff of the replies", async () => {
    const page = await open(`/?${new URLSearchParams({ run: "hostile-a" })}`)
    const link = page.locator("#forks li", { hasText: "fork-alt" }).locator("a.compare-fork")
    await link.waitFor()
    await link.click()
    await page.locator("#first-difference").waitFor()
    assert.deepStrictEqual(new URL(page.url()).searchParams.getAll("compare").concat(new URL(page.url()).searchParams.getAll("with")), ["hostile-a", "fork-alt"])
    assert.strictEqual(await page.locator("#first-difference").getAttribute("data-step"), "1")
    assert.strictEqual(await page.locator(".compare-row.first-difference").getAttribute("data-step"), "1")
    // The step the fork copied is shown once, as the parent's (issue 45), not as a pair of the same text.
    assert.include(await page.locator(".compare-row.shared-steps").innerText(), "step 0: copied from hostile-a by the fork")
    assert.strictEqual(await page.locator('.compare-row[data-step="0"]').count(), 0)
    assert.strictEqual(await page.locator('.compare-row[data-step="2"]').getAttribute("data-same"), "no")
    // The model saw the same request at step 1 (same history), and replied otherwise.
    assert.include(await page.locator("#request-note").innerText(), "the model saw the same request")
    const reply = page.locator('#first-difference [data-diff="reply"]')
    assert.include(await reply.locator(".del").innerText(), "Let me clean up first.")
    assert.include(await reply.locator(".ins").innerText(), "Let me read the page once more.")
    assert.include(await page.locator('#first-difference [data-diff="tool calls"] .ins').innerText(), "the page again")
    assert.strictEqual(await page.locator("main script, main img, main b").count(), 0)
    await page.screenshot({ path: path.join(screenshots, "viewer-compare.png"), fullPage: true })
    // Any two runs: from a run's page, by the other's id (here two runs of one configuration).
    const any = await open(`/?${new URLSearchParams({ run: "hostile-b" })}`)
    await any.locator('#compare-form input[name="with"]').fill("hostile-a")
    await any.locator("#compare-form button").click()
    await any.locator("#no-difference").waitFor()
    assert.include(await any.locator("#no-difference").innerText(), "agree on all 3 steps")
    // The hostile reply of step 0 is text on this page too.
    assert.isTrue(await any.getByText("<script>alert(1)</script>", { exact: false }).first().isVisible())
    assert.strictEqual(await any.locator("main script, main img, main b").count(), 0)
    await any.close()
    // The fork's own page links to the comparison with its parent.
    const fork = await open(`/?${new URLSearchParams({ run: "fork-alt" })}`)
    await fork.locator("#compare-parent").click()
    await fork.locator("#first-difference").waitFor()
    assert.strictEqual(await fork.locator("#first-difference").getAttribute("data-step"), "1")
    assert.deepStrictEqual(dialogs, [])
    assert.deepStrictEqual(pageErrors, [])
    await page.close()
    await fork.close()
  }, 120_000)

  it("searches tasks, replies and observations from the header: hits marked as text, paged, each opening its run", async () => {
    const page = await open("/")
    await page.locator("#runs").waitFor()
    await page.locator('#search input[name="q"]').fill("read the page ONCE more")
    await page.locator('#search input[name="q"]').press("Enter")
    await page.locator("#hits li").first().waitFor()
    assert.deepStrictEqual(
      await page.locator("#hits li").evaluateAll((items) => items.map((li) => [li.getAttribute("data-run"), li.getAttribute("data-field"), li.getAttribute("data-step")])),
      [["fork-alt", "reply", "1"]]
    )
    assert.strictEqual(await page.locator("#hits mark").innerText(), "read the page once more")
    assert.strictEqual(new URL(page.url()).searchParams.get("q"), "read the page ONCE more")
    // Markup in what is found stays text (the hostile reply and observation).
    await page.goto(new URL(`/?${new URLSearchParams({ view: "search", q: "<script>" })}`, url).href)
    await page.locator("#hits li").first().waitFor()
    assert.isAbove(await page.locator("#hits li").count(), 4)
    assert.strictEqual(await page.locator("main script, main img, main b").count(), 0)
    assert.include(await page.locator("#hits li").first().innerText(), "<script>alert(")
    await page.screenshot({ path: path.join(screenshots, "viewer-search.png"), fullPage: true })
    await page.goto(new URL(`/?${new URLSearchParams({ view: "search", q: "notes about", page: "1" })}`, url).href)
    await page.locator("#hits li").first().waitFor()
    const firstPage = await page.locator("#hits li").count()
    await page.locator("#hits li a").first().click()
    await page.locator("#run-id").waitFor()
    assert.isAbove(firstPage, 0)
    assert.deepStrictEqual(dialogs, [])
    assert.deepStrictEqual(pageErrors, [])
    await page.close()
  }, 120_000)

  it("lists each run's cost (its replies' tokens priced by --prices) and the listed runs' total", async () => {
    const page = await open("/")
    await page.locator("#runs tbody tr").first().waitFor()
    const auth = { headers: { authorization: `Bearer ${token}` } }
    const rows = page.locator("#runs tbody tr")
    const count = await rows.count()
    assert.isAtLeast(count, 6)
    let total = 0
    let tokens = 0
    for (let i = 0; i < count; i++) {
      const row = rows.nth(i)
      const runId = (await row.getAttribute("data-run"))!
      const doc = (await (await fetch(new URL(`/api/runs/${encodeURIComponent(runId)}`, url), auth)).json()) as {
        readonly steps: ReadonlyArray<{ readonly tokens: { readonly input: number; readonly output: number } | null }>
      }
      const input = doc.steps.reduce((sum, s) => sum + (s.tokens?.input ?? 0), 0)
      const output = doc.steps.reduce((sum, s) => sum + (s.tokens?.output ?? 0), 0)
      const cell = row.locator("td.cost")
      assert.closeTo(Number(await cell.getAttribute("data-cost")), priced(input, output), 1e-12, runId)
      assert.include(await cell.innerText(), "EUR")
      total += priced(input, output)
      tokens += input + output
    }
    assert.include(await page.locator("#runs thead").textContent(), "Cost (EUR)")
    assert.strictEqual(Number(await page.locator("#totals").getAttribute("data-tokens")), tokens)
    assert.closeTo(Number(await page.locator("#totals").getAttribute("data-cost")), total, 1e-12)
    assert.include(await page.locator("#totals").innerText(), "EUR")
    await page.screenshot({ path: path.join(screenshots, "viewer-list-costs.png"), fullPage: true })
    assert.deepStrictEqual(pageErrors, [])
    await page.close()
  }, 60_000)

  it("plots the statistics with the figures of `polyloop stats --json`, for the store and for one agent", async () => {
    const expected = statsJson()
    const page = await open("/?view=stats")
    const stops = await drawn(page, "chart-stop-reasons")
    // Per agent first (issue 45): the command's groups summed over each agent's snapshots.
    const agents = [...new Set(expected.map((g) => g.agent))]
    const ofAgent = (agent: string) => expected.filter((g) => g.agent === agent)
    assert.deepStrictEqual(stops.labels, agents)
    // Each stacked segment is the command's count of that stop reason for that agent.
    const reasons = [...new Set(expected.flatMap((g) => Object.keys(g.stopReasons)))].sort()
    assert.deepStrictEqual(stops.datasets.map((d) => d.label), reasons)
    for (const dataset of stops.datasets) {
      assert.deepStrictEqual(dataset.data, agents.map((a) => ofAgent(a).reduce((sum, g) => sum + (g.stopReasons[dataset.label] ?? 0), 0)), dataset.label)
    }
    assert.deepStrictEqual(
      await page.locator("#stats-agents tbody tr.agent-row td:nth-child(3)").allInnerTexts(),
      agents.map((a) => String(ofAgent(a).reduce((sum, g) => sum + g.runs, 0)))
    )
    // The histograms count every finished run once.
    const finished = expected.reduce((sum, g) => sum + g.runs, 0)
    for (const id of ["chart-steps", "chart-tokens", "chart-over-time"]) {
      const histogram = await drawn(page, id)
      assert.strictEqual((histogram.datasets[0]!.data as ReadonlyArray<number>).reduce((a, b) => a + b, 0), finished, id)
    }
    // The total cost: every finished run's tokens, priced.
    const auth = { headers: { authorization: `Bearer ${token}` } }
    const listed = (await (await fetch(new URL("/api/runs?status=Finished&pageSize=200", url), auth)).json()) as { readonly runs: ReadonlyArray<{ readonly runId: string }> }
    let total = 0
    for (const { runId } of listed.runs) {
      const doc = (await (await fetch(new URL(`/api/runs/${encodeURIComponent(runId)}`, url), auth)).json()) as {
        readonly steps: ReadonlyArray<{ readonly tokens: { readonly input: number; readonly output: number } | null }>
      }
      total += priced(doc.steps.reduce((sum, s) => sum + (s.tokens?.input ?? 0), 0), doc.steps.reduce((sum, s) => sum + (s.tokens?.output ?? 0), 0))
    }
    assert.strictEqual(listed.runs.length, finished)
    assert.closeTo(Number(await page.locator("#stats-cost").getAttribute("data-cost")), total, 1e-12)
    await page.screenshot({ path: path.join(screenshots, "viewer-stats.png"), fullPage: true })
    // Filtered by agent: the same as `polyloop stats --json --agent`.
    await page.locator('#stats-filters select[name="agent"]').selectOption("researcher")
    for (let tries = 0; tries < 1200 && (await page.locator("#stats-table tbody tr").count()) !== 1; tries++) await page.waitForTimeout(50)
    const researcher = statsJson("--agent", "researcher")
    const filtered = await drawn(page, "chart-stop-reasons")
    assert.deepStrictEqual(filtered.labels, researcher.map((g) => `${g.agent} · ${g.snapshotHash.slice(0, 8)}`))
    for (const dataset of filtered.datasets) assert.deepStrictEqual(dataset.data, researcher.map((g) => g.stopReasons[dataset.label] ?? 0))
    assert.strictEqual(new URL(page.url()).searchParams.get("agent"), "researcher")
    assert.deepStrictEqual(pageErrors, [])
    await page.close()
  }, 120_000)
})
