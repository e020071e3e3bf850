/**
 * A sub-agent's call as the loop runs it (design 0392): a child run under an id derived from
 * the parent's run id, step and call id, through the same `Agent.run` (`Run.runChild`), so that
 * a re-run call resumes the child or reads its recorded result and never starts it twice. The
 * child's answer is the call's observation; what it cost is recorded with the call's result
 * (`ActionResulted.child`); its `RunError` (a `Suspended` child included) fails the parent's step
 * with nothing written for the call.
 *
 * @internal
 */
import { createHash } from "node:crypto"
import type * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as FiberRef from "effect/FiberRef"
import type { ToolCall } from "../Action.js"
import * as ActionOutcome from "../ActionOutcome.js"
import type * as AgentDefinition from "../AgentDefinition.js"
import type { DecisionParser } from "../DecisionParser.js"
import { InvalidRunRequest, type StoreError } from "../Errors.js"
import { loneSurrogate, type RunId, runId as makeRunId } from "../Ids.js"
import type { ModelClient } from "../ModelClient.js"
import type * as RunLog from "../RunLog.js"
import * as StopReason from "../StopReason.js"
import type * as Tool from "../Tool.js"
import type { DerivedExecutor, ToolRegistry } from "../ToolRegistry.js"
import { stepsSpent, tokensSpent } from "./judge.js"
import type { RunRequest, RunResult } from "./request.js"
import { type ChildServices, type LoopError, type Run, span } from "./run.js"

/** Where a sub-agent tool keeps what the loop needs to run its child. @internal */
export const SpecTypeId: unique symbol = Symbol.for("@polyloop/core/SubAgent")

/** A sub-agent tool's child: its agent and tools, its task from the call's arguments. @internal */
export interface Spec {
  readonly agent: AgentDefinition.AgentDefinition
  /**
   * The observation of a child's typed answer from its encoded form (`RunResult.encodedOutput`),
   * or the parse error's text; `undefined` when the child's agent has no output schema.
   */
  readonly answer: ((encoded: unknown) => Either.Either<string, string>) | undefined
  readonly tools: ToolRegistry<unknown>
  readonly task: (args: unknown) => string
  /** Derives the child's executor with the services the parent's executor captured. */
  readonly executor: (captured: Context.Context<never> | undefined) => Effect.Effect<DerivedExecutor>
  readonly model: ModelClient.Service | undefined
  readonly parser: DecisionParser.Service | undefined
  readonly capBudget: boolean
}

/** A tool that carries a sub-agent. @internal */
export interface Carrier {
  readonly [SpecTypeId]: Spec
}

/** The sub-agent a tool runs, if it is one. @internal */
export const specOf = (tool: Tool.Any | undefined): Spec | undefined =>
  tool !== undefined && SpecTypeId in tool ? (tool as unknown as Carrier)[SpecTypeId] : undefined

/**
 * What a store cannot keep verbatim in a run id (decision 8): a C0 control character or DEL
 * (PostgreSQL refuses a NUL in text) and a lone surrogate (UTF-8 makes every one U+FFFD, so two
 * such ids would name one child).
 */
