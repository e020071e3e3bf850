/**
 * The errors of `@polyloop/mcp` (design 0230): `McpError` when a server cannot be connected to or
 * its tools cannot be made into a registry (before any step runs), and `McpToolError`, the
 * ordinary failure of a call whose result says `isError: true` (the action is `Executed`, the
 * model sees the text). Failures of a call's transport or protocol are core's
 * `ToolEnvironmentError` (the action is `EnvError`, the run ends).
 *
 * @since 0.1.0
 */
import * as Schema from "effect/Schema"

/** Why connecting to a server or building its registry failed. */
export const McpErrorReason = Schema.Literal(
  /** The transport could not be opened or the initialize handshake failed. */
  "Connect",
  /** `tools/list` failed or returned something unusable. */
  "ListTools",
  /** A tool's `inputSchema` cannot be compiled by ajv. */
  "InvalidToolSchema",
  /** An option names a tool the server does not have. */
  "UnknownTool",
  /** Two tools share a name (after the prefix). */
  "DuplicateToolName"
)
/** @since 0.1.0 */
export type McpErrorReason = typeof McpErrorReason.Type

/** A server could not be connected to, or its tools could not become a registry. */
export class McpError extends Schema.TaggedError<McpError>()("McpError", {
  reason: McpErrorReason,
  /** The server, as the transport names it (the command, or the URL). */
  server: Schema.String,
  message: Schema.String,
  /** The tool concerned, if one is. */
  tool: Schema.optional(Schema.String),
  cause: Schema.optional(Schema.Defect)
}) {}

/**
 * A call whose result had `isError: true`: the tool ran and reported a failure. An ordinary
 * failure: the derived executor records the step `Executed` with `McpToolError: <text>`, and a
 * completing tool does not complete the run.
 */
export class McpToolError extends Schema.TaggedError<McpToolError>()("McpToolError", {
  tool: Schema.String,
  /** The result's content, described as for a successful result. */
  message: Schema.String
}) {}
