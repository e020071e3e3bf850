import { assert, describe, it } from "@effect/vitest"
import * as Action from "@polyloop/core/Action"
import { DecisionParser } from "@polyloop/core/DecisionParser"
import * as JsonActionParser from "@polyloop/core/JsonActionParser"
import * as ModelReply from "@polyloop/core/ModelReply"
import * as ParsedReply from "@polyloop/core/ParsedReply"
import * as Effect from "effect/Effect"
import * as fc from "effect/FastCheck"
import { parseOk, parserLaws } from "./parserLaws.js"

const parser = JsonActionParser.make()
const custom = JsonActionParser.make({
  toolKeys: ["action"],
  argumentsKeys: ["input"],
  finishKey: null,
  finishTool: { name: "done", answerKey: "result" }
})

parserLaws("JsonActionParser", parser)
parserLaws("JsonActionParser(custom keys)", custom)

const parse = (text: string, p: DecisionParser.Service = parser) => p.parse(ModelReply.make({ text }))

const act = (name: string, args: unknown) => ParsedReply.act(Action.ToolCall.make({ id: "", name, arguments: args }))

const explanation = (parsed: ParsedReply.ParsedReply): string => {
  assert.strictEqual(parsed._tag, "InvalidDecision")
  return parsed._tag === "InvalidDecision" ? parsed.explanation : ""
}

describe("JsonActionParser: actions", () => {
  it.effect("nested and flattened arguments are the same action", () =>
    Effect.gen(function*() {
      const nested = yield* parse("{\"tool\": \"read\", \"arguments\": {\"path\": \"a\"}}")
      const flattened = yield* parse("{\"tool\": \"read\", \"path\": \"a\"}")
      assert.deepStrictEqual(nested, act("read", { path: "a" }))
      assert.deepStrictEqual(flattened, nested)
      // `args` is the other default arguments key, `name` the other tool key.
      assert.deepStrictEqual(yield* parse("{\"name\": \"read\", \"args\": {\"path\": \"a\"}}"), nested)
    }))

  it.effect("tolerates a ```json code fence and prose around the object", () =>
    Effect.gen(function*() {
      const text = [
        "I will read the file first.",
        "```json",
        "{",
        "  \"tool\": \"read\",",
        "  \"arguments\": {\"path\": \"reports/q3.md\", \"note\": \"braces } and { in a string\"}",
        "}",
        "```",
        "Then I will summarise it."
      ].join("\n")
      assert.deepStrictEqual(yield* parse(text), act("read", { path: "reports/q3.md", note: "braces } and { in a string" }))
    }))

  it.effect("the id is empty: the loop assigns call_<step>", () =>
    Effect.gen(function*() {
      const parsed = yield* parse("{\"tool\": \"now\"}")
      assert.deepStrictEqual(parsed, act("now", {}))
    }))

  it.effect("braces in prose are not taken for JSON", () =>
    Effect.gen(function*() {
      const text = "The set {a, b} has two elements; a Python set looks like {1, 2}.\n{\"tool\": \"count\", \"items\": [\"a\", \"b\"]}"
      assert.deepStrictEqual(yield* parse(text), act("count", { items: ["a", "b"] }))
    }))

  it.effect("the first tool key in order names the tool; the other keys are arguments", () =>
    Effect.gen(function*() {
      // `name` is an argument here: "tool" comes first in the default toolKeys.
      assert.deepStrictEqual(
        yield* parse("{\"tool\": \"create_user\", \"name\": \"Ada\", \"age\": 36}"),
        act("create_user", { name: "Ada", age: 36 })
      )
    }))

  it.effect("the nested form is exactly a tool key and one arguments object; anything else is flattened", () =>
    Effect.gen(function*() {
      // A parameter called `args` that is not an object is an ordinary (flattened) argument.
      assert.deepStrictEqual(yield* parse("{\"tool\": \"ls\", \"args\": [\"-l\"]}"), act("ls", { args: ["-l"] }))
      // An arguments object beside other keys: flattened, so validation reports the stray key.
      assert.deepStrictEqual(
        yield* parse("{\"tool\": \"ls\", \"arguments\": {\"path\": \"/\"}, \"all\": true}"),
        act("ls", { arguments: { path: "/" }, all: true })
      )
      assert.deepStrictEqual(yield* parse("{\"tool\": \"now\", \"arguments\": null}"), act("now", {}))
      // Arguments encoded twice (a string holding a JSON object) are the nested form...
      assert.deepStrictEqual(
        yield* parse("{\"tool\": \"read\", \"arguments\": \"{\\\"path\\\": \\\"a\\\"}\"}"),
        act("read", { path: "a" })
      )
      // ...but any other string is an ordinary argument.
      assert.deepStrictEqual(yield* parse("{\"tool\": \"shell\", \"args\": \"ls -l\"}"), act("shell", { args: "ls -l" }))
    }))

  it.effect("a __proto__ key stays an ordinary argument (no prototype pollution)", () =>
    Effect.gen(function*() {
      const parsed = yield* parse("{\"tool\": \"t\", \"__proto__\": {\"polluted\": true}}")
      assert.strictEqual(parsed._tag, "Act")
      if (parsed._tag === "Act" && parsed.actions[0]._tag === "ToolCall") {
        const args = parsed.actions[0].arguments as Record<string, unknown>
        assert.isTrue(Object.prototype.hasOwnProperty.call(args, "__proto__"))
        assert.strictEqual(Object.getPrototypeOf(args), Object.prototype)
        assert.isUndefined(({} as Record<string, unknown>)["polluted"])
      }
    }))

  it.effect("a JSON array of one object is that object", () =>
    Effect.gen(function*() {
      assert.deepStrictEqual(yield* parse("[{\"tool\": \"read\", \"path\": \"a\"}]"), act("read", { path: "a" }))
    }))

  it.effect.prop(
    "any tool name and JSON object of arguments round-trip through both forms",
    {
      name: fc.string({ minLength: 1 }),
      args: fc.dictionary(
        fc.string().filter((key) => !["tool", "name", "final_answer"].includes(key)),
        fc.jsonValue({ maxDepth: 3 })
      )
    },
    ({ args, name }) =>
      Effect.gen(function*() {
        const expected = act(name, JSON.parse(JSON.stringify(args)))
        const nested = yield* parseOk(parser, ModelReply.make({ text: `Sure.\n${JSON.stringify({ tool: name, arguments: args })}` }))
        assert.deepStrictEqual(nested, expected)
        const keys = Object.keys(args)
        const isNestedShape = keys.length === 1 && ["arguments", "args"].includes(keys[0]!)
        if (!isNestedShape) {
          const flat = yield* parseOk(parser, ModelReply.make({ text: `\`\`\`json\n${JSON.stringify({ tool: name, ...args })}\n\`\`\`` }))
          assert.deepStrictEqual(flat, expected)
        }
      })
  )
})

