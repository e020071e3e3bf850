/**
 * `Agent.layer`: the services a run needs (`Agent.Requirements`) from a few options, so a program
 * provides one layer instead of merging five by hand. The event sink defaults to the no-op sink;
 * the executor to the derived executor of `tools` (what `tools.executor()` makes; `ToolRegistry.layerExecutor` gives the same as a layer).
 *
 * @internal
 */
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import { ActionExecutor } from "../ActionExecutor.js"
import type { DecisionParser } from "../DecisionParser.js"
import * as EventSink from "../EventSink.js"
import type { ModelClient } from "../ModelClient.js"
import type { RunLogStore } from "../RunLogStore.js"
import type * as ToolContext from "../ToolContext.js"
import * as ToolRegistry from "../ToolRegistry.js"

/** The services a run needs (the same union as `Agent.Requirements`). */
export type Requirements = ModelClient | DecisionParser | ActionExecutor | RunLogStore | EventSink.EventSink

interface Common {
  /** Where the run log lives: `SqlRunLogStore.layerSqlite(...)`, `RunLogStore.inMemory()`, … */
  readonly store: Layer.Layer<RunLogStore, unknown, unknown>
  /** The model: `OpenAiCompatible.layerConfig()`, `ScriptedModel.layer(...)`, … */
  readonly model: Layer.Layer<ModelClient, unknown, unknown>
  /** How replies become decisions: `NativeToolCallParser.layer()`, `JsonActionParser.layer()`, … */
  readonly parser: Layer.Layer<DecisionParser, unknown, unknown>
  /** Where the loop's events go; the no-op sink when absent. */
  readonly events?: Layer.Layer<EventSink.EventSink, unknown, unknown>
}

/** The options of `Agent.layer`: the executor is `tools`' derived executor, or given. */
export type Options =
  | Common & {
    /** The registry whose derived executor runs the actions (pass the same one to `Agent.run`). */
    readonly tools: ToolRegistry.ToolRegistry<unknown, unknown>
    readonly executor?: undefined
  }
  | Common & {
    /** An executor of your own (a code runner, a sandbox, …). */
    readonly executor: Layer.Layer<ActionExecutor, unknown, unknown>
    readonly tools?: undefined
  }

type ErrorOf<L> = L extends Layer.Layer<infer _Out, infer E, infer _In> ? E : never
type InputOf<L> = L extends Layer.Layer<infer _Out, infer _E, infer In> ? In : never

type ExecutorOf<O> = O extends { readonly executor: infer L extends Layer.Layer<ActionExecutor, unknown, unknown> } ? L
  : O extends { readonly tools: ToolRegistry.ToolRegistry<infer R, infer E> }
    ? Layer.Layer<ActionExecutor, E, Exclude<R, ToolContext.ToolContext>>
  : never

type Parts<O extends Options> =
  | O["store"]
  | O["model"]
  | O["parser"]
  | (O extends { readonly events: infer L extends Layer.Layer<EventSink.EventSink, unknown, unknown> } ? L : never)
  | ExecutorOf<O>

/**
 * The layer `Agent.layer` returns: its error is any of its parts' errors (a registry of handled
 * tools adds none), its input what the parts need (the tools' handlers' services included).
 */
export type AgentLayer<O extends Options> = Layer.Layer<Requirements, ErrorOf<Parts<O>>, InputOf<Parts<O>>>

/**
 * The services a run needs, from a store, a model, a parser and tools (or an executor). The
 * given parts are built one after the other (design 0214), each on the memo map and scope of
 * the enclosing build (`Layer.extendScope`: memoised there, released with that scope), each
 * with its inputs from outside — what `Layer.mergeAll` of the parts gives, without forking a
 * fiber and two scopes per pair of parts: that cost more than the rest of a short run. The
 * default sink and executor are made in place, after them.
 */
export const layer = <const O extends Options>(options: O): AgentLayer<O> => {
  // Any layer is a `Layer<never, …>` (a layer is contravariant in what it provides); the result's
  // type is named below.
  const given: Array<Layer.Layer<never, unknown, unknown>> = [options.store, options.model, options.parser]
  if (options.events !== undefined) given.push(options.events)
  if (options.executor !== undefined) given.push(options.executor)
  // The defaults are made in place (design 0214, amendment): memoising a layer only this call
  // makes shares nothing, and costs more than the rest of building a short run's services.
  const tools = options.executor === undefined ? options.tools : undefined
  const defaults = (context: Context.Context<Requirements>): Effect.Effect<Context.Context<Requirements>, unknown, unknown> => {
    const withSink = options.events === undefined ? Context.add(context, EventSink.EventSink, EventSink.noop) : context
    return tools === undefined
      ? Effect.succeed(withSink)
      : Effect.map(tools.executor(), (executor) => Context.add(withSink, ActionExecutor, executor))
  }
  const built = Layer.scopedContext(
    Effect.flatMap(Layer.CurrentMemoMap, (memoMap) =>
      Effect.flatMap(Effect.scope, (scope) =>
        Effect.flatMap(
          Effect.reduce(given, Context.empty() as Context.Context<Requirements>, (context, part) =>
            Effect.map(Layer.buildWithMemoMap(Layer.extendScope(part), memoMap, scope), (services) => Context.merge(context, services))),
          defaults
        )))
  )
  // `built`'s error and input are the `unknown` of the options' bounds; `AgentLayer<O>` names
  // the precise ones of the layers actually given.
  return built as unknown as AgentLayer<O>
}
