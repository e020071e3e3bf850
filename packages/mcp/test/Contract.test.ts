/**
 * The contract kit's `ActionExecutor` suite on an MCP-backed executor: the derived executor of the
 * test server's tools over stdio (one connection for the file, closed after it). Cases come from
 * the registry (valid calls of each tool with the statuses it may get, arbitrary arguments checked
 * by ajv, unknown tools, code actions) plus fixed calls; the blocking action is a real `slow` call
 * on the server, wrapped to tell the suite's probe when it starts and when its finalizer runs.
 */
import { afterAll } from "@effect/vitest"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Scope from "effect/Scope"
import type { Action } from "@polyloop/core/Action"
import * as Tool from "@polyloop/core/Tool"
import * as ToolRegistry from "@polyloop/core/ToolRegistry"
import * as McpClient from "@polyloop/mcp/McpClient"
import * as McpToolkit from "@polyloop/mcp/McpToolkit"
import * as ActionExecutorContract from "@polyloop/testing/ActionExecutorContract"
import { testServer } from "./support/servers.js"

const scope = Effect.runSync(Scope.make())
afterAll(() => Effect.runPromise(Scope.close(scope, Exit.void)))

const build = Effect.gen(function*() {
  const client = yield* McpClient.connect({ transport: testServer() })
  const tools = yield* McpToolkit.toolsFromClient(client)
  return tools.map((tool) => {
    const handler = tool.handler
    if (tool.name !== "slow" || handler === undefined) return tool
    // The real call, blocking on the server until interrupted; the probe sees it start and end.
    return Tool.withHandler(tool, (args: unknown) =>
      Effect.flatMap(ActionExecutorContract.Probe, (probe) =>
        Deferred.succeed(probe.started, undefined).pipe(
          Effect.zipRight(handler(args)),
          Effect.ensuring(Deferred.succeed(probe.finalized, undefined))
        )))
  })
})

let shared: Promise<ToolRegistry.ToolRegistry<ActionExecutorContract.Probe>> | undefined
const registry = Effect.promise(() => {
  shared ??= Effect.runPromise(Scope.extend(build, scope)).then((tools) => ToolRegistry.make(...tools))
  return shared
})

const blockingAction: Action = { _tag: "ToolCall", id: "call_block", name: "slow", arguments: { key: "block" } }

// The registry's cases need the registry: they are generated from the server's listing of the
// same tools (a second connection, used only to list them).
const casesRegistry = await Effect.runPromise(
  Effect.scoped(Effect.flatMap(McpClient.connect({ transport: testServer() }), (client) => McpToolkit.fromClient(client)))
)

const call = (name: string, args: unknown): Action => ({ _tag: "ToolCall", id: `fixed_${name}`, name, arguments: args })

ActionExecutorContract.suite("an MCP server's tools (stdio)", Effect.flatMap(registry, (r) => r.executor()), {
  cases: [
    ...ActionExecutorContract.casesFromRegistry(casesRegistry, {
      exclude: ["slow", "record"],
      expect: {
        echo: ["Executed"],
        fail: ["Executed"],
        media: ["Executed"],
        structured: ["Executed"],
        protocol_error: ["EnvError"],
        malformed: ["EnvError"],
        // The server lists it but has no implementation: it answers with a JSON-RPC error.
        titled: ["EnvError"]
      }
    }),
    { action: call("echo", { text: "hello" }), expect: ["Executed"], label: "a valid echo" },
    { action: call("echo", { text: "" }), expect: ["NotExecuted"], label: "an echo with an empty text (minLength)" },
    { action: call("record", { key: 1 }), expect: ["NotExecuted"], label: "a record with a numeric key" },
    { action: call("fail", {}), expect: ["Executed"], label: "a call whose result is isError" },
    { action: call("protocol_error", {}), expect: ["EnvError"], label: "a call answered with a JSON-RPC error" }
  ],
  blockingAction,
  timeout: 240_000
})
