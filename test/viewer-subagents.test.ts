/**
 * The viewer shows sub-agent runs (issue 47, design 0412), in headless Chromium
 * (`support/chromium.ts`) on a real server (`Serve.serve`, with a price table) over a SQLite
 * store holding a planner → reader → expert tree (`support/subagent-tree.ts`, whose scripted
 * usage makes every figure below):
 *
 * - the planner's page: each `read` result has a "child run" block linking the child's page,
 *   with its stop reason, "2 steps, 240 tokens", its cost by its own model, and the note of its
 *   own sub-agent (the expert); the header says "3 child runs, 4 steps, 360 tokens"; the
 *   "Sub-agents" section nests the expert under its reader;
 * - following the child link: the reader's page names its parent and shows its grandchild;
 * - the runs list: a child run's row has a badge linking its parent; hiding sub-agent runs leaves
 *   the planner and the run merely named like a child.
 */
import { afterAll, assert, beforeAll, describe, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as ViewerSession from "./support/viewer-session.js"
import * as Tree from "./support/subagent-tree.js"

const ids = Tree.idsOf("planner-1")
/** A tree whose first child's id holds markup (the call id is the model's). */
const hostile = Tree.idsOf("hostile", `<img src=x onerror="window.__pwned=1">`)
/** Named like a child of the planner, but never called by it. */
const fake = `${ids.root}/1/fake`

/** `money` of viewer.js: what the page prints for an amount. */
const money = (amount: number) => `${amount < 0.01 ? amount.toFixed(6) : amount.toFixed(4)} USD`
/** What `tokens` cost at `price` per million. */
const cost = (input: number, output: number, price: { readonly input: number; readonly output: number }) => (input * price.input + output * price.output) / 1_000_000

const runHref = (runId: string) => `/?${new URLSearchParams({ run: runId })}`

describe.sequential("the viewer's sub-agent runs (design 0412)", () => {
  const session = ViewerSession.make("polyloop-viewer-subagents-")
  const { open, pageErrors, runtime } = session

  beforeAll(async () => {
    await runtime.runPromise(Effect.gen(function*() {
      yield* Tree.run(ids.root)
      yield* Tree.runPlain(fake)
      yield* Tree.run(hostile.root, `<img src=x onerror="window.__pwned=1">`)
    }))
    await session.start({ prices: Tree.prices, width: 1400, height: 900 })
  }, 300_000)

  afterAll(() => session.stop())

  it("a parent's page: each child run's block (link, stop reason, steps, tokens, cost, its own sub-agents), the header's totals, the tree", async () => {
    const page = await open(runHref(ids.root))
    const blocks = page.locator(".child-run")
    await blocks.first().waitFor({ timeout: 60_000 })
    assert.deepStrictEqual(await blocks.evaluateAll((nodes) => nodes.map((n) => n.getAttribute("data-child"))), [ids.readerA, ids.readerB])
    const a = page.locator(`.child-run[data-child="${ids.readerA}"]`)
    assert.strictEqual(await a.locator("a.child-link").getAttribute("href"), runHref(ids.readerA))
    assert.strictEqual(await a.locator("a.child-link").innerText(), ids.readerA)
    assert.strictEqual(await a.locator(".child-stop").innerText(), "Completed(Answer)")
    assert.include(await a.locator(".child-figures").innerText(), "2 steps, 240 tokens")
    assert.strictEqual(await a.locator(".child-children").innerText(), "its own sub-agents: 1 child run, 1 step, 60 tokens")
    // The cost comes with the tree, priced by the reader's own model (small), not the planner's (big).
    const readerCost = money(cost(200, 40, Tree.prices.models.small))
    for (let tries = 0; tries < 1200 && (await a.locator(".child-cost").innerText()) !== readerCost; tries++) await page.waitForTimeout(50)
    assert.strictEqual(await a.locator(".child-cost").innerText(), readerCost)
    const b = page.locator(`.child-run[data-child="${ids.readerB}"]`)
    assert.include(await b.locator(".child-figures").innerText(), "1 step, 60 tokens")
    assert.strictEqual(await b.locator(".child-children").count(), 0, "reader b has no sub-agents")
    // The header: the sub-agents' totals from RunFinished.counters.children, with their cost.
    await page.locator("#subagent-cost").waitFor({ timeout: 30_000 })
    assert.include(await page.locator("#subagent-totals").innerText(), "3 child runs, 4 steps, 360 tokens")
    const all = cost(200, 40, Tree.prices.models.small) + cost(40, 20, Tree.prices.models.small) + cost(50, 10, Tree.prices.models.medium)
    assert.strictEqual(await page.locator("#subagent-cost").innerText(), money(all))
    assert.strictEqual(await page.locator("#parent-run").count(), 0, "the planner has no parent")
    // The tree: the expert under reader a.
    const section = page.locator("#subagents")
    assert.include(await section.locator("h2").innerText(), "Sub-agents (3)")
    assert.deepStrictEqual(await section.locator("> ul > li").evaluateAll((lis) => lis.map((li) => li.getAttribute("data-node"))), [ids.readerA, ids.readerB])
    const nested = section.locator(`li[data-node="${ids.readerA}"] > ul > li`)
    assert.deepStrictEqual(await nested.evaluateAll((lis) => lis.map((li) => li.getAttribute("data-node"))), [ids.expert])
    assert.include(await nested.innerText(), "1 step, 60 tokens of medium")
    assert.include(await nested.innerText(), money(cost(50, 10, Tree.prices.models.medium)))
    assert.deepStrictEqual(pageErrors, [])
    await page.close()
  }, 120_000)

  it("following a child's link: its page names its parent and shows its grandchild", async () => {
    const page = await open(runHref(ids.root))
    const link = page.locator(`.child-run[data-child="${ids.readerA}"] a.child-link`)
    await link.waitFor({ timeout: 60_000 })
    await link.click()
    await page.locator("#parent-run").waitFor({ timeout: 60_000 })
    assert.strictEqual(new URL(page.url()).searchParams.get("run"), ids.readerA)
    assert.strictEqual(await page.locator("#run-id").innerText(), ids.readerA)
    assert.strictEqual(await page.locator("#parent-run a").getAttribute("href"), runHref(ids.root))
    assert.include(await page.locator("#subagent-totals").innerText(), "1 child run, 1 step, 60 tokens")
    const block = page.locator(`.child-run[data-child="${ids.expert}"]`)
    assert.include(await block.locator(".child-figures").innerText(), "1 step, 60 tokens")
    assert.deepStrictEqual(await page.locator("#subagents > ul > li").evaluateAll((lis) => lis.map((li) => li.getAttribute("data-node"))), [ids.expert])
    // And back up to the planner by the parent link.
    await page.locator("#parent-run a").click()
    await page.locator("#subagents").waitFor({ timeout: 60_000 })
    assert.strictEqual(await page.locator("#run-id").innerText(), ids.root)
    assert.deepStrictEqual(pageErrors, [])
    await page.close()
  }, 120_000)

  it("the runs list: a child run's badge links its parent; hiding sub-agent runs keeps the top-level runs", async () => {
    const page = await open("/")
    await page.locator("#runs tbody tr").first().waitFor({ timeout: 60_000 })
    const badge = page.locator(`#runs tr[data-run="${ids.readerA}"] .child-of`)
    assert.strictEqual(await badge.getAttribute("href"), runHref(ids.root))
    assert.strictEqual(await page.locator(`#runs tr[data-run="${ids.expert}"] .child-of`).getAttribute("data-parent"), ids.readerA)
    assert.strictEqual(await page.locator(`#runs tr[data-run="${fake}"] .child-of`).count(), 0, "named like a child, not one")
    assert.strictEqual(await page.locator(`#runs tr[data-run="${ids.root}"] .child-of`).count(), 0)
    assert.strictEqual(await page.locator("#count").innerText(), "9 runs")
    await page.locator('select[name="children"]').selectOption("hide")
    for (let tries = 0; tries < 1200 && (await page.locator("#count").innerText()) !== "3 runs"; tries++) await page.waitForTimeout(50)
    assert.deepStrictEqual(new Set(await page.locator("#runs tbody tr").evaluateAll((trs) => trs.map((tr) => tr.getAttribute("data-run")))), new Set([ids.root, fake, hostile.root]))
    assert.strictEqual(new URL(page.url()).searchParams.get("children"), "hide")
    await badge.waitFor({ state: "detached" })
    // The badge leads to the parent's page.
    await page.locator('select[name="children"]').selectOption("")
    await page.locator(`#runs tr[data-run="${ids.readerB}"] .child-of`).click()
    await page.locator("#subagents").waitFor({ timeout: 60_000 })
    assert.strictEqual(await page.locator("#run-id").innerText(), ids.root)
    assert.deepStrictEqual(pageErrors, [])
    await page.close()
  }, 120_000)

  it("a child run id holding markup is shown as text on the parent's page, the child's page and the list", async () => {
    for (const [pathname, ready] of [[runHref(hostile.root), "#subagents"], [runHref(hostile.readerA), "#parent-run"], ["/", "#runs .child-of"]] as const) {
      const page = await open(pathname)
      await page.locator(ready).first().waitFor({ timeout: 60_000 })
      assert.strictEqual(await page.locator("main img").count(), 0, pathname)
      assert.isUndefined(await page.evaluate("window.__pwned"), pathname)
      assert.include(await page.locator("main").innerText(), hostile.readerA, pathname)
      await page.close()
    }
    assert.deepStrictEqual(pageErrors, [])
  }, 120_000)
})
