/**
 * What the model was sent, in the viewer (issue 30, design 0300): a run under masking, a summary
 * and a token budget, on a SQLite store of its own, opened in headless Chromium on the page of
 * the real `polyloop serve`. Each step says what its request held (`sent: steps 0–3 summarised ·
 * 4–5 observations masked · 6–7 verbatim`, the same words as `polyloop show`), a compaction is
 * shown at the step it was made for, with its summary as text, and each observation says from
 * which step on it was masked or no longer sent — while the page shows it in full, as the log
 * keeps it. And a conversation (issue 31): each turn's end and the next message where its turn
 * starts. Screenshot to `POLYLOOP_SCREENSHOTS_DIR` when set.
 */
import { afterAll, assert, beforeAll, describe, it } from "@effect/vitest"
import * as Agent from "@polyloop/core/Agent"
import * as AgentDefinition from "@polyloop/core/AgentDefinition"
import * as EventSink from "@polyloop/core/EventSink"
import * as HistoryPolicy from "@polyloop/core/HistoryPolicy"
import * as Ids from "@polyloop/core/Ids"
import * as ModelReply from "@polyloop/core/ModelReply"
import * as NativeToolCallParser from "@polyloop/core/NativeToolCallParser"
import { RunLogStore } from "@polyloop/core/RunLogStore"
import * as Tool from "@polyloop/core/Tool"
import * as ToolRegistry from "@polyloop/core/ToolRegistry"
import * as SqlRunLogStore from "@polyloop/sql/SqlRunLogStore"
import * as ScriptedModel from "@polyloop/testing/ScriptedModel"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Schema from "effect/Schema"
import { type ChildProcess, spawn } from "node:child_process"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { fileURLToPath } from "node:url"
import * as Chromium from "./support/chromium.js"

const repoRoot = fileURLToPath(new URL("..", import.meta.url))
const launcher = path.join(repoRoot, "packages/cli/bin/polyloop.js")
const screenshots = process.env["POLYLOOP_SCREENSHOTS_DIR"] ?? fs.mkdtempSync(path.join(os.tmpdir(), "polyloop-viewer-history-"))

const read = Tool.make({
  name: "read_file",
  description: "Reads a file.",
  parameters: Schema.Struct({ path: Schema.String }),
  replayPolicy: "Always",
  handler: ({ path: p }) => Effect.succeed(Array.from({ length: 80 }, (_, i) => `${p}:${i} lorem ipsum dolor sit amet`).join("\n"))
})
const tools = ToolRegistry.make(read)
const history = HistoryPolicy.compose(
  HistoryPolicy.maskObservations({ keepLast: 2, every: 2 }),
  HistoryPolicy.summarise({ triggerTokens: 1_500, keepLast: 2 }),
  HistoryPolicy.fitTokens({ window: 2_400, headroom: 200 })
)

