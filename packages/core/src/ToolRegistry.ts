/**
 * The tool registry (design 0008): the tools the model may call, their JSON Schemas, pure
 * validation of calls, narrowing, and the derived executor.
 *
 * @since 0.1.0
 */
import * as Cause from "effect/Cause"
import * as Context from "effect/Context"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as JSONSchema from "effect/JSONSchema"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as ParseResult from "effect/ParseResult"
import * as Predicate from "effect/Predicate"
import * as Schema from "effect/Schema"
import type { Action, ToolCall } from "./Action.js"
import { ActionExecutor, type ReplayPolicy } from "./ActionExecutor.js"
import * as ActionOutcome from "./ActionOutcome.js"
import { InvalidArguments, MissingToolHandler, UnknownTool } from "./Errors.js"
import type { ToolDefinition } from "./ModelClient.js"
import type * as Tool from "./Tool.js"
import { formatIssues } from "./internal/issues.js"
import * as Tracing from "./internal/tracing.js"
import * as ToolContext from "./ToolContext.js"

/** A call that passed validation: its tool and its decoded arguments. */
export interface ValidatedCall {
  readonly call: ToolCall
  readonly tool: Tool.Any
  readonly args: unknown
}

/**
 * A registry of tools; `R` is what their handlers need, `E` how deriving its executor can fail:
 * `MissingToolHandler`, or `never` for a registry made of `Tool.Handled` tools only.
 */
export interface ToolRegistry<R = never, E = MissingToolHandler> {
  /** The tools, in registration order. */
  readonly tools: ReadonlyArray<Tool.Any>
  /** The names, in registration order. */
  readonly names: ReadonlyArray<string>
  readonly get: (name: string) => Option.Option<Tool.Any>
  /**
   * What the model sees: names, descriptions and JSON Schemas (a tool's `jsonSchema` verbatim
   * when it has one, else derived from its `parameters`).
   */
  readonly modelView: () => ReadonlyArray<ToolDefinition>
  /** Pure: the tool exists and the arguments decode. */
  readonly validate: (call: ToolCall) => Either.Either<ValidatedCall, UnknownTool | InvalidArguments>
  /** A registry with only the named tools (handlers carried along); an unknown name is an error. */
  readonly restrictTo: (names: ReadonlyArray<string>) => Either.Either<ToolRegistry<R, E>, UnknownTool>
  /**
   * The derived executor. Fails with `MissingToolHandler`, naming every tool without a handler,
   * at the moment it is called.
   */
  readonly executor: () => Effect.Effect<DerivedExecutor, E, Exclude<R, ToolContext.ToolContext>>
}

/** How deriving the executor of a registry of these tools can fail: never when all are `Tool.Handled`. */
export type MissingOf<Tools extends ReadonlyArray<Tool.Any>> = Tools[number] extends { readonly handler: (args: never) => unknown } ? never
  : MissingToolHandler

/** The context the handlers of a list of tools need. */
export type ContextOf<Tools extends ReadonlyArray<Tool.Any>> = {
  [K in keyof Tools]: Tool.Context<Tools[K]>
}[number]

/** What the derived executor reports besides the outcome. */
export interface ExecutionReport {
  readonly outcome: ActionOutcome.ActionOutcome
  /** The handler failed (ordinary error, defect or timeout): a completing tool did not complete. */
  readonly handlerFailed: boolean
  /** The tool that ran, if the call was valid. */
  readonly tool: Option.Option<Tool.Any>
}

const DerivedExecutorTypeId: unique symbol = Symbol.for("@polyloop/core/ToolRegistry/DerivedExecutor")

/** An executor derived from a registry by `executor()`. */
export interface DerivedExecutor extends ActionExecutor.Service {
  readonly [DerivedExecutorTypeId]: typeof DerivedExecutorTypeId
  readonly registry: ToolRegistry<unknown>
  /**
   * Executes and reports. `toolContext` is the call's `ToolContext` (the loop passes it, so it
   * is provided to the handler together with the captured services, in one step); without it,
   * the handler gets the `ToolContext` in scope, or a standalone one for its call id.
   */
  readonly executeReport: (action: Action, toolContext?: ToolContext.ToolContext.Service) => Effect.Effect<ExecutionReport>
  /**
   * The services captured when the executor was derived (none when its handlers need none): a
   * sub-agent's child executor is derived with them (design 0392).
   */
  readonly captured: Context.Context<never> | undefined
}

