/**
 * Typed final answers over Chat Completions (issue 47, design 0400): an agent with an output
 * schema asks the provider to constrain its text (`response_format` json_schema), and the
 * answer the provider gives is decoded to the typed value.
 *
 * Real data: the request's `response_format` is OpenAI's structured-outputs example as sent by
 * `vicentereig/dspy.rb` `scripts/chat.sh` ("math_response"); the answer text is a recorded
 * gpt-4o-2024-08-06 answer to that schema (`kubiosec-agentic/agentic-labs` `lab02/ADDON.md`,
 * its `output_text`). The chat-completion envelope around the text is ours, shaped as the
 * recorded completions of `CtwoC/agent_kit` `client/output_style/openai_output.md`.
 */
import * as NodeHttpClient from "@effect/platform-node/NodeHttpClient"
import { assert, describe, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Redacted from "effect/Redacted"
import * as Schema from "effect/Schema"
import * as Agent from "@polyloop/core/Agent"
import * as AgentDefinition from "@polyloop/core/AgentDefinition"
import * as EventSink from "@polyloop/core/EventSink"
import { runId } from "@polyloop/core/Ids"
import * as NativeToolCallParser from "@polyloop/core/NativeToolCallParser"
import * as RunLogStore from "@polyloop/core/RunLogStore"
import * as ToolRegistry from "@polyloop/core/ToolRegistry"
import * as OpenAiCompatible from "@polyloop/ai/OpenAiCompatible"
import * as FakeServer from "./FakeServer.js"

/** The `response_format` OpenAI's example sends (dspy.rb `scripts/chat.sh`), verbatim. */
const recordedResponseFormat = {
  type: "json_schema",
  json_schema: {
    name: "math_response",
    strict: true,
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
    }
  }
}

/** The recorded answer text (agentic-labs `lab02/ADDON.md`, gpt-4o-2024-08-06). */
const recordedAnswer =
  "{\"steps\":[{\"explanation\":\"Start with the equation:\",\"output\":\"8x + 7 = -23\"},{\"explanation\":\"Subtract 7 from both sides to isolate the term with x:\",\"output\":\"8x + 7 - 7 = -23 - 7\"},{\"explanation\":\"This simplifies to:\",\"output\":\"8x = -30\"},{\"explanation\":\"Now, divide both sides by 8 to solve for x:\",\"output\":\"8x / 8 = -30 / 8\"},{\"explanation\":\"This simplifies to:\",\"output\":\"x = -30 / 8\"},{\"explanation\":\"Simplify the fraction by dividing both the numerator and the denominator by their greatest common divisor, which is 2:\",\"output\":\"x = -15 / 4\"}],\"final_answer\":\"x = -\\\\frac{15}{4}\"}"

const MathResponse = Schema.Struct({
  steps: Schema.Array(Schema.Struct({ explanation: Schema.String, output: Schema.String })),
  final_answer: Schema.String
})

const agent = AgentDefinition.make({
  name: "tutor",
  systemPrompt: "You are a helpful math tutor. Guide the user through the solution step by step.",
  budget: { maxSteps: 3 },
  output: MathResponse,
  outputName: "math_response",
  strictOutput: true
})

const completion = (content: string) =>
  FakeServer.json({
    id: "chatcmpl-structured-1",
    object: "chat.completion",
    created: 1746083505,
    model: "gpt-4o-2024-08-06",
    choices: [{ index: 0, message: { role: "assistant", content, refusal: null }, logprobs: null, finish_reason: "stop" }],
    usage: { prompt_tokens: 81, completion_tokens: 117, total_tokens: 198 }
  })

const services = (baseUrl: string, registry: ToolRegistry.ToolRegistry) =>
  Layer.mergeAll(
    OpenAiCompatible.layer({ model: "gpt-4o-2024-08-06", baseUrl, apiKey: Redacted.make("sk-structured-DO-NOT-LEAK") }).pipe(
      Layer.provide(NodeHttpClient.layerUndici)
    ),
    NativeToolCallParser.layer(),
    ToolRegistry.layerExecutor(registry),
    EventSink.layerNoop
  )

describe("typed final answers over OpenAiCompatible (design 0400)", () => {
  it.scoped("the request carries response_format json_schema as OpenAI's example does; the answer is decoded to the typed value", () =>
    Effect.gen(function*() {
      const server = yield* FakeServer.make
      yield* server.reply(completion(recordedAnswer))
      const registry = ToolRegistry.make()
      const store = yield* RunLogStore.makeMemory
      const result = yield* Agent.run({ runId: runId("math"), agent, task: "Solve 8x + 7 = -23.", tools: registry }).pipe(
        Effect.provide(Layer.merge(services(server.baseUrl, registry), Layer.succeed(RunLogStore.RunLogStore, store)))
      )
      const [sent] = yield* server.all
      const body = sent!.body as Record<string, unknown>
      // The shape OpenAI's own example sends, the schema being JSONSchema.make's (its `$schema` left out on the wire).
      assert.deepStrictEqual(body["response_format"], recordedResponseFormat)
      assert.strictEqual(result.stopReason._tag, "Completed")
      assert.strictEqual(result.output?.final_answer, "x = -\\frac{15}{4}")
      assert.strictEqual(result.output?.steps.length, 6)
    }))

  it.scoped("an agent without an output schema sends no response_format", () =>
    Effect.gen(function*() {
      const server = yield* FakeServer.make
      yield* server.reply(completion("x = -15/4"))
      const registry = ToolRegistry.make()
      const store = yield* RunLogStore.makeMemory
      const plain = AgentDefinition.make({ name: "tutor", systemPrompt: "s", budget: { maxSteps: 3 } })
      yield* Agent.run({ runId: runId("plain"), agent: plain, task: "Solve 8x + 7 = -23.", tools: registry }).pipe(
        Effect.provide(Layer.merge(services(server.baseUrl, registry), Layer.succeed(RunLogStore.RunLogStore, store)))
      )
      const [sent] = yield* server.all
      assert.isFalse("response_format" in (sent!.body as Record<string, unknown>))
    }))

  it("toRequestBody: settings.extra still overrides response_format", () => {
    const body = OpenAiCompatible.toRequestBody({
      messages: [],
      tools: [],
      settings: { extra: { response_format: { type: "json_object" } } },
      output: { name: "answer", schema: { type: "object" }, strict: false }
    }, "m")
    assert.deepStrictEqual(body["response_format"], { type: "json_object" })
  })
})
