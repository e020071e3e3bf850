/**
 * The decision parser for agents that act by writing code (dissect's case, SPEC §10): the
 * action is the one fenced code block of the configured language in the reply text.
 *
 * - exactly one block of the language (or an untagged block, unless `acceptUntagged` is false)
 *   → `Act(CodeAction { language, code })`, with `language` the configured one;
 * - a distinct explanation for each failure: no block, several blocks of the language, only
 *   blocks of another language, an empty block, a fence left open (unterminated, usually a
 *   reply cut off by the token limit);
 * - a final-answer marker gives `Finish`:
 *   - `finalAnswer.line` (e.g. `"Final Answer:"`): a line outside code blocks starting with the
 *     marker; the answer is the rest of that line and every line after it. A reply with both a
 *     code block and a final-answer line is invalid (the model answered before seeing what its
 *     code does);
 *   - `finalAnswer.call` (e.g. `"final_answer"`): a block whose whole code is one call
 *     `final_answer(<literal>)` (optionally `final_answer(answer=<literal>)`): a string
 *     literal gives its text, a number its source text. The parser never evaluates code, so a
 *     call with any other argument (`final_answer(result)`) or among other statements is an
 *     ordinary action: the executor runs it, and may report completion through
 *     `envReportedCompletion`.
 * - a blank reply is `NoAction`.
 *
 * The parser never fails, never throws on any input, is linear in the reply's length (a line
 * scanner, no regular expression over the reply) and is deterministic (SPEC §5). It reads
 * `reply.text` only, and only through `String` methods (never `text[i]`), so that the linearity
 * test can count every character it reads.
 *
 * @since 0.1.0
 */
import * as Layer from "effect/Layer"
import { CodeAction } from "./Action.js"
import { DecisionParser, fromDecide } from "./DecisionParser.js"
import * as Fence from "./internal/fence.js"
import type { ModelReply } from "./ModelReply.js"
import * as ParsedReply from "./ParsedReply.js"

/** How a reply says "this is my final answer". */
export interface FinalAnswer {
  /** A line starting with this marker, outside code blocks (e.g. `"Final Answer:"`). */
  readonly line?: string
  /** A block whose code is exactly one call of this function (e.g. `"final_answer"`). */
  readonly call?: string
}

/** Options of the code block parser. */
export interface Options {
  /** The language of the code blocks to run, as written after the fence (e.g. `"python"`). */
  readonly language: string
  /** Other fence tags accepted as the language (e.g. `["py"]`). Compared case-insensitively. */
  readonly aliases?: ReadonlyArray<string>
  /** Accept a fence with no language tag as the language. Default true. */
  readonly acceptUntagged?: boolean
  /** The final-answer markers. Default: none (a reply without code is then invalid). */
  readonly finalAnswer?: FinalAnswer
}

/** Options with their defaults filled in. */
export interface ResolvedOptions {
  readonly language: string
  readonly aliases: ReadonlyArray<string>
  readonly acceptUntagged: boolean
  readonly finalAnswer: { readonly line: string | null; readonly call: string | null }
}

/** Fills in the defaults (an empty marker counts as none). */
export const resolveOptions = (options: Options): ResolvedOptions => ({
  language: options.language,
  aliases: options.aliases ?? [],
  acceptUntagged: options.acceptUntagged ?? true,
  finalAnswer: {
    line: options.finalAnswer?.line === undefined || options.finalAnswer.line.length === 0 ? null : options.finalAnswer.line,
    call: options.finalAnswer?.call === undefined || options.finalAnswer.call.length === 0 ? null : options.finalAnswer.call
  }
})

/** The stable id of a parser with these options: its name and its resolved options as JSON. */
export const idOf = (options: Options): string => {
  const r = resolveOptions(options)
  return `CodeBlockParser(${JSON.stringify({
    language: r.language,
    aliases: r.aliases,
    acceptUntagged: r.acceptUntagged,
    finalAnswer: { line: r.finalAnswer.line, call: r.finalAnswer.call }
  })})`
}

const isSpace = (c: number): boolean => c === 0x20 || c === 0x09 || c === 0x0a || c === 0x0d

/**
 * If `code` is exactly one call `name(<argument>)` (whitespace and a trailing `;` allowed),
 * returns the argument's source text. Quotes (Python's single, double and triple quotes, and
 * backticks) are skipped while matching parentheses. Linear.
 */
