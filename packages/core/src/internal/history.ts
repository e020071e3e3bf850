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
import type * as RunLog from "../RunLog.js"
import * as SyntheticObservations from "../SyntheticObservations.js"
import type { ToolRegistry } from "../ToolRegistry.js"
import { actionName, callIdOf, syntheticCallId } from "./actions.js"

// What an action is called lives in `actions.ts` (design 0390: `tracing.ts` needs it without
// this module, which needs `ToolRegistry`); re-exported for the loop's modules.
export { actionName, callIdOf, syntheticCallId }

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

/**
 * A reply whose tool calls without an id (an empty one: Gemini's OpenAI endpoint, a client that
 * does not invent ids, a scripted reply) get the deterministic one of the call at that index,
 * `call_<step>` then `call_<step>_<index>` (issue 29). The loop applies it to every reply before
 * it is logged, whatever the client and whether it streamed, so the logged reply, the history
 * and the actions agree on one id; the same reply when every call has one. @internal
 */
export const assignReplyCallIds = (reply: ModelReply, step: number): ModelReply => {
  const calls = reply.toolCalls
  let missing = false
  for (let i = 0; i < calls.length; i++) if (calls[i]!.id === "") missing = true
  if (!missing) return reply
  return { ...reply, toolCalls: calls.map((call, i) => (call.id === "" ? { ...call, id: syntheticCallId(step, i) } : call)) }
}

/**
 * A decision whose tool calls without an id get the deterministic one (`call_<step>`, then
 * `call_<step>_<index>`); the same decision when none lacks one. @internal
 */
export const assignCallId = (decision: ParsedReply, step: number): ParsedReply => {
  if (decision._tag !== "Act") return decision
  const actions = decision.actions
  let missing = false
  for (let i = 0; i < actions.length; i++) {
    const action = actions[i]!
    if (action._tag === "ToolCall" && action.id === "") missing = true
  }
  if (!missing) return decision
  const [first, ...rest] = actions.map((action, i) =>
    action._tag === "ToolCall" && action.id === "" ? { ...action, id: syntheticCallId(step, i) } : action
  )
  return { _tag: "Act", actions: [first!, ...rest] }
}

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
 * - `Act`: each native tool call of the reply is answered by a `Tool` message with the
 *   observation of the action that has its id (the first such action not used yet, in call
 *   order); a call no action answers gets a fixed "not run" text; the observations of actions
 *   that answer no native call (text action languages) go into one `User` message, each through
 *   the observation template, joined by a blank line. `results[i]` is the result of action i;
 * - `InvalidDecision` / `NoAction` → the explanation / the `noAction` text, as `Tool` answers to
 *   the reply's calls when it has some (providers require every call to be answered), else as
 *   a `User` message;
 * - `Finish` → the reply only.
 * A one-action step renders exactly as before design 0150.
 * @internal
 */
export const appendStep = (
  messages: Messages,
  reply: ModelReply,
  decision: ParsedReply,
  results: ReadonlyArray<RunLog.ActionResulted>,
  texts: Texts
): void => {
  messages.push({ _tag: "Assistant", text: reply.text, toolCalls: reply.toolCalls })
  if (decision._tag === "Finish") return
  const calls = reply.toolCalls
  if (decision._tag === "Act") {
    if (decision.actions.length === 1) appendOne(messages, calls, decision.actions[0], results[0]?.outcome.observation ?? "", texts)
    else appendMany(messages, calls, decision.actions, results, texts)
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

const appendOne = (messages: Messages, calls: ModelReply["toolCalls"], action: Action, observation: string, texts: Texts): void => {
  const nativeId = action._tag === "ToolCall" && action.id !== "" ? action.id : undefined
  let answered = false
  for (let i = 0; i < calls.length; i++) {
    const call = calls[i]!
    if (!answered && call.id === nativeId) {
      answered = true
      messages.push({ _tag: "Tool", callId: call.id, name: call.name, text: observation })
    } else {
      messages.push({ _tag: "Tool", callId: call.id, name: call.name, text: notRunCallText })
    }
  }
  if (!answered) messages.push({ _tag: "User", text: renderObservation(texts.observationParts, observation) })
}

const appendMany = (
  messages: Messages,
  calls: ModelReply["toolCalls"],
  actions: ReadonlyArray<Action>,
  results: ReadonlyArray<RunLog.ActionResulted>,
  texts: Texts
): void => {
  // The actions waiting for their call, by id, in call order (linear overall).
  const byId = new Map<string, { readonly indices: Array<number>; next: number }>()
  for (let i = 0; i < actions.length; i++) {
    const action = actions[i]!
    if (action._tag !== "ToolCall" || action.id === "") continue
    const waiting = byId.get(action.id)
    if (waiting === undefined) byId.set(action.id, { indices: [i], next: 0 })
    else waiting.indices.push(i)
  }
  const answered = new Array<boolean>(actions.length).fill(false)
  for (let c = 0; c < calls.length; c++) {
    const call = calls[c]!
    const waiting = byId.get(call.id)
    const index = waiting === undefined ? undefined : waiting.indices[waiting.next++]
    if (index === undefined) {
      messages.push({ _tag: "Tool", callId: call.id, name: call.name, text: notRunCallText })
    } else {
      answered[index] = true
      messages.push({ _tag: "Tool", callId: call.id, name: call.name, text: results[index]?.outcome.observation ?? "" })
    }
  }
  const rest: Array<string> = []
  for (let i = 0; i < actions.length; i++) {
    if (!answered[i]) rest.push(renderObservation(texts.observationParts, results[i]?.outcome.observation ?? ""))
  }
  if (rest.length > 0) messages.push({ _tag: "User", text: rest.join("\n\n") })
}
