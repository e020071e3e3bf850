/**
 * The reference filesystem server (`@modelcontextprotocol/server-filesystem`, from node_modules)
 * over stdio on a temporary folder: its tools become a registry (policies from annotations, the
 * server's schemas verbatim), invalid calls are refused before the server sees them, calls run,
 * `isError` results are ordinary failures, image content is described — and an agent runs over it.
 */
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import * as Path from "node:path"
import { afterAll, assert, describe, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Option from "effect/Option"
import * as RunLogStore from "@polyloop/core/RunLogStore"
import * as McpClient from "@polyloop/mcp/McpClient"
import * as McpToolkit from "@polyloop/mcp/McpToolkit"
import * as ScriptedModel from "@polyloop/testing/ScriptedModel"
import { runAgent, toolTexts } from "./support/agent.js"
import { filesystemServer } from "./support/servers.js"

const dir = mkdtempSync(Path.join(tmpdir(), "polyloop-mcp-fs-"))
afterAll(() => rmSync(dir, { recursive: true, force: true }))

const connect = McpClient.connect({ transport: filesystemServer(dir) })

describe.sequential("the filesystem server over stdio", { timeout: 180_000 }, () => {
  it.scopedLive("lists its tools: the server's schemas verbatim, replay policies from annotations", () =>
    Effect.gen(function*() {
      const client = yield* connect
      assert.strictEqual(client.serverInfo?.name, "secure-filesystem-server")
      const listed = yield* client.listTools
      const registry = yield* McpToolkit.fromClient(client)
      assert.deepStrictEqual(registry.names, listed.map((tool) => tool.name))
      for (const name of ["read_text_file", "write_file", "edit_file", "list_directory", "move_file"]) assert.include(registry.names, name)
      const view = registry.modelView()
      for (const tool of listed) {
        const shown = view.find((v) => v.name === tool.name)
        assert.deepStrictEqual(shown?.parameters, tool.inputSchema, tool.name)
        assert.strictEqual(shown?.description, tool.description ?? "", tool.name)
      }
      const policy = (name: string) => Option.getOrThrow(registry.get(name)).replayPolicy
      assert.strictEqual(policy("read_text_file"), "Always") // readOnlyHint
      assert.strictEqual(policy("write_file"), "Always") // idempotentHint
      assert.strictEqual(policy("create_directory"), "Always") // idempotentHint
      assert.strictEqual(policy("edit_file"), "Never") // destructive, not idempotent
      assert.strictEqual(policy("move_file"), "Never")
      // Overrides by name, and restrictTo like any registry.
      const overridden = yield* McpToolkit.fromClient(client, { tools: { write_file: { replayPolicy: "Never", completesRun: true } } })
      assert.strictEqual(Option.getOrThrow(overridden.get("write_file")).replayPolicy, "Never")
      assert.isTrue(Option.getOrThrow(overridden.get("write_file")).completesRun)
      const narrowed = Either.getOrThrow(overridden.restrictTo(["read_text_file", "write_file"]))
      assert.deepStrictEqual(narrowed.names, ["read_text_file", "write_file"])
      const unknown = yield* Effect.flip(McpToolkit.fromClient(client, { tools: { delete_everything: { replayPolicy: "Never" } } }))
      assert.strictEqual(unknown.reason, "UnknownTool")
      assert.strictEqual(unknown.tool, "delete_everything")
    }))

  it.scopedLive("validates against the server's schema: invalid calls are NotExecuted with the issues, before any call", () =>
    Effect.gen(function*() {
      const client = yield* connect
      const registry = yield* McpToolkit.fromClient(client)
      const invalid = registry.validate({ _tag: "ToolCall", id: "c1", name: "read_text_file", arguments: { file: "a.txt", head: "ten" } })
      assert.isTrue(Either.isLeft(invalid))
      if (Either.isLeft(invalid)) {
        assert.strictEqual(invalid.left._tag, "InvalidArguments")
        assert.strictEqual(invalid.left._tag === "InvalidArguments" ? invalid.left.issues : "", "path: is missing; head: must be number")
      }
      const executor = yield* registry.executor()
      const outcome = yield* executor.execute({ _tag: "ToolCall", id: "c2", name: "write_file", arguments: { path: Path.join(dir, "never.txt") } })
      assert.strictEqual(outcome.status, "NotExecuted")
      assert.include(outcome.observation, "content: is missing")
      assert.throws(() => readFileSync(Path.join(dir, "never.txt")))
    }))

  it.scopedLive("calls: text results are observations, isError is Executed with the text, images are described", () =>
    Effect.gen(function*() {
      const client = yield* connect
      const executor = yield* Effect.flatMap(McpToolkit.fromClient(client), (registry) => registry.executor())
      const target = Path.join(dir, "hello.txt")
      const written = yield* executor.executeReport({ _tag: "ToolCall", id: "w", name: "write_file", arguments: { path: target, content: "hello\nworld\n" } })
      assert.strictEqual(written.outcome.status, "Executed")
      assert.isFalse(written.handlerFailed)
      assert.strictEqual(readFileSync(target, "utf8"), "hello\nworld\n")
      const read = yield* executor.execute({ _tag: "ToolCall", id: "r", name: "read_text_file", arguments: { path: target, head: 1 } })
      assert.deepStrictEqual([read.status, read.observation, read.observationIsSynthetic], ["Executed", "hello", false])
      const denied = yield* executor.executeReport({ _tag: "ToolCall", id: "d", name: "read_text_file", arguments: { path: "/etc/hostname" } })
      assert.strictEqual(denied.outcome.status, "Executed")
      assert.isTrue(denied.handlerFailed)
      assert.match(denied.outcome.observation, /^McpToolError: Access denied - path outside allowed directories/)
      // A real PNG read through read_media_file comes back as image content: described, not dropped.
      const png = Buffer.from("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAQAAAC1HAwCAAAAC0lEQVR42mNkYAAAAAYAAjCB0C8AAAAASUVORK5CYII=", "base64")
      writeFileSync(Path.join(dir, "dot.png"), png)
      const media = yield* executor.execute({ _tag: "ToolCall", id: "m", name: "read_media_file", arguments: { path: Path.join(dir, "dot.png") } })
      assert.strictEqual(media.status, "Executed")
      assert.strictEqual(media.observation, `[image: image/png, ${png.length} bytes]`)
    }))

  it.scopedLive("an agent runs over the server's tools: the model is told which argument was wrong, and goes on", () =>
    Effect.gen(function*() {
      const client = yield* connect
      const tools = yield* McpToolkit.fromClient(client)
      const notes = Path.join(dir, "notes.md")
      const { last, result } = yield* runAgent("fs-agent", tools, [
        ScriptedModel.toolCall("write_file", { path: notes, text: "# Notes" }),
        ScriptedModel.toolCall("write_file", { path: notes, content: "# Notes\n" }),
        ScriptedModel.toolCall("read_text_file", { path: notes }),
        "Done: notes.md holds a title."
      ], RunLogStore.layerMemory)
      assert.strictEqual(result.stopReason._tag, "Completed")
      assert.deepStrictEqual([result.steps, result.effectiveSteps], [4, 2])
      const texts = toolTexts(last)
      assert.match(texts[0] ?? "", /^The action was not executed: invalid arguments for "write_file": content: is missing\. Available tools: read_file, /)
      assert.strictEqual(texts[2], "# Notes\n")
      assert.strictEqual(readFileSync(notes, "utf8"), "# Notes\n")
    }))
})