const singleCallArgument = (code: string, name: string): string | undefined => {
  const text = code.trim()
  if (!text.startsWith(name)) return undefined
  let i = name.length
  while (i < text.length && (text.charCodeAt(i) === 0x20 || text.charCodeAt(i) === 0x09)) i++
  if (text.charCodeAt(i) !== 0x28) return undefined
  const open = i
  let depth = 0
  let close = -1
  while (i < text.length) {
    const c = text.charAt(i)
    if (c === "\"" || c === "'" || c === "`") {
      const triple = c !== "`" && text.startsWith(c + c + c, i)
      const delimiter = triple ? c + c + c : c
      i += delimiter.length
      while (i < text.length && !text.startsWith(delimiter, i)) i += text.charCodeAt(i) === 0x5c ? 2 : 1
      i += delimiter.length
      continue
    }
    if (c === "(") depth++
    else if (c === ")") {
      depth--
      if (depth === 0) {
        close = i
        break
      }
    }
    i++
  }
  if (close === -1) return undefined
  let rest = close + 1
  while (rest < text.length && (isSpace(text.charCodeAt(rest)) || text.charCodeAt(rest) === 0x3b)) rest++
  if (rest !== text.length) return undefined
  return text.slice(open + 1, close).trim()
}

const isIdentifierChar = (c: number): boolean =>
  (c >= 0x30 && c <= 0x39) || (c >= 0x41 && c <= 0x5a) || (c >= 0x61 && c <= 0x7a) || c === 0x5f

/** Drops a leading keyword `name=` (not `==`) from a call argument. */
const dropKeyword = (argument: string): string => {
  let i = 0
  while (i < argument.length && isIdentifierChar(argument.charCodeAt(i))) i++
  if (i === 0 || (argument.charCodeAt(0) >= 0x30 && argument.charCodeAt(0) <= 0x39)) return argument
  let j = i
  while (j < argument.length && (argument.charCodeAt(j) === 0x20 || argument.charCodeAt(j) === 0x09)) j++
  if (argument.charCodeAt(j) === 0x3d && argument.charCodeAt(j + 1) !== 0x3d) return argument.slice(j + 1).trim()
  return argument
}

const escapes: Readonly<Record<string, string>> = { n: "\n", t: "\t", r: "\r", "\\": "\\", "'": "'", "\"": "\"", "`": "`", "0": "\0" }

/** If `argument` is one string literal (optionally with a Python r/b/u prefix, not f), its text. */
const stringLiteral = (argument: string): string | undefined => {
  let i = 0
  let raw = false
  while (i < 2 && i < argument.length && "rRbBuUfF".includes(argument.charAt(i))) {
    const prefix = argument.charAt(i)
    // An f-string interpolates: its value is only known when the code runs.
    if (prefix === "f" || prefix === "F") return undefined
    if (prefix === "r" || prefix === "R") raw = true
    i++
  }
  const q = argument.charAt(i)
  if (q !== "\"" && q !== "'" && q !== "`") return undefined
  const delimiter = q !== "`" && argument.startsWith(q + q + q, i) ? q + q + q : q
  const bodyStart = i + delimiter.length
  const bodyEnd = argument.length - delimiter.length
  if (bodyEnd < bodyStart || !argument.endsWith(delimiter)) return undefined
  let out = ""
  for (let k = bodyStart; k < bodyEnd; k++) {
    const c = argument.charAt(k)
    if (c === "\\" && k + 1 < bodyEnd) {
      const next = argument.charAt(k + 1)
      if (raw) {
        out += c + next
      } else {
        out += escapes[next] ?? c + next
      }
      k++
      continue
    }
    // An unescaped closing delimiter inside means this is not one literal (e.g. "a" + "b").
    if (argument.startsWith(delimiter, k)) return undefined
    out += c
  }
  return out
}

/** Is `text` a decimal number literal (`42`, `-1.5`, `3e8`)? Linear, no regular expression. */
const isNumberLiteral = (text: string): boolean => {
  let i = text.charCodeAt(0) === 0x2d || text.charCodeAt(0) === 0x2b ? 1 : 0
  const digits = () => {
    const from = i
    while (i < text.length && text.charCodeAt(i) >= 0x30 && text.charCodeAt(i) <= 0x39) i++
    return i - from
  }
  const whole = digits()
  let fraction = 0
  if (text.charCodeAt(i) === 0x2e) {
    i++
    fraction = digits()
  }
  if (whole + fraction === 0) return false
  if (text.charCodeAt(i) === 0x65 || text.charCodeAt(i) === 0x45) {
    i++
    if (text.charCodeAt(i) === 0x2d || text.charCodeAt(i) === 0x2b) i++
    if (digits() === 0) return false
  }
  return i === text.length
}

