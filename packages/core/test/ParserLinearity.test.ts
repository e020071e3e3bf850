/**
 * The three shipped parsers are linear in their input (SPEC §5, "parsers are linear"): a
 * reply is parsed synchronously, so a superlinear parser blocks every run of the process and
 * the lease heartbeats on a large reply. Checked on adversarial inputs up to 1 MiB — the ones
 * each scanner reacts to, and a property over random units of syntax repeated to size — by
 * counting what the parser reads (`linearity.ts`): at every size from 1 KiB doubling to 1 MiB,
 * work(n) ≤ c·n. No clock is read, so a loaded machine cannot change the verdict; the timings
 * are a benchmark (`bench/parsers.ts`).
 *
 * The JSON action parser was quadratic on prose full of braces (`see {a, b} and {c}`, LaTeX's
 * `\frac{a}{b}`): it described the syntax problem of every brace span, and a description counts
 * lines from the start of the reply. That parser is kept here (`quadratic`), and the check must
 * fail on it.
 */
import { assert, describe, it } from "@effect/vitest"
import * as CodeBlockParser from "@polyloop/core/CodeBlockParser"
import * as JsonActionParser from "@polyloop/core/JsonActionParser"
import * as ModelReply from "@polyloop/core/ModelReply"
import * as NativeToolCallParser from "@polyloop/core/NativeToolCallParser"
import * as fc from "effect/FastCheck"
import * as path from "node:path"
import { fileURLToPath } from "node:url"
import ts from "typescript"
import * as Json from "../src/internal/json.js"
import * as Linearity from "./linearity.js"

/**
 * The work allowed per character of input (c in work(n) ≤ c·n). Measured at 1 KiB to 1 MiB on
 * this file's inputs, and over 3,000 random units of the property below (at 1 KiB to 8 KiB):
 * the JSON action parser reads at most 16.0 per character (`{}` repeated: one candidate object
 * per 2 characters, each sliced, scanned, checked and parsed; 15.1 on an array of many
 * objects), the code block parser 19.7 (one long string literal in a final-answer call: the
 * block's code is trimmed and sliced several times, the literal read twice), the native
 * tool-call parser 9.0 (unclosed objects as arguments). The counts settle within 2% of these
 * by 4 KiB. 32 leaves a margin of 1.6 over the largest; a quadratic parser exceeds it within a
 * few doublings (`quadratic` below: at the base size).
 */
const perCharacter = 32

const json = JsonActionParser.decide({ finishTool: { name: "done" } })
const code = CodeBlockParser.decide({ language: "python", finalAnswer: { line: "Final Answer:", call: "final_answer" } })
const native = NativeToolCallParser.decide()

/** The characters of a reply: its text and every tool call's fields. */
const lengthOf = (reply: ModelReply.ModelReply): number => {
  let length = reply.text.length
  for (const call of reply.toolCalls) length += call.id.length + call.name.length + call.argumentsText.length
  return length
}

const text = (size: number, unit: string) => ModelReply.make({ text: Linearity.repeatTo(unit, size) })
const argumentsOf = (argumentsText: string) => ModelReply.make({ text: "", toolCalls: [{ id: "c", name: "t", argumentsText }] })

