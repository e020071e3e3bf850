/**
 * The three shipped parsers are linear in their input (SPEC §5, "parsers are linear"): a
 * reply is parsed synchronously, so a superlinear parser blocks every run of the process and
 * the lease heartbeats on a large reply. Checked on adversarial inputs up to 1 MiB — the ones
 * each scanner reacts to, and a property over random units of syntax repeated to size — by the
 * ratio of times between sizes, never by a wall-clock limit (`linearity.ts`).
 *
 * The JSON action parser was quadratic on prose full of braces (`see {a, b} and {c}`, LaTeX's
 * `\frac{a}{b}`): it described the syntax problem of every brace span, and a description counts
 * lines from the start of the reply.
 */
import { assert, describe, it } from "@effect/vitest"
import * as CodeBlockParser from "@polyloop/core/CodeBlockParser"
import * as JsonActionParser from "@polyloop/core/JsonActionParser"
import * as ModelReply from "@polyloop/core/ModelReply"
import * as NativeToolCallParser from "@polyloop/core/NativeToolCallParser"
import * as fc from "effect/FastCheck"
import * as Linearity from "./linearity.js"

const json = JsonActionParser.decide({ finishTool: { name: "done" } })
const code = CodeBlockParser.decide({ language: "python", finalAnswer: { line: "Final Answer:", call: "final_answer" } })
const native = NativeToolCallParser.decide()

const text = (size: number, unit: string) => ModelReply.make({ text: Linearity.repeatTo(unit, size) })

const expectLinear = (name: string, input: (size: number) => ModelReply.ModelReply, parse: (reply: ModelReply.ModelReply) => unknown) => {
  const growth = Linearity.superlinearGrowth(input, (reply) => {
    parse(reply)
  })
  if (growth !== undefined) assert.fail(Linearity.describe(name, growth))
}

/** Texts the JSON and code scanners react to, repeated to any size. */
const textUnits: ReadonlyArray<readonly [string, string]> = [
  ["braces in prose", "see {a, b} and {c} "],
  ["LaTeX", "so $\\frac{a}{b} + \\sqrt{x_{i}}$ holds\n"],
  ["malformed objects", "{\"tool\" \"x\"} "],
  ["bare-key objects", "{tool: x} "],
  ["empty objects", "{} "],
  ["objects", "{\"tool\":\"read\",\"path\":\"a\"}\n"],
  ["unclosed braces", "{"],
  ["unclosed objects", "{\"a\": "],
  ["quotes in braces", "{\"\\\"\\\\"],
  ["closing braces", "}"],
  ["brackets", "[{\"a\":[1,2,{\"b\":null}]}] "],
  ["an object spread over lines", "{\n\"a\":\n1}\n"],
  ["fences", "```\n"],
  ["python blocks", "```python\nx = 1\n```\n"],
  ["json blocks", "```json\n{\"tool\":\"x\"}\n```\n"],
  ["tilde fences", "~~~~\n"],
  ["long fences", "`````````````````````````````````python\n"],
  ["CRLF lines", "a\r\n"],
  ["indented markers", "      Final Answer"],
  ["final answer calls", "final_answer(\"\"\"'''\"\\"]
]

describe("parsers are linear in the reply (time ratio between sizes, up to 1 MiB)", () => {
  for (const [name, unit] of textUnits) {
    it(`JsonActionParser: ${name}`, () => expectLinear(`JsonActionParser on ${name}`, (size) => text(size, unit), json))
    it(`CodeBlockParser: ${name}`, () => expectLinear(`CodeBlockParser on ${name}`, (size) => text(size, unit), code))
  }

  it("JsonActionParser: a truncated object followed by brace prose", () =>
    expectLinear("JsonActionParser on a truncated object", (size) =>
      ModelReply.make({ text: "{\"tool\": \"x\", " + Linearity.repeatTo("{a} ", size) }), json))

  it("CodeBlockParser: one block of code the final-answer matcher scans", () => {
    for (const unit of ["(", "\"\\", "'''", "final_answer(", "\"a\" + "]) {
      expectLinear(`CodeBlockParser on a block of ${JSON.stringify(unit)}`, (size) =>
        ModelReply.make({ text: "```python\nfinal_answer(" + Linearity.repeatTo(unit, size) + ")\n```" }), code)
    }
  })

  it("CodeBlockParser: an unterminated block, then a final-answer line", () =>
    expectLinear("CodeBlockParser on an unterminated block", (size) =>
      ModelReply.make({ text: "```python\n" + Linearity.repeatTo("x\n", size) + "Final Answer: 1" }), code))

  it("NativeToolCallParser: arguments the JSON reader reacts to", () => {
    for (const [name, unit] of textUnits) {
      expectLinear(`NativeToolCallParser on arguments of ${name}`, (size) =>
        ModelReply.make({ text: "", toolCalls: [{ id: "c", name: "t", argumentsText: Linearity.repeatTo(unit, size) }] }), native)
    }
    expectLinear("NativeToolCallParser on deep arrays", (size) =>
      ModelReply.make({ text: "", toolCalls: [{ id: "c", name: "t", argumentsText: "[".repeat(size / 2) + "]".repeat(size / 2) }] }), native)
    expectLinear("NativeToolCallParser on a long string argument", (size) =>
      ModelReply.make({ text: "", toolCalls: [{ id: "c", name: "t", argumentsText: `{"s":"${"\\n".repeat(size / 2)}"}` }] }), native)
  })

  it("NativeToolCallParser: many calls, and long text without calls", () => {
    expectLinear("NativeToolCallParser on many calls", (size) =>
      ModelReply.make({
        text: "",
        toolCalls: Array.from({ length: Math.ceil(size / 32) }, (_, i) => ({ id: `c${i}`, name: "tool", argumentsText: "{\"a\":1}" }))
      }), native)
    expectLinear("NativeToolCallParser on text", (size) => text(size, "see {a} "), native)
  })

  // Random units of the characters the scanners react to, repeated to size: the property
  // finds what the hand-picked units miss. Few runs: each one parses about 2 MiB per parser.
  it.prop(
    "every parser, on a random unit of syntax repeated to 1 MiB",
    [fc.array(fc.constantFrom("{", "}", "[", "]", "\"", "\\", ":", ",", "'", "`", "```", "```python\n", "\n", " ", "a", "tool", "(", ")", "final_answer(", "Final Answer:", "1"), { minLength: 1, maxLength: 8 })],
    ([fragments]) => {
      const unit = fragments.join("")
      expectLinear(`JsonActionParser on ${JSON.stringify(unit)}`, (size) => text(size, unit), json)
      expectLinear(`CodeBlockParser on ${JSON.stringify(unit)}`, (size) => text(size, unit), code)
      expectLinear(`NativeToolCallParser on arguments ${JSON.stringify(unit)}`, (size) =>
        ModelReply.make({ text: "", toolCalls: [{ id: "c", name: "t", argumentsText: Linearity.repeatTo(unit, size) }] }), native)
    },
    { fastCheck: { numRuns: 8 } }
  )
})
