/**
 * Typed final answers over Anthropic's Messages API and OpenAI's Responses API (issue 47, design
 * 0400 decision 6 and its amendment): an agent with an output schema asks the provider to
 * constrain its text — Anthropic's `output_config.format`, the Responses API's `text.format` —
 * and the answer is decoded to the typed value. Without an output schema, or with
 * `constrainOutput: false`, nothing is asked; `settings.extra` wins over the constraint.
 *
 * Real data (`fixtures/recorded/SOURCES.md`):
 * - Anthropic: the request's `output_config` and the reply are one recorded interaction of
 *   `anthropics/anthropic-sdk-python` (`tests/lib/_parse/__inline_snapshot__/test_messages/
 *   TestSyncParse/bd7029d5-….json` @1eaae19: a pydantic `OrderDetails`, claude-sonnet-4-5).
 *   The Effect schema below is written to give the same JSON Schema (titles and `$defs` as
 *   pydantic writes them).
 * - Responses: the reply is the recorded response of `kubiosec-agentic/agentic-labs`
 *   `lab02/ADDON.md` @146cb16 (gpt-4o-2024-08-06). The request's `text.format` is that
 *   response's echo of it, without the `description: null` the API adds to its echo (the
 *   request itself is not in the source).
 */
import * as NodeHttpClient from "@effect/platform-node/NodeHttpClient"
import { assert, describe, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as JSONSchema from "effect/JSONSchema"
import * as Layer from "effect/Layer"
import * as Redacted from "effect/Redacted"
import * as Schema from "effect/Schema"
import * as Stream from "effect/Stream"
import * as Agent from "@polyloop/core/Agent"
import * as AgentDefinition from "@polyloop/core/AgentDefinition"
import * as EventSink from "@polyloop/core/EventSink"
import { runId } from "@polyloop/core/Ids"
import * as Message from "@polyloop/core/Message"
import type { ModelClient, ModelRequest } from "@polyloop/core/ModelClient"
import * as NativeToolCallParser from "@polyloop/core/NativeToolCallParser"
import * as RunLogStore from "@polyloop/core/RunLogStore"
import * as ToolRegistry from "@polyloop/core/ToolRegistry"
import * as Anthropic from "@polyloop/ai/Anthropic"
import * as OpenAiResponses from "@polyloop/ai/OpenAiResponses"
import * as FakeServer from "./FakeServer.js"
import { clientOf } from "./helpers.js"
import * as Replay from "./Replay.js"

const isRecord = (value: unknown): value is Record<string, unknown> => typeof value === "object" && value !== null && !Array.isArray(value)

const bodyOf = (received: FakeServer.Received | undefined): Record<string, unknown> => {
  assert.isDefined(received)
  const body = received!.body
  assert.isTrue(isRecord(body))
  return body as Record<string, unknown>
}

/** Runs an agent against the fake server with the given provider layer; the first request's body and the result. */
const runAgainst = <A>(
  provider: (baseUrl: string) => Layer.Layer<ModelClient>,
  reply: FakeServer.Reply,
  agent: AgentDefinition.AgentDefinition<A>,
  task: string
) =>
  Effect.gen(function*() {
    const server = yield* FakeServer.make
    yield* server.reply(reply)
    const registry = ToolRegistry.make()
    const store = yield* RunLogStore.makeMemory
    const result = yield* Agent.run({ runId: runId("structured"), agent, task, tools: registry }).pipe(
      Effect.provide(Layer.mergeAll(
        provider(server.baseUrl),
        NativeToolCallParser.layer(),
        ToolRegistry.layerExecutor(registry),
        EventSink.layerNoop,
        Layer.succeed(RunLogStore.RunLogStore, store)
      ))
    )
    const [sent] = yield* server.all
    return { body: bodyOf(sent), result }
  })

// -----------------------------------------------------------------------------
// Anthropic
// -----------------------------------------------------------------------------

/** The recorded request's `output_config` (anthropic-sdk-python, bd7029d5), verbatim. */
const recordedOutputConfig = {
  format: {
    schema: {
      $defs: {
        OrderItem: {
          type: "object",
          title: "OrderItem",
          properties: {
            product_name: { type: "string", title: "Product Name" },
            price: { type: "number", title: "Price" },
            quantity: { type: "integer", title: "Quantity" }
          },
          additionalProperties: false,
          required: ["product_name", "price", "quantity"]
        }
      },
      type: "object",
      title: "OrderDetails",
      properties: {
        items: { type: "array", title: "Items", items: { $ref: "#/$defs/OrderItem" } },
        total: { type: "number", title: "Total" }
      },
      additionalProperties: false,
      required: ["items", "total"]
    },
    type: "json_schema"
  }
}

const OrderItem = Schema.Struct({
  product_name: Schema.String.annotations({ title: "Product Name" }),
  price: Schema.Number.annotations({ title: "Price" }),
  // An integer written as pydantic writes it (`Schema.Int` would add `description: "an integer"`).
  quantity: Schema.Number.pipe(Schema.filter((n) => Number.isInteger(n), { jsonSchema: { type: "integer", title: "Quantity" } }))
}).annotations({ identifier: "OrderItem", title: "OrderItem" })

const OrderDetails = Schema.Struct({
  items: Schema.Array(OrderItem).annotations({ title: "Items" }),
  total: Schema.Number.annotations({ title: "Total" })
}).annotations({ title: "OrderDetails" })

const orderTask = "Extract order: 2 Green Tea at $5.50 and 1 Coffee at $3.00. Total $14."

const orderAgent = AgentDefinition.make({
  name: "orders",
  systemPrompt: "Extract the order.",
  budget: { maxSteps: 3 },
  output: OrderDetails
})

/** The fake server's base URL ends in /v1; Anthropic's root does not. */
const anthropic = (baseUrl: string) =>
  Anthropic.layer({ model: "claude-sonnet-4-5", baseUrl: baseUrl.replace(/\/v1$/, ""), apiKey: Redacted.make("sk-ant-DO-NOT-LEAK") }).pipe(
    Layer.provide(NodeHttpClient.layerUndici)
  )

const anthropicReply = () => Replay.reply("anthropic-structured-output.json")

/** A bare request with an output schema, for the client alone. */
const requestWith = (output: ModelRequest["output"], extra?: ModelRequest["settings"]["extra"]): ModelRequest => ({
  messages: [Message.User.make({ text: orderTask })],
  tools: [],
  settings: extra === undefined ? {} : { extra },
  ...(output === undefined ? {} : { output })
})

const orderOutput = { name: "answer", schema: JSONSchema.make(OrderDetails), strict: false }

describe("typed final answers over Anthropic (design 0400, decision 6 amended)", () => {
  it.scopedLive("the request carries output_config.format as the recorded request does; the recorded text decodes to the typed value", () =>
    Effect.gen(function*() {
      const { body, result } = yield* runAgainst(anthropic, anthropicReply(), orderAgent, orderTask)
      assert.deepStrictEqual(body["output_config"], recordedOutputConfig)
      assert.isFalse("output_format" in body)
      assert.strictEqual(result.stopReason._tag, "Completed")
      assert.deepStrictEqual(result.output, {
        items: [{ product_name: "Green Tea", price: 5.5, quantity: 2 }, { product_name: "Coffee", price: 3, quantity: 1 }],
        total: 14
      })
    }))

  it.scopedLive("an agent without an output schema sends no output_config", () =>
    Effect.gen(function*() {
      const plain = AgentDefinition.make({ name: "orders", systemPrompt: "Extract the order.", budget: { maxSteps: 3 } })
      const { body } = yield* runAgainst(anthropic, anthropicReply(), plain, orderTask)
      assert.isFalse("output_config" in body)
    }))

  it.scopedLive("constrainOutput: false sends no output_config (the answer is still decoded)", () =>
    Effect.gen(function*() {
      const loose = AgentDefinition.make({
        name: "orders",
        systemPrompt: "Extract the order.",
        budget: { maxSteps: 3 },
        output: OrderDetails,
        constrainOutput: false
      })
      const { body, result } = yield* runAgainst(anthropic, anthropicReply(), loose, orderTask)
      assert.isFalse("output_config" in body)
      assert.strictEqual(result.output?.total, 14)
    }))

  it.scopedLive("settings.extra's output_config replaces the constraint whole", () =>
    Effect.gen(function*() {
      const server = yield* FakeServer.make
      yield* server.reply(anthropicReply())
      const client = yield* clientOf(anthropic(server.baseUrl))
      yield* client.generate(requestWith(orderOutput, { output_config: { effort: "low" } }))
      const [sent] = yield* server.all
      assert.deepStrictEqual(bodyOf(sent)["output_config"], { effort: "low" })
    }))

  it.scopedLive("a streamed request carries output_config too", () =>
    Effect.gen(function*() {
      const server = yield* FakeServer.make
      yield* server.reply({ _tag: "Events", events: Replay.streamEvents("anthropic-text-tool-use.chunks.txt") })
      const client = yield* clientOf(anthropic(server.baseUrl))
      const stream = client.stream
      if (stream === undefined) return assert.fail("the Anthropic client streams")
      // The recorded stream calls a tool: declare it, or @effect/ai refuses the stream.
      yield* Stream.runDrain(stream({
        ...requestWith(orderOutput),
        tools: [{ name: "updateIssueList", description: "Updates the issue list", parameters: { type: "object", properties: {} } }]
      }))
      const [sent] = yield* server.all
      const body = bodyOf(sent)
      assert.strictEqual(body["stream"], true)
      assert.deepStrictEqual(body["output_config"], recordedOutputConfig)
    }))

  it.scopedLive("a schema Anthropic cannot express (a record) sends no constraint", () =>
    Effect.gen(function*() {
      const server = yield* FakeServer.make
      yield* server.reply(anthropicReply())
      const client = yield* clientOf(anthropic(server.baseUrl))
      const counts = Schema.Struct({ counts: Schema.Record({ key: Schema.String, value: Schema.Number }) })
      yield* client.generate(requestWith({ name: "answer", schema: JSONSchema.make(counts), strict: false }))
      const [sent] = yield* server.all
      assert.isFalse("output_config" in bodyOf(sent))
    }))

  it("toAnthropicSchema: $schema left out, keywords outside Anthropic's subset moved into the description, additionalProperties: false on objects, oneOf as anyOf", () => {
    const answer = Schema.Struct({
      name: Schema.NonEmptyString,
      score: Schema.Number.pipe(Schema.between(1, 10)),
      tags: Schema.Array(Schema.String).pipe(Schema.minItems(2))
    })
    assert.deepStrictEqual(Anthropic.toAnthropicSchema(JSONSchema.make(answer)), {
      $defs: {
        NonEmptyString: { type: "string", description: "a non empty string\n\n{minLength: 1}", title: "nonEmptyString" }
      },
      type: "object",
      required: ["name", "score", "tags"],
      properties: {
        name: { $ref: "#/$defs/NonEmptyString" },
        score: { type: "number", title: "between(1, 10)", description: "a number between 1 and 10\n\n{minimum: 1, maximum: 10}" },
        tags: { type: "array", items: { type: "string" }, title: "minItems(2)", description: "an array of at least 2 item(s)\n\n{minItems: 2}" }
      },
      additionalProperties: false
    })
    assert.deepStrictEqual(
      Anthropic.toAnthropicSchema({ type: "object", properties: { v: { oneOf: [{ type: "string" }, { type: "null" }] } } }),
      { type: "object", properties: { v: { anyOf: [{ type: "string" }, { type: "null" }] } }, additionalProperties: false }
    )
    assert.isUndefined(Anthropic.toAnthropicSchema({ type: "object", properties: {}, additionalProperties: { type: "number" } }))
    assert.isUndefined(Anthropic.toAnthropicSchema({ type: "object", properties: { any: {} } }))
    // `Schema.Object` (any object): with additionalProperties false it could only be `{}`.
    assert.isUndefined(Anthropic.toAnthropicSchema(JSONSchema.make(Schema.Struct({ o: Schema.Object }))))
    // Tuples (`items` as a list) are not in the subset.
    assert.isUndefined(Anthropic.toAnthropicSchema(JSONSchema.make(Schema.Struct({ t: Schema.Tuple(Schema.String, Schema.Number) }))))
  })
})

// -----------------------------------------------------------------------------
// OpenAI Responses
// -----------------------------------------------------------------------------

/** The recorded response's echo of its request's `text.format`, without the `description: null` the API adds. */
const recordedTextFormat = {
  type: "json_schema",
  name: "math_reasoning",
  schema: {
    type: "object",
    properties: {
      steps: {
        type: "array",
        items: {
          type: "object",
          properties: { explanation: { type: "string" }, output: { type: "string" } },
          required: ["explanation", "output"],
          additionalProperties: false
        }
      },
      final_answer: { type: "string" }
    },
    required: ["steps", "final_answer"],
    additionalProperties: false
  },
  strict: true
}

const MathResponse = Schema.Struct({
  steps: Schema.Array(Schema.Struct({ explanation: Schema.String, output: Schema.String })),
  final_answer: Schema.String
})

const mathTask = "Solve 8x + 7 = -23."

const tutor = AgentDefinition.make({
  name: "tutor",
  systemPrompt: "You are a helpful math tutor. Guide the user through the solution step by step.",
  budget: { maxSteps: 3 },
  output: MathResponse,
  outputName: "math_reasoning",
  strictOutput: true
})

const responses = (baseUrl: string) =>
  OpenAiResponses.layer({ model: "gpt-4o-2024-08-06", baseUrl, apiKey: Redacted.make("sk-responses-DO-NOT-LEAK") }).pipe(
    Layer.provide(NodeHttpClient.layerUndici)
  )

const responsesReply = () => Replay.reply("openai-responses-structured-output.json")

const mathOutput = { name: "math_reasoning", schema: JSONSchema.make(MathResponse), strict: true }

const textOf = (body: Record<string, unknown>): Record<string, unknown> => {
  const text = body["text"]
  assert.isTrue(isRecord(text))
  return text as Record<string, unknown>
}

describe("typed final answers over OpenAI Responses (design 0400, decision 6 amended)", () => {
  it.scopedLive("the request carries text.format json_schema as the recorded response echoes it; the recorded output_text decodes to the typed value", () =>
    Effect.gen(function*() {
      const { body, result } = yield* runAgainst(responses, responsesReply(), tutor, mathTask)
      assert.deepStrictEqual(body["text"], { format: recordedTextFormat })
      assert.strictEqual(result.stopReason._tag, "Completed")
      assert.strictEqual(result.output?.final_answer, "x = -\\frac{15}{4}")
      assert.strictEqual(result.output?.steps.length, 6)
    }))

  it.scopedLive("an agent without an output schema asks for text, as before", () =>
    Effect.gen(function*() {
      const plain = AgentDefinition.make({ name: "tutor", systemPrompt: "s", budget: { maxSteps: 3 } })
      const { body } = yield* runAgainst(responses, responsesReply(), plain, mathTask)
      assert.deepStrictEqual(textOf(body)["format"], { type: "text" })
    }))

  it.scopedLive("constrainOutput: false asks for text (the answer is still decoded)", () =>
    Effect.gen(function*() {
      const loose = AgentDefinition.make({
        name: "tutor",
        systemPrompt: "s",
        budget: { maxSteps: 3 },
        output: MathResponse,
        constrainOutput: false
      })
      const { body, result } = yield* runAgainst(responses, responsesReply(), loose, mathTask)
      assert.deepStrictEqual(textOf(body)["format"], { type: "text" })
      assert.strictEqual(result.output?.steps.length, 6)
    }))

  it.scopedLive("settings.extra's text.format is what is sent; its verbosity too", () =>
    Effect.gen(function*() {
      const server = yield* FakeServer.make
      yield* server.reply(responsesReply())
      const client = yield* clientOf(responses(server.baseUrl))
      yield* client.generate(requestWith(mathOutput, { text: { format: { type: "json_object" }, verbosity: "low" } }))
      const [sent] = yield* server.all
      assert.deepStrictEqual(bodyOf(sent)["text"], { format: { type: "json_object" }, verbosity: "low" })
    }))

  it.scopedLive("a streamed request carries the constraint too (the stream's fiber inherits the call's FiberRef)", () =>
    Effect.gen(function*() {
      const server = yield* FakeServer.make
      yield* server.reply({ _tag: "Events", events: Replay.streamEvents("openai-responses-two-function-calls.sse") })
      const client = yield* clientOf(responses(server.baseUrl))
      // The recorded stream calls two tools: declare them, or @effect/ai refuses the stream.
      const area = { type: "object", properties: { area: { type: "string" } }, required: ["area"] }
      const stream = client.stream
      if (stream === undefined) return assert.fail("the Responses client streams")
      yield* Stream.runDrain(stream({
        ...requestWith(mathOutput),
        tools: [
          { name: "get_local_weather", description: "The weather of an area", parameters: area },
          { name: "get_local_date", description: "The time of an area", parameters: area }
        ]
      }))
      const [sent] = yield* server.all
      const body = bodyOf(sent)
      assert.strictEqual(body["stream"], true)
      assert.deepStrictEqual(body["text"], { format: recordedTextFormat })
    }))
})