const unkeepable = /[\u0000-\u001f\u007f]|[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/

/**
 * The child's run id: `<parent>/<step>/<callId>`, or `child-<sha256>` of the three when that is
 * longer than a run id may be (200 characters) or the call id holds what a store cannot keep
 * verbatim (`child-u16-<sha256>` with a lone surrogate). A function of the call alone: a re-run
 * call names the same child.
 */
export const childRunId = (parent: string, step: number, callId: string): RunId => {
  const plain = `${parent}/${step}/${callId}`
  if (plain.length <= 200 && !unkeepable.test(callId)) return makeRunId(plain)
  const input = `${parent}\u0000${step}\u0000${callId}`
  // UTF-8 is lossless for a well-formed string (the form ids over 200 characters have always
  // been hashed in); with a lone surrogate it is not, so those hash their UTF-16 code units,
  // under a prefix of their own.
  if (loneSurrogate.test(input)) return makeRunId(`child-u16-${createHash("sha256").update(Buffer.from(input, "utf16le")).digest("hex")}`)
  return makeRunId(`child-${createHash("sha256").update(input).digest("hex")}`)
}

/**
 * The child's agent under its parent's budget (decision 4): its steps and tokens at most what
 * the parent has left at the step's start (the calling step counted as one of the parent's) — the parent's state then, which a resume rebuilds
 * identically, so the child's snapshot is the same on every attempt.
 */
export const capped = (run: Run, agent: AgentDefinition.AgentDefinition): AgentDefinition.AgentDefinition => {
  const budget = run.request.agent.budget
  const from = run.state.turnStart
  // The parent's step that makes the call counts too: it completes after its children.
  const stepsLeft = Math.max(1, budget.maxSteps - stepsSpent(run.state, from) - 1)
  const tokensLeft = budget.maxTokens === undefined ? undefined : Math.max(1, budget.maxTokens - tokensSpent(run.state, from))
  const maxSteps = Math.min(agent.budget.maxSteps, stepsLeft)
  const maxTokens = tokensLeft === undefined ? agent.budget.maxTokens : Math.min(agent.budget.maxTokens ?? tokensLeft, tokensLeft)
  if (maxSteps === agent.budget.maxSteps && maxTokens === agent.budget.maxTokens) return agent
  return { ...agent, budget: { ...agent.budget, maxSteps, ...(maxTokens === undefined ? {} : { maxTokens }) } }
}

/**
 * Where a child without a model of its own gets one other than its parent's (design 0392): set
 * by `Replay.run`, which serves each child the recorded child's replies. `undefined` for the
 * parent's model.
 * @internal
 */
export type ChildModels = (parentRunId: RunId, childRunId: RunId, step: number, callId: string) => Effect.Effect<ModelClient.Service | undefined, StoreError>

/** @internal */
export const childModels: FiberRef.FiberRef<ChildModels | undefined> = FiberRef.unsafeMake<ChildModels | undefined>(undefined)

/** What a sub-agent's call reports: its outcome, and its child. @internal */
export interface Report {
  readonly outcome: ActionOutcome.ActionOutcome
  readonly handlerFailed: boolean
  readonly child?: RunLog.ChildRun
}

/** The child as its parent records it. */
const recordOf = (result: RunResult): RunLog.ChildRun => ({
  runId: result.runId,
  stopReason: result.stopReason,
  steps: result.steps,
  effectiveSteps: result.effectiveSteps,
  usage: result.usage,
  ...(result.children === undefined ? {} : { children: result.children })
})

/**
 * The call's outcome from the child's result: its answer (typed: as `spec.answer` renders it),
 * or how it stopped without one.
 */
const outcomeOf = (name: string, spec: Spec, result: RunResult): Effect.Effect<Report, InvalidRunRequest> => {
  const child = recordOf(result)
  const reason = result.stopReason
  if (reason._tag === "Completed") {
    if (spec.answer !== undefined && result.encodedOutput !== undefined) {
      // A finished child asked again under an output schema that no longer decodes its recorded
      // answer: refused as `Agent.run` refuses it at the top (design 0400, decision 4).
      const rendered = spec.answer(result.encodedOutput)
      if (Either.isLeft(rendered)) {
        return Effect.fail(new InvalidRunRequest({ runId: result.runId, issues: `the recorded output does not decode with the agent's output schema: ${rendered.left}` }))
      }
      return Effect.succeed({ outcome: ActionOutcome.executed(rendered.right), handlerFailed: false, child })
    }
    const observation = reason.answer ?? `sub-agent ${name} completed (run ${result.runId}; its environment reported completion)`
    return Effect.succeed({ outcome: ActionOutcome.executed(observation), handlerFailed: false, child })
  }
  if (reason._tag === "EnvError") {
    return Effect.succeed({ outcome: ActionOutcome.envError(`sub-agent ${name} (run ${result.runId}) stopped on an environment error: ${reason.message}`), handlerFailed: false, child })
  }
  return Effect.succeed({
    outcome: ActionOutcome.executed(
      `sub-agent ${name} (run ${result.runId}) stopped without an answer: ${StopReason.format(reason)} after ${result.steps} steps`
    ),
    handlerFailed: true,
    child
  })
}

/**
 * Runs a sub-agent's call as a child run; `undefined` when the call's tool is not a sub-agent.
 * Invalid arguments are `NotExecuted`, as for any tool; the child's `RunError` fails the step.
 * @internal
 */
export const call = (run: Run, step: number, action: ToolCall, callId: string): Effect.Effect<Report, LoopError> | undefined => {
  const tool = run.request.tools.get(action.name)
  const spec = specOf(tool._tag === "Some" ? tool.value : undefined)
  if (spec === undefined) return undefined
  const validated = run.request.tools.validate(action)
  if (Either.isLeft(validated)) return Effect.succeed({ outcome: ActionOutcome.notExecuted(validated.left.message), handlerFailed: false })
  const childId = childRunId(run.runId, step, callId)
  const model: Effect.Effect<ModelClient.Service, StoreError> = spec.model !== undefined
    ? Effect.succeed(spec.model)
    : Effect.flatMap(FiberRef.get(childModels), (models) =>
      models === undefined ? Effect.succeed(run.model) : Effect.map(models(run.runId, childId, step, callId), (served) => served ?? run.model))
  return Effect.flatMap(Effect.zip(spec.executor(run.derived?.captured), model), ([executor, childModel]) => {
    const request: RunRequest = {
      runId: childId,
      agent: spec.capBudget ? capped(run, spec.agent) : spec.agent,
      task: spec.task(validated.right.args),
      tools: spec.tools,
      streaming: run.streaming
    }
    const services: ChildServices = { executor, model: childModel, parser: spec.parser ?? run.parser }
    return Effect.flatMap(run.runChild(request, services), (result) => outcomeOf(action.name, spec, result))
  }).pipe(span(run, "Agent.subAgent", () => ({ "polyloop.run_id": run.runId, "polyloop.step": step, "polyloop.child_run_id": childId })))
}
