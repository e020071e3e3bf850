/**
 * The runs list filters by tag and score (issue 45 item 9, design 0395), in headless Chromium
 * (`support/chromium.ts`) on a real server (`Serve.serve`) over a SQLite store holding the
 * example experiment (`examples/experiment.ts`: 20 samples × 2 configurations × 3 epochs, scorers
 * `numeric` and `short`) and one run of no experiment:
 *
 * - a run's tags are its experiment and its experiment/configuration; the tag filter lists them
 *   and keeps only that configuration's runs, the URL following;
 * - a scorer and score bounds keep the runs whose stored score is within them (the expected runs
 *   read from the experiment's own records), each shown with its score; the filters survive a
 *   reload; clearing the scorer drops its bounds;
 * - the API refuses bounds without a scorer (400) and tags the run of no experiment with nothing.
 */
import { afterAll, assert, beforeAll, describe, it } from "@effect/vitest"
import * as Serve from "@polyloop/cli/Serve"
import * as Agent from "@polyloop/core/Agent"
import * as AgentDefinition from "@polyloop/core/AgentDefinition"
import * as EventSink from "@polyloop/core/EventSink"
import * as Ids from "@polyloop/core/Ids"
import * as ModelReply from "@polyloop/core/ModelReply"
import * as NativeToolCallParser from "@polyloop/core/NativeToolCallParser"
import * as RunLogStore from "@polyloop/core/RunLogStore"
import * as ToolRegistry from "@polyloop/core/ToolRegistry"
import * as Experiment from "@polyloop/eval/Experiment"
import * as ExperimentStore from "@polyloop/eval/ExperimentStore"
import { experiment } from "@polyloop/examples/experiment"
import * as ScriptedModel from "@polyloop/testing/ScriptedModel"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import type { Page } from "playwright-core"
import * as ViewerSession from "./support/viewer-session.js"

interface RunsDoc {
  readonly total: number
  readonly runs: ReadonlyArray<{ readonly runId: string; readonly tags: ReadonlyArray<string>; readonly score?: number | null }>
  readonly filters: { readonly tags: ReadonlyArray<string>; readonly scorers: ReadonlyArray<string> }
}