/** The pure decision function behind `make(options).parse`. Total and deterministic. */
export const decide = (options: Options): ((reply: ModelReply) => ParsedReply.ParsedReply) => {
  const r = resolveOptions(options)
  const accepted = new Set([r.language, ...r.aliases].map((tag) => tag.toLowerCase()))
  const fence = "```" + r.language
  const finishHint =
    r.finalAnswer.line !== null
      ? ` When you have the answer, write a line starting with ${JSON.stringify(r.finalAnswer.line)} instead of code.`
      : r.finalAnswer.call !== null
      ? ` When you have the answer, call ${r.finalAnswer.call}(<answer>) in a code block of its own.`
      : ""
  const howTo = `Write exactly one code block, opened with ${fence} and closed with \`\`\`.${finishHint}`
  const matches = (block: Fence.Block): boolean =>
    block.language === "" ? r.acceptUntagged : accepted.has(block.language.toLowerCase())

  /** The final-answer line, if any: the text after the marker to the end of the reply. */
  const finalLine = (text: string, outside: Fence.Scan["outside"]): string | undefined => {
    const marker = r.finalAnswer.line
    if (marker === null) return undefined
    for (let k = 0; k + 1 < outside.length; k += 2) {
      const line = text.slice(outside[k], outside[k + 1])
      const trimmed = line.trimStart()
      if (trimmed.startsWith(marker)) {
        const at = outside[k]! + (line.length - trimmed.length) + marker.length
        return text.slice(at).trim()
      }
    }
    return undefined
  }

  return (reply) => {
    const text = reply.text
    if (text.trim().length === 0) return ParsedReply.noAction
    const scan = Fence.scan(text)
    const unterminated = scan.blocks.find((block) => !block.terminated)
    if (unterminated !== undefined) {
      return ParsedReply.invalid(
        `The code block opened on line ${unterminated.line} of your reply is never closed (was the reply cut off?). Close every code block with \`\`\` on a line of its own. ${howTo}`
      )
    }
    const mine = scan.blocks.filter(matches)
    const answer = finalLine(text, scan.outside)
    if (mine.length > 1) {
      return ParsedReply.invalid(
        `Your reply contains ${mine.length} ${r.language} code blocks; this agent runs one code block per step. Put all the code for this step in a single block. ${howTo}`
      )
    }
    const block = mine[0]
    if (block !== undefined) {
      if (block.code.trim().length === 0) {
        return ParsedReply.invalid(`The ${r.language} code block in your reply is empty, so there is nothing to run. ${howTo}`)
      }
      if (answer !== undefined) {
        return ParsedReply.invalid(
          `Your reply contains both code to run and a final answer (${JSON.stringify(r.finalAnswer.line)}); do one or the other: run the code and read its output first, or give the final answer alone.`
        )
      }
      if (r.finalAnswer.call !== null) {
        const argument = singleCallArgument(block.code, r.finalAnswer.call)
        if (argument !== undefined) {
          const value = dropKeyword(argument)
          const answer = stringLiteral(value) ?? (isNumberLiteral(value) ? value : undefined)
          if (answer !== undefined) return ParsedReply.finish(answer)
        }
      }
      return ParsedReply.act(CodeAction.make({ language: r.language, code: block.code }))
    }
    if (answer !== undefined) {
      if (answer.length === 0) {
        return ParsedReply.invalid(`Your final answer (${JSON.stringify(r.finalAnswer.line)}) is empty. Write the answer after the marker.`)
      }
      return ParsedReply.finish(answer)
    }
    const others = scan.blocks.filter((b) => b.language !== "")
    if (others.length > 0) {
      const tags = [...new Set(others.map((b) => b.language))].slice(0, 5).map((tag) => "```" + tag).join(", ")
      return ParsedReply.invalid(
        `Your reply has code in another language (${tags}); this agent runs ${r.language} code only. ${howTo}`
      )
    }
    if (scan.blocks.length > 0) {
      // Only untagged blocks, and untagged blocks are not accepted.
      return ParsedReply.invalid(
        `Your code block has no language tag; this agent runs only blocks tagged ${JSON.stringify(r.language)}. ${howTo}`
      )
    }
    return ParsedReply.invalid(`Your reply contains no ${r.language} code block, so no action was taken. ${howTo}`)
  }
}

/** Makes the parser. */
export const make = (options: Options): DecisionParser.Service => fromDecide(idOf(options), decide(options))

/** The parser as the `DecisionParser` layer. */
export const layer = (options: Options): Layer.Layer<DecisionParser> => Layer.succeed(DecisionParser, make(options))
