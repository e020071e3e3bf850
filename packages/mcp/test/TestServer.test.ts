/**
 * The cases the filesystem server cannot show, against a server written with the SDK's server
 * side, over stdio: a tool list over several pages, `isError`, a JSON-RPC error, a malformed
 * result, every content kind, a server killed mid-call, an interrupted call (the server receives
 * the cancellation), a tool timeout, schemas ajv cannot compile, a server that cannot start, the
 * connection closing with its scope; the `McpClient` layer with a name prefix; `completesRun`.
 */
import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import * as Path from "node:path"
import { afterAll, assert, describe, it } from "@effect/vitest"
import * as Cause from "effect/Cause"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Exit from "effect/Exit"
import * as Fiber from "effect/Fiber"
import * as Option from "effect/Option"
import * as Schedule from "effect/Schedule"
import * as Scope from "effect/Scope"
import * as RunLogStore from "@polyloop/core/RunLogStore"
import * as McpClient from "@polyloop/mcp/McpClient"
import * as McpToolkit from "@polyloop/mcp/McpToolkit"
import * as ScriptedModel from "@polyloop/testing/ScriptedModel"
import { runAgent, toolTexts } from "./support/agent.js"
import { testTools } from "./support/testServer.js"
import packageJson from "../package.json" with { type: "json" }
import { awaitRecord, records, serverPid, testServer } from "./support/servers.js"

const dir = mkdtempSync(Path.join(tmpdir(), "polyloop-mcp-test-"))
afterAll(() => rmSync(dir, { recursive: true, force: true }))
let files = 0
const recordFile = () => Path.join(dir, `records-${files++}.txt`)

const png = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAQAAAC1HAwCAAAAC0lEQVR42mNkYAAAAAYAAjCB0C8AAAAASUVORK5CYII="

/** A connection to a fresh test server, its registry's executor, and the server's record file. */
const setup = (options: McpToolkit.Options = {}) =>
  Effect.gen(function*() {
    const file = recordFile()
    const client = yield* McpClient.connect({ transport: testServer({ recordFile: file }) })
    const registry = yield* McpToolkit.fromClient(client, options)
    const executor = yield* registry.executor()
    return { client, registry, executor, file }
  })

const call = (name: string, args: unknown = {}) => ({ _tag: "ToolCall" as const, id: `id-${name}`, name, arguments: args })

const isAlive = (pid: number): boolean => {
  try {
    process.kill(pid, 0)
    return true
  } catch {
    return false
  }
}

