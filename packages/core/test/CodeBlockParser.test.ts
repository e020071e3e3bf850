import { assert, describe, it } from "@effect/vitest"
import * as Action from "@polyloop/core/Action"
import * as CodeBlockParser from "@polyloop/core/CodeBlockParser"
import { DecisionParser } from "@polyloop/core/DecisionParser"
import * as ModelReply from "@polyloop/core/ModelReply"
import * as ParsedReply from "@polyloop/core/ParsedReply"
import * as Effect from "effect/Effect"
import * as fc from "effect/FastCheck"
import { parseOk, parserLaws } from "./parserLaws.js"

const plain = CodeBlockParser.make({ language: "python" })
const withLine = CodeBlockParser.make({ language: "python", aliases: ["py"], finalAnswer: { line: "Final Answer:" } })
const withCall = CodeBlockParser.make({ language: "python", finalAnswer: { call: "final_answer" } })
const strict = CodeBlockParser.make({ language: "python", acceptUntagged: false, finalAnswer: { line: "Final Answer:", call: "final_answer" } })

parserLaws("CodeBlockParser(python)", plain)
parserLaws("CodeBlockParser(python, both markers, strict)", strict)

const parse = (text: string, p: DecisionParser.Service = plain) => p.parse(ModelReply.make({ text }))

const act = (code: string) => ParsedReply.act(Action.CodeAction.make({ language: "python", code }))

const explanation = (parsed: ParsedReply.ParsedReply): string => {
  assert.strictEqual(parsed._tag, "InvalidDecision")
  return parsed._tag === "InvalidDecision" ? parsed.explanation : ""
}

const fence = (language: string, code: string) => `\`\`\`${language}\n${code}\n\`\`\``

describe("CodeBlockParser: actions", () => {
  it.effect("one block of the language is Act(CodeAction) with its code", () =>
    Effect.gen(function*() {
      const text = `Thought: count the rows.\n${fence("python", "import csv\nrows = list(csv.reader(open('a.csv')))\nprint(len(rows))")}\nLet's see.`
      assert.deepStrictEqual(yield* parse(text), act("import csv\nrows = list(csv.reader(open('a.csv')))\nprint(len(rows))"))
    }))

  it.effect("code is kept verbatim: indentation, blank lines, backticks and braces inside", () =>
    Effect.gen(function*() {
      const code = "def f(x):\n\n    return {'a': `x`}  # ``\n"
      assert.deepStrictEqual(yield* parse(fence("python", code)), act(code))
    }))

  it.effect("tags compare case-insensitively; aliases and untagged fences are accepted as configured", () =>
    Effect.gen(function*() {
      assert.deepStrictEqual(yield* parse(fence("Python", "x = 1")), act("x = 1"))
      assert.deepStrictEqual(yield* parse(fence("py", "x = 1"), withLine), act("x = 1"))
      assert.deepStrictEqual(yield* parse(fence("", "x = 1")), act("x = 1"))
      assert.deepStrictEqual(yield* parse(fence("python title=\"a\"", "x = 1")), act("x = 1"))
      assert.deepStrictEqual(yield* parse("~~~python\nx = 1\n~~~"), act("x = 1"))
      assert.deepStrictEqual(yield* parse("  ```python\n  x = 1\n    y = 2\n  ```"), act("x = 1\n  y = 2"))
      assert.deepStrictEqual(yield* parse("```python\r\nx = 1\r\n```\r\n"), act("x = 1"))
    }))

  it.effect("blocks in other languages beside the one block are ignored", () =>
    Effect.gen(function*() {
      const text = `${fence("text", "previous output")}\n${fence("python", "print(2)")}`
      assert.deepStrictEqual(yield* parse(text), act("print(2)"))
    }))

  it.effect.prop(
    "any code without a fence line round-trips",
    { code: fc.fullUnicodeString().filter((code) => code.trim().length > 0 && !code.includes("`") && !code.includes("~~~") && !code.includes("\r")) },
    ({ code }) =>
      Effect.gen(function*() {
        const parsed = yield* parseOk(plain, ModelReply.make({ text: `Here:\n${fence("python", code)}\ndone` }))
        assert.deepStrictEqual(parsed, act(code))
      })
  )
})

