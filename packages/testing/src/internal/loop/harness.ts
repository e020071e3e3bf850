/**
 * The loop suite's harness: how a concern's test runs `Agent.run` over the store under test
 * (`Harness`), what a concern file is given (`SuiteContext`), and the helpers several concerns
 * share (requests, log comparison, failing writes, the six-step run and its boundaries).
 *
 * @internal
 */
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as ActionExecutor from "@polyloop/core/ActionExecutor"
import * as Agent from "@polyloop/core/Agent"
import * as AgentDefinition from "@polyloop/core/AgentDefinition"
import * as DecisionParser from "@polyloop/core/DecisionParser"
import { type ConcurrentWriter, type RunError, StoreError } from "@polyloop/core/Errors"
import * as EventSink from "@polyloop/core/EventSink"
import * as Ids from "@polyloop/core/Ids"
import type * as Message from "@polyloop/core/Message"
import type * as ModelClient from "@polyloop/core/ModelClient"
import * as ModelReply from "@polyloop/core/ModelReply"
import * as RunLog from "@polyloop/core/RunLog"
import * as RunLogStore from "@polyloop/core/RunLogStore"
import * as ToolContext from "@polyloop/core/ToolContext"
import * as ToolRegistry from "@polyloop/core/ToolRegistry"
import * as ScriptedModel from "../../ScriptedModel.js"
import { agent, call, parser, say } from "./fixtures.js"
import { type Assert, type EffectVitest } from "../vitest.js"

export interface Services {
  readonly model: Layer.Layer<ModelClient.ModelClient>
  /** Default: the derived executor of the request's tools. */
  readonly executor?: ActionExecutor.ActionExecutor.Service
  readonly parser?: DecisionParser.DecisionParser.Service
  readonly sink?: Layer.Layer<EventSink.EventSink>
  /** Default: the store under test. */
  readonly store?: RunLogStore.RunLogStore.Service
}

/** A request whose tools' handlers need at most their `ToolContext`. */
export interface SuiteRequest extends Agent.RunRequest {
  readonly tools: ToolRegistry.ToolRegistry<ToolContext.ToolContext>
}

export interface Harness {
  readonly store: RunLogStore.RunLogStore.Service
  readonly run: (request: SuiteRequest, services: Services) => Effect.Effect<Agent.RunResult, RunError>
  readonly log: (runId: Ids.RunId) => Effect.Effect<RunLog.RunLog, StoreError>
}

export const makeHarness = (store: RunLogStore.RunLogStore.Service): Harness => ({
  store,
  log: (runId) => store.readLog(runId),
  run: (request, services) =>
    Effect.gen(function*() {
      const executor = services.executor ?? (yield* Effect.orDie(request.tools.executor()))
      return yield* Agent.run(request).pipe(
        Effect.provide(
          Layer.mergeAll(
            services.model,
            ActionExecutor.layer(executor),
            DecisionParser.layer(services.parser ?? parser),
            services.sink ?? EventSink.layerNoop,
            Layer.succeed(RunLogStore.RunLogStore, services.store ?? store)
          )
        )
      )
    })
})

export const request = (
  runId: string,
  tools: ToolRegistry.ToolRegistry<ToolContext.ToolContext>,
  overrides?: Partial<Parameters<typeof AgentDefinition.make>[0]>,
  task = "Do the task."
): SuiteRequest => ({ runId: Ids.runId(runId), agent: agent(overrides), task, tools })

/** The log as records without sequence numbers, resume records and resume counts (to compare runs). */
export const comparable = (log: RunLog.RunLog): ReadonlyArray<unknown> =>
  RunLog.records(log)
    .filter((record) => record._tag !== "RunResumed")
    .map((record) => {
      const { seq: _seq, ...rest } = record
      // The model's share of a step's time is not known for a step whose reply was logged before a resume.
      if (rest._tag === "StepCompleted") {
        const { modelElapsed: _model, ...step } = rest
        return step
      }
      if (rest._tag === "ModelReplied") {
        const { modelElapsed: _model, ...replied } = rest
        return replied
      }
      if (rest._tag === "RunFinished") return { ...rest, counters: { ...rest.counters, resumedCount: 0 } }
      return rest
    })

