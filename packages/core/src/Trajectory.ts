/**
 * Trajectory exports of a run log (design 0170), for tools outside polyloop:
 *
 * - `openaiChat`: one JSON object per run in the OpenAI Chat Completions shape — `messages`
 *   exactly as the model saw them (the history rebuilt from the log with the loop's own
 *   rendering, the final reply included), `tool_calls` with `type: "function"`, `tool`
 *   messages with `tool_call_id` — and `tools` (the function definitions). The format most
 *   fine-tuning and evaluation tools read.
 * - `atif`: the Agent Trajectory Interchange Format (Harbor, RFC 0001, `ATIF-v1.4`): a system
 *   step, the task as a user step, one agent step per model reply with its tool calls, the
 *   observations the model was sent back, and token metrics; run data (stop reason, snapshot
 *   hash, a fork's parent) under `extra`.
 *
 * Both are built from the rebuilt history, not from any record kind's layout, so records other
 * issues add do not need a case here. An interrupted step (a reply with no completed step) is
 * not part of the history, so it is not exported.
 *
 * @since 0.1.0
 */
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Option from "effect/Option"
import type { StoreError } from "./Errors.js"
import * as History from "./internal/history.js"
import * as Recorded from "./internal/recorded.js"
import * as LogFile from "./LogFile.js"
import type * as Message from "./Message.js"
import * as RunLog from "./RunLog.js"
import * as StopReason from "./StopReason.js"

/** A JSON object. */
export type JsonObject = { readonly [key: string]: unknown }

/** An OpenAI chat message (the subset polyloop writes). */
export type OpenAiMessage =
  | { readonly role: "system"; readonly content: string }
  | { readonly role: "user"; readonly content: string }
  | {
    readonly role: "assistant"
    readonly content: string | null
    /** A mutable array type, as the `openai` package's message types expect. */
    readonly tool_calls?: Array<{
      readonly id: string
      readonly type: "function"
      readonly function: { readonly name: string; readonly arguments: string }
    }>
  }
  | { readonly role: "tool"; readonly tool_call_id: string; readonly content: string }

/** An OpenAI function tool definition. */
export interface OpenAiTool {
  readonly type: "function"
  readonly function: { readonly name: string; readonly description: string; readonly parameters: JsonObject }
}

/** One run in the OpenAI chat format. */
export interface OpenAiChat {
  readonly messages: ReadonlyArray<OpenAiMessage>
  readonly tools: ReadonlyArray<OpenAiTool>
}

const toOpenAi = (message: Message.Message): OpenAiMessage => {
  switch (message._tag) {
    case "System":
      return { role: "system", content: message.text }
    case "User":
      return { role: "user", content: message.text }
    case "Assistant":
      return message.toolCalls.length === 0
        ? { role: "assistant", content: message.text }
        : {
          role: "assistant",
          content: message.text === "" ? null : message.text,
          tool_calls: message.toolCalls.map((call) => ({ id: call.id, type: "function", function: { name: call.name, arguments: call.argumentsText } }))
        }
    case "Tool":
      return { role: "tool", tool_call_id: message.callId, content: message.text }
  }
}

const isObject = (value: unknown): value is JsonObject => typeof value === "object" && value !== null && !Array.isArray(value)

const withRecorded = <A>(log: RunLog.RunLog, f: (recorded: Recorded.Recorded, messages: ReadonlyArray<Message.Message>) => A) =>
  Effect.suspend(() => {
    const fixed = Recorded.fromLog(log)
    if (Either.isLeft(fixed)) {
      const runId = Option.match(log.started, { onNone: () => "?", onSome: (s) => s.runId })
      return Effect.fail(Recorded.unreadable(runId, `cannot export: ${fixed.left}`))
    }
    return Effect.map(Recorded.messages(fixed.right, log), (messages) => f(fixed.right, messages))
  })

/** The run as the OpenAI chat format (see the module header). Fails for the empty log or an unreadable snapshot. */
export const openaiChat = (log: RunLog.RunLog): Effect.Effect<OpenAiChat, StoreError> =>
  withRecorded(log, (recorded, messages) => ({
    messages: messages.map(toOpenAi),
    tools: recorded.tools.map((tool) => ({
      type: "function",
      function: { name: tool.name, description: tool.description, parameters: isObject(tool.parameters) ? tool.parameters : {} }
    }))
  }))

