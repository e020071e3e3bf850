/**
 * The conversation page's fixes and the list's filters and exports (issue 45, items 8 and 9), in
 * headless Chromium (`support/chromium.ts`) on a real server (`Serve.serve`) over a SQLite store:
 *
 * - a conversation of three turns of two steps each under a per-turn budget of 4 steps: the
 *   budget bar counts the last turn against the limit (not 6 / 4 in red), the total said apart;
 * - a tool whose handler failed is shown as a failure, not as "Executed: Error…";
 * - a final answer is shown once (not repeated under "decision Finish");
 * - a long run id stays on one line in the runs list;
 * - the experiments page has the header's Statistics link and search box;
 * - the runs list filters by start date and model; each run has export links (JSONL,
 *   openai-chat, ATIF) whose files are what `polyloop export` writes.
 */
import { afterAll, assert, beforeAll, describe, it } from "@effect/vitest"
import * as Serve from "@polyloop/cli/Serve"
import * as Agent from "@polyloop/core/Agent"
import * as AgentDefinition from "@polyloop/core/AgentDefinition"
import * as EventSink from "@polyloop/core/EventSink"
import * as Ids from "@polyloop/core/Ids"
import * as ModelReply from "@polyloop/core/ModelReply"
import * as NativeToolCallParser from "@polyloop/core/NativeToolCallParser"
import * as Tool from "@polyloop/core/Tool"
import * as ToolRegistry from "@polyloop/core/ToolRegistry"
import * as ScriptedModel from "@polyloop/testing/ScriptedModel"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Schema from "effect/Schema"
import { spawnSync } from "node:child_process"
import * as fs from "node:fs"
import * as path from "node:path"
import { fileURLToPath } from "node:url"
import * as ViewerSession from "./support/viewer-session.js"

const repoRoot = fileURLToPath(new URL("..", import.meta.url))
const launcher = path.join(repoRoot, "packages/cli/bin/polyloop.js")

const lookup = Tool.make({
  name: "lookup_order",
  description: "Looks an order up.",
  parameters: Schema.Struct({ order: Schema.Number }),
  replayPolicy: "Always",
  handler: ({ order }) => (order === 23 ? Effect.fail(new Error(`order ${order} is not in the database`)) : Effect.succeed(`order ${order}: shipped`))
})
const tools = ToolRegistry.make(lookup)

/** A run id longer than the list's column (issue 45: ids wrapped mid-word). */
const longId = "experiment-2026-12-05-alpha-sample-0042-epoch-3"

