/**
 * JSON Schema tools without a server: the dialect a schema declares picks the validator, ajv's
 * errors become the registry's issues (`path: problem`, escaped pointers unescaped), a schema ajv
 * cannot compile is a typed error, and how result content becomes an observation.
 */
import { assert, describe, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Schema from "effect/Schema"
import * as ToolRegistry from "@polyloop/core/ToolRegistry"
import * as JsonSchemaTool from "@polyloop/mcp/JsonSchemaTool"
import { base64Bytes, describeItem, observation } from "../src/internal/content.js"

const issuesOf = (jsonSchema: unknown, args: unknown): string | undefined => {
  const tool = Either.getOrThrow(JsonSchemaTool.make({ name: "t", description: "", jsonSchema, handler: () => Effect.succeed("ok") }))
  const result = ToolRegistry.make(tool).validate({ _tag: "ToolCall", id: "1", name: "t", arguments: args })
  return Either.isLeft(result) ? (result.left._tag === "InvalidArguments" ? result.left.issues : result.left._tag) : undefined
}

describe("JsonSchemaTool", () => {
  it("picks the dialect from $schema (2020-12 when absent, as MCP says)", () => {
    assert.strictEqual(JsonSchemaTool.dialectOf({}), "2020-12")
    assert.strictEqual(JsonSchemaTool.dialectOf({ $schema: "http://json-schema.org/draft-07/schema#" }), "draft-07")
    assert.strictEqual(JsonSchemaTool.dialectOf({ $schema: "https://json-schema.org/draft/2019-09/schema" }), "2019-09")
    assert.strictEqual(JsonSchemaTool.dialectOf({ $schema: "https://json-schema.org/draft/2020-12/schema" }), "2020-12")
    // `prefixItems` exists in 2020-12 only: the same schema checks tuples there and not in draft-07.
    const tuple = { type: "object", properties: { pair: { type: "array", prefixItems: [{ type: "string" }, { type: "number" }] } } }
    assert.strictEqual(issuesOf(tuple, { pair: [1, "a"] }), "pair.0: must be string; pair.1: must be number")
    assert.isUndefined(issuesOf({ ...tuple, $schema: "http://json-schema.org/draft-07/schema#" }, { pair: [1, "a"] }))
  })

  it("reports every issue at its path, worded like Effect Schema's", () => {
    const schema = {
      type: "object",
      properties: {
        "a/b": { type: "integer" },
        nested: {
          type: "object",
          properties: { id: { type: "integer" }, when: { type: "string", format: "date-time" } },
          required: ["id"],
          additionalProperties: false
        }
      },
      required: ["name"]
    }
    assert.strictEqual(
      issuesOf(schema, { "a/b": 1.5, nested: { when: "yesterday", extra: 1 } }),
      "name: is missing; a/b: must be integer; nested.id: is missing; nested.extra: is unexpected; nested.when: must match format \"date-time\""
    )
    assert.strictEqual(issuesOf(schema, "text"), "must be object")
    assert.isUndefined(issuesOf(schema, { name: "x", nested: { id: 1, when: "2026-12-01T10:00:00Z" } }))
  })

  it("the parameters Schema decodes valid values unchanged and encodes only valid ones", () => {
    const tool = Either.getOrThrow(JsonSchemaTool.make({ name: "t", description: "", jsonSchema: { type: "object", required: ["a"] } }))
    const value = { a: [1, { b: null }] }
    assert.strictEqual(Schema.decodeUnknownSync(tool.parameters)(value), value)
    assert.isTrue(Either.isLeft(Schema.encodeUnknownEither(tool.parameters)({})))
    assert.deepStrictEqual(tool.jsonSchema, { type: "object", required: ["a"] })
  })

  it("a schema ajv cannot compile, or one that is not an object, is InvalidJsonSchema naming the tool", () => {
    const bad = JsonSchemaTool.make({ name: "broken", description: "", jsonSchema: { type: "object", properties: { x: { type: 12 } } } })
    assert.isTrue(Either.isLeft(bad))
    if (Either.isLeft(bad)) {
      assert.strictEqual(bad.left.tool, "broken")
      assert.match(bad.left.message, /^the schema of "broken" cannot be compiled: /)
    }
    const notObject = JsonSchemaTool.make({ name: "list", description: "", jsonSchema: [1] })
    assert.isTrue(Either.isLeft(notObject) && notObject.left.message === "the schema of \"list\" is not a JSON object")
  })

  it("two tools with one $id compile side by side", () => {
    const compiler = JsonSchemaTool.makeCompiler()
    const a = compiler.compile("a", { $id: "https://example.com/same.json", type: "string" })
    const b = compiler.compile("b", { $id: "https://example.com/same.json", type: "number" })
    assert.isTrue(Either.isRight(a) && Either.isRight(b))
    if (Either.isRight(a) && Either.isRight(b)) {
      assert.isUndefined(a.right("x"))
      assert.isUndefined(b.right(1))
      assert.isDefined(b.right("x"))
    }
  })
})

describe("result content as an observation", () => {
  it("counts base64 bytes", () => {
    assert.deepStrictEqual(["", "AA==", "AAA=", "AAAA", "AAEC\nAw=="].map(base64Bytes), [0, 1, 2, 3, 4])
  })

  it("describes kinds it does not know, and empty results", () => {
    assert.strictEqual(describeItem({ type: "hologram", data: "x" }), "[content of type \"hologram\"]")
    assert.strictEqual(describeItem({ type: "image", mimeType: "image/gif" }), "[image: image/gif]")
    assert.strictEqual(observation({ content: [] }), "")
    assert.strictEqual(observation({ content: [{ type: "text", text: "a" }, { type: "text", text: "b" }] }), "a\nb")
  })
})
