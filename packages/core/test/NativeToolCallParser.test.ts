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

  it.effect("several calls are one Act with all of them, in the reply's order (design 0150)", () =>
    Effect.gen(function*() {
      const parsed = yield* parser.parse(reply("", ["c1", "read", "{\"path\":\"a\"}"], ["c2", "write", ""], ["c3", "read", "{\"path\":\"b\"}"]))
      assert.deepStrictEqual(
        parsed,
        ParsedReply.actAll([
          { _tag: "ToolCall", id: "c1", name: "read", arguments: { path: "a" } },
          { _tag: "ToolCall", id: "c2", name: "write", arguments: {} },
          { _tag: "ToolCall", id: "c3", name: "read", arguments: { path: "b" } }
        ])
      )
    }))

  it.effect("several calls, one with arguments that are not JSON: InvalidDecision naming it, none run", () =>
    Effect.gen(function*() {
      const text = explanation(yield* parser.parse(reply("", ["c1", "read", "{}"], ["c2", "write", "{nope"])))
      assert.include(text, "call 2 (to \"write\") are not valid JSON")
      assert.include(text, "None of your 2 calls was run")
    }))

  it.effect("several calls sharing an id: InvalidDecision (each call needs its own id); empty ids may repeat", () =>
    Effect.gen(function*() {
      const text = explanation(yield* parser.parse(reply("", ["c1", "read", "{}"], ["c1", "write", "{}"])))
      assert.include(text, "share the id \"c1\"")
      const parsed = yield* parser.parse(reply("", ["", "read", "{}"], ["", "write", "{}"]))
      assert.strictEqual(parsed._tag === "Act" ? parsed.actions.length : 0, 2)
    }))

  it("the one-action-per-step explanation is the text this parser gave for several calls before design 0150", () => {
    const decision = ParsedReply.oneActionPerStep([
      { _tag: "ToolCall", id: "c1", name: "read", arguments: {} },
      { _tag: "ToolCall", id: "c2", name: "write", arguments: {} }
    ])
    assert.deepStrictEqual(
      decision,
      ParsedReply.invalid("You called 2 tools at once (\"read\", \"write\"); this agent takes one action per step. Call exactly one tool.")
    )
  })

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