describe("JsonActionParser: finishing", () => {
  it.effect("{\"final_answer\": ...} is Finish; a non-string answer is its JSON text", () =>
    Effect.gen(function*() {
      assert.deepStrictEqual(yield* parse("Done.\n{\"final_answer\": \"42 widgets\"}"), ParsedReply.finish("42 widgets"))
      assert.deepStrictEqual(yield* parse("{\"final_answer\": {\"count\": 42}}"), ParsedReply.finish("{\"count\":42}"))
    }))

  it.effect("a final answer mixed with a tool call is invalid", () =>
    Effect.gen(function*() {
      const text = explanation(yield* parse("{\"final_answer\": \"x\", \"tool\": \"read\"}"))
      assert.include(text, "both a final answer")
    }))

  it.effect("a configured finish tool gives Finish with its answer argument", () =>
    Effect.gen(function*() {
      assert.deepStrictEqual(yield* parse("{\"action\": \"done\", \"input\": {\"result\": \"ok\"}}", custom), ParsedReply.finish("ok"))
      assert.deepStrictEqual(yield* parse("{\"action\": \"done\", \"result\": \"flat ok\"}", custom), ParsedReply.finish("flat ok"))
      const missing = explanation(yield* parse("{\"action\": \"done\"}", custom))
      assert.include(missing, "\"result\"")
      // With finishKey disabled, final_answer is just another key: no tool named.
      assert.include(explanation(yield* parse("{\"final_answer\": \"x\"}", custom)), "does not name a tool")
      // Custom keys: `action`/`input`.
      assert.deepStrictEqual(
        yield* parse("{\"action\": \"read\", \"input\": {\"path\": \"a\"}}", custom),
        act("read", { path: "a" })
      )
    }))
})

