/**
 * The decision parser for models with native tool calling (SPEC §10): the decision is read
 * from `reply.toolCalls`, not from the text.
 *
 * - one call → `Act(ToolCall)` with the model's call id and the arguments parsed as JSON
 *   (empty or blank `argumentsText`, which some providers send for a call without arguments,
 *   is `{}`); arguments that are not JSON → `InvalidDecision` naming the tool and the problem
 *   (line and column, in engine-independent words, so the explanation is reproducible);
 * - several calls → `Act` with all of them, in the reply's order (design 0150; the loop turns it
 *   into the "one action per step" `InvalidDecision` when the agent's `parallelToolCalls` is
 *   false); if the arguments of one of them are not JSON, or two share a non-empty id, the whole
 *   reply is `InvalidDecision` naming the call (none of them is run);
 * - no call and some text → `Finish { answer: text }` or `NoAction`, by the `onText` option
 *   (default `"Finish"`);
 * - no call and blank text → `NoAction`.
 *
 * The parser never fails, never throws on any input, and is deterministic (SPEC §5).
 *
 * @since 0.1.0
 */
import * as Layer from "effect/Layer"
import type { Action, ToolCall } from "./Action.js"
import { DecisionParser, fromDecide } from "./DecisionParser.js"
import * as Json from "./internal/json.js"
import type { ModelReply } from "./ModelReply.js"
import * as ParsedReply from "./ParsedReply.js"

/** Options of the native tool-call parser. */
export interface Options {
  /** What a reply with text and no tool call means: the final answer (default) or no action. */
  readonly onText?: "Finish" | "NoAction"
}

/** Options with their defaults filled in. */
export interface ResolvedOptions {
  readonly onText: "Finish" | "NoAction"
}

/** Fills in the defaults. */
export const resolveOptions = (options: Options = {}): ResolvedOptions => ({
  onText: options.onText ?? "Finish"
})

/** The stable id of a parser with these options, e.g. `NativeToolCallParser({"onText":"Finish"})`. */
export const idOf = (options: Options = {}): string => {
  const resolved = resolveOptions(options)
  return `NativeToolCallParser(${JSON.stringify({ onText: resolved.onText })})`
}

const isBlank = (text: string): boolean => text.trim().length === 0

/** A tool call (the fields are the reply's own, already strings: no schema validation needed). */
const toolCall = (id: string, name: string, args: unknown): ToolCall => ({ _tag: "ToolCall", id, name, arguments: args })

/** The pure decision function behind `make(options).parse`. Total and deterministic. */
export const decide = (options: Options = {}): ((reply: ModelReply) => ParsedReply.ParsedReply) => {
  const resolved = resolveOptions(options)
  return (reply) => {
    const calls = reply.toolCalls
    if (calls.length > 1) return several(calls)
    const call = calls[0]
    if (call !== undefined) {
      if (isBlank(call.argumentsText)) {
        return ParsedReply.act(toolCall(call.id, call.name, {}))
      }
      const parsed = Json.parse(call.argumentsText)
      if (parsed._tag === "Error") {
        return ParsedReply.invalid(
          `The arguments of your call to ${JSON.stringify(call.name)} are not valid JSON: ${parsed.problem}. Call the tool again with a JSON object as its arguments.`
        )
      }
      return ParsedReply.act(toolCall(call.id, call.name, parsed.value))
    }
    if (isBlank(reply.text)) return ParsedReply.noAction
    return resolved.onText === "Finish" ? ParsedReply.finish(reply.text) : ParsedReply.noAction
  }
}

/** Several calls: all of them, or the first problem (arguments that are not JSON, an id used twice). Linear. */
const several = (calls: ModelReply["toolCalls"]): ParsedReply.ParsedReply => {
  const seen = new Set<string>()
  const actions: Array<Action> = []
  for (let i = 0; i < calls.length; i++) {
    const call = calls[i]!
    if (call.id !== "") {
      if (seen.has(call.id)) {
        return ParsedReply.invalid(
          `Your calls ${i + 1} (${JSON.stringify(call.name)}) and an earlier one share the id ${JSON.stringify(call.id)}; none of your ${calls.length} calls was run. Each call needs its own id.`
        )
      }
      seen.add(call.id)
    }
    if (isBlank(call.argumentsText)) {
      actions.push(toolCall(call.id, call.name, {}))
      continue
    }
    const parsed = Json.parse(call.argumentsText)
    if (parsed._tag === "Error") {
      return ParsedReply.invalid(
        `The arguments of your call ${i + 1} (to ${JSON.stringify(call.name)}) are not valid JSON: ${parsed.problem}. None of your ${calls.length} calls was run. Call the tools again with a JSON object as the arguments of each.`
      )
    }
    actions.push(toolCall(call.id, call.name, parsed.value))
  }
  const [first, ...rest] = actions
  return ParsedReply.actAll([first!, ...rest])
}

/** Makes the parser. */
export const make = (options: Options = {}): DecisionParser.Service => fromDecide(idOf(options), decide(options))

/** The parser as the `DecisionParser` layer. */
export const layer = (options: Options = {}): Layer.Layer<DecisionParser> => Layer.succeed(DecisionParser, make(options))
