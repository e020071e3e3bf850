/**
 * Design 0230's core extension points: a tool whose JSON Schema comes from outside (`jsonSchema`)
 * is shown to the model and recorded in the snapshot verbatim, while `parameters` still
 * validates; `Snapshot.changedTools` and `SnapshotMismatch.tools` name the tools that changed.
 */
import { assert, describe, it } from "@effect/vitest"
import * as AgentDefinition from "@polyloop/core/AgentDefinition"
import { SnapshotMismatch } from "@polyloop/core/Errors"
import * as Snapshot from "@polyloop/core/Snapshot"
import * as Tool from "@polyloop/core/Tool"
import * as ToolRegistry from "@polyloop/core/ToolRegistry"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as JSONSchema from "effect/JSONSchema"
import * as Schema from "effect/Schema"

const serverSchema = {
  type: "object",
  properties: { path: { type: "string", description: "where" } },
  required: ["path"],
  $schema: "https://json-schema.org/draft/2020-12/schema"
}

const external = Tool.make({
  name: "read",
  description: "Reads.",
  parameters: Schema.Struct({ path: Schema.String }),
  jsonSchema: serverSchema,
  handler: ({ path }) => Effect.succeed(path)
})
const code = Tool.make({
  name: "add",
  description: "Adds.",
  parameters: Schema.Struct({ a: Schema.Number }),
  handler: ({ a }) => Effect.succeed(String(a))
})

const agent = AgentDefinition.make({ name: "a", systemPrompt: "s", budget: { maxSteps: 3 }, modelSettings: { model: "m" } })
const snapshotOf = (tools: ToolRegistry.ToolRegistry<unknown>) =>
  Snapshot.encode(Snapshot.make({ agent, task: "t", tools, parserId: "p" })).value

describe("Tool.jsonSchema", () => {
  it("the model view and the snapshot show a tool's jsonSchema verbatim, and derive the others' from parameters", () => {
    const registry = ToolRegistry.make(external, code)
    const [readView, addView] = registry.modelView()
    assert.strictEqual(readView?.parameters, serverSchema)
    assert.deepStrictEqual(addView?.parameters, JSONSchema.make(code.parameters))
    const snapshot = snapshotOf(registry) as { tools: ReadonlyArray<{ parameters: unknown }> }
    assert.deepStrictEqual(snapshot.tools[0]?.parameters, serverSchema)
    // restrictTo carries it along.
    const narrowed = Either.getOrThrow(registry.restrictTo(["read"]))
    assert.strictEqual(narrowed.modelView()[0]?.parameters, serverSchema)
  })

  it("validation still goes through parameters", () => {
    const registry = ToolRegistry.make(external)
    const bad = registry.validate({ _tag: "ToolCall", id: "1", name: "read", arguments: { path: 3 } })
    assert.isTrue(Either.isLeft(bad))
    if (Either.isLeft(bad)) assert.strictEqual(bad.left._tag, "InvalidArguments")
    assert.isTrue(Either.isRight(registry.validate({ _tag: "ToolCall", id: "1", name: "read", arguments: { path: "a" } })))
  })
})

describe("Snapshot.changedTools and SnapshotMismatch.tools", () => {
  it("names the tools whose entries changed, were removed or were added; a moved tool is not named", () => {
    const changedSchema: Tool.Tool<{ readonly path: string }> = { ...external, jsonSchema: { ...serverSchema, required: [] } }
    const otherPolicy: Tool.Tool<{ readonly a: number }> = { ...code, replayPolicy: "Always" }
    const extra: Tool.Tool<{ readonly a: number }> = { ...code, name: "extra" }
    const before = snapshotOf(ToolRegistry.make(external, code))
    assert.deepStrictEqual(Snapshot.changedTools(before, before), [])
    assert.deepStrictEqual(Snapshot.changedTools(before, snapshotOf(ToolRegistry.make(changedSchema, code))), ["read"])
    assert.deepStrictEqual(Snapshot.changedTools(before, snapshotOf(ToolRegistry.make(external, otherPolicy))), ["add"])
    assert.deepStrictEqual(Snapshot.changedTools(before, snapshotOf(ToolRegistry.make(code, extra))), ["read", "extra"])
    assert.deepStrictEqual(Snapshot.changedTools(before, snapshotOf(ToolRegistry.make(code, external))), [])
    assert.deepStrictEqual(Snapshot.changedTools(null, { tools: "no" }), [])
  })

  it("the message names the changed tools; without them it is as before", () => {
    const differences: ReadonlyArray<readonly [string, unknown, unknown]> = [["tools[0].parameters.required[0]", "path", null]]
    const named = new SnapshotMismatch({ runId: "r", differences, tools: ["read"] })
    assert.strictEqual(named.message, "run r was started with another configuration; differing: tools[0].parameters.required[0]; tools changed: read")
    assert.strictEqual(new SnapshotMismatch({ runId: "r", differences }).message, "run r was started with another configuration; differing: tools[0].parameters.required[0]")
  })
})
