import { assert, describe, it } from "@effect/vitest"
import * as Action from "@polyloop/core/Action"
import { DecisionParser } from "@polyloop/core/DecisionParser"
import * as ModelReply from "@polyloop/core/ModelReply"
import * as NativeToolCallParser from "@polyloop/core/NativeToolCallParser"
import * as ParsedReply from "@polyloop/core/ParsedReply"
import * as Effect from "effect/Effect"
import * as fc from "effect/FastCheck"
import { parseOk, parserLaws } from "./parserLaws.js"

const parser = NativeToolCallParser.make()
const noActionOnText = NativeToolCallParser.make({ onText: "NoAction" })

parserLaws("NativeToolCallParser", parser)
parserLaws("NativeToolCallParser(onText: NoAction)", noActionOnText)

const reply = (text: string, ...calls: ReadonlyArray<readonly [id: string, name: string, argumentsText: string]>) =>
  ModelReply.make({ text, toolCalls: calls.map(([id, name, argumentsText]) => ({ id, name, argumentsText })) })

const explanation = (parsed: ParsedReply.ParsedReply): string => {
  assert.strictEqual(parsed._tag, "InvalidDecision")
  return parsed._tag === "InvalidDecision" ? parsed.explanation : ""
}

describe("NativeToolCallParser", () => {
  it.effect("one call is Act with the model's id and the arguments parsed as JSON", () =>
    Effect.gen(function*() {
      const parsed = yield* parser.parse(reply("Let me look.", ["call_abc", "read", "{\"path\": \"a.txt\", \"lines\": [1, 2]}"]))
      assert.deepStrictEqual(
        parsed,
        ParsedReply.act(Action.ToolCall.make({ id: "call_abc", name: "read", arguments: { path: "a.txt", lines: [1, 2] } }))
      )
    }))

  it.effect("blank argumentsText (a call without arguments) is {}", () =>
    Effect.gen(function*() {
      for (const text of ["", "  \n"]) {
        const parsed = yield* parser.parse(reply("", ["c1", "now", text]))
        assert.deepStrictEqual(parsed, ParsedReply.act(Action.ToolCall.make({ id: "c1", name: "now", arguments: {} })))
      }
    }))

  it.effect("arguments that are not JSON are InvalidDecision naming the tool and the JSON problem", () =>
    Effect.gen(function*() {
      const truncated = explanation(yield* parser.parse(reply("", ["c1", "read", "{\"path\": \"a.txt\""])))
      assert.include(truncated, "\"read\"")
      assert.include(truncated, "not valid JSON")
      assert.include(truncated, "the text ends inside an object (a \"}\" is missing) (line 1, column 17)")
      const singleQuotes = explanation(yield* parser.parse(reply("", ["c1", "write", "{'path': 'a'}"])))
      assert.include(singleQuotes, "\"write\"")
      assert.include(singleQuotes, "double quotes, not single quotes (line 1, column 2)")
      const trailingComma = explanation(yield* parser.parse(reply("", ["c1", "write", "{\"a\": 1,\n}"])))
      assert.include(trailingComma, "trailing comma before \"}\" is not allowed (line 2, column 1)")
      const prose = explanation(yield* parser.parse(reply("", ["c1", "write", "path is a.txt"])))
      assert.include(prose, "expected a value but found \"p\" (line 1, column 1)")
    }))

  it.effect("several calls are InvalidDecision: one action per step", () =>
    Effect.gen(function*() {
      const parsed = yield* parser.parse(reply("", ["c1", "read", "{}"], ["c2", "write", "{}"]))
      const text = explanation(parsed)
      assert.include(text, "one action per step")
      assert.include(text, "2 tools")
      assert.include(text, "\"read\", \"write\"")
    }))

  it.effect("no call and some text is Finish with the text by default, NoAction by option", () =>
    Effect.gen(function*() {
      assert.deepStrictEqual(yield* parser.parse(reply("The answer is 42.")), ParsedReply.finish("The answer is 42."))
      assert.deepStrictEqual(yield* noActionOnText.parse(reply("The answer is 42.")), ParsedReply.noAction)
    }))

  it.effect("no call and blank text is NoAction whatever the option", () =>
    Effect.gen(function*() {
      for (const p of [parser, noActionOnText]) {
        assert.deepStrictEqual(yield* p.parse(reply("")), ParsedReply.noAction)
        assert.deepStrictEqual(yield* p.parse(reply(" \n\t")), ParsedReply.noAction)
      }
    }))

  it.effect.prop(
    "any JSON value as arguments comes back as the parsed value",
    { json: fc.json(), id: fc.string(), name: fc.string() },
    ({ id, json, name }) =>
      Effect.gen(function*() {
        const parsed = yield* parseOk(parser, reply("", [id, name, json]))
        assert.deepStrictEqual(parsed, ParsedReply.act(Action.ToolCall.make({ id, name, arguments: JSON.parse(json) })))
      })
  )

  it("the id encodes the options and is stable", () => {
    assert.strictEqual(parser.id, "NativeToolCallParser({\"onText\":\"Finish\"})")
    assert.strictEqual(NativeToolCallParser.make({ onText: "Finish" }).id, parser.id)
    assert.strictEqual(noActionOnText.id, "NativeToolCallParser({\"onText\":\"NoAction\"})")
  })

  it.effect("layer provides it as the DecisionParser", () =>
    Effect.gen(function*() {
      const provided = yield* DecisionParser
      assert.strictEqual(provided.id, noActionOnText.id)
      assert.deepStrictEqual(yield* provided.parse(reply("hi")), ParsedReply.noAction)
    }).pipe(Effect.provide(NativeToolCallParser.layer({ onText: "NoAction" }))))
})
