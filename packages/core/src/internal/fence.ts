/**
 * A line-based, linear scanner for Markdown fenced code blocks (``` and ~~~ fences, as in
 * CommonMark, except that a fence still open at the end of the text is reported as
 * unterminated instead of being closed implicitly). Never throws; no regular expression runs
 * over model text.
 *
 * @internal
 */

/** @internal */
export interface Block {
  /** The info string's first word, as written (case kept); "" for an untagged fence. */
  readonly language: string
  /** The lines between the fences, joined with "\n" (the opener's indentation removed). */
  readonly code: string
  /** Whether a closing fence was found. */
  readonly terminated: boolean
  /** The 1-based line number of the opening fence. */
  readonly line: number
}

/** @internal */
export interface Scan {
  readonly blocks: ReadonlyArray<Block>
  /**
   * The lines outside any fence, as pairs of 0-based character offsets in the text: the start
   * of a line, then its end (before `\r\n` or `\n`). Numbers, not line objects, so that a
   * reply of many lines does not fill the heap with objects only a final-answer marker reads.
   */
  readonly outside: ReadonlyArray<number>
}

const BACKTICK = 0x60
const TILDE = 0x7e

const isBlank = (c: number): boolean => c === 0x20 || c === 0x09

interface Opener {
  readonly char: number
  readonly length: number
  readonly indent: number
  readonly info: string
}

/** Reads a fence opener on `line`, if it is one. */
const opener = (line: string): Opener | undefined => {
  let i = 0
  while (i < line.length && line.charCodeAt(i) === 0x20) i++
  const indent = i
  const char = line.charCodeAt(i)
  if (char !== BACKTICK && char !== TILDE) return undefined
  while (i < line.length && line.charCodeAt(i) === char) i++
  const length = i - indent
  if (length < 3) return undefined
  const info = line.slice(i).trim()
  // A backtick fence's info string cannot contain a backtick (```x``` is inline code).
  if (char === BACKTICK && info.includes("`")) return undefined
  return { char, length, indent, info }
}

/** Is `line` a closing fence for `open`? Only the fence character, at least as many. */
const closes = (line: string, open: Opener): boolean => {
  let i = 0
  while (i < line.length && isBlank(line.charCodeAt(i))) i++
  const start = i
  while (i < line.length && line.charCodeAt(i) === open.char) i++
  if (i - start < open.length) return false
  while (i < line.length && isBlank(line.charCodeAt(i))) i++
  return i === line.length
}

const firstWord = (info: string): string => {
  let i = 0
  while (i < info.length && !isBlank(info.charCodeAt(i)) && info.charCodeAt(i) !== 0x7b) i++
  return info.slice(0, i)
}

const dedent = (line: string, indent: number): string => {
  let i = 0
  while (i < indent && i < line.length && line.charCodeAt(i) === 0x20) i++
  return line.slice(i)
}

/**
 * Splits `text` into fenced blocks and the lines outside them. `\r\n` line ends are accepted.
 *
 * @internal
 */
export const scan = (text: string): Scan => {
  const blocks: Array<Block> = []
  const outside: Array<number> = []
  let current: { open: Opener; line: number; lines: Array<string> } | undefined
  let offset = 0
  let lineNumber = 0
  while (offset <= text.length) {
    const newline = text.indexOf("\n", offset)
    const end = newline === -1 ? text.length : newline
    let line = text.slice(offset, end)
    if (line.endsWith("\r")) line = line.slice(0, -1)
    lineNumber++
    if (current === undefined) {
      const open = opener(line)
      if (open === undefined) outside.push(offset, offset + line.length)
      else current = { open, line: lineNumber, lines: [] }
    } else if (closes(line, current.open)) {
      blocks.push({ language: firstWord(current.open.info), code: current.lines.join("\n"), terminated: true, line: current.line })
      current = undefined
    } else {
      current.lines.push(dedent(line, current.open.indent))
    }
    if (newline === -1) break
    offset = newline + 1
  }
  if (current !== undefined) {
    blocks.push({ language: firstWord(current.open.info), code: current.lines.join("\n"), terminated: false, line: current.line })
  }
  return { blocks, outside }
}
