/**
 * JSON helpers shared by the decision parsers: parsing with a deterministic, engine-independent
 * description of the first syntax problem, a nesting-depth guard, and a linear scan for JSON
 * object candidates in free text. Everything here is total (never throws) and linear in the
 * input: no regular expression runs over model text.
 *
 * Why one file: most of it is one linear parser (`firstProblem`, an explicit-stack scan of one
 * text), and the candidate scan reads the same bytes with the same byte classes and quoting
 * rules; apart, the two would have to agree on them across a module boundary (design 0390).
 *
 * @internal
 */

/**
 * Values nested deeper than this are refused: `JSON.parse` copes with any depth, but
 * `JSON.stringify` (the run log's encoder) overflows the stack on deep values, and a reply that
 * cannot be logged would crash every resume of its run.
 *
 * @internal
 */
export const maxDepth = 256

/** @internal */
export type ParseResult =
  | { readonly _tag: "Ok"; readonly value: unknown }
  | { readonly _tag: "Error"; readonly problem: string }

/**
 * Parses the JSON text `text[start, end)` without describing a failure: linear in the span,
 * so a scan may try every candidate span of a text (disjoint spans: linear in the text) and
 * describe only the one it reports (`parse`), since the description locates the problem by
 * line and column from the start of the text.
 *
 * @internal
 */
export const tryParse = (text: string, start: number = 0, end: number = text.length): { readonly _tag: "Ok"; readonly value: unknown } | undefined => {
  const source = start === 0 && end === text.length ? text : text.slice(start, end)
  // Checked by the scanner first: a `JSON.parse` that throws costs an exception per span,
  // tens of microseconds each, which brace-dense prose multiplies by its braces.
  if (depthOf(source) > maxDepth || firstProblem(source) !== undefined) return undefined
  try {
    return { _tag: "Ok", value: JSON.parse(source) as unknown }
  } catch {
    return undefined
  }
}

/**
 * Parses the JSON text `text[start, end)`. On failure, `problem` describes the first syntax
 * error with its line and column in `text` (so positions point into the whole reply), in words that do not depend on the JavaScript engine (V8's messages change between
 * Node versions, and the explanation enters history, which must be reproducible).
 *
 * @internal
 */
export const parse = (text: string, start: number = 0, end: number = text.length): ParseResult => {
  const parsed = tryParse(text, start, end)
  if (parsed !== undefined) return parsed
  const source = start === 0 && end === text.length ? text : text.slice(start, end)
  if (depthOf(source) > maxDepth) {
    return { _tag: "Error", problem: `it nests deeper than ${maxDepth} levels of objects and arrays` }
  }
  return { _tag: "Error", problem: diagnose(text, start, end) ?? "it is not valid JSON" }
}

/**
 * The deepest nesting of `{`/`[` outside strings (0 for a scalar). Linear; never throws.
 *
 * @internal
 */
export const depthOf = (text: string): number => {
  let depth = 0
  let max = 0
  let inString = false
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i)
    if (inString) {
      if (c === BACKSLASH) i++
      else if (c === QUOTE) inString = false
      continue
    }
    if (c === QUOTE) inString = true
    else if (c === OPEN_BRACE || c === OPEN_BRACKET) {
      depth++
      if (depth > max) max = depth
    } else if ((c === CLOSE_BRACE || c === CLOSE_BRACKET) && depth > 0) depth--
  }
  return max
}

const QUOTE = 0x22
const BACKSLASH = 0x5c
const OPEN_BRACE = 0x7b
const CLOSE_BRACE = 0x7d
const OPEN_BRACKET = 0x5b
const CLOSE_BRACKET = 0x5d

const isWhitespace = (c: number): boolean => c === 0x20 || c === 0x09 || c === 0x0a || c === 0x0d
const isDigit = (c: number): boolean => c >= 0x30 && c <= 0x39
const isHex = (c: number): boolean => isDigit(c) || (c >= 0x41 && c <= 0x46) || (c >= 0x61 && c <= 0x66)

