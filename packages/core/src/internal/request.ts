/**
 * What a run is asked and what it answers (SPEC §7): the request, the result, the services the
 * loop needs, and the snapshot a request runs under. `Agent.ts` re-exports them.
 *
 * @internal
 */
import * as Either from "effect/Either"
import * as Schema from "effect/Schema"
import { JsonValue } from "./jsonValue.js"
import { ActionExecutor } from "../ActionExecutor.js"
import * as AgentDefinition from "../AgentDefinition.js"
import { DecisionParser } from "../DecisionParser.js"
import * as EventSink from "../EventSink.js"
import { RunId } from "../Ids.js"
import { Usage } from "../ModelReply.js"
import { StopReason } from "../StopReason.js"
import { ModelClient } from "../ModelClient.js"
import * as RunLog from "../RunLog.js"
import { RunLogStore } from "../RunLogStore.js"
import * as Snapshot from "../Snapshot.js"
import type { ToolRegistry } from "../ToolRegistry.js"

/** What to run: an agent on a task with a registry of tools, under a caller-chosen run id. */
export interface RunRequest<A = unknown> {
  readonly runId: RunId
  /** The agent; with an output schema (`AgentDefinition<A>`), the result's `output` is an `A` (design 0400). */
  readonly agent: AgentDefinition.AgentDefinition<A>
  readonly task: string
  /**
   * The tools the model sees (their schemas, replay policies and completion markers are in the
   * snapshot). When the `ActionExecutor` in context is a registry's derived executor, it must
   * have been derived from this registry.
   */
  readonly tools: ToolRegistry<unknown>
  /**
   * Stream the model's replies (design 0180): each reply is announced piece by piece as
   * `ModelDelta` events while it arrives, then logged whole as before. Not in the snapshot (it
   * changes nothing the model sees): a run may resume with or without it. Default false.
   */
  readonly streaming?: boolean | undefined
}

/** How a run ended; the same value every time `run` is called on a finished run id. */
export const RunResult = Schema.Struct({
  runId: RunId,
  stopReason: StopReason,
  steps: Schema.NonNegativeInt,
  effectiveSteps: Schema.NonNegativeInt,
  usage: Usage,
  /** How many times the run was resumed. */
  resumedCount: Schema.NonNegativeInt,
  /**
   * Events the sink failed to deliver during the attempt that finished the run (an attempt
   * that was interrupted or crashed leaves no count). The `RunFinished` event itself is emitted
   * after its record is durable, so its own delivery is not in the count.
   */
  eventDeliveryFailures: Schema.NonNegativeInt,
  /** A conversation's turn (design 0300): the counters are that turn's. Absent for a single-task run. */
  turn: Schema.optional(Schema.NonNegativeInt),
  /**
   * What the run's sub-agents cost, over all descendants (design 0392); absent when it had none.
   * `steps` and `usage` above are the run's own.
   */
  children: Schema.optional(RunLog.ChildTotals),
  /**
   * The answer encoded by the agent's output schema (a JSON value, design 0400), as
   * `RunFinished.output` records it: what crosses a wire. Absent without an output schema, or
   * when the run did not complete with an answer.
   */
  encodedOutput: Schema.optional(JsonValue)
})
/**
 * How a run ended. `output` (design 0400): the answer decoded by the agent's output schema — the
 * typed value, not in the schema (`encodedOutput` is what is encoded); absent when the agent has
 * no output schema or the run did not complete with an answer.
 *
 * @since 0.1.0
 */
export interface RunResult<A = unknown> extends Schema.Schema.Type<typeof RunResult> {
  readonly output?: A
}

/** The services `run` needs. */
export type Requirements = ModelClient | DecisionParser | ActionExecutor | RunLogStore | EventSink.EventSink

/** The result recorded in a `RunFinished` record. */
export const resultOf = (runId: RunId, finished: RunLog.RunFinished): RunResult => ({
  runId,
  stopReason: finished.stopReason,
  steps: finished.counters.steps,
  effectiveSteps: finished.counters.effectiveSteps,
  usage: finished.counters.usage,
  resumedCount: finished.counters.resumedCount,
  eventDeliveryFailures: finished.eventDeliveryFailures,
  ...(finished.counters.children === undefined ? {} : { children: finished.counters.children }),
  ...(finished.output === undefined ? {} : { encodedOutput: finished.output })
})

/**
 * The snapshot a request runs under (the decision parser's `id` is part of it).
 * `defaultParallelToolCalls` is the value of an unset `parallelToolCalls` (see `Snapshot.Input`).
 */
export const snapshotOf = (request: RunRequest, parserId: string, defaultParallelToolCalls: boolean = true): Snapshot.Encoded =>
  Snapshot.encodeInput({ agent: request.agent, task: request.task, tools: request.tools, parserId, defaultParallelToolCalls })

/** A turn's result, from its `TurnFinished`. */
export const turnResultOf = (runId: RunId, ended: RunLog.TurnFinished): RunResult => ({
  runId,
  stopReason: ended.stopReason,
  steps: ended.counters.steps,
  effectiveSteps: ended.counters.effectiveSteps,
  usage: ended.counters.usage,
  resumedCount: ended.counters.resumedCount,
  eventDeliveryFailures: 0,
  turn: ended.turn,
  ...(ended.counters.children === undefined ? {} : { children: ended.counters.children }),
  ...(ended.output === undefined ? {} : { encodedOutput: ended.output })
})

/**
 * The result with its typed `output`: `encodedOutput` decoded by the agent's output schema
 * (design 0400), or the parse error's text when the schema no longer decodes it (a finished run
 * asked again under a changed schema). A result without `encodedOutput`, or an agent without an
 * output schema, is returned as it is.
 */
export const withOutput = <A>(agent: AgentDefinition.AgentDefinition<A>, result: RunResult): Either.Either<RunResult<A>, string> => {
  if (agent.output === undefined || result.encodedOutput === undefined) return Either.right(result as RunResult<A>)
  return Either.map(agent.output.decodeRecorded(result.encodedOutput), (output): RunResult<A> => ({ ...result, output }))
}
