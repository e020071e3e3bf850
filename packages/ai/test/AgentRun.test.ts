/**
 * Full `Agent.run`s of a tool-calling agent through `OpenAiCompatible` and a fake
 * OpenAI-compatible server on loopback: the history the server receives, retries of retryable
 * errors, the token budget fed by real usage, and interruption mid-call followed by a resume.
 */
import * as NodeHttpClient from "@effect/platform-node/NodeHttpClient"
import { assert, describe, it } from "@effect/vitest"
import * as Deferred from "effect/Deferred"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Fiber from "effect/Fiber"
import * as Layer from "effect/Layer"
import * as Redacted from "effect/Redacted"
import * as Schema from "effect/Schema"
import * as Agent from "@polyloop/core/Agent"
import * as AgentDefinition from "@polyloop/core/AgentDefinition"
import * as EventSink from "@polyloop/core/EventSink"
import { runId } from "@polyloop/core/Ids"
import * as NativeToolCallParser from "@polyloop/core/NativeToolCallParser"
import * as RunLogStore from "@polyloop/core/RunLogStore"
import * as Tool from "@polyloop/core/Tool"
import * as ToolRegistry from "@polyloop/core/ToolRegistry"
import * as OpenAiCompatible from "@polyloop/ai/OpenAiCompatible"
import * as SpanRecorder from "@polyloop/testing/SpanRecorder"
import * as FakeServer from "./FakeServer.js"

const apiKey = "sk-agent-test-DO-NOT-LEAK"

const files: Readonly<Record<string, string>> = { "notes.txt": "the answer is 42" }

const readFile = Tool.make({
  name: "read_file",
  description: "Reads a text file",
  parameters: Schema.Struct({ path: Schema.String }),
  handler: ({ path }) => {
    const content = files[path]
    return content === undefined ? Effect.fail(`no such file: ${path}`) : Effect.succeed(content)
  }
})

const registry = ToolRegistry.make(readFile)

const agent = (budget: AgentDefinition.AgentDefinition["budget"]) =>
  AgentDefinition.make({
    name: "reader",
    systemPrompt: "Answer from the files. Use read_file.",
    modelSettings: { temperature: 0 },
    budget,
    modelRetry: { maxAttempts: 3, baseDelay: Duration.millis(1), maxDelay: Duration.millis(5) }
  })

const task = "What is the answer in notes.txt?"

const toolCallReply = (id: string, name: string, args: string, usage: readonly [number, number]) =>
  FakeServer.json({
    id: `chatcmpl-${id}`,
    object: "chat.completion",
    choices: [{
      index: 0,
      message: { role: "assistant", content: null, tool_calls: [{ id, type: "function", function: { name, arguments: args } }] },
      finish_reason: "tool_calls"
    }],
    usage: { prompt_tokens: usage[0], completion_tokens: usage[1], total_tokens: usage[0] + usage[1] }
  })

const textReply = (text: string, usage: readonly [number, number]) =>
  FakeServer.json({
    id: "chatcmpl-final",
    object: "chat.completion",
    choices: [{ index: 0, message: { role: "assistant", content: text }, finish_reason: "stop" }],
    usage: { prompt_tokens: usage[0], completion_tokens: usage[1], total_tokens: usage[0] + usage[1] }
  })

/** Every service `Agent.run` needs, the model being the fake server behind `OpenAiCompatible`. */
const services = (baseUrl: string) =>
  Layer.mergeAll(
    OpenAiCompatible.layer({ model: "fake-model", baseUrl, apiKey: Redacted.make(apiKey) }).pipe(
      Layer.provide(NodeHttpClient.layerUndici)
    ),
    NativeToolCallParser.layer(),
    ToolRegistry.layerExecutor(registry),
    EventSink.layerNoop
  )

const messagesOf = (body: unknown): unknown =>
  typeof body === "object" && body !== null && "messages" in body ? body.messages : undefined

const wireTools = [{
  type: "function",
  function: {
    name: "read_file",
    description: "Reads a text file",
    parameters: registry.modelView()[0]?.parameters
  }
}]