/** Renders the character at `pos` for an explanation (a whole code point, JSON-quoted). */
const charAt = (text: string, pos: number): string => {
  const cp = text.codePointAt(pos)
  return cp === undefined ? "the end of the text" : JSON.stringify(String.fromCodePoint(cp))
}

const locate = (text: string, pos: number): string => {
  let line = 1
  let column = 1
  for (let i = 0; i < pos && i < text.length; i++) {
    if (text.charCodeAt(i) === 0x0a) {
      line++
      column = 1
    } else column++
  }
  return `line ${line}, column ${column}`
}

type Container = "object" | "array"

/**
 * Describes the first JSON syntax error in `text[start, end)`, or `undefined` when it is valid
 * JSON; positions are lines and columns of `text`. Linear in `end` (locating counts lines from
 * the start of `text`): describe one span of a text, not each of many.
 *
 * @internal
 */
export const diagnose = (text: string, start: number = 0, end: number = text.length): string | undefined => {
  const problem = firstProblem(start === 0 && end === text.length ? text : text.slice(start, end))
  if (problem === undefined) return undefined
  return problem.at < 0 ? problem.what : `${problem.what} (${locate(text, start + problem.at)})`
}

/** A syntax problem: what it is and where, as an offset in the scanned source (-1: nowhere). */
interface Problem {
  readonly what: string
  readonly at: number
}

/**
 * The first JSON syntax problem of `src`, or `undefined` when it is valid JSON. Iterative (an
 * explicit stack), so any nesting depth is safe; linear in `src`.
 */
