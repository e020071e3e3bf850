/**
 * The viewer at the size of real stores (issue 45), in headless Chromium (`support/chromium.ts`)
 * over a SQLite store filled by `support/many-runs.ts` (real logs of the loop):
 *
 * - statistics over 1,200 finished runs of 50 agents with 1 to 40 snapshots each: grouped by
 *   agent first (a page of 25 agents, each agent's snapshots collapsed until asked for), every
 *   chart capped at 20 bars, the page a few screens high, not tens of thousands of pixels; and
 *   `polyloop stats` prints the same agents first, in a bounded table;
 * - a run of 200 steps whose observations are 8 kB each: long texts collapsed (shown whole on
 *   asking), a step's request as it was sent (a chat of the messages), jump to a step;
 * - a run of 1,000 steps: a windowed list (a few dozen steps made at a time, any step reached by
 *   jumping or scrolling), the timeline charts in at most 200 bars;
 * - a fork compared with its parent: the copied steps shown once as shared, the rest aligned from
 *   the fork point, each step's cost and latency on both sides; a fork not run yet says so.
 */
import { afterAll, assert, beforeAll, describe, it } from "@effect/vitest"
import * as Serve from "@polyloop/cli/Serve"
import { spawnSync } from "node:child_process"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { fileURLToPath } from "node:url"
import type { Page } from "playwright-core"
import * as ViewerSession from "./support/viewer-session.js"
import * as Many from "./support/many-runs.js"

const repoRoot = fileURLToPath(new URL("..", import.meta.url))
const launcher = path.join(repoRoot, "packages/cli/bin/polyloop.js")
const screenshots = process.env["POLYLOOP_SCREENSHOTS_DIR"] ?? fs.mkdtempSync(path.join(os.tmpdir(), "polyloop-viewer-scale-"))

const runs = 1200
const agents = 50

/** A chart's data as Chart.js holds it (read in the page: the bars are what it draws). */
interface ChartData {
  readonly labels: ReadonlyArray<string>
  readonly datasets: ReadonlyArray<{ readonly label: string; readonly data: ReadonlyArray<number | null> }>
}

/** Waits (polling from here: the page's CSP forbids `waitForFunction`'s evaluated strings) until chart `#id` is drawn. */
const drawn = async (page: Page, id: string): Promise<ChartData> => {
  for (let tries = 0; tries < 1200; tries++) {
    const data = (await page.evaluate(`(() => {
      const chart = window.Chart.getChart(document.getElementById(${JSON.stringify(id)}))
      return chart === undefined ? null : { labels: chart.data.labels, datasets: chart.data.datasets.map((d) => ({ label: d.label, data: d.data })) }
    })()`)) as ChartData | null
    if (data !== null) return data
    await page.waitForTimeout(50)
  }
  throw new Error(`chart #${id} was never drawn`)
}

/** Polls until `check` holds (the page's CSP forbids `waitForFunction`). */
const until = async (check: () => Promise<boolean>, what: string): Promise<void> => {
  for (let tries = 0; tries < 1200; tries++) {
    if (await check()) return
    await new Promise((resolve) => setTimeout(resolve, 50))
  }
  throw new Error(`never: ${what}`)
}

/**
 * Besides `seedMany`'s: the long runs (agent long-reader, two configurations: their step budgets
 * differ) and the parent and forks (agent forker, one configuration; the fork not run is
 * unfinished) — 4 more finished runs of 2 more agents in 3 more configurations.
 */
const extra = { runs: 4, agents: 2, configurations: 3 }

/** The number of configurations (agent and snapshot) `seedMany` made. */
const seededConfigurations = (() => {
  const seen = new Set<string>()
  for (let i = 0; i < runs; i++) {
    const a = i % agents
    seen.add(`${a} ${Math.floor(i / agents) % Many.snapshotsOf(a)}`)
  }
  return seen.size
})()
const configurations = seededConfigurations + extra.configurations