export const resultOfStep = (log: RunLog.RunLog, step: number) => log.results.find((r) => r.step === step)

export const lastMessages = (requests: ReadonlyArray<ScriptedModel.SeenRequest>, step: number, n: number): ReadonlyArray<Message.Message> => {
  const seen = requests.filter((r) => r.call.step === step)
  const messages = seen[seen.length - 1]?.request.messages ?? []
  return messages.slice(messages.length - n)
}

/** A store whose chosen writes fail with `StoreError` (before reaching the store). */
export const failingWrites = (
  store: RunLogStore.RunLogStore.Service,
  fails: (kind: "start" | "appendReply" | "appendResults" | "completeStep" | "appendResume" | "finish", step: number) => boolean
): RunLogStore.RunLogStore.Service => {
  const guard = <A>(kind: Parameters<typeof fails>[0], step: number, runId: Ids.RunId, write: Effect.Effect<A, StoreError | ConcurrentWriter>) =>
    Effect.suspend(() =>
      fails(kind, step)
        ? Effect.fail(new StoreError({ reason: "Unavailable", runId, message: `injected: ${kind} of step ${step} failed` }))
        : write
    )
  return {
    ...store,
    start: (record) => guard("start", -1, record.runId, store.start(record)),
    appendReply: (runId, record) => guard("appendReply", record.step, runId, store.appendReply(runId, record)),
    appendResults: (runId, results) => guard("appendResults", results[0].step, runId, store.appendResults(runId, results)),
    completeStep: (runId, results, step) => guard("completeStep", step.step, runId, store.completeStep(runId, results, step)),
    appendResume: (runId, record) => guard("appendResume", record.fromStep, runId, store.appendResume(runId, record)),
    finish: (runId, record) => guard("finish", record.counters.steps, runId, store.finish(runId, record))
  }
}

/** The six-step run used by the resume tests: native calls, a Never tool twice, an invalid reply. */
export const sixSteps: ReadonlyArray<ModelReply.ModelReply> = [
  call("echo", { text: "a" }),
  call("write", { key: "k1", value: "v1" }),
  say("let me think about it"),
  call("write", { key: "k2", value: "v2" }),
  call("echo", { text: "b" }),
  call("submit", { answer: "42" })
]

export type Boundary =
  | { readonly at: "model"; readonly step: number }
  | { readonly at: "tool"; readonly step: number }
  | { readonly at: "durable"; readonly step: number }

export const boundaries: ReadonlyArray<Boundary> = [
  ...[0, 1, 2, 3, 4, 5].map((step): Boundary => ({ at: "model", step })),
  ...[0, 1, 3, 4, 5].map((step): Boundary => ({ at: "tool", step })),
  ...[0, 1, 2, 3, 4, 5].map((step): Boundary => ({ at: "durable", step }))
]

export const describeBoundary = (b: Boundary): string =>
  b.at === "model"
    ? `during the model call of step ${b.step}`
    : b.at === "tool"
    ? `inside the tool handler of step ${b.step}`
    : `after step ${b.step} is durable`

/** What a concern file gets to register its tests (see `AgentLoopSuite.ts`). */
export interface SuiteContext {
  readonly describe: EffectVitest["describe"]
  /** A test on TestClock (time moves only when a test moves it), with a fresh store. */
  readonly test: <A, E>(title: string, body: (h: Harness) => Effect.Effect<A, E>) => void
  /** A test on the live clock (model retries sleep for real, briefly), with a fresh store. */
  readonly liveTest: <A, E>(title: string, body: (h: Harness) => Effect.Effect<A, E>) => void
  readonly assert: Assert
}

/** A concern: registers its `describe` blocks and tests. */
export type Concern = (ctx: SuiteContext) => void