/** Is this executor derived from a registry? */
export const isDerivedExecutor = (executor: ActionExecutor.Service): executor is DerivedExecutor =>
  Predicate.hasProperty(executor, DerivedExecutorTypeId)

/**
 * Was `executor` derived from `registry` (same names, the same tool specs)? Narrowed registries
 * derive the same specs, so `restrictTo` on both sides agrees.
 */
export const isDerivedFrom = (executor: DerivedExecutor, registry: ToolRegistry<unknown>): boolean => {
  const mine = executor.registry.tools
  if (mine.length !== registry.tools.length) return false
  return mine.every((tool) => Option.exists(registry.get(tool.name), (other) => other === tool))
}

const errorName = (value: unknown): string => {
  if (Predicate.hasProperty(value, "_tag") && typeof value._tag === "string") return value._tag
  if (value instanceof Error) {
    const ctor = value.constructor?.name
    return ctor && ctor !== "Object" ? ctor : value.name
  }
  return typeof value === "object" && value !== null ? (value.constructor?.name ?? "Error") : typeof value
}

const errorMessage = (value: unknown): string => {
  if (Predicate.hasProperty(value, "message") && typeof value.message === "string") return value.message
  if (typeof value === "string") return value
  try {
    return JSON.stringify(value) ?? String(value)
  } catch {
    return String(value)
  }
}

/** `Name: message`, no stack trace. */
export const describeFailure = (value: unknown): string => {
  const message = errorMessage(value)
  const name = errorName(value)
  return message.length > 0 ? `${name}: ${message}` : name
}

class ToolTimeout {
  readonly _tag = "ToolTimeout"
  constructor(readonly tool: string, readonly timeout: Duration.Duration) {}
}

/** What a handler needs besides its arguments. */
interface HandlerServices {
  /** The services captured at derivation; undefined when there are none (nothing to provide). */
  readonly captured: Context.Context<never> | undefined
  /** The call's `ToolContext`, when the caller passes it. */
  readonly toolContext: ToolContext.ToolContext.Service | undefined
}

/** The handler's effect with its services: one provide per call (captured services and the call's ToolContext together). */
const provideHandler = (
  validated: ValidatedCall,
  effect: Effect.Effect<string, unknown, unknown>,
  services: HandlerServices
): Effect.Effect<string, unknown> => {
  const { captured, toolContext } = services
  if (toolContext !== undefined) {
    return (captured === undefined
      ? Effect.provideService(effect, ToolContext.ToolContext, toolContext)
      : Effect.provide(effect, Context.add(captured, ToolContext.ToolContext, toolContext))) as Effect.Effect<string, unknown>
  }
  // Called outside the loop: the ToolContext in scope, or a standalone one for the call id.
  const withCaptured = captured === undefined ? effect : Effect.provide(effect, captured)
  return Effect.flatMap(Effect.serviceOption(ToolContext.ToolContext), (ctx) =>
    Option.isSome(ctx)
      ? withCaptured
      : Effect.provideService(
        withCaptured,
        ToolContext.ToolContext,
        ToolContext.make({ runId: "standalone", step: 0, callId: validated.call.id })
      )) as Effect.Effect<string, unknown>
}

/** The report of a handler that failed (ordinary error or timeout). */
const handlerFailure = (tool: Tool.Any, error: unknown): ExecutionReport => {
  const outcome = error instanceof ToolTimeout
    ? ActionOutcome.executed(`ToolTimeout: ${error.tool} exceeded ${Duration.format(error.timeout)}`)
    : Predicate.isTagged(error, "ToolEnvironmentError")
    ? ActionOutcome.envError(errorMessage(error))
    : ActionOutcome.executed(describeFailure(error))
  return { outcome, handlerFailed: true, tool: Option.some(tool) }
}

/** How a handler's success or failure becomes its report; made once per tool (a step allocates nothing for it). */
interface Reports {
  readonly onSuccess: (observation: string) => ExecutionReport
  readonly onFailure: (error: unknown) => ExecutionReport
}