describe.sequential("a server written with the SDK, over stdio", { timeout: 180_000 }, () => {
  it.scopedLive("the client introduces itself as polyloop at @polyloop/mcp's own version, or as clientInfo says", () =>
    Effect.gen(function*() {
      const file = recordFile()
      yield* McpClient.connect({ transport: testServer({ recordFile: file }) })
      assert.strictEqual(yield* awaitRecord(file, /^client /), `client polyloop ${packageJson.version}`)
      const other = recordFile()
      yield* McpClient.connect({ transport: testServer({ recordFile: other }), clientInfo: { name: "my-app", version: "2.3.4" } })
      assert.strictEqual(yield* awaitRecord(other, /^client /), "client my-app 2.3.4")
    }))

  it.scopedLive("lists every page, in order; a tool with only a title is described by it; policies from annotations", () =>
    Effect.gen(function*() {
      const { registry } = yield* setup()
      assert.deepStrictEqual(registry.names, testTools(undefined).map((tool) => tool.name))
      assert.strictEqual(registry.modelView().find((v) => v.name === "titled")?.description, "Only a title")
      const policy = (name: string) => Option.getOrThrow(registry.get(name)).replayPolicy
      assert.deepStrictEqual(["echo", "slow", "record", "fail"].map(policy), ["Always", "Always", "Never", "Never"])
    }))

  it.scopedLive("the McpClient layer and registry(): a name prefix for the model, the server's own name on the wire", () =>
    Effect.gen(function*() {
      const file = recordFile()
      // The layer lives as long as the test's scope (as an application's would).
      const context = yield* Layer.build(McpClient.layer({ transport: testServer({ recordFile: file }) }))
      const registry = yield* Effect.provide(McpToolkit.registry({ namePrefix: "t_", tools: { record: { replayPolicy: "Always" } } }), context)
      assert.deepStrictEqual(registry.names, testTools(undefined).map((tool) => `t_${tool.name}`))
      assert.strictEqual(Option.getOrThrow(registry.get("t_record")).replayPolicy, "Always")
      const executor = yield* registry.executor()
      const outcome = yield* executor.execute(call("t_record", { key: "p", ms: 0 }))
      assert.deepStrictEqual([outcome.status, outcome.observation], ["Executed", "record p done"])
      assert.include(records(file), "started record p")
      const unprefixed = yield* executor.execute(call("record", { key: "q" }))
      assert.strictEqual(unprefixed.status, "NotExecuted")
    }))

  it.scopedLive("completesRun per tool: a completing tool whose result is isError does not complete the run; one that returns does", () =>
    Effect.gen(function*() {
      const { registry } = yield* setup({ tools: { fail: { completesRun: true }, echo: { completesRun: true } } })
      const { last, result } = yield* runAgent("completes", registry, [
        ScriptedModel.toolCall("fail", {}),
        ScriptedModel.toolCall("echo", { text: "submitted" })
      ], RunLogStore.layerMemory)
      assert.deepStrictEqual(result.stopReason._tag === "Completed" ? result.stopReason.by : result.stopReason._tag, "Tool")
      assert.deepStrictEqual([result.steps, result.effectiveSteps], [2, 2])
      assert.deepStrictEqual(toolTexts(last), ["McpToolError: the disk is full\ntry a smaller file"])
    }))

  it.scopedLive("isError is an ordinary failure: Executed with the text, the handler failed", () =>
    Effect.gen(function*() {
      const { executor } = yield* setup()
      const report = yield* executor.executeReport(call("fail"))
      assert.strictEqual(report.outcome.status, "Executed")
      assert.strictEqual(report.outcome.observation, "McpToolError: the disk is full\ntry a smaller file")
      assert.isTrue(report.handlerFailed)
    }))

  it.scopedLive("a JSON-RPC error and a malformed result are EnvError; the connection still serves", () =>
    Effect.gen(function*() {
      const { executor } = yield* setup()
      const protocol = yield* executor.execute(call("protocol_error"))
      assert.strictEqual(protocol.status, "EnvError")
      assert.include(protocol.observation, "the handler's database is gone")
      assert.include(protocol.observation, "tools/call \"protocol_error\"")
      const malformed = yield* executor.execute(call("malformed"))
      assert.strictEqual(malformed.status, "EnvError")
      const echo = yield* executor.execute(call("echo", { text: "still here" }))
      assert.deepStrictEqual([echo.status, echo.observation], ["Executed", "still here"])
    }))

  it.scopedLive("every content kind is described, none dropped; structured content alone shows as JSON", () =>
    Effect.gen(function*() {
      const { executor } = yield* setup()
      const media = yield* executor.execute(call("media"))
      assert.strictEqual(media.status, "Executed")
      assert.strictEqual(
        media.observation,
        [
          "here:",
          `[image: image/png, ${Buffer.from(png, "base64").length} bytes]`,
          "[audio: audio/wav, 3 bytes]",
          "[resource link: report.csv <file:///data/report.csv> (text/csv), the report]",
          "[resource file:///notes.txt (text/plain)]",
          "note body",
          "[resource file:///blob.bin: application/octet-stream, 4 bytes]"
        ].join("\n")
      )
      const structured = yield* executor.execute(call("structured"))
      assert.strictEqual(structured.observation, "{\"total\":3}")
    }))

  it.scopedLive("a server killed mid-call is EnvError (with what it wrote on stderr), and so is every later call", () =>
    Effect.gen(function*() {
      const { executor, file } = yield* setup()
      const pid = yield* serverPid(file)
      const fiber = yield* Effect.fork(executor.execute(call("slow", { key: "k" })))
      yield* awaitRecord(file, /^started slow k$/)
      process.kill(pid, "SIGKILL")
      const outcome = yield* Fiber.join(fiber)
      assert.strictEqual(outcome.status, "EnvError")
      assert.include(outcome.observation, "Connection closed")
      assert.include(outcome.observation, "(server stderr: test server ready)")
      const later = yield* executor.execute(call("echo", { text: "x" }))
      assert.strictEqual(later.status, "EnvError")
    }))

  it.scopedLive("an interrupted call passes the interruption through, and the server receives the cancellation", () =>
    Effect.gen(function*() {
      const { executor, file } = yield* setup()
      const fiber = yield* Effect.fork(executor.execute(call("slow", { key: "i" })))
      yield* awaitRecord(file, /^started slow i$/)
      const exit = yield* Fiber.interrupt(fiber)
      assert.isTrue(Exit.isFailure(exit) && Cause.isInterruptedOnly(exit.cause), String(exit))
      const cancelled = yield* awaitRecord(file, /^cancelled slow /)
      assert.match(cancelled, /^cancelled slow \d+ /)
      assert.isFalse(records(file).includes("done slow i"))
      const echo = yield* executor.execute(call("echo", { text: "after" }))
      assert.strictEqual(echo.observation, "after")
    }))

  it.scopedLive("a tool's timeout is an ordinary ToolTimeout, and the server is told to cancel", () =>
    Effect.gen(function*() {
      const { executor, file } = yield* setup({ tools: { slow: { timeout: "300 millis" } } })
      const report = yield* executor.executeReport(call("slow", { key: "t" }))
      assert.deepStrictEqual([report.outcome.status, report.outcome.observation], ["Executed", "ToolTimeout: slow exceeded 300ms"])
      yield* awaitRecord(file, /^cancelled slow /)
    }))

  it.scopedLive("invalid arguments never reach the server", () =>
    Effect.gen(function*() {
      const { executor, file } = yield* setup()
      const outcome = yield* executor.execute(call("record", { key: 7, extra: true }))
      assert.strictEqual(outcome.status, "NotExecuted")
      assert.include(outcome.observation, "key: must be string")
      const empty = yield* executor.execute(call("echo", { text: "" }))
      assert.include(empty.observation, "text: must NOT have fewer than 1 characters")
      const extra = yield* executor.execute(call("echo", { text: "a", volume: 3 }))
      assert.include(extra.observation, "volume: is unexpected")
      assert.isFalse(records(file).some((line) => line.startsWith("started")))
    }))

  it.scopedLive("a schema ajv cannot compile fails the registry with McpError naming the tool", () =>
    Effect.gen(function*() {
      const client = yield* McpClient.connect({ transport: testServer({ variant: "badschema" }) })
      const error = yield* Effect.flip(McpToolkit.fromClient(client))
      assert.deepStrictEqual([error.reason, error.tool], ["InvalidToolSchema", "broken_schema"])
      assert.include(error.message, "broken_schema")
    }))

  it.scopedLive("a server that cannot start is McpError Connect", () =>
    Effect.gen(function*() {
      const error = yield* Effect.flip(
        McpClient.connect({ transport: McpClient.stdio({ command: process.execPath, args: ["-e", "process.stderr.write('no config'); process.exit(3)"] }) })
      )
      assert.strictEqual(error.reason, "Connect")
      assert.include(error.message, "no config")
    }))

  it.live("the connection closes with its scope: the server process ends", () =>
    Effect.gen(function*() {
      const file = recordFile()
      const scope = yield* Scope.make()
      const client = yield* Scope.extend(McpClient.connect({ transport: testServer({ recordFile: file }) }), scope)
      const pid = yield* serverPid(file)
      assert.isTrue(isAlive(pid))
      yield* client.listTools
      yield* Scope.close(scope, Exit.void)
      yield* Effect.suspend(() => (isAlive(pid) ? Effect.fail("alive") : Effect.void)).pipe(Effect.retry({ schedule: Schedule.spaced("50 millis"), times: 100 }))
      assert.isFalse(isAlive(pid))
    }))
})