const firstProblem = (src: string): Problem | undefined => {
  const n = src.length
  let pos = 0
  const stack: Array<Container> = []
  const fail = (what: string, at: number = pos): Problem => ({ what, at })
  const skip = () => {
    while (pos < n && isWhitespace(src.charCodeAt(pos))) pos++
  }
  const unexpected = (expected: string): Problem =>
    pos >= n ? fail(`the text ends where ${expected} was expected`) : fail(`expected ${expected} but found ${charAt(src, pos)}`)

  /** Scans a string starting at the opening quote; returns an error or undefined. */
  const scanString = (): Problem | undefined => {
    const start = pos
    pos++
    while (pos < n) {
      const c = src.charCodeAt(pos)
      if (c === QUOTE) {
        pos++
        return undefined
      }
      if (c === BACKSLASH) {
        const e = src.charCodeAt(pos + 1)
        if (e === 0x75) {
          for (let k = 2; k < 6; k++) {
            if (!isHex(src.charCodeAt(pos + k))) return fail("a \\u escape needs four hexadecimal digits", pos)
          }
          pos += 6
          continue
        }
        // " \ / b f n r t
        if (e === QUOTE || e === BACKSLASH || e === 0x2f || e === 0x62 || e === 0x66 || e === 0x6e || e === 0x72 || e === 0x74) {
          pos += 2
          continue
        }
        return pos + 1 >= n
          ? fail("the string is not closed", start)
          : fail(`invalid escape \\${String.fromCodePoint(src.codePointAt(pos + 1) ?? 0x3f)} in a string`, pos)
      }
      if (c < 0x20) {
        return fail("a raw control character (such as a line break) inside a string; write it as an escape like \\n", pos)
      }
      pos++
    }
    return fail("the string is not closed", start)
  }

  const scanNumber = (): Problem | undefined => {
    if (src.charCodeAt(pos) === 0x2d) pos++
    if (pos >= n || !isDigit(src.charCodeAt(pos))) return unexpected("a digit")
    if (src.charCodeAt(pos) === 0x30) {
      pos++
      if (pos < n && isDigit(src.charCodeAt(pos))) return fail("a number must not have leading zeros")
    } else {
      while (pos < n && isDigit(src.charCodeAt(pos))) pos++
    }
    if (src.charCodeAt(pos) === 0x2e) {
      pos++
      if (pos >= n || !isDigit(src.charCodeAt(pos))) return unexpected("a digit after the decimal point")
      while (pos < n && isDigit(src.charCodeAt(pos))) pos++
    }
    const e = src.charCodeAt(pos)
    if (e === 0x65 || e === 0x45) {
      pos++
      const s = src.charCodeAt(pos)
      if (s === 0x2b || s === 0x2d) pos++
      if (pos >= n || !isDigit(src.charCodeAt(pos))) return unexpected("a digit in the exponent")
      while (pos < n && isDigit(src.charCodeAt(pos))) pos++
    }
    return undefined
  }

  const scanLiteral = (word: string): boolean => {
    if (src.startsWith(word, pos)) {
      pos += word.length
      return true
    }
    return false
  }

  const describeKeyProblem = (): Problem => {
    if (pos >= n) return fail("the text ends where a property name was expected")
    const c = src.charCodeAt(pos)
    if (c === 0x27) return fail("property names and strings must use double quotes, not single quotes")
    if (c === CLOSE_BRACE) return fail("a trailing comma before \"}\" is not allowed")
    return fail(`expected a double-quoted property name but found ${charAt(src, pos)}`)
  }

  // States: "value" (a value is expected), "after" (a value just ended), "key" (a property name
  // is expected after "{" or ",").
  let state: "value" | "after" | "key" = "value"
  skip()
  if (pos >= n) return { what: "the text is empty, where a JSON value was expected", at: -1 }
  for (;;) {
    if (state === "value") {
      skip()
      if (pos >= n) return fail("the text ends where a value was expected")
      const c = src.charCodeAt(pos)
      if (c === OPEN_BRACE) {
        stack.push("object")
        pos++
        skip()
        if (src.charCodeAt(pos) === CLOSE_BRACE) {
          pos++
          stack.pop()
          state = "after"
        } else state = "key"
        continue
      }
      if (c === OPEN_BRACKET) {
        stack.push("array")
        pos++
        skip()
        if (src.charCodeAt(pos) === CLOSE_BRACKET) {
          pos++
          stack.pop()
          state = "after"
        }
        continue
      }
      if (c === QUOTE) {
        const error = scanString()
        if (error !== undefined) return error
        state = "after"
        continue
      }
      if (c === 0x2d || isDigit(c)) {
        const error = scanNumber()
        if (error !== undefined) return error
        state = "after"
        continue
      }
      if (scanLiteral("true") || scanLiteral("false") || scanLiteral("null")) {
        state = "after"
        continue
      }
      if (c === 0x27) return fail("strings must use double quotes, not single quotes")
      if (c === CLOSE_BRACKET && stack[stack.length - 1] === "array") return fail("a trailing comma before \"]\" is not allowed")
      return fail(`expected a value but found ${charAt(src, pos)}`)
    }
    if (state === "key") {
      skip()
      if (src.charCodeAt(pos) !== QUOTE) return describeKeyProblem()
      const error = scanString()
      if (error !== undefined) return error
      skip()
      if (src.charCodeAt(pos) !== 0x3a) return unexpected("\":\" after a property name")
      pos++
      state = "value"
      continue
    }
    // state === "after"
    skip()
    const top = stack[stack.length - 1]
    if (top === undefined) {
      return pos < n ? fail(`unexpected ${charAt(src, pos)} after the end of the JSON value`) : undefined
    }
    const c = src.charCodeAt(pos)
    if (c === 0x2c) {
      pos++
      state = top === "object" ? "key" : "value"
      continue
    }
    if (top === "object" && c === CLOSE_BRACE) {
      pos++
      stack.pop()
      continue
    }
    if (top === "array" && c === CLOSE_BRACKET) {
      pos++
      stack.pop()
      continue
    }
    if (pos >= n) return fail(`the text ends inside ${top === "object" ? "an object (a \"}\" is missing)" : "an array (a \"]\" is missing)"}`)
    return top === "object"
      ? fail(`expected "," or "}" after a property value but found ${charAt(src, pos)}`)
      : fail(`expected "," or "]" after an array element but found ${charAt(src, pos)}`)
  }
}

