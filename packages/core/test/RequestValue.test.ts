/**
 * A `ModelRequest` is a value (design 0211): a client that keeps every request it is handed sees
 * each one unchanged after the run, and cannot change one either.
 */
import { assert, describe, it } from "@effect/vitest"
import * as Agent from "@polyloop/core/Agent"
import * as AgentDefinition from "@polyloop/core/AgentDefinition"
import * as Ids from "@polyloop/core/Ids"
import * as ModelClient from "@polyloop/core/ModelClient"
import * as NativeToolCallParser from "@polyloop/core/NativeToolCallParser"
import * as RunLogStore from "@polyloop/core/RunLogStore"
import * as Tool from "@polyloop/core/Tool"
import * as ToolRegistry from "@polyloop/core/ToolRegistry"
import * as ScriptedModel from "@polyloop/testing/ScriptedModel"
import * as Effect from "effect/Effect"
import * as Schema from "effect/Schema"

const count = Tool.make({
  name: "count",
  description: "Counts.",
  parameters: Schema.Struct({ n: Schema.Number }),
  replayPolicy: "Always",
  handler: ({ n }) => Effect.succeed(`counted ${n}`)
})
const tools = ToolRegistry.make(count)
const agent = AgentDefinition.make({ name: "request-value", systemPrompt: "Count.", budget: { maxSteps: 10 } })
const encode = Schema.encodeSync(ModelClient.ModelRequest)

describe("a ModelRequest is a value", () => {
  it.effect("a recording client keeps every request; after the run each is what it was at its call", () =>
    Effect.gen(function*() {
      const kept: Array<{ readonly request: ModelClient.ModelRequest; readonly atCall: string }> = []
      const recording = ModelClient.layer((request) =>
        Effect.sync(() => {
          kept.push({ request, atCall: JSON.stringify(request) })
          return kept.length < 5 ? ScriptedModel.toolCall("count", { n: kept.length }, { id: `c${kept.length}` }) : ScriptedModel.text("done")
        })
      )
      const result = yield* Agent.run({ runId: Ids.runId("value"), agent, task: "Count to four.", tools }).pipe(
        Effect.provide(Agent.layer({ store: RunLogStore.inMemory(), model: recording, parser: NativeToolCallParser.layer(), tools }))
      )
      assert.strictEqual(result.steps, 5)
      assert.lengthOf(kept, 5)
      // Each step adds the reply and the tool's answer: 2, 4, 6, 8, 10 messages.
      assert.deepStrictEqual(kept.map(({ request }) => request.messages.length), [2, 4, 6, 8, 10])
      for (const { atCall, request } of kept) {
        assert.strictEqual(JSON.stringify(request), atCall, "the request is unchanged after the run")
        assert.strictEqual([...request.messages].length, request.messages.length)
        assert.isTrue(Array.isArray(request.messages))
        assert.deepStrictEqual(encode(request), JSON.parse(atCall), "it encodes as it did at the call")
      }
      assert.strictEqual(kept[1]!.request.messages[3]?.text, "counted 1")
      assert.isUndefined(kept[0]!.request.messages[2], "a later message is not visible in an earlier request")
    }))

  it.effect("a client cannot change a request's messages: every write is a TypeError and the loop's history is untouched", () =>
    Effect.gen(function*() {
      const attempts: Array<string> = []
      const meddling = ModelClient.layer((request) =>
        Effect.sync(() => {
          const messages = request.messages as Array<(typeof request.messages)[number]>
          const writes: Array<readonly [string, () => unknown]> = [
            ["push", () => messages.push({ _tag: "User", text: "injected" })],
            ["index", () => (messages[0] = { _tag: "User", text: "replaced" })],
            ["length", () => (messages.length = 0)],
            ["pop", () => messages.pop()]
          ]
          for (const [name, write] of writes) {
            try {
              write()
              attempts.push(`${name}: allowed`)
            } catch (error) {
              attempts.push(`${name}: ${error instanceof TypeError ? "TypeError" : String(error)}`)
            }
          }
          return ScriptedModel.text(`saw ${request.messages.length}`)
        })
      )
      const result = yield* Agent.run({ runId: Ids.runId("meddle"), agent, task: "Count.", tools }).pipe(
        Effect.provide(Agent.layer({ store: RunLogStore.inMemory(), model: meddling, parser: NativeToolCallParser.layer(), tools }))
      )
      assert.strictEqual(result.steps, 1)
      assert.deepStrictEqual(attempts, ["push: TypeError", "index: TypeError", "length: TypeError", "pop: TypeError"])
    }))
})