const reportsByTool = new WeakMap<Tool.Any, Reports>()

const reportsOf = (tool: Tool.Any): Reports => {
  let reports = reportsByTool.get(tool)
  if (reports === undefined) {
    const some = Option.some(tool)
    reports = {
      onSuccess: (observation) => ({ outcome: ActionOutcome.executed(observation), handlerFailed: false, tool: some }),
      onFailure: (error) => handlerFailure(tool, error)
    }
    reportsByTool.set(tool, reports)
  }
  return reports
}

const runHandler = (
  validated: ValidatedCall,
  handler: (args: unknown) => Effect.Effect<string, unknown, unknown>,
  services: HandlerServices
): Effect.Effect<ExecutionReport> => {
  const tool = validated.tool
  // Suspended: the handler is called when the effect runs, and a throw becomes a defect.
  const provided = provideHandler(validated, Effect.suspend(() => handler(validated.args)), services)
  const timed: Effect.Effect<string, unknown> =
    tool.timeout === undefined
      ? provided
      : Effect.timeoutFail(provided, {
          duration: tool.timeout,
          onTimeout: () => new ToolTimeout(tool.name, tool.timeout!)
        })
  return timed.pipe(
    Effect.match(reportsOf(tool)),
    // A thrown exception or a defect in a handler is an ordinary failure of the action. Only
    // defects are handled here, and only when the handler was not interrupted: a cause that
    // carries an interruption (e.g. a finalizer that died while the handler was interrupted)
    // passes through untouched, defect included. (`catchAllDefect` would recover from it.)
    Effect.catchSomeCause((cause) =>
      Cause.isInterrupted(cause)
        ? Option.none()
        : Option.map(Cause.dieOption(cause), (defect) =>
          Effect.succeed<ExecutionReport>({
            outcome: ActionOutcome.executed(describeFailure(defect)),
            handlerFailed: true,
            tool: Option.some(tool)
          }))
    ),
    Tracing.withSpanIfTraced("ToolRegistry.execute", () => ({ "polyloop.tool": tool.name, "polyloop.call_id": validated.call.id }))
  )
}

const makeRegistry = <R>(tools: ReadonlyArray<Tool.Any>): ToolRegistry<R> => {
  const byName = new Map<string, Tool.Any>()
  for (const tool of tools) byName.set(tool.name, tool)
  const names = tools.map((t) => t.name)
  let view: ReadonlyArray<ToolDefinition> | undefined
  const decoders = new Map<string, (u: unknown) => Either.Either<unknown, ParseResult.ParseError>>()
  const decoderFor = (tool: Tool.Any) => {
    let decoder = decoders.get(tool.name)
    if (decoder === undefined) {
      decoder = Schema.decodeUnknownEither(tool.parameters, { errors: "all", onExcessProperty: "error" })
      decoders.set(tool.name, decoder)
    }
    return decoder
  }
  const validate = (call: ToolCall): Either.Either<ValidatedCall, UnknownTool | InvalidArguments> => {
    const tool = byName.get(call.name)
    if (tool === undefined) return Either.left(new UnknownTool({ name: call.name, available: names }))
    const decoded = decoderFor(tool)(call.arguments)
    return Either.isLeft(decoded)
      ? Either.left(new InvalidArguments({ tool: tool.name, issues: formatIssues(decoded.left) }))
      : Either.right({ call, tool, args: decoded.right })
  }
  const registry: ToolRegistry<R> = {
    tools,
    names,
    get: (name) => Option.fromNullable(byName.get(name)),
    modelView: () => {
      if (view === undefined) {
        view = tools.map((tool) => ({
          name: tool.name,
          description: tool.description,
          parameters: tool.jsonSchema ?? JSONSchema.make(tool.parameters)
        }))
      }
      return view
    },
    validate,
    restrictTo: (wanted) => {
      const missing = wanted.find((name) => !byName.has(name))
      if (missing !== undefined) return Either.left(new UnknownTool({ name: missing, available: names }))
      const keep = new Set(wanted)
      return Either.right(makeRegistry<R>(tools.filter((tool) => keep.has(tool.name))))
    },
    executor: () =>
      Effect.suspend(() => {
        const missing = tools.filter((tool) => tool.handler === undefined).map((tool) => tool.name)
        if (missing.length > 0) return Effect.fail(new MissingToolHandler({ tools: missing }))
        // The services the handlers need are captured now; a `ToolContext` that happens to be in
        // scope at derivation is dropped, so it can never shadow the one of the call being served.
        return Effect.map(Effect.context<never>(), (context) => {
          const rest = Context.omit(ToolContext.ToolContext)(context)
          // Handlers that need no service get nothing provided but their ToolContext.
          const captured = rest.unsafeMap.size === 0 ? undefined : rest
          const executeReport = (action: Action, toolContext?: ToolContext.ToolContext.Service): Effect.Effect<ExecutionReport> => {
            if (action._tag !== "ToolCall") {
              return Effect.succeed({
                outcome: ActionOutcome.notExecuted(
                  `this executor runs tool calls; it was given a ${action.language} code action (two action languages crossed)`
                ),
                handlerFailed: false,
                tool: Option.none()
              })
            }
            const validated = validate(action)
            if (Either.isLeft(validated)) {
              return Effect.succeed({ outcome: ActionOutcome.notExecuted(validated.left.message), handlerFailed: false, tool: Option.none() })
            }
            const call = validated.right
            return runHandler(call, call.tool.handler as (args: unknown) => Effect.Effect<string, unknown, unknown>, { captured, toolContext })
          }
          const derived: DerivedExecutor = {
            [DerivedExecutorTypeId]: DerivedExecutorTypeId,
            registry: registry as ToolRegistry<unknown>,
            executeReport,
            captured,
            execute: (action) => Effect.map(executeReport(action), (report) => report.outcome),
            // An action this executor refuses (wrong language, unknown tool, invalid arguments)
            // never reaches a handler, so running it again on resume only refuses it again:
            // "Always" keeps the resumed history identical to an uninterrupted run's.
            replayPolicy: (action): ReplayPolicy =>
              action._tag === "ToolCall"
                ? Either.match(validate(action), {
                    onLeft: () => "Always",
                    onRight: ({ tool }) => tool.replayPolicy
                  })
                : "Always"
          }
          return derived
        })
      })
  }
  return registry
}

