/**
 * A tool: name, description, a parameter Schema (decoded from the call's arguments; JSON Schema
 * derived for the model), an optional handler, a replay policy, a completion marker (design
 * 0008) and an optional approval rule (design 0160). The implementation hangs on the spec, so
 * narrowing a registry carries it along.
 *
 * @since 0.1.0
 */
import * as Duration from "effect/Duration"
import type * as Effect from "effect/Effect"
import type * as Schema from "effect/Schema"
import type { ReplayPolicy } from "./ActionExecutor.js"
import type { ToolEnvironmentError } from "./Errors.js"
import type { ToolDefinition } from "./ModelClient.js"

/** A JSON Schema as the model sees it (a JSON value). */
export type JsonSchema = ToolDefinition["parameters"]

/**
 * A tool handler: receives only the decoded arguments, returns the observation text. Fail with
 * `ToolEnvironmentError` when the environment is broken; any other failure (or a thrown
 * exception) is an ordinary error the model sees.
 */
export type Handler<A, E, R> = (args: A) => Effect.Effect<string, ToolEnvironmentError | E, R>

/**
 * Approval by a person only when a pure predicate of the decoded arguments says so. The
 * `description` is what the snapshot records (the predicate's code cannot be hashed): keep it
 * stable, and change it when the rule changes.
 */
export interface ApprovalWhen<A> {
  readonly _tag: "When"
  readonly description: string
  /** Pure and total: evaluated again on resume; a throw is a defect. */
  readonly required: (args: A) => boolean
}

/** A tool's approval rule: every call (`"Required"`), or the calls a predicate picks. */
export type Approval<A> = "Required" | ApprovalWhen<A>

/** Approval for the calls whose decoded arguments satisfy `required`, described by `description`. */
export const approvalWhen = <A>(description: string, required: (args: A) => boolean): ApprovalWhen<A> => ({
  _tag: "When",
  description,
  required
})

/** A tool spec. */
export interface Tool<A = unknown, E = unknown, R = never> {
  readonly name: string
  readonly description: string
  readonly parameters: Schema.Schema<A, unknown>
  /**
   * The JSON Schema the model sees, verbatim, for a tool whose schema comes from outside (an MCP
   * server's `inputSchema`, design 0230); `parameters` then validates against that same schema.
   * When absent, the model view derives it from `parameters` with `JSONSchema.make`.
   */
  readonly jsonSchema?: JsonSchema | undefined
  readonly handler: Handler<A, E, R> | undefined
  readonly replayPolicy: ReplayPolicy
  readonly completesRun: boolean
  readonly timeout: Duration.Duration | undefined
  /** Whether a call needs a person's decision before it runs (design 0160); none when undefined. */
  readonly approval?: Approval<A> | undefined
}

/** Any tool, whatever its types (the registry's erased view; arguments are checked by `parameters`). */
export interface Any {
  readonly name: string
  readonly description: string
  readonly parameters: Schema.Schema.AnyNoContext
  readonly jsonSchema?: JsonSchema | undefined
  readonly handler: ((args: never) => Effect.Effect<string, unknown, unknown>) | undefined
  readonly replayPolicy: ReplayPolicy
  readonly completesRun: boolean
  readonly timeout: Duration.Duration | undefined
  readonly approval?: "Required" | ApprovalWhen<never> | undefined
}

/** The context a tool's handler needs. */
export type Context<T> = T extends Tool<infer _A, infer _E, infer R> ? R : never

/** The options of `make`. */
export interface MakeOptions<A, I, E, R> {
  readonly name: string
  readonly description: string
  readonly parameters: Schema.Schema<A, I, never>
  readonly jsonSchema?: JsonSchema
  readonly handler?: Handler<A, E, R>
  readonly replayPolicy?: ReplayPolicy
  readonly completesRun?: boolean
  readonly timeout?: Duration.DurationInput
  /** `"Required"`, or `approvalWhen(description, predicate)`; default none. */
  readonly approval?: Approval<A>
}

/**
 * A tool made with its handler. A registry of such tools only (`ToolRegistry.make`) knows it has
 * every handler: its derived executor cannot fail with `MissingToolHandler`, and its type says so.
 */
export interface Handled<A = unknown, E = unknown, R = never> extends Tool<A, E, R> {
  readonly handler: Handler<A, E, R>
}

/**
 * Makes a tool. `replayPolicy` defaults to `"Never"`, `completesRun` to false. `jsonSchema` is
 * for a schema that comes from outside (see `Tool.jsonSchema`): the model sees it as given.
 * With a handler, the tool is `Handled`.
 */
export function make<A, I, E = never, R = never>(options: MakeOptions<A, I, E, R> & { readonly handler: Handler<A, E, R> }): Handled<A, E, R>
export function make<A, I, E = never, R = never>(options: MakeOptions<A, I, E, R>): Tool<A, E, R>
export function make<A, I, E = never, R = never>(options: MakeOptions<A, I, E, R>): Tool<A, E, R> {
  return {
    name: options.name,
    description: options.description,
    parameters: options.parameters as unknown as Schema.Schema<A, unknown>,
    ...(options.jsonSchema === undefined ? {} : { jsonSchema: options.jsonSchema }),
    handler: options.handler,
    replayPolicy: options.replayPolicy ?? "Never",
    completesRun: options.completesRun ?? false,
    timeout: options.timeout === undefined ? undefined : Duration.decode(options.timeout),
    ...(options.approval === undefined ? {} : { approval: options.approval })
  }
}

/** How the snapshot records a tool's approval rule: `"Required"`, `"When: <description>"`, or none. */
export const approvalDescription = (tool: Any): string | undefined =>
  tool.approval === undefined ? undefined : tool.approval === "Required" ? "Required" : `When: ${tool.approval.description}`

/** Does a call of `tool` with these decoded arguments need a person's decision? */
export const needsApproval = (tool: Any, args: unknown): boolean =>
  tool.approval === undefined
    ? false
    : tool.approval === "Required" || (tool.approval.required as (args: unknown) => boolean)(args)

/** The same tool with another handler (or none). */
export function withHandler<A, E, R, E2, R2>(tool: Tool<A, E, R>, handler: Handler<A, E2, R2>): Handled<A, E2, R2>
export function withHandler<A, E, R, E2, R2>(tool: Tool<A, E, R>, handler: Handler<A, E2, R2> | undefined): Tool<A, E2, R2>
export function withHandler<A, E, R, E2, R2>(tool: Tool<A, E, R>, handler: Handler<A, E2, R2> | undefined): Tool<A, E2, R2> {
  return { ...tool, handler }
}