describe.sequential("the viewer under a history policy, in a real browser", () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "polyloop-viewer-history-"))
  const db = path.join(dir, "runs.db")
  let serve: ChildProcess | undefined
  let printed = ""
  let token = ""
  let browser: Chromium.Browser | undefined

  beforeAll(async () => {
    Chromium.ensure()
    await Effect.runPromise(
      Effect.gen(function*() {
        const model = yield* ScriptedModel.make((request, call) =>
          request.tools.length === 0
            ? ModelReply.make({ text: `Read files 0 to ${call.step - 3}; nothing wrong so far.`, usage: { inputTokens: 400, outputTokens: 12 } })
            : call.step < 14
            ? ModelReply.make({ text: "", toolCalls: [{ id: "", name: "read_file", argumentsText: JSON.stringify({ path: `f${call.step}` }) }] })
            : ModelReply.make({ text: "Every file read." }))
        yield* Agent.run({
          runId: Ids.runId("history-run"),
          agent: AgentDefinition.make({ name: "reader", systemPrompt: "Read files.", budget: { maxSteps: 20 }, history }),
          task: "Read every file.",
          tools
        }).pipe(Effect.provide(Layer.mergeAll(model.layer, NativeToolCallParser.layer(), Layer.orDie(ToolRegistry.layerExecutor(tools)), EventSink.layerNoop)))
        // A conversation of two turns (issue 31).
        const desk = yield* ScriptedModel.make((request) => {
          const last = request.messages.at(-1)!
          return last._tag === "User"
            ? ModelReply.make({ text: "", toolCalls: [{ id: "", name: "read_file", argumentsText: JSON.stringify({ path: "orders.txt" }) }] })
            : ModelReply.make({ text: `Answered: ${request.messages.filter((m) => m._tag === "User").at(-1)!.text}` })
        })
        for (const [i, text] of ["Where is order 17?", "And order 23?"].entries()) {
          yield* Agent.send({ runId: Ids.runId("chat-run"), messageId: `msg-${i}`, text, agent: AgentDefinition.make({ name: "desk", systemPrompt: "Answer.", budget: { maxSteps: 4 } }), tools }).pipe(
            Effect.provide(Layer.mergeAll(desk.layer, NativeToolCallParser.layer(), Layer.orDie(ToolRegistry.layerExecutor(tools)), EventSink.layerNoop))
          )
        }
        const log = yield* Effect.flatMap(RunLogStore, (store) => store.readLog(Ids.runId("history-run")))
        if (!log.compactions.some((c) => c.summary !== undefined)) return yield* Effect.dieMessage("the seeded run made no summary")
      }).pipe(Effect.provide(SqlRunLogStore.layerSqlite({ filename: db })))
    )
    const child = spawn(process.execPath, [launcher, "serve", "--db", db, "--port", "0"], { cwd: repoRoot, stdio: ["ignore", "pipe", "pipe"], env: { ...process.env, NO_COLOR: "1" } })
    serve = child
    const found = await new Promise<readonly [string, string]>((resolve, reject) => {
      let stdout = ""
      child.stdout!.setEncoding("utf8").on("data", (chunk: string) => {
        stdout += chunk
        const match = /polyloop viewer on (http:\/\/\S+) [\s\S]*token for scripts and other browsers: ([0-9a-f]+) /.exec(stdout)
        if (match !== null) resolve([match[1]!, match[2]!])
      })
      child.on("close", (code) => reject(new Error(`serve exited (${code}):\n${stdout}`)))
    })
    printed = found[0]
    token = found[1]
    browser = await Chromium.launch({ width: 1280, height: 1400 })
    // The printed URL logs this browser in once (design 0370).
    await (await Chromium.login(browser.context, printed)).close()
  }, 240_000)

  afterAll(async () => {
    await browser?.close()
    if (serve !== undefined && serve.exitCode === null) serve.kill("SIGKILL")
    fs.rmSync(dir, { recursive: true, force: true })
  })

  it("each step says what its request held; compactions with their summaries; observations marked masked or no longer sent, shown in full", async () => {
    const page = await browser!.context.newPage()
    const errors: Array<string> = []
    page.on("pageerror", (error) => errors.push(error.message))
    const parsed = new URL(printed)
    await page.goto(new URL(`/?${new URLSearchParams({ run: "history-run" })}`, parsed.origin).href)
    await page.locator("section.step").first().waitFor()
    const transcript = (await (await fetch(new URL("/api/runs/history-run", parsed.origin), { headers: { authorization: `Bearer ${token}` } })).json()) as {
      readonly compactions: ReadonlyArray<{ readonly step: number; readonly toStep: number; readonly summary?: string; readonly reason: string }>
      readonly steps: ReadonlyArray<{ readonly step: number; readonly history: { readonly sent: { readonly replacedBefore: number; readonly maskedBefore: number }; readonly maskedFrom: number | null; readonly replacedFrom: number | null } }>
    }
    const summary = transcript.compactions.find((c) => c.summary !== undefined)!
    // The step the summary was made for shows it, as text.
    const at = page.locator(`#step-${summary.step}`)
    assert.include(await at.innerText(), "summarised")
    assert.include(await at.locator("pre.summary").innerText(), summary.summary!)
    // Every step's "sent" line is what the log says its request held.
    for (const step of transcript.steps) {
      const sent = await page.locator(`#step-${step.step} .sent`).innerText()
      const { maskedBefore, replacedBefore } = step.history.sent
      if (replacedBefore > 0) assert.match(sent, new RegExp(`^steps 0(–${replacedBefore - 1})? (summarised|dropped)`), `step ${step.step}: ${sent}`)
      if (maskedBefore > replacedBefore) assert.include(sent, "observations masked", `step ${step.step}`)
    }
    // Step 0's observation: masked from some step, later not sent at all — and shown in full here.
    const first = transcript.steps[0]!.history
    assert.isNotNull(first.replacedFrom)
    const badges = await page.locator("#step-0 .badge.masked").allInnerTexts()
    assert.include(badges, `not sent from step ${first.replacedFrom}`)
    if (first.maskedFrom !== null) assert.include(badges, `masked from step ${first.maskedFrom}`)
    // Folded on the page (design 0371), shown whole on asking.
    await page.locator("#step-0 button.unfold").first().click()
    assert.strictEqual((await page.locator("#step-0 pre.observation").innerText()).split("\n").length, 80)
    await at.scrollIntoViewIfNeeded()
    await page.screenshot({ path: path.join(screenshots, "viewer-history.png"), fullPage: false })
    assert.deepStrictEqual(errors, [])
    await page.close()
  }, 120_000)

  it("a conversation's turns: each turn's end, the next message before its first step, the conversation open", async () => {
    const page = await browser!.context.newPage()
    await page.goto(new URL(`/?${new URLSearchParams({ run: "chat-run" })}`, new URL(printed).origin).href)
    await page.locator("section.step").first().waitFor()
    assert.deepStrictEqual(await page.locator(".turn-end").allInnerTexts(), ["turn 0 ended: Completed(Answer) after 2 steps", "turn 1 ended: Completed(Answer) after 2 steps"])
    const message = page.locator(".turn-message")
    assert.strictEqual(await message.count(), 1)
    assert.include(await message.innerText(), "And order 23?")
    assert.include(await message.innerText(), "message msg-1")
    // The message stands before turn 1's first step (step 2).
    assert.strictEqual(await page.locator(".step-wrap:has(.turn-message) section.step").getAttribute("data-step"), "2")
    assert.include(await page.locator("#conversation").innerText(), "2 turn(s) answered")
    await page.close()
  }, 120_000)
})
