/**
 * Laws every decision parser obeys (SPEC §5): on any reply — arbitrary unicode, lone
 * surrogates, empty, 1 MB, inputs dense in the characters the scanners care about — `parse`
 * succeeds with a valid `ParsedReply`, and parsing twice gives deep-equal results. Not collected
 * by vitest on its own; each parser's test file calls `parserLaws`.
 */
import { assert, describe, it } from "@effect/vitest"
import type * as DecisionParser from "@polyloop/core/DecisionParser"
import * as ModelReply from "@polyloop/core/ModelReply"
import * as ParsedReply from "@polyloop/core/ParsedReply"
import * as Arbitrary from "effect/Arbitrary"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as fc from "effect/FastCheck"
import * as Schema from "effect/Schema"

/** Characters and fragments the parsers' scanners react to. */
const syntax = fc.constantFrom(
  "{", "}", "[", "]", "\"", "\\", ":", ",", "'", "`", "```", "```python\n", "```json\n", "~~~", "\n", "\r\n", " ", "\t",
  "a", "tool", "\"tool\"", "\"name\"", "\"arguments\"", "\"final_answer\"", "final_answer(", "(", ")", "Final Answer:",
  "-", "0", "1", "e", ".", "true", "null", "\\u12", "\\n", "\u0000", "é", "😀", "\ud800", "r\"", "\"\"\""
)

/** Arbitrary texts: printable, full unicode, lone surrogates, and syntax-dense fuzz. */
export const texts: fc.Arbitrary<string> = fc.oneof(
  fc.string(),
  fc.fullUnicodeString(),
  fc.string({ unit: "binary" }),
  fc.stringOf(syntax, { maxLength: 60 }),
  fc.json().map((json) => `Here is my action:\n\`\`\`json\n${json}\n\`\`\``),
  fc.tuple(fc.string(), fc.fullUnicodeString()).map(([lang, code]) => `\`\`\`${lang}\n${code}\n\`\`\``)
)

const replyFromText = (text: string): ModelReply.ModelReply => ModelReply.make({ text })

/** Replies: arbitrary text, and native tool calls whose arguments are arbitrary texts too. */
export const replies: fc.Arbitrary<ModelReply.ModelReply> = fc.oneof(
  texts.map(replyFromText),
  Arbitrary.make(ModelReply.ModelReply),
  fc.record({
    text: texts,
    calls: fc.array(fc.record({ id: fc.string(), name: fc.string(), argumentsText: fc.oneof(texts, fc.json()) }), { maxLength: 3 })
  }).map(({ calls, text }) => ModelReply.make({ text, toolCalls: calls }))
)

const MB = 1024 * 1024

/** Big and pathological inputs (about 1 MB each). */
export const hugeTexts: ReadonlyArray<readonly [string, string]> = [
  ["1 MB of prose", "lorem ipsum dolor sit amet ".repeat(MB / 27)],
  ["1 MB of unicode", "é😀\u0000\ud800漢字 ".repeat(MB / 8)],
  ["1 MB of open braces", "{".repeat(MB)],
  ["1 MB of `{\"`", "{\"".repeat(MB / 2)],
  ["1 MB of nested objects", "{\"a\":".repeat(MB / 6) + "1" + "}".repeat(MB / 6)],
  ["1 MB of brackets", "[".repeat(MB / 2) + "]".repeat(MB / 2)],
  ["1 MB of fences", "```\n".repeat(MB / 4)],
  ["1 MB of python fences", "```python\nx\n".repeat(MB / 12)],
  ["1 MB of quotes and backslashes", "\"\\".repeat(MB / 2)],
  ["1 MB in one code block", "```python\n" + "final_answer(".repeat(MB / 13) + "\n```"],
  ["1 MB JSON action", `{"tool":"write","arguments":{"text":"${"x".repeat(MB)}"}}`],
  ["Final Answer then 1 MB", "Final Answer: " + "y".repeat(MB)]
]

const isParsedReply = Schema.is(ParsedReply.ParsedReply)

/** Parses and checks the result is a `ParsedReply`; the parse must succeed. */
export const parseOk = (parser: DecisionParser.DecisionParser.Service, reply: ModelReply.ModelReply) =>
  Effect.gen(function*() {
    const exit = yield* Effect.exit(parser.parse(reply))
    assert.isTrue(Exit.isSuccess(exit), "parse never fails or dies")
    const parsed = Exit.isSuccess(exit) ? exit.value : ParsedReply.noAction
    assert.isTrue(isParsedReply(parsed), "the result is a ParsedReply")
    return parsed
  })

/** Registers the laws for a parser. */
export const parserLaws = (label: string, parser: DecisionParser.DecisionParser.Service) =>
  describe(`${label}: parser laws`, () => {
    // `it.prop` + `runSync` (not `it.effect.prop`): no test environment is built per run.
    it.prop(
      "any reply gives a ParsedReply, the same one twice",
      { reply: replies },
      ({ reply }) => {
        const first = Effect.runSync(parseOk(parser, reply))
        const second = Effect.runSync(parseOk(parser, reply))
        assert.deepStrictEqual(first, second)
      },
      { fastCheck: { numRuns: 500 } }
    )

    it.effect("the empty reply gives a ParsedReply", () =>
      Effect.gen(function*() {
        const parsed = yield* parseOk(parser, ModelReply.make({}))
        assert.deepStrictEqual(parsed, yield* parseOk(parser, ModelReply.make({})))
      }))

    for (const [name, text] of hugeTexts) {
      it.effect(`${name}: a ParsedReply, deterministic`, () =>
        Effect.gen(function*() {
          const reply = ModelReply.make({ text, toolCalls: [{ id: "c", name: "t", argumentsText: text }] })
          const first = yield* parseOk(parser, replyFromText(text))
          assert.deepStrictEqual(first, yield* parseOk(parser, replyFromText(text)))
          const native = yield* parseOk(parser, reply)
          assert.deepStrictEqual(native, yield* parseOk(parser, reply))
        }))
    }

    it("has a stable id", () => {
      assert.isString(parser.id)
      assert.isAbove(parser.id.length, 0)
    })
  })