describe("Agent.run through OpenAiCompatible and a fake server", () => {
  it.scopedLive("a tool-calling run: unknown tool, a 503 retried, a real tool call, the answer", () =>
    Effect.gen(function*() {
      const server = yield* FakeServer.make
      yield* server.reply(
        toolCallReply("call_1", "lookup", "{\"q\":\"answer\"}", [100, 10]),
        FakeServer.json({ error: { message: "overloaded" } }, 503),
        toolCallReply("call_2", "read_file", "{\"path\":\"notes.txt\"}", [150, 12]),
        textReply("The answer is 42.", [200, 6])
      )
      const store = yield* RunLogStore.makeMemory
      const id = runId("run-1")

      const result = yield* Agent.run({ runId: id, agent: agent({ maxSteps: 6 }), task, tools: registry }).pipe(
        Effect.provide(Layer.merge(services(server.baseUrl), Layer.succeed(RunLogStore.RunLogStore, store)))
      )

      assert.deepStrictEqual(result, {
        runId: id,
        stopReason: { _tag: "Completed", by: "Answer", answer: "The answer is 42." },
        steps: 3,
        effectiveSteps: 1,
        usage: { inputTokens: 450, outputTokens: 28 },
        resumedCount: 0,
        eventDeliveryFailures: 0
      })

      const requests = yield* server.all
      assert.lengthOf(requests, 4)
      for (const received of requests) {
        assert.strictEqual(received.path, "/v1/chat/completions")
        assert.strictEqual(received.headers.authorization, `Bearer ${apiKey}`)
        assert.deepInclude(received.body, { model: "fake-model", temperature: 0, tools: wireTools })
      }
      const system = { role: "system", content: "Answer from the files. Use read_file." }
      const user = { role: "user", content: task }
      const call1 = {
        role: "assistant",
        content: null,
        tool_calls: [{ id: "call_1", type: "function", function: { name: "lookup", arguments: "{\"q\":\"answer\"}" } }]
      }
      const call2 = {
        role: "assistant",
        content: null,
        tool_calls: [{ id: "call_2", type: "function", function: { name: "read_file", arguments: "{\"path\":\"notes.txt\"}" } }]
      }
      assert.deepStrictEqual(messagesOf(requests[0]?.body), [system, user])
      // The 503 was retried with the same history.
      assert.deepStrictEqual(messagesOf(requests[1]?.body), messagesOf(requests[2]?.body))
      const second = messagesOf(requests[2]?.body)
      assert.isArray(second)
      if (!Array.isArray(second)) return
      assert.deepStrictEqual(second.slice(0, 3), [system, user, call1])
      // The unknown tool got the synthetic observation, answering call_1.
      const notExecuted: unknown = second[3]
      assert.deepInclude(notExecuted, { role: "tool", tool_call_id: "call_1" })
      assert.include(JSON.stringify(notExecuted), "not executed")
      assert.include(JSON.stringify(notExecuted), "read_file")
      assert.lengthOf(second, 4)
      assert.deepStrictEqual(messagesOf(requests[3]?.body), [
        ...second,
        call2,
        { role: "tool", tool_call_id: "call_2", content: "the answer is 42" }
      ])
    }))

  it.scoped("the token budget counts the usage the server reports", () =>
    Effect.gen(function*() {
      const server = yield* FakeServer.make
      yield* server.reply(toolCallReply("call_1", "read_file", "{\"path\":\"notes.txt\"}", [900, 150]))
      const result = yield* Agent.run({
        runId: runId("run-tokens"),
        agent: agent({ maxSteps: 10, maxTokens: 1000 }),
        task,
        tools: registry
      }).pipe(Effect.provide(Layer.merge(services(server.baseUrl), RunLogStore.layerMemory)))
      assert.deepStrictEqual(result.stopReason, { _tag: "BudgetExhausted", budget: "Tokens" })
      assert.deepStrictEqual(result.usage, { inputTokens: 900, outputTokens: 150 })
      assert.strictEqual(result.steps, 1)
      assert.lengthOf(yield* server.all, 1)
    }))

  it.scoped("interrupting the run aborts the model's HTTP request; a later run resumes and finishes", () =>
    Effect.gen(function*() {
      const server = yield* FakeServer.make
      yield* server.reply(
        toolCallReply("call_1", "read_file", "{\"path\":\"notes.txt\"}", [10, 5]),
        FakeServer.hang
      )
      const store = yield* RunLogStore.makeMemory
      const layer = Layer.merge(services(server.baseUrl), Layer.succeed(RunLogStore.RunLogStore, store))
      const id = runId("run-interrupted")
      const request = { runId: id, agent: agent({ maxSteps: 6 }), task, tools: registry }

      const fiber = yield* Effect.fork(Agent.run(request).pipe(Effect.provide(layer)))
      yield* server.next
      const hanging = yield* server.next
      assert.isFalse(yield* Deferred.isDone(hanging.abortedByClient))
      const exit = yield* Fiber.interrupt(fiber)
      assert.isTrue(Exit.isInterrupted(exit))
      yield* hanging.abortedByClient

      yield* server.reply(textReply("The answer is 42.", [30, 4]))
      const result = yield* Agent.run(request).pipe(Effect.provide(layer))
      assert.deepStrictEqual(result.stopReason, { _tag: "Completed", by: "Answer", answer: "The answer is 42." })
      assert.strictEqual(result.resumedCount, 1)
      assert.strictEqual(result.effectiveSteps, 1)
      assert.deepStrictEqual(result.usage, { inputTokens: 40, outputTokens: 9 })
      const resumed = yield* server.next
      // The resumed run sends the same history the interrupted call was sending.
      assert.deepStrictEqual(messagesOf(resumed.body), messagesOf(hanging.body))
    }))
})

