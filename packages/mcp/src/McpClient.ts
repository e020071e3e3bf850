/**
 * A connection to a Model Context Protocol server through the official SDK's client
 * (`@modelcontextprotocol/sdk`), over stdio (a child process) or Streamable HTTP, as a scoped
 * resource: `connect` opens the transport and runs the initialize handshake; the connection
 * closes (the child process ends) when the scope does (design 0230).
 *
 * `callTool` classifies what can go wrong: a transport failure, a dead server, a JSON-RPC error
 * response, a request timeout or a malformed result is `ToolEnvironmentError` (the environment
 * cannot serve); a result with `isError: true` is returned as it is, for the caller to decide.
 * Interrupting a call aborts its request: the SDK sends MCP's `notifications/cancelled` for it,
 * and the interruption passes through.
 *
 * @since 0.1.0
 */
import { Client } from "@modelcontextprotocol/sdk/client/index.js"
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js"
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js"
import type { Transport as SdkTransport } from "@modelcontextprotocol/sdk/shared/transport.js"
import type { CallToolResult, Tool } from "@modelcontextprotocol/sdk/types.js"
import * as Context from "effect/Context"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import type * as Scope from "effect/Scope"
import { ToolEnvironmentError } from "@polyloop/core/Errors"
import { McpError } from "./McpError.js"

import packageJson from "../package.json" with { type: "json" }

/** A tool as the server lists it (the SDK's `Tool`: name, title, description, inputSchema, annotations, …). */
export type McpTool = Tool

/** A `tools/call` result (the SDK's `CallToolResult`). */
export type McpCallResult = CallToolResult

/** A server started as a child process, spoken to over its stdin/stdout. */
export interface StdioTransport {
  readonly _tag: "Stdio"
  readonly command: string
  readonly args?: ReadonlyArray<string>
  /** Added to the SDK's default inherited variables (PATH, HOME, …). */
  readonly env?: Readonly<Record<string, string>>
  readonly cwd?: string
  /**
   * The child's standard error: `"keep"` (default) keeps its last few thousand characters and
   * adds them to the messages of environment errors (why did the server die?); `"inherit"` passes
   * it through to this process's; `"ignore"` drops it.
   */
  readonly stderr?: "keep" | "inherit" | "ignore"
}

/** A server reached over MCP's Streamable HTTP transport. */
export interface StreamableHttpTransport {
  readonly _tag: "StreamableHttp"
  readonly url: string | URL
  readonly headers?: Readonly<Record<string, string>>
  /**
   * While a call is in flight, the server is pinged this often (default 5 seconds; `null`: never).
   * The SDK's HTTP client leaves a request pending when its response stream drops, so without
   * this a server that went away mid-call is noticed only at the request timeout; a ping that
   * fails (connection refused, session gone, no answer within the request timeout) ends the call
   * with `ToolEnvironmentError`.
   */
  readonly pingInterval?: Duration.DurationInput | null
}

/** How to reach the server. */
export type Transport = StdioTransport | StreamableHttpTransport

/** A stdio transport. */
export const stdio = (options: Omit<StdioTransport, "_tag">): StdioTransport => ({ _tag: "Stdio", ...options })

/** A Streamable HTTP transport. */
export const streamableHttp = (url: string | URL, options: Omit<StreamableHttpTransport, "_tag" | "url"> = {}): StreamableHttpTransport => ({
  _tag: "StreamableHttp",
  url,
  ...options
})

/** Options of `connect`. */
export interface Options {
  readonly transport: Transport
  /** How this client introduces itself (default `polyloop` at the version of `@polyloop/mcp`). */
  readonly clientInfo?: { readonly name: string; readonly version: string }
  /**
   * How long a request may wait for its answer before the SDK gives up (default 60 seconds, the
   * SDK's): a call that times out this way is `ToolEnvironmentError`. A tool's own polyloop
   * `timeout` is added to it, so the tool's (ordinary) `ToolTimeout` comes first.
   */
  readonly requestTimeout?: Duration.DurationInput
}

/** Options of one call. */
export interface CallOptions {
  /** The tool's polyloop timeout, if it has one (see `Options.requestTimeout`). */
  readonly timeout?: Duration.Duration | undefined
}

/** A connected client. */
export class McpClient extends Context.Tag("@polyloop/mcp/McpClient")<McpClient, McpClient.Service>() {}

/** @since 0.1.0 */
export declare namespace McpClient {
  /** @since 0.1.0 */
  export interface Service {
    /** The server, as the transport names it (the command line, or the URL). */
    readonly server: string
    /** What the server said it is in the handshake. */
    readonly serverInfo: { readonly name: string; readonly version: string } | undefined
    /** `tools/list`, every page. */
    readonly listTools: Effect.Effect<ReadonlyArray<McpTool>, McpError>
    /** `tools/call`; `isError` results are returned, every other failure is `ToolEnvironmentError`. */
    readonly callTool: (name: string, args: unknown, options?: CallOptions) => Effect.Effect<McpCallResult, ToolEnvironmentError>
  }
}

const stderrKept = 4_000

const messageOf = (error: unknown): string => (error instanceof Error ? error.message : String(error))