/** The ATIF version written. */
export const atifVersion = "ATIF-v1.4"

/** An ATIF step (the fields polyloop writes). */
export interface AtifStep {
  readonly step_id: number
  readonly timestamp?: string
  readonly source: "system" | "user" | "agent"
  readonly model_name?: string
  readonly message: string
  readonly tool_calls?: ReadonlyArray<{ readonly tool_call_id: string; readonly function_name: string; readonly arguments: JsonObject }>
  readonly observation?: {
    readonly results: ReadonlyArray<{
      readonly source_call_id?: string
      readonly content: string
      /** A sub-agent's child run (design 0392): its own trajectory, exported under its run id. */
      readonly subagent_trajectory_ref?: ReadonlyArray<{ readonly session_id: string }>
    }>
  }
  readonly metrics?: { readonly prompt_tokens: number; readonly completion_tokens: number }
  readonly extra?: JsonObject
}

/** An ATIF trajectory (the fields polyloop writes). */
export interface Atif {
  readonly schema_version: typeof atifVersion
  readonly session_id: string
  readonly agent: { readonly name: string; readonly version: string; readonly model_name?: string; readonly extra?: JsonObject }
  readonly steps: ReadonlyArray<AtifStep>
  readonly notes?: string
  readonly final_metrics: {
    readonly total_prompt_tokens: number
    readonly total_completion_tokens: number
    readonly total_steps: number
    readonly extra?: JsonObject
  }
  readonly extra?: JsonObject
}

/** A tool call's arguments as an ATIF object: the parsed JSON object, or the raw text under `_raw`. */
const argumentsObject = (text: string): JsonObject => {
  try {
    const value: unknown = JSON.parse(text)
    return isObject(value) ? value : { _raw: text }
  } catch {
    return { _raw: text }
  }
}

const iso = (millis: number): string | undefined => {
  const date = new Date(millis)
  return Number.isNaN(date.getTime()) ? undefined : date.toISOString()
}