describe("Agent.run through OpenAiCompatible, traced (design 0212)", () => {
  it.scopedLive("each Agent.model span names the client's model (not in the settings), with the wire's usage and finish reason", () =>
    Effect.gen(function*() {
      const server = yield* FakeServer.make
      yield* server.reply(
        toolCallReply("call_1", "read_file", "{\"path\":\"notes.txt\"}", [150, 12]),
        textReply("The answer is 42.", [200, 6])
      )
      const recorder = yield* SpanRecorder.make
      const spans = recorder.spans
      const result = yield* Agent.run({ runId: runId("traced-1"), agent: agent({ maxSteps: 4 }), task, tools: registry }).pipe(
        Effect.provide(Layer.merge(services(server.baseUrl), RunLogStore.inMemory())),
        Effect.withTracer(recorder.tracer)
      )
      assert.strictEqual(result.steps, 2)
      const models = spans.filter((span) => span.name === "Agent.model")
      assert.lengthOf(models, 2)
      const expected = [[150, 12, "tool_calls"], [200, 6, "stop"]] as const
      models.forEach((span, step) => {
        assert.strictEqual(span.kind, "client")
        assert.strictEqual(span.attributes.get("gen_ai.operation.name"), "chat")
        assert.strictEqual(span.attributes.get("gen_ai.request.model"), "fake-model")
        assert.strictEqual(span.attributes.get("gen_ai.request.temperature"), 0)
        assert.strictEqual(span.attributes.get("gen_ai.usage.input_tokens"), expected[step]![0])
        assert.strictEqual(span.attributes.get("gen_ai.usage.output_tokens"), expected[step]![1])
        assert.deepStrictEqual(span.attributes.get("gen_ai.response.finish_reasons"), [expected[step]![2]])
      })
      // The client's own span sits under the loop's and carries no GenAI attributes (one inference span per call).
      const own = spans.filter((span) => span.name === "OpenAiCompatible.generate")
      assert.lengthOf(own, 2)
      for (const span of own) {
        assert.strictEqual(SpanRecorder.parentName(span), "Agent.model")
        assert.isUndefined(span.attributes.get("gen_ai.request.model"))
      }
    }))
})
