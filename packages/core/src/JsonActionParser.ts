/**
 * The decision parser for tool calls written as JSON in the reply text (GovDoc's case,
 * SPEC §10): finds exactly one JSON object in free text (prose around it and a ```json code
 * fence are tolerated) and reads a tool call or a final answer out of it.
 *
 * Accepted forms (key names configurable; defaults shown):
 * - `{"tool": "read", "arguments": {"path": "a"}}` — nested arguments;
 * - `{"tool": "read", "path": "a"}` — the same action, arguments flattened onto the action
 *   level. The nested form is exactly a tool key plus one arguments key holding an object (or
 *   `null`, or a string holding a JSON object: arguments encoded twice); anything else is read
 *   as flattened (so a tool may have a parameter called `args`);
 * - `{"name": ...}` instead of `{"tool": ...}`; when several tool keys are present, the first in
 *   `toolKeys` order names the tool and the others are arguments;
 * - `{"final_answer": "..."}` (the `finishKey`) → `Finish`; a non-string answer is rendered as
 *   JSON text. Optionally a `finishTool` name: calling it is `Finish` with its answer argument.
 *
 * - a JSON **array** of such objects (design 0150) → `Act` with one action per element, in
 *   order; an element that does not read as a tool call makes the whole reply `InvalidDecision`
 *   (naming the element), as does a final answer among tool calls. Whether several actions run
 *   in one step is the agent's `parallelToolCalls`.
 *
 * Each way of failing has its own explanation: no JSON object, several objects, malformed JSON
 * (with line and column, in engine-independent words), a truncated object, an object without a
 * tool name, a tool name that is not a string, a final answer mixed with a tool call. A blank
 * reply is `NoAction`. Braces in ordinary prose (`{a, b}`) are not taken for JSON.
 *
 * Text action languages have no call ids from the model: the `ToolCall` this parser produces
 * has `id: ""`, and the loop assigns the deterministic id `call_<step>` (SPEC §4). Native tool
 * calls in `reply.toolCalls` are not read; use `NativeToolCallParser` for those.
 *
 * The parser never fails, never throws on any input, is linear in the reply's length, and is
 * deterministic (SPEC §5). It reads the text only through `String` methods and `JSON.parse`
 * (never `text[i]`), so that the linearity test can count every character it reads.
 *
 * @since 0.1.0
 */
import * as Layer from "effect/Layer"
import { type Action, ToolCall } from "./Action.js"
import { DecisionParser, fromDecide } from "./DecisionParser.js"
import * as Json from "./internal/json.js"
import type { ModelReply } from "./ModelReply.js"
import * as ParsedReply from "./ParsedReply.js"

/** A tool whose call means "finish": its `answerKey` argument (default `"answer"`) is the answer. */
export interface FinishTool {
  readonly name: string
  readonly answerKey?: string
}

/** Options of the JSON action parser. */
export interface Options {
  /** Keys that name the tool, in order of precedence. Default `["tool", "name"]`. */
  readonly toolKeys?: ReadonlyArray<string>
  /** Keys that may hold the nested arguments, in order of precedence. Default `["arguments", "args"]`. */
  readonly argumentsKeys?: ReadonlyArray<string>
  /** A key whose presence makes the object a final answer; `null` disables. Default `"final_answer"`. */
  readonly finishKey?: string | null
  /** A tool name that means "finish". Default: none. */
  readonly finishTool?: FinishTool | null
}

/** Options with their defaults filled in. */
export interface ResolvedOptions {
  readonly toolKeys: ReadonlyArray<string>
  readonly argumentsKeys: ReadonlyArray<string>
  readonly finishKey: string | null
  readonly finishTool: { readonly name: string; readonly answerKey: string } | null
}

/** Fills in the defaults. */
export const resolveOptions = (options: Options = {}): ResolvedOptions => ({
  toolKeys: options.toolKeys ?? ["tool", "name"],
  argumentsKeys: options.argumentsKeys ?? ["arguments", "args"],
  finishKey: options.finishKey === undefined ? "final_answer" : options.finishKey,
  finishTool:
    options.finishTool === undefined || options.finishTool === null
      ? null
      : { name: options.finishTool.name, answerKey: options.finishTool.answerKey ?? "answer" }
})

/** The stable id of a parser with these options: its name and its resolved options as JSON. */
export const idOf = (options: Options = {}): string => {
  const r = resolveOptions(options)
  return `JsonActionParser(${JSON.stringify({
    toolKeys: r.toolKeys,
    argumentsKeys: r.argumentsKeys,
    finishKey: r.finishKey,
    finishTool: r.finishTool === null ? null : { name: r.finishTool.name, answerKey: r.finishTool.answerKey }
  })})`
}