/** The transport and how to name the server, and what it wrote on stderr (stdio, `"keep"`). */
const makeTransport = (transport: Transport): { readonly sdk: SdkTransport; readonly server: string; readonly stderrTail: () => string } => {
  if (transport._tag === "StreamableHttp") {
    const url = typeof transport.url === "string" ? new URL(transport.url) : transport.url
    const sdk = new StreamableHTTPClientTransport(url, transport.headers === undefined ? {} : { requestInit: { headers: { ...transport.headers } } })
    return { sdk, server: url.href, stderrTail: () => "" }
  }
  const mode = transport.stderr ?? "keep"
  const sdk = new StdioClientTransport({
    command: transport.command,
    args: [...(transport.args ?? [])],
    ...(transport.env === undefined ? {} : { env: { ...transport.env } }),
    ...(transport.cwd === undefined ? {} : { cwd: transport.cwd }),
    stderr: mode === "keep" ? "pipe" : mode
  })
  let tail = ""
  if (mode === "keep") {
    sdk.stderr?.on("data", (chunk: Buffer | string) => {
      tail = (tail + chunk.toString()).slice(-stderrKept)
    })
  }
  const server = [transport.command, ...(transport.args ?? [])].join(" ")
  return { sdk, server, stderrTail: () => tail.trim() }
}

/**
 * Connects (scoped): the connection closes, and a stdio server's process ends, when the scope
 * closes. Failing to connect is `McpError { reason: "Connect" }`; connecting can be interrupted.
 */
export const connect = (options: Options): Effect.Effect<McpClient.Service, McpError, Scope.Scope> =>
  Effect.gen(function*() {
    const { sdk, server, stderrTail } = makeTransport(options.transport)
    const client = new Client(options.clientInfo ?? { name: "polyloop", version: packageJson.version })
    const requestTimeout = Duration.toMillis(Duration.decode(options.requestTimeout ?? Duration.seconds(60)))
    const withStderr = (message: string): string => {
      const tail = stderrTail()
      return tail === "" ? message : `${message} (server stderr: ${tail.slice(-1_000)})`
    }
    // Closing is registered before connecting, so an interrupted or failed connect leaves no process behind.
    yield* Effect.addFinalizer(() => Effect.ignore(Effect.tryPromise(() => client.close())))
    yield* Effect.tryPromise({
      try: (signal) => client.connect(sdk, { signal, timeout: requestTimeout }),
      catch: (error) => new McpError({ reason: "Connect", server, message: withStderr(`cannot connect to MCP server ${server}: ${messageOf(error)}`), cause: error })
    }).pipe(Effect.withSpan("McpClient.connect", { attributes: { "mcp.server": server } }))
    const listTools = Effect.tryPromise({
      try: async (signal) => {
        const tools: Array<McpTool> = []
        let cursor: string | undefined
        do {
          const page = await client.listTools(cursor === undefined ? {} : { cursor }, { signal, timeout: requestTimeout })
          tools.push(...page.tools)
          cursor = page.nextCursor
        } while (cursor !== undefined)
        return tools as ReadonlyArray<McpTool>
      },
      catch: (error) => new McpError({ reason: "ListTools", server, message: withStderr(`tools/list on MCP server ${server} failed: ${messageOf(error)}`), cause: error })
    }).pipe(Effect.withSpan("McpClient.listTools", { attributes: { "mcp.server": server } }))
    // Over HTTP, a dead server is found by pinging it while a call waits (see `pingInterval`).
    const pingEvery = options.transport._tag === "StreamableHttp" && options.transport.pingInterval !== null
      ? Duration.decode(options.transport.pingInterval ?? Duration.seconds(5))
      : undefined
    const watchdog: Effect.Effect<never, ToolEnvironmentError> | undefined = pingEvery === undefined ? undefined : Effect.tryPromise({
      try: (signal) => client.ping({ signal, timeout: requestTimeout }),
      catch: (error) => new ToolEnvironmentError({ message: `MCP server ${server} stopped answering during a call: ping failed: ${messageOf(error)}`, cause: error })
    }).pipe(Effect.delay(pingEvery), Effect.forever)
    const callTool = (name: string, args: unknown, callOptions?: CallOptions): Effect.Effect<McpCallResult, ToolEnvironmentError> =>
      Effect.tryPromise({
        // The signal aborts when the fiber is interrupted: the SDK then sends notifications/cancelled
        // for this request and rejects; the interruption itself passes through untouched.
        try: (signal) =>
          client.callTool(
            { name, arguments: args as Record<string, unknown> },
            undefined,
            { signal, timeout: requestTimeout + (callOptions?.timeout === undefined ? 0 : Duration.toMillis(callOptions.timeout)) }
          ) as Promise<McpCallResult>,
        catch: (error) =>
          new ToolEnvironmentError({ message: withStderr(`MCP server ${server}: tools/call "${name}" failed: ${messageOf(error)}`), cause: error })
      }).pipe(
        // The first to end wins: the call's result or failure, or a failed ping; the other is interrupted.
        (call) => (watchdog === undefined ? call : Effect.raceFirst(call, watchdog)),
        Effect.withSpan("McpClient.callTool", { attributes: { "mcp.server": server, "mcp.tool": name } })
      )
    const version = client.getServerVersion()
    return {
      server,
      serverInfo: version === undefined ? undefined : { name: version.name, version: version.version },
      listTools,
      callTool
    }
  })

/** The connection as a layer (closed when the layer's scope closes). */
export const layer = (options: Options): Layer.Layer<McpClient, McpError> => Layer.scoped(McpClient, connect(options))
