/**
 * History rendering and state rebuild for the loop. Rendering appends to one growing message
 * array (linear in the number of steps); the same `appendStep` renders a live step and a step
 * read back from the log, so a resumed run shows the model exactly what an uninterrupted one did.
 *
 * @internal
 */
import type { Action } from "../Action.js"
import type * as Message from "../Message.js"
import type { ModelReply } from "../ModelReply.js"
import type { ParsedReply } from "../ParsedReply.js"
import * as SyntheticObservations from "../SyntheticObservations.js"
import type { ToolRegistry } from "../ToolRegistry.js"

/** @internal */
export type Messages = Array<Message.Message>

/** Texts fixed for a whole run (all derived from the snapshot). @internal */
export interface Texts {
  readonly synthetic: SyntheticObservations.SyntheticObservations
  /** The registry's names joined by ", " (`(none)` for an empty registry). */
  readonly tools: string
  /** The `noAction` text, filled. */
  readonly noAction: string
  /** The observation template split around `{observation}`. */
  readonly observationParts: ReadonlyArray<string>
  readonly observationLimit: number | undefined
}

/** Answers the tool calls of a reply that the step did not execute. @internal */
export const notRunCallText = "This tool call was not run: only one action per step is executed."

/** @internal */
export const makeTexts = (options: {
  readonly synthetic: SyntheticObservations.SyntheticObservations
  readonly tools: ToolRegistry<unknown>
  readonly observationTemplate: string
  readonly observationLimit: number | undefined
}): Texts => makeTextsFor({ ...options, toolNames: options.tools.names })

/** `makeTexts` from the tools' names (what a recorded snapshot holds). @internal */
export const makeTextsFor = (options: {
  readonly synthetic: SyntheticObservations.SyntheticObservations
  readonly toolNames: ReadonlyArray<string>
  readonly observationTemplate: string
  readonly observationLimit: number | undefined
}): Texts => {
  const tools = options.toolNames.length === 0 ? "(none)" : options.toolNames.join(", ")
  return {
    synthetic: options.synthetic,
    tools,
    noAction: SyntheticObservations.fill(options.synthetic.noAction, { tool: "", issues: "", tools }),
    observationParts: options.observationTemplate.split("{observation}"),
    observationLimit: options.observationLimit
  }
}

/** The first two messages: the system prompt and the task. @internal */
export const initial = (systemPrompt: string, task: string): Messages => [
  { _tag: "System", text: systemPrompt },
  { _tag: "User", text: task }
]

/** The name the synthetic templates use for an action: the tool's name or the code's language. @internal */
export const actionName = (action: Action): string => (action._tag === "ToolCall" ? action.name : action.language)

/** The call id of an action at a step: the model's id, or `call_<step>` when it has none. @internal */
export const callIdOf = (action: Action, step: number): string =>
  action._tag === "ToolCall" && action.id !== "" ? action.id : `call_${step}`

/** A decision with the deterministic call id `call_<step>` given to a tool call that has none. @internal */
export const assignCallId = (decision: ParsedReply, step: number): ParsedReply =>
  decision._tag === "Act" && decision.action._tag === "ToolCall" && decision.action.id === ""
    ? { _tag: "Act", action: { ...decision.action, id: `call_${step}` } }
    : decision

/**
 * The `{issues}` of a synthetic `notExecuted` text: a pure function of the snapshot (the
 * registry) and the action, never the executor's own words.
 * @internal
 */
export const notExecutedIssues = (action: Action, tools: ToolRegistry<unknown>): string => {
  if (action._tag === "CodeAction") {
    return tools.names.length > 0
      ? `a ${action.language} code action cannot run here; act by calling one of the tools`
      : `the executor refused the ${action.language} code action`
  }
  const validated = tools.validate(action)
  return validated._tag === "Left" ? validated.left.message : "the executor refused the action"
}

/** Fills a synthetic template for an action. @internal */
export const fillFor = (template: string, action: Action, issues: string, texts: Texts): string =>
  SyntheticObservations.fill(template, { tool: actionName(action), issues, tools: texts.tools })

/**
 * Cuts an observation to the limit (UTF-16 code units, never splitting a surrogate pair).
 * Returns the kept text and the number of cut characters.
 * @internal
 */
export const truncate = (text: string, limit: number | undefined): readonly [string, number] => {
  if (limit === undefined || text.length <= limit) return [text, 0]
  let end = limit
  const last = text.charCodeAt(end - 1)
  if (last >= 0xd800 && last <= 0xdbff) end -= 1
  return [text.slice(0, end), text.length - end]
}

const renderObservation = (parts: ReadonlyArray<string>, observation: string): string =>
  parts.length === 1 ? (parts[0] ?? "") : parts.join(observation)

/**
 * Appends one completed step to the history:
 * - the reply as an `Assistant` message (its text and native tool calls);
 * - `Act` on a native tool call of the reply → a `Tool` message answering that call with the
 *   observation; any other call of the reply is answered with a fixed "not run" text;
 * - `Act` in a text action language → a `User` message through the observation template;
 * - `InvalidDecision` / `NoAction` → the explanation / the `noAction` text, as `Tool` answers to
 *   the reply's calls when it has some (providers require every call to be answered), else as
 *   a `User` message;
 * - `Finish` → the reply only.
 * @internal
 */
export const appendStep = (
  messages: Messages,
  reply: ModelReply,
  decision: ParsedReply,
  observation: string | undefined,
  texts: Texts
): void => {
  messages.push({ _tag: "Assistant", text: reply.text, toolCalls: reply.toolCalls })
  if (decision._tag === "Finish") return
  const calls = reply.toolCalls
  if (decision._tag === "Act") {
    const action = decision.action
    const nativeId = action._tag === "ToolCall" && action.id !== "" ? action.id : undefined
    let answered = false
    for (let i = 0; i < calls.length; i++) {
      const call = calls[i]!
      if (!answered && call.id === nativeId) {
        answered = true
        messages.push({ _tag: "Tool", callId: call.id, name: call.name, text: observation ?? "" })
      } else {
        messages.push({ _tag: "Tool", callId: call.id, name: call.name, text: notRunCallText })
      }
    }
    if (!answered) messages.push({ _tag: "User", text: renderObservation(texts.observationParts, observation ?? "") })
    return
  }
  const feedback = decision._tag === "InvalidDecision" ? decision.explanation : texts.noAction
  if (calls.length === 0) {
    messages.push({ _tag: "User", text: feedback })
    return
  }
  for (let i = 0; i < calls.length; i++) {
    const call = calls[i]!
    messages.push({ _tag: "Tool", callId: call.id, name: call.name, text: feedback })
  }
}