const hasOwn = (object: object, key: string): boolean => Object.prototype.hasOwnProperty.call(object, key)

const quote = (key: string): string => JSON.stringify(key)

const keyList = (keys: ReadonlyArray<string>): string => keys.map(quote).join(" or ")

/** A short excerpt of a span of text for an explanation, on one line, between backticks. */
const excerpt = (text: string): string => {
  const short = text.length > 60 ? `${text.slice(0, 57)}...` : text
  let flat = ""
  for (const c of short) flat += c === "\n" || c === "\r" || c === "\t" ? " " : c === "`" ? "'" : c
  return "`" + flat + "`"
}

const answerText = (value: unknown): string => {
  if (typeof value === "string") return value
  const parsed = JSON.stringify(value)
  return parsed === undefined ? "" : parsed
}

/**
 * The value of an arguments key as nested arguments: an object, `null` (no arguments), or a
 * string holding a JSON object (arguments encoded twice, as native tool-call APIs send them).
 * Anything else is not nested arguments (`undefined`): the key is then an ordinary argument.
 */
const nestedArguments = (value: unknown): Readonly<Record<string, unknown>> | undefined => {
  if (value === null) return {}
  if (Json.isObject(value)) return value
  if (typeof value === "string") {
    const parsed = Json.parse(value)
    if (parsed._tag === "Ok" && Json.isObject(parsed.value)) return parsed.value
  }
  return undefined
}

/** The pure decision function behind `make(options).parse`. Total and deterministic. */
export const decide = (options: Options = {}): ((reply: ModelReply) => ParsedReply.ParsedReply) => {
  const r = resolveOptions(options)
  const shape = `{${quote(r.toolKeys[0] ?? "tool")}: "<tool name>", ${quote(r.argumentsKeys[0] ?? "arguments")}: {...}}`
  const finishHint = r.finishKey === null ? "" : `, or {${quote(r.finishKey)}: "<answer>"} to finish`
  const howTo = `Reply with exactly one JSON object of the form ${shape}${finishHint}.`

  const interpret = (object: Readonly<Record<string, unknown>>): ParsedReply.ParsedReply => {
    const toolKey = r.toolKeys.find((key) => hasOwn(object, key))
    if (r.finishKey !== null && hasOwn(object, r.finishKey)) {
      if (toolKey !== undefined) {
        return ParsedReply.invalid(
          `Your JSON object has both a final answer (${quote(r.finishKey)}) and a tool call (${quote(toolKey)}); do one or the other. ${howTo}`
        )
      }
      return ParsedReply.finish(answerText(object[r.finishKey]))
    }
    if (toolKey === undefined) {
      const keys = Object.keys(object)
      const found = keys.length === 0 ? "it is empty" : `its keys are ${keys.slice(0, 10).map(quote).join(", ")}${keys.length > 10 ? ", ..." : ""}`
      return ParsedReply.invalid(`Your JSON object does not name a tool: it has no ${keyList(r.toolKeys)} key (${found}). ${howTo}`)
    }
    const name = object[toolKey]
    if (typeof name !== "string" || name.length === 0) {
      return ParsedReply.invalid(
        `The ${quote(toolKey)} field of your JSON object must be a non-empty string naming the tool; it is ${excerpt(answerText(name))}. ${howTo}`
      )
    }
    const rest = Object.keys(object).filter((key) => key !== toolKey)
    let args: unknown
    const only = rest.length === 1 ? rest[0] : undefined
    const nested = only !== undefined && r.argumentsKeys.includes(only) ? nestedArguments(object[only]) : undefined
    if (nested !== undefined) {
      args = nested
    } else {
      // Flattened: every other key is an argument. `Object.fromEntries` defines own properties,
      // so a key such as "__proto__" stays an ordinary key.
      args = Object.fromEntries(rest.map((key) => [key, object[key]]))
    }
    if (r.finishTool !== null && name === r.finishTool.name) {
      const answer = Json.isObject(args) ? args[r.finishTool.answerKey] : undefined
      if (typeof answer !== "string") {
        return ParsedReply.invalid(
          `To finish, call ${quote(r.finishTool.name)} with a string argument ${quote(r.finishTool.answerKey)} holding your answer.`
        )
      }
      return ParsedReply.finish(answer)
    }
    return ParsedReply.act(ToolCall.make({ id: "", name, arguments: args }))
  }

  /** The elements of an array of actions: all must be tool calls. */
  const interpretAll = (objects: ReadonlyArray<Readonly<Record<string, unknown>>>): ParsedReply.ParsedReply => {
    const actions: Array<Action> = []
    for (let i = 0; i < objects.length; i++) {
      const decision = interpret(objects[i]!)
      switch (decision._tag) {
        case "Act":
          actions.push(...decision.actions)
          break
        case "InvalidDecision":
          return ParsedReply.invalid(`In element ${i + 1} of your array of actions: ${decision.explanation}`)
        default:
          return ParsedReply.invalid(
            `Element ${i + 1} of your array of actions is a final answer; finish in a reply of its own, without tool calls. ${howTo}`
          )
      }
    }
    const [first, ...rest] = actions
    return first === undefined ? ParsedReply.noAction : ParsedReply.actAll([first, ...rest])
  }

  return (reply) => {
    const text = reply.text
    if (text.trim().length === 0) return ParsedReply.noAction
    const candidates = Json.findObjectCandidates(text)
    const attempts: Array<Attempt> = []
    for (const candidate of candidates) {
      const source = text.slice(candidate.start, Math.min(candidate.end, candidate.start + 80))
      if (!candidate.terminated) {
        attempts.push({ _tag: "Unterminated", source })
        continue
      }
      // Candidates are disjoint, so trying each is linear in the text; the problem of a
      // malformed one is described only if it is the one reported (describing locates it by
      // line from the start of the text: describing every one would be quadratic).
      const parsed = Json.opensObject(text, candidate.start) ? Json.tryParse(text, candidate.start, candidate.end) : undefined
      if (parsed !== undefined) {
        if (Json.isObject(parsed.value)) attempts.push({ _tag: "Object", value: parsed.value, start: candidate.start, end: candidate.end })
      } else if (Json.looksLikeObject(text, candidate.start)) {
        attempts.push({ _tag: "Malformed", start: candidate.start, end: candidate.end, source })
      }
      // Otherwise: braces in prose, not an attempt at JSON.
    }
    if (attempts.length === 0) {
      return ParsedReply.invalid(`Your reply contains no JSON object, so no action was taken. ${howTo}`)
    }
    if (attempts.length > 1) {
      const array = arrayOf(text, attempts)
      if (array !== undefined) return interpretAll(array)
      return ParsedReply.invalid(
        `Your reply contains ${attempts.length} JSON objects; this agent takes one action per step. ${howTo}`
      )
    }
    const attempt = attempts[0]!
    switch (attempt._tag) {
      case "Unterminated":
        return ParsedReply.invalid(
          `Your JSON object starting with ${excerpt(attempt.source)} is not closed (a "}" is missing; was the reply cut off?). ${howTo}`
        )
      case "Malformed": {
        const parsed = Json.parse(text, attempt.start, attempt.end)
        const problem = parsed._tag === "Error" ? parsed.problem : "it is not valid JSON"
        return ParsedReply.invalid(
          `Your JSON object starting with ${excerpt(attempt.source)} is not valid JSON: ${problem}. ${howTo}`
        )
      }
      case "Object":
        return interpret(attempt.value)
    }
  }
}