describe.sequential("the conversation page, the list's filters and exports (issue 45)", () => {
  const session = ViewerSession.make("polyloop-viewer-conversation-")
  const { db, open, pageErrors, runtime } = session
  let bound: Serve.Bound

  beforeAll(async () => {
    await runtime.runPromise(Effect.gen(function*() {
      // Each turn: a lookup, then the answer (two steps); the budget is 4 steps per turn.
      const desk = yield* ScriptedModel.make((request) => {
        const last = request.messages.at(-1)!
        const order = Number(/\d+/.exec(request.messages.filter((m) => m._tag === "User").at(-1)!.text)?.[0] ?? "0")
        return last._tag === "User"
          ? ModelReply.make({ text: "", toolCalls: [{ id: "", name: "lookup_order", argumentsText: JSON.stringify({ order }) }] })
          : ModelReply.make({ text: `About order ${order}: see the lookup above.` })
      })
      const agent = AgentDefinition.make({ name: "desk", systemPrompt: "Answer about orders.", budget: { maxSteps: 4 } })
      for (const [i, text] of ["Where is order 17?", "And order 23?", "And order 31?"].entries()) {
        yield* Agent.send({ runId: Ids.runId("chat-run"), messageId: `msg-${i}`, text, agent, tools }).pipe(
          Effect.provide(Layer.mergeAll(desk.layer, NativeToolCallParser.layer(), Layer.orDie(ToolRegistry.layerExecutor(tools)), EventSink.layerNoop))
        )
      }
      const single = yield* ScriptedModel.make([ModelReply.make({ text: "" , toolCalls: [{ id: "", name: "lookup_order", argumentsText: JSON.stringify({ order: 5 }) }] }), ModelReply.make({ text: "Order 5 shipped." })])
      yield* Agent.run({ runId: Ids.runId(longId), agent: AgentDefinition.make({ name: "solo", systemPrompt: "Answer.", budget: { maxSteps: 4 } }), task: "Where is order 5?", tools }).pipe(
        Effect.provide(Layer.mergeAll(single.layer, NativeToolCallParser.layer(), Layer.orDie(ToolRegistry.layerExecutor(tools)), EventSink.layerNoop))
      )
    }))
    bound = await session.start({ width: 1280, height: 900 })
  }, 240_000)

  afterAll(() => session.stop())

  it("a conversation's budget bar counts the last turn against the per-turn limit, the total apart", async () => {
    const page = await open(`/?${new URLSearchParams({ run: "chat-run" })}`)
    const bar = page.locator('[data-budget="steps"]')
    await bar.waitFor({ timeout: 60_000 })
    assert.include(await bar.innerText(), "2 / 4")
    assert.include(await bar.innerText(), "turn 2")
    assert.strictEqual(await page.locator('[data-budget="steps"] .bar.full').count(), 0, "not over budget")
    assert.include(await page.locator("#budgets-total").innerText(), "all 3 turns: 6 steps")
    await page.close()
  }, 120_000)

  it("a tool that failed reads as a failure; a final answer is shown once", async () => {
    const page = await open(`/?${new URLSearchParams({ run: "chat-run" })}`)
    // Turn 1 (steps 2 and 3): the lookup of order 23 failed.
    const failed = page.locator('section.step[data-step="2"]')
    await failed.waitFor({ timeout: 60_000 })
    const badge = failed.locator("[data-status]")
    assert.strictEqual(await badge.innerText(), "tool failed")
    assert.strictEqual(await badge.getAttribute("data-status"), "Executed")
    assert.include(await failed.locator(".observation").innerText(), "order 23 is not in the database")
    // Step 3 answers: its text once, the decision saying it is the answer.
    const answer = page.locator('section.step[data-step="3"]')
    const text = "About order 23: see the lookup above."
    assert.strictEqual((await answer.innerText()).split(text).length - 1, 1, await answer.innerText())
    assert.include(await answer.locator(".decision-note").innerText(), "the reply above is the answer")
    await page.close()
  }, 120_000)

  it("a long run id stays on one line in the list; the experiments page keeps the header's Statistics link and search box", async () => {
    const page = await open("/")
    const link = page.locator(`[data-run="${longId}"] td.run a`)
    await link.waitFor({ timeout: 60_000 })
    const box = (await link.boundingBox())!
    // One line of its 13 px font is about 15 px; wrapped, it was 37.
    assert.isBelow(box.height, 26, `the id takes ${box.height} px: one line`)
    await page.goto(new URL("/experiments", bound.baseUrl).href)
    await page.locator("header nav a#nav-stats").waitFor()
    await page.locator('header form#search input[name="q"]').fill("order 23")
    await page.locator('header form#search input[name="q"]').press("Enter")
    await page.locator("#hits").waitFor({ timeout: 60_000 })
    assert.strictEqual(new URL(page.url()).searchParams.get("q"), "order 23")
    assert.deepStrictEqual(pageErrors, [])
    await page.close()
  }, 120_000)

  it("filters the runs by start date and model; each run's export links give what `polyloop export` writes", async () => {
    const page = await open("/")
    const rows = page.locator("#runs tbody tr")
    await rows.first().waitFor({ timeout: 60_000 })
    assert.strictEqual(await rows.count(), 2)
    const today = new Date().toISOString().slice(0, 10)
    await page.locator('input[name="from"]').fill("2001-01-01")
    await page.locator('input[name="to"]').fill("2001-01-02")
    await page.locator('input[name="to"]').dispatchEvent("change")
    // Waits for the page's re-query however loaded the machine is (a 5 s poll failed under CI
    // load), polling from here: the page's CSP forbids `waitForFunction`.
    const rowsAre = async (n: number) => {
      for (let tries = 0; tries < 1200 && (await rows.count()) !== n; tries++) await page.waitForTimeout(50)
    }
    await rowsAre(0)
    assert.strictEqual(await rows.count(), 0)
    assert.strictEqual(new URL(page.url()).searchParams.get("to"), "2001-01-02")
    await page.locator('input[name="from"]').fill(today)
    await page.locator('input[name="to"]').fill(today)
    await page.locator('input[name="to"]').dispatchEvent("change")
    await rowsAre(2)
    assert.strictEqual(await rows.count(), 2)
    // By model: the models the store names are the filter's choices; another selects nothing.
    const api = async (query: string) =>
      (await (await fetch(new URL(`/api/runs?${query}`, bound.baseUrl), { headers: { authorization: `Bearer ${bound.token}` } })).json()) as {
        readonly total: number
        readonly filters: { readonly models: ReadonlyArray<string> }
      }
    const models = (await api("")).filters.models
    assert.isAtLeast(models.length, 1)
    assert.strictEqual((await api(`model=${encodeURIComponent(models[0]!)}`)).total, 2)
    assert.strictEqual((await api("model=no-such-model")).total, 0)
    // The export links of a run: each downloads what the command writes.
    await page.goto(new URL(`/?${new URLSearchParams({ run: longId })}`, bound.baseUrl).href)
    for (const format of ["jsonl", "openai-chat", "atif"] as const) {
      const link = page.locator(`#exports a[data-format="${format}"]`)
      await link.waitFor({ timeout: 60_000 })
      const [download] = await Promise.all([page.waitForEvent("download"), link.click()])
      const file = await download.path()
      const expected = spawnSync(process.execPath, [launcher, "export", longId, "--format", format, "--db", db], { cwd: repoRoot, encoding: "utf8" })
      assert.strictEqual(expected.status, 0, expected.stderr)
      assert.strictEqual(fs.readFileSync(file, "utf8"), expected.stdout, format)
      assert.strictEqual(download.suggestedFilename(), `${longId}.${format === "jsonl" ? "jsonl" : "json"}`)
    }
    assert.deepStrictEqual(pageErrors, [])
    await page.close()
  }, 180_000)
})
