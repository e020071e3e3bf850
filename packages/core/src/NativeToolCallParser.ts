/**
 * The decision parser for models with native tool calling (SPEC §10): the decision is read
 * from `reply.toolCalls`, not from the text.
 *
 * - one call → `Act(ToolCall)` with the model's call id and the arguments parsed as JSON
 *   (empty or blank `argumentsText`, which some providers send for a call without arguments,
 *   is `{}`); arguments that are not JSON → `InvalidDecision` naming the tool and the problem
 *   (line and column, in engine-independent words, so the explanation is reproducible);
 * - several calls → `InvalidDecision` (one action per step);
 * - no call and some text → `Finish { answer: text }` or `NoAction`, by the `onText` option
 *   (default `"Finish"`);
 * - no call and blank text → `NoAction`.
 *
 * The parser never fails, never throws on any input, and is deterministic (SPEC §5).
 *
 * @since 0.1.0
 */
import * as Layer from "effect/Layer"
import type { ToolCall } from "./Action.js"
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
    if (calls.length > 1) {
      const names = calls.map((call) => JSON.stringify(call.name)).join(", ")
      return ParsedReply.invalid(
        `You called ${calls.length} tools at once (${names}); this agent takes one action per step. Call exactly one tool.`
      )
    }
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

/** Makes the parser. */
export const make = (options: Options = {}): DecisionParser.Service => fromDecide(idOf(options), decide(options))

/** The parser as the `DecisionParser` layer. */
export const layer = (options: Options = {}): Layer.Layer<DecisionParser> => Layer.succeed(DecisionParser, make(options))