/** Tools given twice under one name. */
export class DuplicateToolName extends Schema.TaggedError<DuplicateToolName>()("DuplicateToolName", {
  names: Schema.Array(Schema.String)
}) {
  override get message(): string {
    return `tool name(s) registered twice: ${this.names.join(", ")}`
  }
}

/** Makes a registry, failing with `DuplicateToolName` if two tools share a name. */
export const makeEither = <const Tools extends ReadonlyArray<Tool.Any>>(
  ...tools: Tools
): Either.Either<ToolRegistry<ContextOf<Tools>, MissingOf<Tools>>, DuplicateToolName> => {
  const seen = new Set<string>()
  const duplicates = new Set<string>()
  for (const tool of tools) {
    if (seen.has(tool.name)) duplicates.add(tool.name)
    seen.add(tool.name)
  }
  if (duplicates.size > 0) return Either.left(new DuplicateToolName({ names: [...duplicates] }))
  // The type's claim about handlers is checked by `executor` at run time all the same.
  return Either.right(makeRegistry<ContextOf<Tools>>(tools) as ToolRegistry<ContextOf<Tools>, MissingOf<Tools>>)
}

/** Makes a registry. Two tools sharing a name is a programming error: it throws `DuplicateToolName`. */
export const make = <const Tools extends ReadonlyArray<Tool.Any>>(...tools: Tools): ToolRegistry<ContextOf<Tools>, MissingOf<Tools>> =>
  Either.getOrThrowWith(makeEither(...tools), (error) => error)

/** The empty registry. */
export const empty: ToolRegistry<never, never> = makeRegistry<never>([]) as ToolRegistry<never, never>

/**
 * The derived executor as an `ActionExecutor` layer. For a registry of `Tool.Handled` tools (every
 * tool made with its handler) the layer cannot fail; otherwise it fails with `MissingToolHandler`.
 */
export const layerExecutor = <R, E>(
  registry: ToolRegistry<R, E>
): Layer.Layer<ActionExecutor, E, Exclude<R, ToolContext.ToolContext>> =>
  Layer.effect(ActionExecutor, registry.executor())