describe("JsonActionParser: a distinct explanation for each failure", () => {
  it.effect("no JSON object", () =>
    Effect.gen(function*() {
      const text = explanation(yield* parse("I think I should read the file."))
      assert.include(text, "contains no JSON object")
      assert.include(text, "{\"tool\": \"<tool name>\", \"arguments\": {...}}")
    }))

  it.effect("several objects", () =>
    Effect.gen(function*() {
      const text = explanation(yield* parse("{\"tool\": \"a\"}\nthen\n{\"tool\": \"b\"}"))
      assert.include(text, "contains 2 JSON objects")
      assert.include(text, "one action per step")
      // Two arrays are not one array of actions.
      assert.include(explanation(yield* parse("[{\"tool\": \"a\"}] and [{\"tool\": \"b\"}]")), "contains 2 JSON objects")
    }))

  it.effect("a JSON array of actions is one Act with each, in order (fenced, flattened arguments allowed)", () =>
    Effect.gen(function*() {
      const parsed = yield* parse(
        "Doing three things:\n```json\n[{\"tool\": \"a\"}, {\"tool\": \"b\", \"path\": \"x\"},\n {\"name\": \"c\", \"arguments\": {\"n\": 1}}]\n```"
      )
      assert.deepStrictEqual(
        parsed,
        ParsedReply.actAll([
          { _tag: "ToolCall", id: "", name: "a", arguments: {} },
          { _tag: "ToolCall", id: "", name: "b", arguments: { path: "x" } },
          { _tag: "ToolCall", id: "", name: "c", arguments: { n: 1 } }
        ])
      )
      assert.deepStrictEqual(yield* parse("[{\"tool\": \"a\"}]"), ParsedReply.act({ _tag: "ToolCall", id: "", name: "a", arguments: {} }))
    }))

  it.effect("an array with an element that is not a tool call, or a final answer among calls, is InvalidDecision naming the element", () =>
    Effect.gen(function*() {
      assert.include(explanation(yield* parse("[{\"tool\": \"a\"}, {\"path\": \"x\"}]")), "In element 2 of your array of actions: Your JSON object does not name a tool")
      assert.include(explanation(yield* parse("[{\"tool\": \"a\"}, {\"final_answer\": \"done\"}]")), "Element 2 of your array of actions is a final answer")
      assert.include(explanation(yield* parse("[{\"tool\": \"a\"}, 3, {\"tool\": \"b\"}]")), "contains 2 JSON objects")
    }))

  it.effect("malformed JSON, with the problem and where it is in the reply", () =>
    Effect.gen(function*() {
      const singleQuotes = explanation(yield* parse("Calling:\n{'tool': 'read'}"))
      assert.include(singleQuotes, "is not valid JSON")
      assert.include(singleQuotes, "double quotes, not single quotes (line 2, column 2)")
      const trailing = explanation(yield* parse("{\"tool\": \"read\", \"path\": \"a\",}"))
      assert.include(trailing, "trailing comma before \"}\" is not allowed (line 1, column 30)")
      const unquoted = explanation(yield* parse("{tool: \"read\"}"))
      assert.include(unquoted, "expected a double-quoted property name but found \"t\" (line 1, column 2)")
      const rawNewline = explanation(yield* parse("{\"tool\": \"write\", \"text\": \"two\nlines\"}"))
      assert.include(rawNewline, "raw control character")
    }))

  it.effect("an object left open (truncated reply)", () =>
    Effect.gen(function*() {
      const text = explanation(yield* parse("{\"tool\": \"read\", \"arguments\": {\"path\": \"a\"}"))
      assert.include(text, "is not closed")
      assert.notInclude(text, "does not name a tool")
    }))

  it.effect("an object without a tool name", () =>
    Effect.gen(function*() {
      const text = explanation(yield* parse("{\"path\": \"a\"}"))
      assert.include(text, "does not name a tool")
      assert.include(text, "no \"tool\" or \"name\" key")
      assert.include(text, "its keys are \"path\"")
      assert.include(explanation(yield* parse("{}")), "it is empty")
    }))

  it.effect("a tool name that is not a non-empty string", () =>
    Effect.gen(function*() {
      assert.include(explanation(yield* parse("{\"tool\": 3}")), "must be a non-empty string")
      assert.include(explanation(yield* parse("{\"tool\": \"\"}")), "must be a non-empty string")
    }))

  it.effect("all these explanations are different", () =>
    Effect.gen(function*() {
      const texts = [
        "no json",
        "{\"tool\": \"a\"} {\"tool\": \"b\"}",
        "{\"tool\": \"a\",}",
        "{\"tool\": \"a\"",
        "{\"x\": 1}",
        "{\"tool\": 1}",
        "{\"final_answer\": \"x\", \"tool\": \"a\"}"
      ]
      const explanations = []
      for (const text of texts) explanations.push(explanation(yield* parse(text)).split(".")[0])
      assert.strictEqual(new Set(explanations).size, texts.length)
    }))

  it.effect("a blank reply is NoAction", () =>
    Effect.gen(function*() {
      assert.deepStrictEqual(yield* parse(""), ParsedReply.noAction)
      assert.deepStrictEqual(yield* parse("  \n "), ParsedReply.noAction)
    }))

  it.effect("values nested too deep to be logged are refused", () =>
    Effect.gen(function*() {
      const deep = `{"tool": "t", "x": ${"[".repeat(300)}${"]".repeat(300)}}`
      assert.include(explanation(yield* parse(deep)), "nests deeper than 256 levels")
      const fine = `{"tool": "t", "x": ${"[".repeat(100)}${"]".repeat(100)}}`
      assert.strictEqual((yield* parse(fine))._tag, "Act")
    }))
})

describe("JsonActionParser: id and layer", () => {
  it("the id encodes the resolved options", () => {
    assert.strictEqual(
      parser.id,
      "JsonActionParser({\"toolKeys\":[\"tool\",\"name\"],\"argumentsKeys\":[\"arguments\",\"args\"],\"finishKey\":\"final_answer\",\"finishTool\":null})"
    )
    assert.strictEqual(JsonActionParser.make({ finishKey: "final_answer", toolKeys: ["tool", "name"] }).id, parser.id)
    assert.notStrictEqual(custom.id, parser.id)
    assert.notStrictEqual(JsonActionParser.make({ finishTool: { name: "done" } }).id, parser.id)
    assert.include(JsonActionParser.make({ finishTool: { name: "done" } }).id, "\"answerKey\":\"answer\"")
  })

  it.effect("layer provides it as the DecisionParser", () =>
    Effect.gen(function*() {
      const provided = yield* DecisionParser
      assert.strictEqual(provided.id, parser.id)
    }).pipe(Effect.provide(JsonActionParser.layer())))
})