describe.sequential("the viewer at the size of real stores (issue 45)", () => {
  const session = ViewerSession.make("polyloop-viewer-scale-")
  const { db, open, pageErrors, runtime } = session
  let bound: Serve.Bound

  beforeAll(async () => {
    await runtime.runPromise(Many.seedMany({ runs, agents, startAt: Date.UTC(2026, 0, 1) }))
    await runtime.runPromise(Many.longRun({ runId: "long-200", steps: 200, observationBytes: 8000 }))
    await runtime.runPromise(Many.longRun({ runId: "long-1000", steps: 1000, observationBytes: 300 }))
    await runtime.runPromise(Many.parentAndForks({ parent: "parent-8", fork: "fork-8", unrun: "fork-unrun" }))
    bound = await session.start({ prices: { currency: "USD", models: { "*": { input: 3, output: 15 } } }, width: 1280, height: 900 })
    process.stdout.write(`viewer scale screenshots: ${screenshots}\n`)
  }, 600_000)

  afterAll(() => session.stop())

  it("statistics of 1,200 runs of 50 agents: by agent first, snapshots collapsed, charts capped, tables paged", async () => {
    const page = await open("/?view=stats")
    await page.locator("#stats-agents tbody tr").first().waitFor({ timeout: 60_000 })
    assert.include(await page.locator("#stats-count").innerText(), `${runs + extra.runs} finished runs of ${agents + extra.agents} agents in ${configurations} configurations`)
    // The chart: at most 20 bars; the agents left out are counted under it (and are in the table).
    const chart = await drawn(page, "chart-stop-reasons")
    assert.strictEqual(chart.labels.length, 20)
    const counted = chart.datasets.reduce((sum, d) => sum + d.data.reduce<number>((a, b) => a + (b ?? 0), 0), 0)
    assert.strictEqual(counted, 20 * (runs / agents))
    assert.include(await page.locator("#chart-left").innerText(), `${agents + extra.agents - 20} more (${runs + extra.runs - 20 * (runs / agents)} runs)`)
    // The agents' table: a page of 25, then the next.
    const rows = page.locator("#stats-agents tbody tr.agent-row")
    assert.strictEqual(await rows.count(), 25)
    assert.strictEqual(await rows.first().getAttribute("data-agent"), Many.agentName(0))
    assert.strictEqual(await page.locator("#stats-agents tbody tr.snapshot-row").count(), 0, "snapshots collapsed")
    // An agent's snapshots, on asking.
    const third = Many.agentName(3)
    await page.locator(`#stats-agents tr.agent-row[data-agent="${third}"] button.expand`).click()
    await until(async () => (await page.locator(`#stats-agents tr.snapshot-row[data-agent="${third}"]`).count()) === Many.snapshotsOf(3), "the snapshots shown")
    // The page stays a few screens high.
    const height = Number(await page.evaluate("document.documentElement.scrollHeight"))
    assert.isBelow(height, 5000, `the statistics page is ${height} px high`)
    await page.screenshot({ path: path.join(screenshots, "viewer-stats-1200.png"), fullPage: true })
    await page.locator("#stats-agents-pager button.next").click()
    await until(async () => (await rows.first().getAttribute("data-agent")) === Many.agentName(25), "the second page of agents")
    assert.strictEqual(new URL(page.url()).searchParams.get("agentPage"), "2")
    // One agent selected: its snapshots, paged and charted (capped) the same way.
    await page.locator('#stats-filters select[name="agent"]').selectOption(Many.agentName(6))
    await page.locator("#stats-table tbody tr").first().waitFor()
    await until(async () => (await page.locator("#stats-table tbody tr").count()) === Many.snapshotsOf(6), "agent-06's snapshots")
    const byAgent = await drawn(page, "chart-stop-reasons")
    assert.isAtMost(byAgent.labels.length, 20)
    assert.deepStrictEqual(pageErrors, [])
    await page.close()
  }, 180_000)

  it("a run of 200 steps with 8 kB observations: long texts collapsed, the request as sent, jump to a step", async () => {
    const page = await open(`/?${new URLSearchParams({ run: "long-200" })}`)
    const first = page.locator('[data-step="0"] pre.observation')
    await first.waitFor({ timeout: 60_000 })
    const full = Many.pageText(0, 8000)
    // Collapsed: the first lines, and a button that says how much there is.
    const shown = await first.innerText()
    assert.isAtMost(shown.split("\n").length, 12)
    assert.isTrue(full.startsWith(shown.trimEnd()), "the folded text is the start of the observation")
    const unfold = page.locator('[data-step="0"] button.unfold').first()
    assert.match(await unfold.innerText(), /show all \d+ lines \(7\.8 kB\)/)
    await unfold.click()
    assert.strictEqual(await first.innerText(), full)
    // The page is not 200 full observations high.
    const height = Number(await page.evaluate("document.documentElement.scrollHeight"))
    assert.isBelow(height, 120_000, `the run's page is ${height} px high`)
    // Step 3's request as it was sent: the system prompt, the task, then each earlier step's reply and observation.
    const request = page.locator('[data-step="3"] details.request')
    await request.locator("summary").click()
    const messages = request.locator(".message")
    await messages.first().waitFor()
    assert.deepStrictEqual(
      await messages.evaluateAll((nodes) => nodes.map((n) => n.getAttribute("data-role"))),
      ["system", "user", "assistant", "tool", "assistant", "tool", "assistant", "tool"]
    )
    assert.include(await messages.nth(1).innerText(), "Fetch the pages you need, then answer.")
    assert.include(await messages.nth(3).innerText(), "result 0.0:")
    // Jump to a step: it is made (the window had not made it) and scrolled into view.
    await page.locator('#jump input[name="step"]').fill("150")
    await page.locator("#jump").press("Enter")
    const target = page.locator("#step-150")
    await target.waitFor()
    await until(async () => (await target.boundingBox()) !== null && Math.abs((await target.boundingBox())!.y) < 900, "step 150 in view")
    assert.deepStrictEqual(pageErrors, [])
    await page.close()
  }, 180_000)

  it("a run of 1,000 steps: a windowed list, any step reached, the timeline in at most 200 bars", async () => {
    const page = await open(`/?${new URLSearchParams({ run: "long-1000" })}`)
    await page.locator('[data-step="0"] pre.observation').waitFor({ timeout: 60_000 })
    await page.locator("#finished").waitFor()
    const made = await page.locator("section.step").count()
    assert.isAtMost(made, 120, `${made} steps made at once`)
    assert.isAtLeast(made, 1)
    // Every step has its place (the scroll bar is the whole run's).
    assert.strictEqual(await page.locator("#steps .step-wrap").count(), 1000)
    await page.locator('#jump input[name="step"]').fill("999")
    await page.locator("#jump").press("Enter")
    await page.locator('[data-step="999"] pre.observation').waitFor()
    assert.include(await page.locator('[data-step="999"]').innerText(), "submit")
    assert.isAtMost(await page.locator("section.step").count(), 120)
    // Scrolling to the top brings step 0 back.
    await page.evaluate("window.scrollTo(0, 0)")
    await page.locator('[data-step="0"] pre.observation').waitFor()
    const timeline = await drawn(page, "chart-timeline")
    assert.isAtMost(timeline.labels.length, 200)
    assert.strictEqual(timeline.labels[0], "steps 0–4")
    const tokens = await drawn(page, "chart-step-tokens")
    assert.isAtMost(tokens.labels.length, 200)
    await page.screenshot({ path: path.join(screenshots, "viewer-run-1000.png"), fullPage: false })
    assert.deepStrictEqual(pageErrors, [])
    await page.close()
  }, 180_000)

  it("compares a fork with its parent from the fork point, with each step's cost and latency", async () => {
    const page = await open(`/?${new URLSearchParams({ compare: "parent-8", with: "fork-8" })}`)
    await page.locator("#compare-steps").waitFor({ timeout: 60_000 })
    // The steps the fork copied are one line, not five pairs of the same text.
    assert.include(await page.locator("#compare-steps .shared-steps").innerText(), "steps 0–4: copied from parent-8 by the fork")
    assert.deepStrictEqual(
      await page.locator("#compare-steps .compare-row[data-step]").evaluateAll((rows) => rows.map((r) => r.getAttribute("data-step"))),
      ["5", "6", "7"]
    )
    assert.strictEqual(await page.locator("#first-difference").getAttribute("data-step"), "6")
    // A step only the parent has says why.
    assert.include(await page.locator('.compare-row[data-step="7"] .side.absent').innerText(), "fork-8 finished at step 6")
    assert.strictEqual(await page.getByText("(no such step)").count(), 0)
    // Cost and latency per step, on both sides; and the totals from the fork point.
    for (const step of ["5", "6"]) {
      for (const side of [0, 1]) {
        const cell = page.locator(`.compare-row[data-step="${step}"] .side`).nth(side)
        assert.isAbove(Number(await cell.locator(".step-cost").getAttribute("data-cost")), 0, `step ${step} side ${side}`)
        assert.match(await cell.locator(".step-latency").innerText(), /\d+ ms|\d+\.\d s/)
      }
    }
    const totals = await page.locator("#compare-totals").innerText()
    assert.include(totals, "from the fork point")
    assert.include(totals, "3 steps")
    assert.include(totals, "2 steps")
    // A fork not run yet: said in words.
    await page.goto(new URL(`/?${new URLSearchParams({ compare: "parent-8", with: "fork-unrun" })}`, bound.baseUrl).href)
    await page.locator("#compare-steps").waitFor()
    assert.include(await page.locator("#fork-note").innerText(), "fork-unrun has not run past its fork point (step 5) yet")
    assert.strictEqual(await page.getByText("(no such step)").count(), 0)
    assert.deepStrictEqual(pageErrors, [])
    await page.close()
  }, 120_000)

  it("the statistics API pages the configurations and keeps each page's figures those of `polyloop stats --json`", async () => {
    const auth = { headers: { authorization: `Bearer ${bound.token}` } }
    const get = async (query: string) =>
      (await (await fetch(new URL(`/api/stats?${query}`, bound.baseUrl), auth)).json()) as {
        readonly groups: ReadonlyArray<{ readonly agent: string; readonly snapshotHash: string; readonly runs: number }>
        readonly groupCount: number
        readonly byAgent: { readonly rows: ReadonlyArray<{ readonly agent: string; readonly runs: number; readonly snapshots: number }>; readonly count: number }
      }
    const first = await get("")
    assert.strictEqual(first.groupCount, configurations)
    assert.strictEqual(first.groups.length, 50)
    assert.strictEqual(first.byAgent.count, agents + extra.agents)
    const all = JSON.parse(spawnSync(process.execPath, [launcher, "stats", "--json", "--db", db], { cwd: repoRoot, encoding: "utf8", maxBuffer: 1 << 26 }).stdout) as ReadonlyArray<{ readonly agent: string; readonly snapshotHash: string; readonly runs: number }>
    assert.strictEqual(all.length, configurations)
    const third = await get("page=3")
    assert.deepStrictEqual(third.groups, all.slice(100, 150))
    for (const row of first.byAgent.rows) {
      const mine = all.filter((g) => g.agent === row.agent)
      assert.deepStrictEqual([row.runs, row.snapshots], [mine.reduce((sum, g) => sum + g.runs, 0), mine.length], row.agent)
    }
  }, 120_000)

  it("`polyloop stats` prints agents first, each with its number of snapshots, in a bounded table; --by snapshot with --limit", () => {
    const stats = spawnSync(process.execPath, [launcher, "stats", "--db", db], { cwd: repoRoot, encoding: "utf8", env: { ...process.env, NO_COLOR: "1" } })
    assert.strictEqual(stats.status, 0, stats.stderr)
    const lines = stats.stdout.trimEnd().split("\n")
    assert.isAtMost(lines.length, 60, stats.stdout.slice(0, 2000))
    // 52 agents: the header, the first 50 (--limit's default), and a line counting the rest.
    assert.strictEqual(lines.length, 1 + 50 + 1)
    assert.match(lines[lines.length - 1]!, new RegExp(`^… ${agents + extra.agents - 50} more agents`))
    assert.match(lines[0]!, /^AGENT\s+SNAPSHOTS\s+RUNS/)
    assert.match(lines[1]!, new RegExp(`^${Many.agentName(0)}\\s+${Many.snapshotsOf(0)}\\s+${runs / agents}\\s`))
    assert.strictEqual(lines.filter((l) => /^agent-\d\d\s/.test(l)).length, agents)
    const bySnapshot = spawnSync(process.execPath, [launcher, "stats", "--db", db, "--by", "snapshot", "--limit", "30"], { cwd: repoRoot, encoding: "utf8", env: { ...process.env, NO_COLOR: "1" } })
    assert.strictEqual(bySnapshot.status, 0, bySnapshot.stderr)
    const snapshotLines = bySnapshot.stdout.trimEnd().split("\n")
    assert.strictEqual(snapshotLines.filter((l) => /^agent-\d\d\s+[0-9a-f]{12}\s/.test(l)).length, 30)
    assert.match(snapshotLines[snapshotLines.length - 1]!, new RegExp(`${configurations - 30} more configurations`))
  }, 120_000)
})
