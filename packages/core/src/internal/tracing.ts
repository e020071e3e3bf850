/**
 * Spans on hot paths. Effect's built-in tracer keeps spans in memory where nobody outside the
 * process sees them, and a span costs more than a whole loop step; so per-step spans are made
 * only when another tracer is installed (`@effect/opentelemetry`, DevTools, a test tracer).
 *
 * @internal
 */
import * as Effect from "effect/Effect"
import type * as Tracer from "effect/Tracer"
import type { Action } from "../Action.js"
import type { ModelReply } from "../ModelReply.js"
import type { ModelSettings } from "../ModelSettings.js"
import { actionName } from "./actions.js"

/** Effect's built-in tracer. @internal */
export const builtInTracer: Tracer.Tracer = Effect.runSync(Effect.tracer)

/** Is a tracer other than the built-in one installed? @internal */
export const isTraced = (tracer: Tracer.Tracer): boolean => tracer !== builtInTracer

/** `Effect.withSpan` (no stack trace) when a tracer listens, else the effect itself. @internal */
export const withSpanIfTraced = (name: string, attributes: () => Record<string, unknown>) =>
<A, E, R>(effect: Effect.Effect<A, E, R>): Effect.Effect<A, E, R> =>
  Effect.tracerWith((tracer) =>
    isTraced(tracer) ? Effect.withSpan(effect, name, { attributes: attributes(), captureStackTrace: false }) : effect
  )

/** The GenAI semantic-convention attribute names (design 0212; public as `Telemetry.Attributes`). @internal */
export const GenAi = {
  operationName: "gen_ai.operation.name",
  providerName: "gen_ai.provider.name",
  agentName: "gen_ai.agent.name",
  requestModel: "gen_ai.request.model",
  requestTemperature: "gen_ai.request.temperature",
  requestTopP: "gen_ai.request.top_p",
  requestMaxTokens: "gen_ai.request.max_tokens",
  requestSeed: "gen_ai.request.seed",
  requestStopSequences: "gen_ai.request.stop_sequences",
  responseFinishReasons: "gen_ai.response.finish_reasons",
  usageInputTokens: "gen_ai.usage.input_tokens",
  usageOutputTokens: "gen_ai.usage.output_tokens",
  toolName: "gen_ai.tool.name",
  toolCallId: "gen_ai.tool.call.id",
  toolType: "gen_ai.tool.type"
} as const

/** The run span's attributes: an `invoke_agent`. @internal */
export const runAttributes = (runId: string, agentName: string): Record<string, unknown> => ({
  "polyloop.run_id": runId,
  "polyloop.agent": agentName,
  [GenAi.operationName]: "invoke_agent",
  [GenAi.agentName]: agentName
})

/** The model span's attributes before the call: a `chat` with the settings that are set. @internal */
export const modelAttributes = (runId: string, step: number, settings: ModelSettings): Record<string, unknown> => {
  const attributes: Record<string, unknown> = { "polyloop.run_id": runId, "polyloop.step": step, [GenAi.operationName]: "chat" }
  if (settings.model !== undefined) attributes[GenAi.requestModel] = settings.model
  if (settings.temperature !== undefined) attributes[GenAi.requestTemperature] = settings.temperature
  if (settings.topP !== undefined) attributes[GenAi.requestTopP] = settings.topP
  if (settings.maxOutputTokens !== undefined) attributes[GenAi.requestMaxTokens] = settings.maxOutputTokens
  if (settings.seed !== undefined) attributes[GenAi.requestSeed] = settings.seed
  if (settings.stop !== undefined) attributes[GenAi.requestStopSequences] = settings.stop
  return attributes
}

/** Annotates the model span with the reply's usage and finish reason. @internal */
export const annotateReply = (reply: ModelReply): Effect.Effect<void> => {
  // The conventions record the provider's own word (`tool_calls`, `end_turn`, …).
  const finishReason = reply.rawFinishReason ?? reply.finishReason
  return Effect.annotateCurrentSpan(
    finishReason === undefined
      ? { [GenAi.usageInputTokens]: reply.usage.inputTokens, [GenAi.usageOutputTokens]: reply.usage.outputTokens }
      : {
        [GenAi.usageInputTokens]: reply.usage.inputTokens,
        [GenAi.usageOutputTokens]: reply.usage.outputTokens,
        [GenAi.responseFinishReasons]: [finishReason]
      }
  )
}

/** The action span's attributes: an `execute_tool` naming the tool (or the code's language) and the call. @internal */
export const actionAttributes = (runId: string, step: number, index: number, action: Action, callId: string): Record<string, unknown> => {
  const name = actionName(action)
  const attributes: Record<string, unknown> = {
    "polyloop.run_id": runId,
    "polyloop.step": step,
    "polyloop.call_index": index,
    "polyloop.action": name,
    "polyloop.call_id": callId,
    [GenAi.operationName]: "execute_tool",
    [GenAi.toolName]: name,
    [GenAi.toolCallId]: callId
  }
  if (action._tag === "ToolCall") attributes[GenAi.toolType] = "function"
  return attributes
}