describe("CodeBlockParser: a distinct explanation for each failure", () => {
  it.effect("no block", () =>
    Effect.gen(function*() {
      const text = explanation(yield* parse("I would count the rows with csv."))
      assert.include(text, "contains no python code block")
      assert.include(text, "```python")
    }))

  it.effect("several blocks", () =>
    Effect.gen(function*() {
      const text = explanation(yield* parse(`${fence("python", "a = 1")}\nand\n${fence("python", "b = 2")}`))
      assert.include(text, "contains 2 python code blocks")
    }))

  it.effect("wrong language", () =>
    Effect.gen(function*() {
      const text = explanation(yield* parse(fence("javascript", "console.log(1)")))
      assert.include(text, "another language (```javascript)")
      assert.include(text, "runs python code only")
      // Without an alias, ```py is another language.
      assert.include(explanation(yield* parse(fence("py", "x = 1"))), "another language (```py)")
    }))

  it.effect("an untagged block when untagged blocks are not accepted", () =>
    Effect.gen(function*() {
      assert.include(explanation(yield* parse(fence("", "x = 1"), strict)), "has no language tag")
    }))

  it.effect("empty block", () =>
    Effect.gen(function*() {
      assert.include(explanation(yield* parse("```python\n```")), "is empty")
      assert.include(explanation(yield* parse(fence("python", "  \n\t"))), "is empty")
    }))

  it.effect("unterminated fence", () =>
    Effect.gen(function*() {
      const text = explanation(yield* parse("Let me compute.\n```python\nfor i in range(10):\n    print(i"))
      assert.include(text, "opened on line 2")
      assert.include(text, "never closed")
      // A shorter closing fence does not close a longer opening one.
      assert.include(explanation(yield* parse("````python\nx = 1\n```")), "never closed")
    }))

  it.effect("inline triple backticks are not a fence", () =>
    Effect.gen(function*() {
      assert.include(explanation(yield* parse("Run ```print(1)``` please")), "contains no python code block")
    }))

  it.effect("all these explanations are different", () =>
    Effect.gen(function*() {
      const texts = [
        "nothing",
        `${fence("python", "a")}\n${fence("python", "b")}`,
        fence("js", "a"),
        "```python\n```",
        "```python\nx"
      ]
      const explanations = []
      for (const text of texts) explanations.push(explanation(yield* parse(text)).split(".")[0])
      assert.strictEqual(new Set(explanations).size, texts.length)
    }))

  it.effect("a blank reply is NoAction", () =>
    Effect.gen(function*() {
      assert.deepStrictEqual(yield* parse(""), ParsedReply.noAction)
      assert.deepStrictEqual(yield* parse("\n  \n"), ParsedReply.noAction)
    }))
})

describe("CodeBlockParser: final-answer markers", () => {
  it.effect("a `Final Answer:` line outside code is Finish with the rest of the reply", () =>
    Effect.gen(function*() {
      assert.deepStrictEqual(
        yield* parse("Thought: I know it now.\nFinal Answer: 42 rows\n(from a.csv)", withLine),
        ParsedReply.finish("42 rows\n(from a.csv)")
      )
      assert.deepStrictEqual(yield* parse("   Final Answer:   yes  ", withLine), ParsedReply.finish("yes"))
    }))

  it.effect("the marker inside a code block is code, not an answer", () =>
    Effect.gen(function*() {
      const text = fence("python", "print('Final Answer: 42')")
      assert.deepStrictEqual(yield* parse(text, withLine), act("print('Final Answer: 42')"))
    }))

  it.effect("code and a final answer together are invalid; an empty answer is invalid", () =>
    Effect.gen(function*() {
      const both = explanation(yield* parse(`${fence("python", "print(1)")}\nFinal Answer: 1`, withLine))
      assert.include(both, "both code to run and a final answer")
      assert.include(explanation(yield* parse("Final Answer:   ", withLine)), "final answer (\"Final Answer:\") is empty")
    }))

  it.effect("without a line marker configured, such a line is just prose", () =>
    Effect.gen(function*() {
      assert.include(explanation(yield* parse("Final Answer: 42")), "contains no python code block")
    }))

  it.effect("a block that is exactly final_answer(<literal>) is Finish", () =>
    Effect.gen(function*() {
      const cases: ReadonlyArray<readonly [string, string]> = [
        ["final_answer(\"42 rows\")", "42 rows"],
        ["final_answer('it\\'s done\\n')", "it's done\n"],
        ["final_answer(\"\"\"multi\nline\"\"\")", "multi\nline"],
        ["final_answer(r'C:\\temp')", "C:\\temp"],
        ["  final_answer( answer = \"kw\" ) ;  ", "kw"],
        ["final_answer(42)", "42"],
        ["final_answer(-1.5e3)", "-1.5e3"]
      ]
      for (const [code, answer] of cases) {
        assert.deepStrictEqual(yield* parse(fence("python", code), withCall), ParsedReply.finish(answer), code)
      }
    }))

  it.effect("final_answer with a computed argument or among other statements is code to run", () =>
    Effect.gen(function*() {
      const cases = [
        "final_answer(result)",
        "final_answer(f\"{n} rows\")",
        "final_answer(\"a\" + \"b\")",
        "n = 3\nfinal_answer(n)",
        "final_answer('x')\nprint(2)",
        "final_answer('x') + 1",
        "final_answers('x')",
        "final_answer(\"unclosed)"
      ]
      for (const code of cases) assert.deepStrictEqual(yield* parse(fence("python", code), withCall), act(code), code)
    }))
})

describe("CodeBlockParser: id and layer", () => {
  it("the id encodes the resolved options", () => {
    assert.strictEqual(
      plain.id,
      "CodeBlockParser({\"language\":\"python\",\"aliases\":[],\"acceptUntagged\":true,\"finalAnswer\":{\"line\":null,\"call\":null}})"
    )
    assert.strictEqual(CodeBlockParser.make({ language: "python", acceptUntagged: true, finalAnswer: {} }).id, plain.id)
    const ids = new Set([plain, withLine, withCall, strict, CodeBlockParser.make({ language: "bash" })].map((p) => p.id))
    assert.strictEqual(ids.size, 5)
  })

  it.effect("layer provides it as the DecisionParser", () =>
    Effect.gen(function*() {
      const provided = yield* DecisionParser
      assert.strictEqual(provided.id, withCall.id)
      assert.deepStrictEqual(yield* provided.parse(ModelReply.make({ text: fence("python", "final_answer('x')") })), ParsedReply.finish("x"))
    }).pipe(Effect.provide(CodeBlockParser.layer({ language: "python", finalAnswer: { call: "final_answer" } }))))
})
