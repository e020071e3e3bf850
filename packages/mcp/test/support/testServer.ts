/**
 * A small MCP server written with the SDK's server side (its low-level `Server`, so a handler can
 * answer with a JSON-RPC error — `McpServer` turns thrown errors into `isError` results), for the
 * cases the filesystem server cannot show: `isError`, a protocol error, a malformed result, every
 * content kind, a slow tool that records its cancellation, a tool list over several pages that
 * changes with a variant, and tools that record their executions to a file (for the kill tests).
 *
 * Records (one line each, appended to `recordFile`): `pid <pid>` at start, `client <name>
 * <version>` once the client has initialized, `started <tool>
 * <key>`, `done <tool> <key>`, `cancelled <tool> <requestId> <reason>`.
 */
import { appendFileSync } from "node:fs"
import { Server } from "@modelcontextprotocol/sdk/server/index.js"
import { CallToolRequestSchema, ErrorCode, ListToolsRequestSchema, McpError, type Tool } from "@modelcontextprotocol/sdk/types.js"

/** How the server is set up. */
export interface TestServerOptions {
  /** Where executions and cancellations are recorded (none: not recorded). */
  readonly recordFile?: string
  /**
   * `"changed"`: the `echo` tool requires one more argument (the tools changed between start and
   * resume); `"badschema"`: one more tool whose schema ajv cannot compile.
   */
  readonly variant?: string
  /** Tools per `tools/list` page (default 3, so a client must follow `nextCursor`). */
  readonly pageSize?: number
}

// A 1x1 transparent PNG (67 bytes).
const png = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAQAAAC1HAwCAAAAC0lEQVR42mNkYAAAAAYAAjCB0C8AAAAASUVORK5CYII="

/** The tools, in listing order. */
export const testTools = (variant: string | undefined): ReadonlyArray<Tool> => [
  {
    name: "echo",
    description: "Echoes the text.",
    inputSchema: variant === "changed"
      ? { type: "object", properties: { text: { type: "string" }, loud: { type: "boolean" } }, required: ["text", "loud"] }
      : { type: "object", properties: { text: { type: "string", minLength: 1 } }, required: ["text"], additionalProperties: false },
    annotations: { readOnlyHint: true }
  },
  { name: "fail", description: "Always fails (isError).", inputSchema: { type: "object", properties: {} } },
  { name: "protocol_error", description: "Answers with a JSON-RPC error.", inputSchema: { type: "object", properties: {} } },
  { name: "malformed", description: "Answers with a result that is not a CallToolResult.", inputSchema: { type: "object", properties: {} } },
  { name: "media", description: "Returns every content kind.", inputSchema: { type: "object", properties: {} }, annotations: { readOnlyHint: true } },
  { name: "structured", description: "Returns only structured content.", inputSchema: { type: "object", properties: {} } },
  {
    name: "slow",
    description: "Waits `ms` milliseconds (default: until cancelled), recording its cancellation.",
    inputSchema: { type: "object", properties: { ms: { type: "integer", minimum: 0 }, key: { type: "string" } } },
    annotations: { idempotentHint: true }
  },
  {
    name: "record",
    description: "Records an execution under `key`, after `ms` milliseconds.",
    inputSchema: { type: "object", properties: { key: { type: "string" }, ms: { type: "integer", minimum: 0 } }, required: ["key"] },
    annotations: { readOnlyHint: false, destructiveHint: true, idempotentHint: false }
  },
  { name: "titled", title: "Only a title", inputSchema: { type: "object" } },
  ...(variant === "badschema"
    ? [{ name: "broken_schema", description: "Its schema is not a JSON Schema.", inputSchema: { type: "object" as const, properties: { x: { type: "no-such-type" } } } }]
    : [])
]

/** The server (not yet connected to a transport). */
export const makeTestServer = (options: TestServerOptions = {}): Server => {
  const record = (line: string): void => {
    if (options.recordFile !== undefined) appendFileSync(options.recordFile, `${line}\n`)
  }
  const tools = testTools(options.variant)
  const pageSize = options.pageSize ?? 3
  const server = new Server({ name: "polyloop-test-server", version: "1.0.0" }, { capabilities: { tools: {} } })
  // Who connected, as the client said in `initialize`.
  server.oninitialized = () => {
    const client = server.getClientVersion()
    record(`client ${client?.name ?? "?"} ${client?.version ?? "?"}`)
  }
  server.setRequestHandler(ListToolsRequestSchema, (request) => {
    const start = request.params?.cursor === undefined ? 0 : Number(request.params.cursor)
    const next = start + pageSize
    return { tools: tools.slice(start, next), ...(next < tools.length ? { nextCursor: String(next) } : {}) }
  })
  server.setRequestHandler(CallToolRequestSchema, async (request, extra) => {
    const args = (request.params.arguments ?? {}) as Record<string, unknown>
    const name = request.params.name
    switch (name) {
      case "echo":
        return { content: [{ type: "text", text: String(args["text"]) }] }
      case "fail":
        return { content: [{ type: "text", text: "the disk is full" }, { type: "text", text: "try a smaller file" }], isError: true }
      case "protocol_error":
        throw new McpError(ErrorCode.InternalError, "the handler's database is gone")
      case "malformed":
        return { content: "not an array" } as unknown as { content: [] }
      case "media":
        return {
          content: [
            { type: "text", text: "here:" },
            { type: "image", data: png, mimeType: "image/png" },
            { type: "audio", data: "AAAA", mimeType: "audio/wav" },
            { type: "resource_link", uri: "file:///data/report.csv", name: "report.csv", mimeType: "text/csv", description: "the report" },
            { type: "resource", resource: { uri: "file:///notes.txt", mimeType: "text/plain", text: "note body" } },
            { type: "resource", resource: { uri: "file:///blob.bin", mimeType: "application/octet-stream", blob: "AAECAw==" } }
          ]
        }
      case "structured":
        return { content: [], structuredContent: { total: 3 } }
      case "slow":
      case "record": {
        const key = typeof args["key"] === "string" ? args["key"] : "-"
        record(`started ${name} ${key}`)
        const ms = typeof args["ms"] === "number" ? args["ms"] : undefined
        await new Promise<void>((resolve) => {
          const timer = ms === undefined ? undefined : setTimeout(resolve, ms)
          extra.signal.addEventListener("abort", () => {
            if (timer !== undefined) clearTimeout(timer)
            record(`cancelled ${name} ${String(extra.requestId)} ${String(extra.signal.reason)}`)
            resolve()
          })
        })
        if (extra.signal.aborted) return { content: [] }
        record(`done ${name} ${key}`)
        return { content: [{ type: "text", text: `${name} ${key} done` }] }
      }
      default:
        throw new McpError(ErrorCode.InvalidParams, `unknown tool ${name}`)
    }
  })
  return server
}

/** Records the server's pid (the tests kill it by pid). */
export const recordPid = (recordFile: string | undefined): void => {
  if (recordFile !== undefined) appendFileSync(recordFile, `pid ${process.pid}\n`)
}