describe.sequential("the runs list's tag and score filters (issue 45 item 9, design 0395)", () => {
  const session = ViewerSession.make("polyloop-viewer-tags-")
  const { open, pageErrors, runtime } = session
  let bound: Serve.Bound
  /** The experiment's own records: each run's `numeric` score, by run id. */
  const numeric = new Map<string, number>()
  const api = async (query: string) => {
    const response = await fetch(new URL(`/api/runs?${query}`, bound.baseUrl), { headers: { authorization: `Bearer ${bound.token}` } })
    return { status: response.status, body: (await response.json()) as RunsDoc & { readonly error?: { readonly _tag: string; readonly message: string } } }
  }
  /** Waits until the page says `n` runs. */
  const counted = async (page: Page, n: number) => {
    const text = `${n} run${n === 1 ? "" : "s"}`
    for (let tries = 0; tries < 1200 && (await page.locator("#count").innerText().catch(() => "")) !== text; tries++) await page.waitForTimeout(50)
    assert.strictEqual(await page.locator("#count").innerText(), text)
  }

  beforeAll(async () => {
    await runtime.runPromise(Effect.gen(function*() {
      yield* Experiment.run(experiment).pipe(Effect.provide(ExperimentStore.layer))
      const store = yield* RunLogStore.RunLogStore
      const records = ExperimentStore.fromBlobs(store.blobs!)
      const index = yield* records.index(experiment.name)
      for (const [key, hash] of index.scores) {
        if (key.startsWith("numeric|")) numeric.set(`${experiment.name}/${key.slice("numeric|".length)}`, (yield* records.score(hash)).score.value)
      }
      // A run of no experiment.
      const model = yield* ScriptedModel.make([ModelReply.make({ text: "Nothing to do." })])
      yield* Agent.run({ runId: Ids.runId("plain-run"), agent: AgentDefinition.make({ name: "solo", systemPrompt: "Answer.", budget: { maxSteps: 2 } }), task: "Say something.", tools: ToolRegistry.empty }).pipe(
        Effect.provide(Layer.mergeAll(model.layer, NativeToolCallParser.layer(), Layer.orDie(ToolRegistry.layerExecutor(ToolRegistry.empty)), EventSink.layerNoop))
      )
    }))
    bound = await session.start({ width: 1400, height: 900 })
  }, 300_000)

  afterAll(() => session.stop())

  it("filters by tag: an experiment's configuration, the URL following", async () => {
    assert.strictEqual(numeric.size, 120, "the experiment scored its 120 runs")
    const page = await open("/")
    await page.locator('select[name="tag"]').waitFor({ timeout: 60_000 })
    const options = await page.locator('select[name="tag"] option').evaluateAll((os) => os.map((o) => o.getAttribute("value")))
    assert.deepStrictEqual(options, ["", "multiplication", "multiplication/guess", "multiplication/tool"])
    await counted(page, 121)
    await page.locator('select[name="tag"]').selectOption("multiplication/guess")
    const guess = [...numeric.keys()].filter((id) => id.startsWith("multiplication/guess/")).length
    await counted(page, guess)
    assert.strictEqual(new URL(page.url()).searchParams.get("tag"), "multiplication/guess")
    const rows = page.locator("#runs tbody tr")
    for (const id of await rows.evaluateAll((trs) => trs.map((tr) => tr.getAttribute("data-run")))) assert.match(id ?? "", /^multiplication\/guess\//)
    assert.deepStrictEqual(await rows.first().locator("td.tags [data-tag]").allInnerTexts(), ["multiplication", "multiplication/guess"])
    await page.locator('select[name="tag"]').selectOption("multiplication")
    await counted(page, 120)
    assert.deepStrictEqual(pageErrors, [])
    await page.close()
  }, 120_000)

  it("filters by a scorer's score between bounds; the filters survive a reload; clearing the scorer drops its bounds", async () => {
    const page = await open(`/?${new URLSearchParams({ tag: "multiplication/guess" })}`)
    await page.locator('select[name="scorer"]').waitFor({ timeout: 60_000 })
    assert.isTrue(await page.locator('input[name="scoreMin"]').isDisabled(), "no bound without a scorer")
    await page.locator('select[name="scorer"]').selectOption("numeric")
    const guessScores = [...numeric.entries()].filter(([id]) => id.startsWith("multiplication/guess/"))
    // Every guess run is scored: the count stays; the score column tells the filter is on.
    await page.locator("#runs thead th", { hasText: "Score (numeric)" }).waitFor({ timeout: 30_000 })
    await counted(page, guessScores.length)
    // The bounds: scores of exactly 1 (the guess was right).
    const right = guessScores.filter(([, score]) => score >= 1 && score <= 1)
    assert.isAbove(right.length, 0)
    assert.isBelow(right.length, guessScores.length, "some guesses were wrong: the bound selects")
    assert.isFalse(await page.locator('input[name="scoreMin"]').isDisabled(), "a scorer chosen: its bounds can be set")
    await page.locator('input[name="scoreMin"]').fill("1")
    await page.locator('input[name="scoreMin"]').dispatchEvent("change")
    await counted(page, right.length)
    const url = new URL(page.url())
    assert.deepStrictEqual([url.searchParams.get("tag"), url.searchParams.get("scorer"), url.searchParams.get("scoreMin")], ["multiplication/guess", "numeric", "1"])
    for (const score of await page.locator("#runs tbody td.score").evaluateAll((tds) => tds.map((td) => td.getAttribute("data-score")))) {
      assert.strictEqual(Number(score), 1)
    }
    // The wrong guesses: at most 0.5.
    await page.locator('input[name="scoreMin"]').fill("")
    await page.locator('input[name="scoreMin"]').dispatchEvent("change")
    await counted(page, guessScores.length)
    await page.locator('input[name="scoreMax"]').fill("0.5")
    await page.locator('input[name="scoreMax"]').dispatchEvent("change")
    const wrong = guessScores.filter(([, score]) => score <= 0.5)
    await counted(page, wrong.length)
    // A reload keeps them.
    await page.reload()
    await counted(page, wrong.length)
    assert.strictEqual(await page.locator('select[name="scorer"]').inputValue(), "numeric")
    assert.strictEqual(await page.locator('input[name="scoreMax"]').inputValue(), "0.5")
    // No scorer: no bounds either.
    await page.locator('select[name="scorer"]').selectOption("")
    await counted(page, guessScores.length)
    await page.locator("#runs thead th", { hasText: "Score (numeric)" }).waitFor({ state: "detached", timeout: 30_000 })
    const after = new URL(page.url()).searchParams
    assert.deepStrictEqual([after.get("scorer"), after.get("scoreMax"), after.get("tag")], [null, null, "multiplication/guess"])
    assert.deepStrictEqual(pageErrors, [])
    await page.close()
  }, 120_000)

  it("the API: tags and scores on each run, the filters' values, bounds without a scorer refused", async () => {
    const all = await api("pageSize=200")
    assert.strictEqual(all.status, 200)
    assert.deepStrictEqual(all.body.filters.tags, ["multiplication", "multiplication/guess", "multiplication/tool"])
    assert.deepStrictEqual(all.body.filters.scorers, ["numeric", "short"])
    assert.deepStrictEqual(all.body.runs.find((r) => r.runId === "plain-run")?.tags, [])
    assert.isUndefined(all.body.runs[0]?.score, "no scorer asked: no score")
    const scored = await api("scorer=numeric&pageSize=200")
    assert.strictEqual(scored.body.total, numeric.size, "the run of no experiment has no score")
    for (const run of scored.body.runs) assert.strictEqual(run.score, numeric.get(run.runId), run.runId)
    const refused = await api("scoreMin=0.5")
    assert.strictEqual(refused.status, 400)
    assert.strictEqual(refused.body.error?._tag, "InvalidQuery")
    assert.include(refused.body.error?.message ?? "", "scorer")
    assert.strictEqual((await api("scoreMin=abc&scorer=numeric")).status, 400)
    assert.strictEqual((await api("tag=nope")).body.total, 0)
    assert.strictEqual((await api("scorer=nope")).body.total, 0)
  }, 60_000)
})