/**
 * A candidate JSON object found in free text: its span, and whether it closed before the text
 * ended.
 *
 * @internal
 */
export interface Candidate {
  readonly start: number
  /** Exclusive end. */
  readonly end: number
  readonly terminated: boolean
}

/**
 * Can the text at `start` (a `{`) open a valid JSON object: after the brace and whitespace, a
 * double quote or `}`? A cheap test before parsing a span. Linear over the candidates of
 * `findObjectCandidates` (the whitespace after one brace ends at the next).
 *
 * @internal
 */
export const opensObject = (text: string, start: number): boolean => {
  let i = start + 1
  while (i < text.length && isWhitespace(text.charCodeAt(i))) i++
  const c = text.charCodeAt(i)
  return c === QUOTE || c === CLOSE_BRACE
}

/**
 * Does the text at `start` (a `{`) look like an attempt at a JSON object rather than a brace in
 * prose? After the brace and whitespace: a quote (double or single), `}`, or a bare word
 * followed by `:`. Bounded look-ahead.
 *
 * @internal
 */
export const looksLikeObject = (text: string, start: number): boolean => {
  let i = start + 1
  const limit = Math.min(text.length, start + 1 + 4096)
  while (i < limit && isWhitespace(text.charCodeAt(i))) i++
  if (i >= text.length) return false
  const c = text.charCodeAt(i)
  if (c === QUOTE || c === 0x27 || c === CLOSE_BRACE) return true
  const wordStart = i
  while (i < limit && isWordChar(text.charCodeAt(i))) i++
  if (i === wordStart) return false
  while (i < limit && (text.charCodeAt(i) === 0x20 || text.charCodeAt(i) === 0x09)) i++
  return text.charCodeAt(i) === 0x3a
}

const isWordChar = (c: number): boolean =>
  (c >= 0x30 && c <= 0x39) || (c >= 0x41 && c <= 0x5a) || (c >= 0x61 && c <= 0x7a) || c === 0x5f || c === 0x24

/**
 * Finds the outermost brace-balanced spans of `text` (string-aware inside braces), in order.
 * An unclosed brace that looks like the start of an object yields one unterminated candidate
 * covering the rest of the text (so a truncated object is not mistaken for the object nested
 * in it); an unclosed brace in prose is ignored. Linear in the length of the text.
 *
 * @internal
 */
export const findObjectCandidates = (text: string): ReadonlyArray<Candidate> => {
  const open: Array<number> = []
  const closed: Array<Candidate> = []
  let inString = false
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i)
    if (inString) {
      if (c === BACKSLASH) i++
      else if (c === QUOTE) inString = false
      continue
    }
    if (c === OPEN_BRACE) open.push(i)
    else if (c === CLOSE_BRACE) {
      const start = open.pop()
      if (start === undefined) continue
      // Spans nested in this one were recorded before it; drop them (amortised linear).
      while (closed.length > 0 && closed[closed.length - 1]!.start > start) closed.pop()
      closed.push({ start, end: i + 1, terminated: true })
    } else if (c === QUOTE && open.length > 0) inString = true
  }
  // The first unclosed brace that looks like an object swallows everything after it.
  const unclosed = open.find((start) => looksLikeObject(text, start))
  if (unclosed === undefined) return closed
  const before = closed.filter((candidate) => candidate.start < unclosed)
  return [...before, { start: unclosed, end: text.length, terminated: false }]
}

/**
 * Is `value` a plain JSON object (not an array, not null)?
 *
 * @internal
 */
export const isObject = (value: unknown): value is Readonly<Record<string, unknown>> =>
  typeof value === "object" && value !== null && !Array.isArray(value)