/** The run as an ATIF trajectory (see the module header). Fails for the empty log or an unreadable snapshot. */
export const atif = (log: RunLog.RunLog): Effect.Effect<Atif, StoreError> =>
  withRecorded(log, (recorded, messages): Atif => {
    const snapshot = recorded.snapshot
    const model = snapshot.agent.modelSettings.model
    const started = recorded.started
    const timestamp = iso(started.startedAt)
    const steps: Array<AtifStep> = [
      { step_id: 1, ...(timestamp === undefined ? {} : { timestamp }), source: "system", message: snapshot.agent.systemPrompt },
      { step_id: 2, source: "user", message: started.task }
    ]
    let promptTokens = 0
    let completionTokens = 0
    // messages: System, User, then per completed step its Assistant message and the feedback sent back.
    let i = 2
    for (let k = 0; k < log.steps.length; k++) {
      const assistant = messages[i]
      if (assistant === undefined || assistant._tag !== "Assistant") break
      i++
      const feedback: Array<Message.Message> = []
      while (i < messages.length && messages[i]!._tag !== "Assistant") feedback.push(messages[i++]!)
      // A conversation's next message enters the history after the step its turn before ended
      // at (design 0300): it is the person's step, not part of this step's observation.
      const spoke = log.userMessages.filter((m) => log.turns.some((t) => t.turn === m.turn - 1 && t.atStep === k + 1))
      feedback.splice(feedback.length - spoke.length, spoke.length)
      const completed = log.steps[k]!
      const decision = completed.decision
      const toolCalls = assistant.toolCalls.length > 0
        ? assistant.toolCalls.map((call) => ({ tool_call_id: call.id, function_name: call.name, arguments: argumentsObject(call.argumentsText) }))
        : decision._tag === "Act"
        ? decision.actions.flatMap((action, index) =>
          action._tag === "ToolCall"
            ? [{
              tool_call_id: History.callIdOf(action, k, index),
              function_name: action.name,
              arguments: isObject(action.arguments) ? action.arguments : { _value: action.arguments }
            }]
            : []
        )
        : []
      const single = toolCalls.length === 1 ? toolCalls[0]!.tool_call_id : undefined
      const stepResults = completed.resultIds.map((id) => log.results.find((r) => r.resultId === id)).filter((r) => r !== undefined)
      // A sub-agent's call points at its child's trajectory (design 0392).
      const childOf = (callId: string | undefined) => {
        const result = callId === undefined ? undefined : stepResults.find((r) => r.action._tag === "ToolCall" && r.action.id === callId)
        return result?.child === undefined ? {} : { subagent_trajectory_ref: [{ session_id: result.child.runId }] }
      }
      const results = feedback.map((message) =>
        message._tag === "Tool"
          ? { source_call_id: message.callId, content: message.text, ...childOf(message.callId) }
          : single !== undefined
          ? { source_call_id: single, content: message.text, ...childOf(single) }
          : { content: message.text }
      )
      const usage = completed.usage
      promptTokens += usage.inputTokens
      completionTokens += usage.outputTokens
      steps.push({
        step_id: steps.length + 1,
        source: "agent",
        ...(model === undefined ? {} : { model_name: model }),
        message: assistant.text,
        ...(toolCalls.length === 0 ? {} : { tool_calls: toolCalls }),
        ...(results.length === 0 ? {} : { observation: { results } }),
        metrics: { prompt_tokens: usage.inputTokens, completion_tokens: usage.outputTokens },
        extra: {
          polyloop_step: k,
          decision: decision._tag,
          ...(decision._tag === "Act" && decision.actions[0]._tag === "CodeAction"
            ? { code_action: { language: decision.actions[0].language, code: decision.actions[0].code } }
            : {}),
          // One result: its status; several (design 0150): each one's, in call order.
          ...(stepResults.length === 1
            ? { status: stepResults[0]!.outcome.status, observation_is_synthetic: stepResults[0]!.outcome.observationIsSynthetic }
            : stepResults.length > 1
            ? { statuses: stepResults.map((r) => r.outcome.status), observations_are_synthetic: stepResults.map((r) => r.outcome.observationIsSynthetic) }
            : {})
        }
      })
      for (const m of spoke) {
        const at = iso(m.at)
        steps.push({ step_id: steps.length + 1, ...(at === undefined ? {} : { timestamp: at }), source: "user", message: m.text, extra: { polyloop_turn: m.turn, message_id: m.messageId } })
      }
    }
    const finished = Option.getOrUndefined(log.finished)
    return {
      schema_version: atifVersion,
      session_id: started.runId,
      agent: {
        name: snapshot.agent.name,
        version: `polyloop ${snapshot.polyloop}`,
        ...(model === undefined ? {} : { model_name: model }),
        extra: { parser: snapshot.parser, snapshot_hash: started.snapshotHash, model_settings: snapshot.agent.modelSettings }
      },
      steps,
      notes: "Exported by polyloop: step 1 is the system prompt, step 2 the task, then one agent step per model reply (extra.polyloop_step).",
      final_metrics: {
        total_prompt_tokens: promptTokens,
        total_completion_tokens: completionTokens,
        total_steps: steps.length,
        extra: {
          polyloop_steps: log.steps.length,
          effective_steps: log.steps.filter((s) => s.effective).length
        }
      },
      extra: {
        finished: finished !== undefined,
        ...(finished === undefined ? {} : { stop_reason: StopReason.format(finished.stopReason), finished_at: iso(finished.finishedAt) }),
        ...(started.forkedFrom === undefined ? {} : { forked_from: { run_id: started.forkedFrom.runId, step: started.forkedFrom.step } })
      }
    }
  })

/** The export formats of a run: the records as stored (`jsonl`, `json`) or a trajectory format. */
export type Format = "jsonl" | "json" | "openai-chat" | "atif"

/** A run's export as text in `format` (one line for `jsonl`/`openai-chat`, a document for `json`/`atif`). */
export const render = (log: RunLog.RunLog, format: Format): Effect.Effect<string, StoreError> => {
  switch (format) {
    case "jsonl":
      return Effect.sync(() => LogFile.toJsonl(log))
    case "json":
      return Effect.sync(() => LogFile.toJson(log))
    case "openai-chat":
      return Effect.map(openaiChat(log), (chat) => `${JSON.stringify(chat)}\n`)
    case "atif":
      return Effect.map(atif(log), (trajectory) => `${JSON.stringify(trajectory, null, 2)}\n`)
  }
}
