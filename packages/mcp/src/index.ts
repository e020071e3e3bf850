/**
 * @polyloop/mcp
 *
 * @since 0.1.0
 */

/**
 * A tool whose parameters are a JSON Schema given from outside (an MCP server's `inputSchema`, or any JSON Schema), validated with ajv (design 0230). The model sees the schema verbatim (`Tool.jsonSchema`); `parameters` is an Effect `Schema` whose decoding runs the compiled ajv validator, so the registry's `validate` reports its issues (`path: must be string`, `path: is missing`) exactly as for a code tool, and an invalid call is `NotExecuted` with them.
 */
export * as JsonSchemaTool from "./JsonSchemaTool.js"

/**
 * A connection to a Model Context Protocol server through the official SDK's client (`@modelcontextprotocol/sdk`), over stdio (a child process) or Streamable HTTP, as a scoped resource: `connect` opens the transport and runs the initialize handshake; the connection closes (the child process ends) when the scope does (design 0230).
 */
export * as McpClient from "./McpClient.js"

/**
 * The errors of `@polyloop/mcp` (design 0230): `McpError` when a server cannot be connected to or its tools cannot be made into a registry (before any step runs), and `McpToolError`, the ordinary failure of a call whose result says `isError: true` (the action is `Executed`, the model sees the text). Failures of a call's transport or protocol are core's `ToolEnvironmentError` (the action is `EnvError`, the run ends).
 */
export * as McpError from "./McpError.js"

/**
 * A Model Context Protocol server's tools as a polyloop `ToolRegistry` (design 0230): one `tools/list`, each tool a spec whose JSON Schema the model sees verbatim and ajv enforces before the call, whose handler calls `tools/call` on the connection, whose replay policy comes from its annotations (`readOnlyHint` or `idempotentHint` → `"Always"`, else `"Never"`) unless overridden by name. The result is an ordinary registry: merge it with code tools (`ToolRegistry.make(...code, ...mcp.tools)`), narrow it with `restrictTo`; its tools' names, descriptions, schemas and policies are in the run's snapshot, so a server whose tools changed between start and resume is refused with `SnapshotMismatch` naming them.
 */
export * as McpToolkit from "./McpToolkit.js"