/** A JSON object found in the text, one that does not parse, or one that is not closed. */
type Attempt =
  | FoundObject
  | { readonly _tag: "Malformed"; readonly start: number; readonly end: number; readonly source: string }
  | { readonly _tag: "Unterminated"; readonly source: string }

interface FoundObject {
  readonly _tag: "Object"
  readonly value: Readonly<Record<string, unknown>>
  readonly start: number
  readonly end: number
}

const isSpace = (c: number): boolean => c === 0x20 || c === 0x0a || c === 0x0d || c === 0x09

/**
 * The objects found, when they are exactly the elements of one JSON array (`[` before the first,
 * `]` after the last, the span valid JSON); else `undefined`. Linear in the text.
 */
const arrayOf = (text: string, attempts: ReadonlyArray<Attempt>): ReadonlyArray<Readonly<Record<string, unknown>>> | undefined => {
  const objects: Array<FoundObject> = []
  for (const attempt of attempts) {
    if (attempt._tag !== "Object") return undefined
    objects.push(attempt)
  }
  let open = objects[0]!.start - 1
  while (open >= 0 && isSpace(text.charCodeAt(open))) open--
  if (open < 0 || text.charCodeAt(open) !== 0x5b) return undefined
  let close = objects[objects.length - 1]!.end
  while (close < text.length && isSpace(text.charCodeAt(close))) close++
  if (close >= text.length || text.charCodeAt(close) !== 0x5d) return undefined
  const parsed = Json.tryParse(text, open, close + 1)
  if (parsed === undefined || !Array.isArray(parsed.value) || parsed.value.length !== objects.length) return undefined
  return objects.map((o) => o.value)
}

/** Makes the parser. */
export const make = (options: Options = {}): DecisionParser.Service => fromDecide(idOf(options), decide(options))

/** The parser as the `DecisionParser` layer. */
export const layer = (options: Options = {}): Layer.Layer<DecisionParser> => Layer.succeed(DecisionParser, make(options))
