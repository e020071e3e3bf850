/**
 * Design 0140 at the command line: `polyloop` prints what a provider said about a failure (code,
 * type, param, retry hint, request id), `polyloop show` shows a reply's reasoning, refusal,
 * finish reason (raw word kept) and usage details; and a log written before 0140
 * (`packages/ai/test/fixtures/logs/pre-0140.db`, raw finish reasons) still shows, and its
 * unfinished run resumes to its end under today's code.
 */
import { afterAll, assert, describe, it } from "@effect/vitest"
import * as CliError from "@polyloop/cli/CliError"
import * as Agent from "@polyloop/core/Agent"
import * as AgentDefinition from "@polyloop/core/AgentDefinition"
import { ModelError } from "@polyloop/core/Errors"
import * as EventSink from "@polyloop/core/EventSink"
import { runId } from "@polyloop/core/Ids"
import * as ModelReply from "@polyloop/core/ModelReply"
import * as NativeToolCallParser from "@polyloop/core/NativeToolCallParser"
import * as RunLogStore from "@polyloop/core/RunLogStore"
import * as Tool from "@polyloop/core/Tool"
import * as ToolRegistry from "@polyloop/core/ToolRegistry"
import * as SqlRunLogStore from "@polyloop/sql/SqlRunLogStore"
import * as ScriptedModel from "@polyloop/testing/ScriptedModel"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Schema from "effect/Schema"
import { execFile } from "node:child_process"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { fileURLToPath } from "node:url"

const launcher = fileURLToPath(new URL("../bin/polyloop.js", import.meta.url))
const oldLog = fileURLToPath(new URL("../../ai/test/fixtures/logs/pre-0140.db", import.meta.url))
const dir = fs.mkdtempSync(path.join(os.tmpdir(), "polyloop-0140-"))
afterAll(() => fs.rmSync(dir, { recursive: true, force: true }))

/** Runs `polyloop <args>` as a subprocess (asynchronously: the test worker keeps answering vitest). */
const polyloop = (args: ReadonlyArray<string>): Promise<{ status: number; stdout: string; stderr: string }> => {
  const env: NodeJS.ProcessEnv = { ...process.env }
  for (const name of ["FORCE_COLOR", "POLYLOOP_API_KEY", "POLYLOOP_BASE_URL", "POLYLOOP_MODEL"]) delete env[name]
  return new Promise((resolve) => {
    execFile(process.execPath, [launcher, ...args], { encoding: "utf8", env }, (error, stdout, stderr) => {
      resolve({ status: error === null ? 0 : typeof error.code === "number" ? error.code : 1, stdout, stderr })
    })
  })
}

/** A copy of the pre-0140 log (tests never write into the fixture). */
const copyOfOldLog = (name: string): string => {
  const file = path.join(dir, name)
  fs.copyFileSync(oldLog, file)
  return file
}

// The configuration the fixture's runs were started with (make-pre-0140-log.ts).
const readFile = Tool.make({
  name: "read_file",
  description: "Reads a text file",
  parameters: Schema.Struct({ path: Schema.String }),
  handler: ({ path }) => Effect.succeed(`contents of ${path}`)
})
const registry = ToolRegistry.make(readFile)
const agent = AgentDefinition.make({
  name: "reader",
  systemPrompt: "Answer from the files.",
  budget: { maxSteps: 6 },
  modelRetry: { maxAttempts: 1, baseDelay: Duration.millis(1), maxDelay: Duration.millis(1) }
})

const services = (file: string, script: ScriptedModel.Script) =>
  Layer.mergeAll(
    ScriptedModel.layer(script),
    NativeToolCallParser.layer(),
    ToolRegistry.layerExecutor(registry),
    EventSink.layerNoop,
    SqlRunLogStore.layerSqlite({ filename: file })
  )

