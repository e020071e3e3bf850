/**
 * Resuming runs over MCP tools: a server whose tools changed between start and resume is refused
 * with `SnapshotMismatch` naming the changed tool (nothing written); a run killed by SIGKILL while
 * a "Never" tool was running is resumed without running that tool again.
 */
import { spawn } from "node:child_process"
import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import * as Path from "node:path"
import { fileURLToPath } from "node:url"
import { afterAll, assert, describe, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import { runId } from "@polyloop/core/Ids"
import * as RunLogStore from "@polyloop/core/RunLogStore"
import * as SyntheticObservations from "@polyloop/core/SyntheticObservations"
import * as McpClient from "@polyloop/mcp/McpClient"
import * as McpToolkit from "@polyloop/mcp/McpToolkit"
import * as ScriptedModel from "@polyloop/testing/ScriptedModel"
import { runAgent } from "./support/agent.js"
import { awaitRecord, records, repoRoot, testServer } from "./support/servers.js"

const here = Path.dirname(fileURLToPath(import.meta.url))
const dir = mkdtempSync(Path.join(tmpdir(), "polyloop-mcp-resume-"))
afterAll(() => rmSync(dir, { recursive: true, force: true }))

// `slow` takes 2 s: long enough to interrupt the run while it runs, short enough to run again on resume.
const script = [
  ScriptedModel.toolCall("slow", { key: "first", ms: 2_000 }),
  ScriptedModel.toolCall("echo", { text: "hi" }),
  "done"
]

/** Connects to the test server (variant given) and builds its registry, in the current scope. */
const toolsOf = (recordFile: string, variant?: string) =>
  Effect.flatMap(
    McpClient.connect({ transport: testServer({ recordFile, ...(variant === undefined ? {} : { variant }) }) }),
    (client) => McpToolkit.fromClient(client)
  )

/** Runs a node child to its exit; its stdout lines. */
const runChild = (args: ReadonlyArray<string>) =>
  Effect.async<{ readonly child: ReturnType<typeof spawn>; readonly lines: Array<string>; readonly exited: Promise<number | null> }>((resume) => {
    const child = spawn(process.execPath, ["--import", "tsx", Path.join(here, "support", "crashAgent.ts"), ...args], {
      cwd: repoRoot,
      stdio: ["ignore", "pipe", "inherit"]
    })
    const lines: Array<string> = []
    let buffer = ""
    child.stdout?.setEncoding("utf8")
    child.stdout?.on("data", (chunk: string) => {
      buffer += chunk
      const parts = buffer.split("\n")
      buffer = parts.pop() ?? ""
      lines.push(...parts)
    })
    const exited = new Promise<number | null>((resolve) => child.on("exit", (code) => resolve(code)))
    resume(Effect.succeed({ child, lines, exited }))
  })

const killPids = (file: string): void => {
  for (const line of records(file)) {
    if (!line.startsWith("pid ")) continue
    try {
      process.kill(Number(line.slice(4)), "SIGKILL")
    } catch {
      // already gone
    }
  }
}

describe.sequential("resuming runs over MCP tools", () => {
  it.scopedLive("a server whose tools changed between start and resume: SnapshotMismatch naming the tool; nothing written", () =>
    Effect.gen(function*() {
      const file = Path.join(dir, "changed.txt")
      const storeService = yield* Effect.provide(RunLogStore.RunLogStore, RunLogStore.layerMemory)
      const store = Layer.succeed(RunLogStore.RunLogStore, storeService)
      // Started, then interrupted while `slow` runs: the run is left unfinished.
      yield* Effect.scoped(
        Effect.gen(function*() {
          const tools = yield* toolsOf(file)
          const fiber = yield* Effect.fork(runAgent("changed", tools, script, store))
          yield* awaitRecord(file, /^started slow first$/)
          yield* Fiber.interrupt(fiber)
        })
      )
      const before = yield* storeService.readLog(runId("changed"))
      assert.isTrue(Option.isSome(before.started) && Option.isNone(before.finished))
      // The server now lists `echo` with another schema.
      const error = yield* Effect.flip(Effect.scoped(Effect.flatMap(toolsOf(file, "changed"), (tools) => runAgent("changed", tools, script, store))))
      assert.strictEqual(error._tag, "SnapshotMismatch")
      if (error._tag === "SnapshotMismatch") {
        assert.deepStrictEqual(error.tools, ["echo"])
        assert.isTrue(error.differences.every(([path]) => path.startsWith("tools[0].parameters")), JSON.stringify(error.differences))
        assert.include(error.message, "tools changed: echo")
      }
      assert.deepStrictEqual(yield* storeService.readLog(runId("changed")), before)
      // The unchanged server resumes it: `slow` is idempotent ("Always"), so the interrupted call runs again.
      const { result } = yield* Effect.scoped(Effect.flatMap(toolsOf(file), (tools) => runAgent("changed", tools, script, store)))
      assert.deepStrictEqual([result.stopReason._tag, result.steps, result.resumedCount], ["Completed", 3, 1])
      assert.deepStrictEqual(records(file).filter((l) => l.startsWith("started slow")), ["started slow first", "started slow first"])
      assert.include(records(file), "done slow first")
    }), { timeout: 300_000 })

  it.live("a run killed by SIGKILL mid-call resumes without running the \"Never\" tool again", () =>
    Effect.gen(function*() {
      const db = Path.join(dir, "crash.db")
      const file = Path.join(dir, "crash.txt")
      const first = yield* runChild([db, file])
      yield* awaitRecord(file, /^started record once$/)
      first.child.kill("SIGKILL")
      yield* Effect.promise(() => first.exited)
      killPids(file) // the orphaned server of the killed life
      const second = yield* runChild([db, file])
      const code = yield* Effect.promise(() => second.exited)
      killPids(file)
      assert.strictEqual(code, 0, second.lines.join("\n"))
      const line = second.lines.find((l) => l.startsWith("result "))
      assert.isDefined(line)
      const result = JSON.parse(line!.slice("result ".length)) as {
        stopReason: { _tag: string }
        steps: number
        effectiveSteps: number
        resumedCount: number
        observations: ReadonlyArray<string>
      }
      assert.strictEqual(result.stopReason._tag, "Completed")
      assert.deepStrictEqual([result.steps, result.effectiveSteps, result.resumedCount], [3, 1, 1])
      assert.deepStrictEqual(result.observations, [
        SyntheticObservations.defaults.interrupted.replace("{tool}", "record"),
        "resumed"
      ])
      assert.deepStrictEqual(records(file).filter((l) => l.startsWith("started record")), ["started record once"])
      assert.isFalse(records(file).includes("done record once"))
    }), { timeout: 300_000 })
})