const expectLinear = (name: string, input: (size: number) => ModelReply.ModelReply, parse: (reply: ModelReply.ModelReply) => unknown) => {
  const excess = Linearity.superlinearWork(input, lengthOf, parse, { perCharacter })
  if (excess !== undefined) assert.fail(Linearity.describe(name, excess, perCharacter))
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

/**
 * The JSON action parser before the fix: it diagnosed every brace span, and a diagnosis
 * locates its problem by counting lines from the start of the text.
 */
const quadratic = (reply: ModelReply.ModelReply): unknown =>
  Json.findObjectCandidates(reply.text).map((candidate) => Json.diagnose(reply.text, candidate.start, candidate.end))

/** The same mistake, made for one brace span in 256: linear at first, over the bound from 256 KiB. */
const sparselyQuadratic = (reply: ModelReply.ModelReply): unknown =>
  Json.findObjectCandidates(reply.text)
    .filter((_, i) => i % 256 === 0)
    .map((candidate) => Json.diagnose(reply.text, candidate.start, candidate.end))

/** The same mistake with native methods only: the line of every brace, from a copy of the text before it. */
const quadraticNative = (reply: ModelReply.ModelReply): unknown => {
  const lines: Array<number> = []
  for (let i = reply.text.indexOf("{"); i !== -1; i = reply.text.indexOf("{", i + 1)) {
    lines.push(reply.text.slice(0, i).split("\n").length)
  }
  return lines
}

describe("parsers are linear in the reply (work counted, up to 1 MiB)", () => {
  for (const [name, unit] of textUnits) {
    it(`JsonActionParser: ${name}`, () => expectLinear(`JsonActionParser on ${name}`, (size) => text(size, unit), json))
    it(`CodeBlockParser: ${name}`, () => expectLinear(`CodeBlockParser on ${name}`, (size) => text(size, unit), code))
  }

  it("JsonActionParser: a truncated object followed by brace prose", () =>
    expectLinear("JsonActionParser on a truncated object", (size) =>
      ModelReply.make({ text: "{\"tool\": \"x\", " + Linearity.repeatTo("{a} ", size) }), json))

  it("JsonActionParser: an array of many objects", () =>
    expectLinear("JsonActionParser on an array of objects", (size) =>
      ModelReply.make({ text: "[" + Linearity.repeatTo("{\"tool\":\"t\",\"a\":1},", size) + "{\"tool\":\"t\"}]" }), json))

  it("CodeBlockParser: one block of code the final-answer matcher scans", () => {
    for (const unit of ["(", "\"\\", "'''", "final_answer(", "\"a\" + "]) {
      expectLinear(`CodeBlockParser on a block of ${JSON.stringify(unit)}`, (size) =>
        ModelReply.make({ text: "```python\nfinal_answer(" + Linearity.repeatTo(unit, size) + ")\n```" }), code)
    }
  })

  it("CodeBlockParser: a final answer that is one long string literal", () =>
    expectLinear("CodeBlockParser on a long literal", (size) =>
      ModelReply.make({ text: "```python\nfinal_answer(answer=r\"" + Linearity.repeatTo("a\\n", size) + "\")\n```" }), code))

  it("CodeBlockParser: an unterminated block, then a final-answer line", () =>
    expectLinear("CodeBlockParser on an unterminated block", (size) =>
      ModelReply.make({ text: "```python\n" + Linearity.repeatTo("x\n", size) + "Final Answer: 1" }), code))

  it("NativeToolCallParser: arguments the JSON reader reacts to", () => {
    for (const [name, unit] of textUnits) {
      expectLinear(`NativeToolCallParser on arguments of ${name}`, (size) => argumentsOf(Linearity.repeatTo(unit, size)), native)
    }
    expectLinear("NativeToolCallParser on deep arrays", (size) => argumentsOf("[".repeat(size / 2) + "]".repeat(size / 2)), native)
    expectLinear("NativeToolCallParser on a long string argument", (size) => argumentsOf(`{"s":"${"\\n".repeat(size / 2)}"}`), native)
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
  // finds what the hand-picked units miss.
  it.prop(
    "every parser, on a random unit of syntax repeated to 1 MiB",
    [fc.array(fc.constantFrom("{", "}", "[", "]", "\"", "\\", ":", ",", "'", "`", "```", "```python\n", "\n", " ", "a", "tool", "(", ")", "final_answer(", "Final Answer:", "1"), { minLength: 1, maxLength: 8 })],
    ([fragments]) => {
      const unit = fragments.join("")
      expectLinear(`JsonActionParser on ${JSON.stringify(unit)}`, (size) => text(size, unit), json)
      expectLinear(`CodeBlockParser on ${JSON.stringify(unit)}`, (size) => text(size, unit), code)
      expectLinear(`NativeToolCallParser on arguments ${JSON.stringify(unit)}`, (size) => argumentsOf(Linearity.repeatTo(unit, size)), native)
    },
    { fastCheck: { numRuns: 8 } }
  )
})

describe("the work count", () => {
  it("fails a quadratic parser, at the first size over the bound (before 1 MiB)", () => {
    const parsers = [
      ["diagnosing every brace span", quadratic],
      ["slicing before every brace", quadraticNative],
      ["diagnosing one brace span in 256", sparselyQuadratic]
    ] as const
    for (const [name, parse] of parsers) {
      for (const unit of ["see {a, b} and {c} ", "so $\\frac{a}{b} + \\sqrt{x_{i}}$ holds\n"]) {
        const { excess, measured } = Linearity.measure((size) => text(size, unit), lengthOf, parse, { perCharacter })
        if (excess === undefined) return assert.fail(`a quadratic parser (${name}) on ${JSON.stringify(unit)} passed the check`)
        assert.isAbove(excess.at.work, perCharacter * excess.at.length)
        assert.isBelow(excess.at.size, Linearity.defaultMaxSize, "the check stops at the first size over the bound")
        assert.strictEqual(measured[measured.length - 1], excess.at)
        if (parse === sparselyQuadratic) {
          // Within the bound at the smaller sizes: the check sees the growth, not a constant.
          assert.isAtLeast(excess.below.length, 4, Linearity.describe(name, excess, perCharacter))
        }
      }
    }
  })

  it("the parsers read text only in ways it counts: no text[i], no regular expression", () => {
    // The modules whose code runs while a reply is parsed. `text[i]` on a string (found by its
    // type) cannot be intercepted, and a regular expression's backtracking would be work unseen.
    const files = ["JsonActionParser.ts", "CodeBlockParser.ts", "NativeToolCallParser.ts", "internal/json.ts", "internal/fence.ts"]
      .map((file) => fileURLToPath(new URL(`../src/${file}`, import.meta.url)))
    const program = ts.createProgram(files, {
      strict: true,
      noEmit: true,
      skipLibCheck: true,
      target: ts.ScriptTarget.ES2022,
      module: ts.ModuleKind.NodeNext,
      moduleResolution: ts.ModuleResolutionKind.NodeNext,
      customConditions: ["@polyloop/source"],
      types: []
    })
    const checker = program.getTypeChecker()
    const found: Array<string> = []
    for (const file of files) {
      const source = program.getSourceFile(file)
      if (source === undefined) return assert.fail(`${file} is not in the program`)
      const where = (node: ts.Node) => {
        const { line } = source.getLineAndCharacterOfPosition(node.getStart(source))
        return `${path.basename(file)}:${line + 1}: ${node.getText(source)}`
      }
      const visit = (node: ts.Node): void => {
        if (ts.isElementAccessExpression(node) && (checker.getTypeAtLocation(node.expression).flags & ts.TypeFlags.StringLike) !== 0) {
          found.push(where(node))
        }
        if (ts.isRegularExpressionLiteral(node) || (ts.isNewExpression(node) && node.expression.getText(source) === "RegExp")) {
          found.push(where(node))
        }
        ts.forEachChild(node, visit)
      }
      visit(source)
    }
    assert.deepStrictEqual(found, [])
    // The check itself finds what it looks for.
    const probe = ts.createSourceFile("probe.ts", "const t: string = \"ab\"; t[1]; /a+/.test(t)", ts.ScriptTarget.ES2022, true)
    let probes = 0
    const count = (node: ts.Node): void => {
      if (ts.isElementAccessExpression(node) || ts.isRegularExpressionLiteral(node)) probes++
      ts.forEachChild(node, count)
    }
    count(probe)
    assert.strictEqual(probes, 2)
  })

  it("is the same on two runs", () => {
    const series = () =>
      [json, code, native].map((parse) =>
        Linearity.measure((size) => text(size, "see {a, b} and {\"tool\": \"x\"} ```python\nx\n```\n"), lengthOf, parse, { perCharacter }).measured)
    const first = series()
    assert.deepStrictEqual(series(), first)
    // Sizes from 1 KiB to 1 MiB, each with some work counted.
    for (const measured of first) {
      assert.strictEqual(measured.length, 11)
      for (const m of measured) assert.isAbove(m.work, 0)
    }
  })

  it("puts every method back, also when the counted function throws", () => {
    const before = Object.getOwnPropertyDescriptor(String.prototype, "charCodeAt")
    const beforeParse = JSON.parse
    assert.throws(() =>
      Linearity.workOf(() => {
        "x".charCodeAt(0)
        throw new Error("boom")
      }), "boom")
    assert.deepStrictEqual(Object.getOwnPropertyDescriptor(String.prototype, "charCodeAt"), before)
    assert.strictEqual(JSON.parse, beforeParse)
    // Counted: one charCodeAt, a 6-character slice, 4 characters searched, JSON.parse of 3.
    assert.strictEqual(Linearity.workOf(() => {
      "abc".charCodeAt(1)
      "abcdefgh".slice(1, 7)
      "abcd".indexOf("d")
      JSON.parse("[1]")
    }), 1 + 7 + 4 + 3)
  })
})
