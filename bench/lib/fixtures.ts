/**
 * What every benchmark runs: one agent, one no-op tool, precomputed tool-call replies, and the
 * layers that put `Agent.run` on the in-memory or the SQLite store.
 */
import * as ActionExecutor from "@polyloop/core/ActionExecutor"
import * as Agent from "@polyloop/core/Agent"
import * as AgentDefinition from "@polyloop/core/AgentDefinition"
import * as DecisionParser from "@polyloop/core/DecisionParser"
import { ModelError, type RunError } from "@polyloop/core/Errors"
import * as EventSink from "@polyloop/core/EventSink"
import * as Ids from "@polyloop/core/Ids"
import * as ModelClient from "@polyloop/core/ModelClient"
import * as ModelReply from "@polyloop/core/ModelReply"
import * as NativeToolCallParser from "@polyloop/core/NativeToolCallParser"
import * as RunLogStore from "@polyloop/core/RunLogStore"
import * as Tool from "@polyloop/core/Tool"
import * as ToolRegistry from "@polyloop/core/ToolRegistry"
import * as ScriptedModel from "@polyloop/testing/ScriptedModel"
import * as Context from "effect/Context"
import * as Layer from "effect/Layer"
import * as Effect from "effect/Effect"
import * as Schema from "effect/Schema"

/** The no-op tool: takes `{ n }`, returns a constant observation. */
export const noop = Tool.make({
  name: "noop",
  description: "Does nothing and says so.",
  parameters: Schema.Struct({ n: Schema.Number }),
  handler: () => Effect.succeed("ok"),
  replayPolicy: "Always"
})

/** The registry of the benchmarks: the no-op tool only. */
export const tools = ToolRegistry.make(noop)

/** The agent; `maxSteps` decides how many steps a run takes (every reply is a tool call). */
export const agent = (maxSteps: number): AgentDefinition.AgentDefinition =>
  AgentDefinition.make({
    name: "bench",
    systemPrompt: "You are a benchmark. Call the noop tool.",
    budget: { maxSteps },
    modelRetry: { ...AgentDefinition.defaultModelRetry, maxAttempts: 1 }
  })

/** The reply of step `k`: one native call of the no-op tool, with its id already set. */
export const replyFor = (step: number): ModelReply.ModelReply =>
  ScriptedModel.toolCall("noop", { n: step }, { id: `call_${step}`, usage: { inputTokens: 10, outputTokens: 5 } })

/** Precomputed replies for steps `0 … count-1`. */
export const replies = (count: number): ReadonlyArray<ModelReply.ModelReply> => Array.from({ length: count }, (_, k) => replyFor(k))

const agents = new Map<number, AgentDefinition.AgentDefinition>()
/** One definition per step budget, as an application defines its agent once (its snapshot's encoding is then cached). */
const agentFor = (maxSteps: number): AgentDefinition.AgentDefinition => {
  let found = agents.get(maxSteps)
  if (found === undefined) agents.set(maxSteps, found = agent(maxSteps))
  return found
}

/** The request of a run of `maxSteps` steps. */
export const request = (runId: string, maxSteps: number): Agent.RunRequest => ({
  runId: Ids.runId(runId),
  agent: agentFor(maxSteps),
  task: "Call the noop tool until the budget runs out.",
  tools
})

/**
 * Parser, executor (derived from the registry) and a no-op event sink, built once: a run is
 * given a ready context, so no layer is built per run (as in an application that provides its
 * layers once and runs many runs).
 */
export const loopServices: Context.Context<DecisionParser.DecisionParser | ActionExecutor.ActionExecutor | EventSink.EventSink> = Context.make(
  DecisionParser.DecisionParser,
  NativeToolCallParser.make()
).pipe(
  Context.add(ActionExecutor.ActionExecutor, Effect.runSync(Effect.orDie(tools.executor()))),
  Context.add(EventSink.EventSink, EventSink.make(() => Effect.void))
)

/** What the benchmark model does besides replying: stop a run at a step, report each call. */
export interface ModelOptions {
  /** The call of this step fails with a non-retryable `ModelError`: the run stops unfinished, resumable. */
  readonly failAt?: number
  /** Called with the step of every call before it replies (e.g. to time steps or to park a run). */
  readonly onCall?: (step: number) => Effect.Effect<void>
}

/**
 * The benchmark's scripted model: replies are precomputed, so a call costs next to nothing. The
 * step of a call is read off the history length (two messages to start, two per step: the
 * reply and the tool's answer), which holds for these runs and after a resume. Unlike
 * `ScriptedModel` it keeps no record of the requests, so memory per run is the loop's own.
 */
export const model = (script: ReadonlyArray<ModelReply.ModelReply>, options: ModelOptions = {}): ModelClient.ModelClient.Service =>
  ModelClient.make((request) => {
    const step = (request.messages.length - 2) / 2
    if (!Number.isInteger(step)) return Effect.dieMessage(`bench model: unexpected history length ${request.messages.length}`)
    const reply: Effect.Effect<ModelReply.ModelReply, ModelError> = step === options.failAt
      ? Effect.fail(new ModelError({ retryable: false, message: `bench: stop at step ${step}` }))
      : Effect.succeed(script[step] ?? replyFor(step))
    return options.onCall === undefined ? reply : Effect.zipRight(options.onCall(step), reply)
  })

/** What a run needs besides its request, for `store` and `modelClient`: provide it once around many runs. */
export const contextOf = (store: RunLogStore.RunLogStore.Service, modelClient: ModelClient.ModelClient.Service) =>
  loopServices.pipe(Context.add(ModelClient.ModelClient, modelClient), Context.add(RunLogStore.RunLogStore, store))

/**
 * `runs` requests at once (all of them concurrently) against one store and one model, their
 * services provided once around them all, as a process carrying many runs has them (`runOn`
 * provides them to each run: a provide per run is the caller's cost, not the run's).
 */
export const runAllOn = (
  store: RunLogStore.RunLogStore.Service,
  modelClient: ModelClient.ModelClient.Service,
  requests: ReadonlyArray<Agent.RunRequest>
): Effect.Effect<void, RunError> =>
  Effect.forEach(requests, Agent.run, { concurrency: "unbounded", discard: true }).pipe(Effect.provide(contextOf(store, modelClient)))

/** Runs one request against a store and a model. */
export const runOn = (
  store: RunLogStore.RunLogStore.Service,
  modelClient: ModelClient.ModelClient.Service,
  req: Agent.RunRequest
): Effect.Effect<Agent.RunResult, RunError> =>
  Agent.run(req).pipe(
    Effect.provide(loopServices.pipe(Context.add(ModelClient.ModelClient, modelClient), Context.add(RunLogStore.RunLogStore, store)))
  )

/**
 * Services for one run, built for it with the one-line wiring an application uses
 * (`Agent.layer`, design 0211): the store layer given, the benchmark model, the native parser,
 * the registry's derived executor and the no-op event sink.
 */
export const servicesFor = <E>(store: Layer.Layer<RunLogStore.RunLogStore, E>, steps: number) =>
  Agent.layer({
    store,
    model: Layer.succeed(ModelClient.ModelClient, model(replies(steps))),
    parser: NativeToolCallParser.layer(),
    tools
  })
