/**
 * The same client over MCP's Streamable HTTP transport, against the test server on loopback:
 * list, validate, call, `isError`, an interrupted call (the server receives the cancellation), a
 * server that goes away mid-call (EnvError: found by the pings sent while a call waits, or without
 * them at the request timeout), and pings that leave a long call to a live server alone.
 */
import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import * as Path from "node:path"
import { afterAll, assert, describe, it } from "@effect/vitest"
import * as Cause from "effect/Cause"
import type * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Fiber from "effect/Fiber"
import * as McpClient from "@polyloop/mcp/McpClient"
import * as McpToolkit from "@polyloop/mcp/McpToolkit"
import { httpTestServer } from "./support/httpServer.js"
import { awaitRecord, records } from "./support/servers.js"
import { testTools } from "./support/testServer.js"

const dir = mkdtempSync(Path.join(tmpdir(), "polyloop-mcp-http-"))
afterAll(() => rmSync(dir, { recursive: true, force: true }))
let files = 0

const setup = (
  transport: (url: string) => McpClient.StreamableHttpTransport = (url) => McpClient.streamableHttp(url),
  requestTimeout: Duration.DurationInput = "60 seconds"
) => Effect.gen(function*() {
  const file = Path.join(dir, `records-${files++}.txt`)
  const server = yield* httpTestServer({ recordFile: file })
  const client = yield* McpClient.connect({ transport: transport(server.url), requestTimeout })
  const registry = yield* McpToolkit.fromClient(client)
  const executor = yield* registry.executor()
  return { server, client, registry, executor, file }
})

const call = (name: string, args: unknown = {}) => ({ _tag: "ToolCall" as const, id: `id-${name}`, name, arguments: args })

describe.sequential("Streamable HTTP on loopback", { timeout: 180_000 }, () => {
  it.scopedLive("lists, validates, calls; isError is Executed", () =>
    Effect.gen(function*() {
      const { client, executor, file, registry } = yield* setup()
      assert.match(client.server, /^http:\/\/127\.0\.0\.1:\d+\/mcp$/)
      assert.deepStrictEqual(registry.names, testTools(undefined).map((tool) => tool.name))
      const echo = yield* executor.execute(call("echo", { text: "over http" }))
      assert.deepStrictEqual([echo.status, echo.observation], ["Executed", "over http"])
      const invalid = yield* executor.execute(call("record", {}))
      assert.strictEqual(invalid.status, "NotExecuted")
      assert.include(invalid.observation, "key: is missing")
      assert.isFalse(records(file).some((line) => line.startsWith("started")), "invalid arguments never reach the server")
      const failed = yield* executor.executeReport(call("fail"))
      assert.deepStrictEqual([failed.outcome.status, failed.handlerFailed], ["Executed", true])
      assert.strictEqual(failed.outcome.observation, "McpToolError: the disk is full\ntry a smaller file")
      const protocol = yield* executor.execute(call("protocol_error"))
      assert.strictEqual(protocol.status, "EnvError")
    }))

  it.scopedLive("an interrupted call passes through and the server receives the cancellation", () =>
    Effect.gen(function*() {
      const { executor, file } = yield* setup()
      const fiber = yield* Effect.fork(executor.execute(call("slow", { key: "h" })))
      yield* awaitRecord(file, /^started slow h$/)
      const exit = yield* Fiber.interrupt(fiber)
      assert.isTrue(Exit.isFailure(exit) && Cause.isInterruptedOnly(exit.cause), String(exit))
      yield* awaitRecord(file, /^cancelled slow /)
      const echo = yield* executor.execute(call("echo", { text: "after" }))
      assert.strictEqual(echo.observation, "after")
    }))

  it.scopedLive("a server that goes away mid-call is EnvError: the ping during the call fails", () =>
    Effect.gen(function*() {
      const { executor, file, server } = yield* setup()
      const fiber = yield* Effect.fork(executor.execute(call("slow", { key: "gone" })))
      yield* awaitRecord(file, /^started slow gone$/)
      server.kill()
      const outcome = yield* Fiber.join(fiber)
      assert.strictEqual(outcome.status, "EnvError")
      assert.include(outcome.observation, "stopped answering during a call: ping failed")
      const later = yield* executor.execute(call("echo", { text: "x" }))
      assert.strictEqual(later.status, "EnvError")
    }))

  // Without pings, the SDK's HTTP client leaves the request pending when its response stream
  // drops: the server's absence is noticed at the request timeout (design 0230).
  it.scopedLive("without pings, a server gone mid-call is EnvError at the request timeout", () =>
    Effect.gen(function*() {
      const { executor, file, server } = yield* setup((url) => McpClient.streamableHttp(url, { pingInterval: null }), "3 seconds")
      const fiber = yield* Effect.fork(executor.execute(call("slow", { key: "gone" })))
      yield* awaitRecord(file, /^started slow gone$/)
      server.kill()
      const outcome = yield* Fiber.join(fiber)
      assert.strictEqual(outcome.status, "EnvError")
      assert.include(outcome.observation, "Request timed out")
    }))

  it.scopedLive("pings do not disturb a long call to a live server", () =>
    Effect.gen(function*() {
      const { executor } = yield* setup((url) => McpClient.streamableHttp(url, { pingInterval: "100 millis" }))
      const outcome = yield* executor.execute(call("slow", { key: "long", ms: 1_500 }))
      assert.deepStrictEqual([outcome.status, outcome.observation], ["Executed", "slow long done"])
    }))
})