describe.sequential("design 0140 at the command line", () => {
  it("a ModelError is one line naming the provider's code, type, param, retry hint and request id", () => {
    const error = new ModelError({
      retryable: false,
      status: 429,
      message: "OpenAiCompatible: https://api.openai.com/v1/chat/completions answered 429 Too Many Requests (insufficient_quota)",
      code: "insufficient_quota",
      type: "insufficient_quota",
      retryAfter: Duration.seconds(20),
      requestId: "req_123"
    })
    assert.strictEqual(
      CliError.describe(error),
      "ModelError: OpenAiCompatible: https://api.openai.com/v1/chat/completions answered 429 Too Many Requests (insufficient_quota) [code insufficient_quota · type insufficient_quota · retry after 20s · request req_123]"
    )
    assert.strictEqual(CliError.describe(new ModelError({ retryable: true, message: "m" })), "ModelError: m")
  })

  it("show reads a pre-0140 log: raw finish reasons are normalised, the raw word shown beside", async () => {
    const file = copyOfOldLog("show.db")
    const finished = await polyloop(["show", "old-finished", "--db", file])
    assert.strictEqual(finished.status, 0, finished.stderr)
    assert.match(finished.stdout, /step 0 .*finish tool-calls \(tool_calls\)/)
    assert.match(finished.stdout, /step 1 .*finish stop/)
    const interrupted = await polyloop(["show", "old-interrupted", "--db", file])
    assert.strictEqual(interrupted.status, 0, interrupted.stderr)
    assert.match(interrupted.stdout, /interrupted: the reply is logged but the step did not complete/)
  })

  it.effect("an unfinished pre-0140 run resumes under today's code (its snapshot has no truncated text) and finishes", () =>
    Effect.gen(function*() {
      const file = copyOfOldLog("resume.db")
      const result = yield* Agent.run({ runId: runId("old-interrupted"), agent, task: "What is in a.txt and b.txt?", tools: registry }).pipe(
        Effect.provide(services(file, (_request, call) => ModelReply.make({ text: `done at step ${call.step}`, finishReason: "stop" })))
      )
      assert.strictEqual(result.resumedCount, 1)
      assert.deepStrictEqual(result.stopReason, { _tag: "Completed", by: "Answer", answer: "done at step 2" })
      const log = yield* Effect.flatMap(RunLogStore.RunLogStore, (store) => store.readLog(runId("old-interrupted"))).pipe(
        Effect.provide(SqlRunLogStore.layerSqlite({ filename: file }))
      )
      assert.deepStrictEqual(log.replies.map((r) => [r.reply.finishReason, r.reply.rawFinishReason]), [
        ["tool-calls", "tool_calls"],
        ["tool-calls", "tool_calls"],
        ["stop", undefined]
      ])
      assert.isTrue(Option.isSome(log.finished))
    }))

  it.effect("show prints a reply's reasoning, refusal, finish reason and usage details", () =>
    Effect.gen(function*() {
      const file = path.join(dir, "new.db")
      yield* Agent.run({ runId: runId("new-run"), agent, task: "Read nothing.", tools: registry }).pipe(
        Effect.provide(services(file, [
          ModelReply.make({
            text: "I can't help with that.",
            refusal: "I can't help with that.",
            reasoning: "The request asks for something I must refuse.",
            usage: { inputTokens: 1200, outputTokens: 80, cachedInputTokens: 1024, reasoningTokens: 64 },
            finishReason: "end_turn"
          })
        ]))
      )
      const shown = yield* Effect.promise(() => polyloop(["show", "new-run", "--db", file]))
      assert.strictEqual(shown.status, 0, shown.stderr)
      assert.match(shown.stdout, /step 0 .*1200\+80 tokens, 1024 cached, 64 reasoning · finish stop \(end_turn\)/)
      assert.match(shown.stdout, /reasoning +The request asks for something I must refuse\./)
      assert.match(shown.stdout, /refusal +I can't help with that\./)
    }))
})
