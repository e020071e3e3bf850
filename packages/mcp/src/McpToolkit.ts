/**
 * A Model Context Protocol server's tools as a polyloop `ToolRegistry` (design 0230): one
 * `tools/list`, each tool a spec whose JSON Schema the model sees verbatim and ajv enforces
 * before the call, whose handler calls `tools/call` on the connection, whose replay policy comes
 * from its annotations (`readOnlyHint` or `idempotentHint` → `"Always"`, else `"Never"`) unless
 * overridden by name. The result is an ordinary registry: merge it with code tools
 * (`ToolRegistry.make(...code, ...mcp.tools)`), narrow it with `restrictTo`; its tools' names,
 * descriptions, schemas and policies are in the run's snapshot, so a server whose tools changed
 * between start and resume is refused with `SnapshotMismatch` naming them.
 *
 * @since 0.1.0
 */
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import type { ReplayPolicy } from "@polyloop/core/ActionExecutor"
import type * as Tool from "@polyloop/core/Tool"
import * as ToolRegistry from "@polyloop/core/ToolRegistry"
import { observation } from "./internal/content.js"
import * as JsonSchemaTool from "./JsonSchemaTool.js"
import { McpClient, type McpTool } from "./McpClient.js"
import { McpError, McpToolError } from "./McpError.js"

/** What may be set per tool, by the server's tool name. */
export interface ToolOptions {
  /** Overrides the policy derived from the tool's annotations. */
  readonly replayPolicy?: ReplayPolicy
  /** The tool completes the run when its call returns without `isError` (default false). */
  readonly completesRun?: boolean
  /** A polyloop timeout: a call exceeding it is `Executed` as `ToolTimeout` (and cancelled on the server). */
  readonly timeout?: Duration.DurationInput
}

/** Options of `fromClient` / `registry`. */
export interface Options {
  /** Per tool, by the server's name. Naming a tool the server does not list is `McpError { reason: "UnknownTool" }`. */
  readonly tools?: Readonly<Record<string, ToolOptions>>
  /** Prepended to every tool's name as the model sees it (e.g. `"fs_"`); the server is called by its own name. */
  readonly namePrefix?: string
}

/** The registry's tools fail with `McpToolError` (ordinary) or `ToolEnvironmentError`, and need nothing. */
export type McpRegistry = ToolRegistry.ToolRegistry<never>

/** The replay policy MCP annotations suggest: `readOnlyHint` or `idempotentHint` → `"Always"`, else `"Never"`. */
export const policyOf = (tool: McpTool): ReplayPolicy =>
  tool.annotations?.readOnlyHint === true || tool.annotations?.idempotentHint === true ? "Always" : "Never"

/** The tool's description for the model: its description, else its title, else "". */
export const descriptionOf = (tool: McpTool): string => tool.description ?? tool.title ?? tool.annotations?.title ?? ""

/** The tools of a connected client as specs (in the server's order). */
export const toolsFromClient = (client: McpClient.Service, options: Options = {}): Effect.Effect<ReadonlyArray<Tool.Tool<unknown, McpToolError, never>>, McpError> =>
  Effect.flatMap(client.listTools, (listed) =>
    Effect.suspend(() => {
      const byServerName = new Set(listed.map((tool) => tool.name))
      const unknown = Object.keys(options.tools ?? {}).find((name) => !byServerName.has(name))
      if (unknown !== undefined) {
        return Effect.fail(
          new McpError({
            reason: "UnknownTool",
            server: client.server,
            tool: unknown,
            message: `options name tool "${unknown}", which MCP server ${client.server} does not list (it lists: ${[...byServerName].join(", ")})`
          })
        )
      }
      const prefix = options.namePrefix ?? ""
      const compiler = JsonSchemaTool.makeCompiler()
      const specs: Array<Tool.Tool<unknown, McpToolError, never>> = []
      for (const listedTool of listed) {
        const own = options.tools?.[listedTool.name] ?? {}
        const timeout = own.timeout === undefined ? undefined : Duration.decode(own.timeout)
        const serverName = listedTool.name
        const made = JsonSchemaTool.make<McpToolError, never>({
          name: prefix + serverName,
          description: descriptionOf(listedTool),
          jsonSchema: listedTool.inputSchema,
          compiler,
          replayPolicy: own.replayPolicy ?? policyOf(listedTool),
          completesRun: own.completesRun ?? false,
          ...(timeout === undefined ? {} : { timeout }),
          handler: (args) =>
            Effect.flatMap(client.callTool(serverName, args, { timeout }), (result) =>
              result.isError === true
                ? Effect.fail(new McpToolError({ tool: serverName, message: observation(result) }))
                : Effect.succeed(observation(result)))
        })
        if (Either.isLeft(made)) {
          return Effect.fail(new McpError({ reason: "InvalidToolSchema", server: client.server, tool: serverName, message: made.left.message, cause: made.left }))
        }
        specs.push(made.right)
      }
      return Effect.succeed(specs)
    }))

/** The tools of a connected client as a registry. */
export const fromClient = (client: McpClient.Service, options: Options = {}): Effect.Effect<McpRegistry, McpError> =>
  Effect.flatMap(toolsFromClient(client, options), (tools) =>
    Either.match(ToolRegistry.makeEither(...tools), {
      onLeft: (error) =>
        Effect.fail(new McpError({ reason: "DuplicateToolName", server: client.server, message: `MCP server ${client.server}: ${error.message}` })),
      onRight: (registry) => Effect.succeed(registry as McpRegistry)
    }))

/** The tools of the `McpClient` in context as a registry. */
export const registry = (options: Options = {}): Effect.Effect<McpRegistry, McpError, McpClient> =>
  Effect.flatMap(McpClient, (client) => fromClient(client, options))
