/**
 * A conversation's requests on the wire (issue 31, design 0300 decision 7): a three-turn
 * conversation with a tool call in each turn, run through `OpenAiCompatible`, `OpenAiResponses`
 * and `Anthropic` against the loopback fake server (kills and approval outcomes are the core
 * property test's, `packages/core/test/Conversation.test.ts`, on the loop's requests); every
 * request body the server receives pairs each call with exactly one answer, in order, in that
 * API's own shape (Chat Completions `tool_calls`/`tool`, Responses `function_call`/
 * `function_call_output`, Anthropic `tool_use`/`tool_result`), and holds every message of the
 * person in order. A property over random turn sequences, kill points and approval outcomes (the
 * core property's, `packages/core/test/Conversation.test.ts`) renders every request the loop
 * makes through the three clients (`WireRender.ts`, no server) and checks each API's pairing on
 * the body. The bodies polyloop sends for a multi-turn history with calls are values of
 * the providers' own request types (type-checked here): `openai`'s
 * `ChatCompletionCreateParamsNonStreaming` and `ResponseCreateParamsNonStreaming`,
 * `@anthropic-ai/sdk`'s `MessageCreateParamsNonStreaming`; and a recorded multi-turn request of a
 * real client (`fixtures/recorded/openai-chat-multi-turn-request.json`) is exactly what polyloop
 * sends for the same history.
 */
import * as NodeHttpClient from "@effect/platform-node/NodeHttpClient"
import { assert, describe, it } from "@effect/vitest"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as fc from "effect/FastCheck"
import * as Fiber from "effect/Fiber"
import * as Layer from "effect/Layer"
import * as Redacted from "effect/Redacted"
import * as Schema from "effect/Schema"
import * as Agent from "@polyloop/core/Agent"
import * as AgentDefinition from "@polyloop/core/AgentDefinition"
import * as EventSink from "@polyloop/core/EventSink"
import { runId } from "@polyloop/core/Ids"
import type * as Message from "@polyloop/core/Message"
import type { ModelClient } from "@polyloop/core/ModelClient"
import * as NativeToolCallParser from "@polyloop/core/NativeToolCallParser"
import * as RunLogStore from "@polyloop/core/RunLogStore"
import * as Tool from "@polyloop/core/Tool"
import * as ToolRegistry from "@polyloop/core/ToolRegistry"
import * as Anthropic from "@polyloop/ai/Anthropic"
import * as OpenAiCompatible from "@polyloop/ai/OpenAiCompatible"
import * as OpenAiResponses from "@polyloop/ai/OpenAiResponses"
import * as Approval from "@polyloop/core/Approval"
import type { ModelRequest } from "@polyloop/core/ModelClient"
import * as ModelReply from "@polyloop/core/ModelReply"
import * as RunLogAudit from "@polyloop/core/RunLogAudit"
import * as ScriptedModel from "@polyloop/testing/ScriptedModel"
import type { MessageCreateParamsNonStreaming, MessageParam } from "@anthropic-ai/sdk/resources/messages"
import type { ChatCompletionCreateParamsNonStreaming, ChatCompletionMessageParam } from "openai/resources/chat/completions"
import type { ResponseCreateParamsNonStreaming, ResponseInputItem } from "openai/resources/responses/responses"
import * as FakeServer from "./FakeServer.js"
import * as Replay from "./Replay.js"
import * as WireRender from "./WireRender.js"

const apiKey = "sk-wire-DO-NOT-LEAK"

const lookup = Tool.make({
  name: "lookup",
  description: "Looks an order up",
  parameters: Schema.Struct({ order: Schema.String }),
  replayPolicy: "Always",
  handler: ({ order }) => Effect.succeed(`order ${order}: shipped`)
})
const registry = ToolRegistry.make(lookup)
const agent = AgentDefinition.make({ name: "desk", systemPrompt: "Answer about orders.", budget: { maxSteps: 4 } })
const questions = ["Where is order 17?", "And order 23?", "Thanks, that is all."]

type ClientLayer = (baseUrl: string) => Layer.Layer<ModelClient, never, import("@effect/platform/HttpClient").HttpClient>

/** A provider's two replies per turn: a lookup call, then a text answer (written in its own shape). */
interface Shape {
  readonly layer: ClientLayer
  readonly call: (turn: number) => FakeServer.Reply
  readonly text: (turn: number) => FakeServer.Reply
  /** Checks a request body: pairs, and the person's messages in order; returns those messages. */
  readonly check: (body: unknown) => ReadonlyArray<string>
}

const record = (value: unknown): Record<string, unknown> => (typeof value === "object" && value !== null ? (value as Record<string, unknown>) : {})
const list = (value: unknown): ReadonlyArray<unknown> => (Array.isArray(value) ? value : [])

/** Chat Completions: an assistant message's `tool_calls` are answered by as many `tool` messages, in order, at once. */
const chatCheck = (body: unknown): ReadonlyArray<string> => {
  const messages = list(record(body).messages).map(record)
  const users: Array<string> = []
  for (let i = 0; i < messages.length; i++) {
    const m = messages[i]!
    if (m.role === "user") users.push(String(m.content))
    if (m.role === "tool") assert.fail(`message ${i} answers ${String(m.tool_call_id)} without its call before it`)
    const calls = list(m.tool_calls).map(record)
    for (let k = 0; k < calls.length; k++) {
      const answer = messages[i + 1 + k]
      assert.strictEqual(answer?.role, "tool", `call ${k} of message ${i} is answered`)
      assert.strictEqual(answer?.tool_call_id, calls[k]!.id)
    }
    i += calls.length
  }
  return users
}

/** Responses: each `function_call` item has one `function_call_output` with its `call_id`, after it and before the next message. */
const responsesCheck = (body: unknown): ReadonlyArray<string> => {
  const items = list(record(body).input).map(record)
  const users: Array<string> = []
  const open = new Set<string>()
  for (const item of items) {
    if (item.type === "function_call") open.add(String(item.call_id))
    else if (item.type === "function_call_output") {
      assert.isTrue(open.delete(String(item.call_id)), `an output for ${String(item.call_id)} without its call`)
    } else {
      assert.strictEqual(open.size, 0, `calls ${[...open].join(", ")} unanswered before the next message`)
      if (item.role === "user") users.push(list(item.content).map((c) => String(record(c).text ?? "")).join("") || String(item.content))
    }
  }
  assert.strictEqual(open.size, 0)
  return users
}

/** Anthropic: an assistant message's `tool_use` blocks are answered by the `tool_result` blocks that open the next user message. */
const anthropicCheck = (body: unknown): ReadonlyArray<string> => {
  const messages = list(record(body).messages).map(record)
  const users: Array<string> = []
  for (let i = 0; i < messages.length; i++) {
    const blocks = typeof messages[i]!.content === "string" ? [{ type: "text", text: messages[i]!.content }] : list(messages[i]!.content).map(record)
    if (messages[i]!.role === "user") {
      for (const b of blocks) if (b.type === "text") users.push(String(b.text))
      if (i === 0 || messages[i - 1]!.role !== "assistant") assert.notInclude(blocks.map((b) => b.type), "tool_result", `message ${i}: a tool_result without its tool_use`)
      continue
    }
    const uses = blocks.filter((b) => b.type === "tool_use").map((b) => String(b.id))
    if (uses.length === 0) continue
    const next = messages[i + 1]
    assert.strictEqual(next?.role, "user", `message ${i}'s tool_use blocks are answered in the next message`)
    const results = list(next!.content).map(record).filter((b) => b.type === "tool_result").map((b) => String(b.tool_use_id))
    assert.deepStrictEqual(results, uses, `message ${i + 1} answers message ${i}'s calls, in order`)
  }
  return users
}

const chatShape: Shape = {
  layer: (baseUrl) => OpenAiCompatible.layer({ model: "recorded", baseUrl, apiKey: Redacted.make(apiKey) }),
  call: (turn) =>
    FakeServer.json({
      id: `chatcmpl-${turn}`,
      object: "chat.completion",
      choices: [{ index: 0, message: { role: "assistant", content: null, tool_calls: [{ id: `call_t${turn}`, type: "function", function: { name: "lookup", arguments: JSON.stringify({ order: `${17 + turn}` }) } }] }, finish_reason: "tool_calls" }],
      usage: { prompt_tokens: 50, completion_tokens: 5, total_tokens: 55 }
    }),
  text: () => Replay.reply("openai-chat-text.json"),
  check: chatCheck
}

const anthropicShape: Shape = {
  layer: (baseUrl) => Anthropic.layer({ model: "claude-sonnet-4-5", baseUrl: baseUrl.replace(/\/v1$/, ""), apiKey: Redacted.make(apiKey) }),
  call: (turn) =>
    FakeServer.json({
      id: `msg_${turn}`,
      type: "message",
      role: "assistant",
      model: "claude-sonnet-4-5",
      content: [{ type: "tool_use", id: `toolu_t${turn}`, name: "lookup", input: { order: `${17 + turn}` } }],
      stop_reason: "tool_use",
      stop_sequence: null,
      usage: { input_tokens: 50, output_tokens: 5 }
    }),
  text: () => Replay.reply("anthropic-cache-read.json"),
  check: anthropicCheck
}

/** The recorded Responses reply (fixtures/recorded/openai-responses-function-call.json) with its output items replaced (written). */
const responsesReply = (id: string, output: ReadonlyArray<unknown>) => FakeServer.json({ ...record(Replay.json("openai-responses-function-call.json")), id, output })

const responsesShape: Shape = {
  layer: (baseUrl) => OpenAiResponses.layer({ model: "o3", baseUrl, apiKey: Redacted.make(apiKey) }),
  call: (turn) =>
    responsesReply(`resp_${turn}`, [{ id: `fc_${turn}`, type: "function_call", status: "completed", arguments: JSON.stringify({ order: `${17 + turn}` }), call_id: `call_t${turn}`, name: "lookup" }]),
  text: (turn) =>
    responsesReply(`resp_text_${turn}`, [{ id: `msg_${turn}`, type: "message", status: "completed", role: "assistant", content: [{ type: "output_text", text: `Answer ${turn}.`, annotations: [], logprobs: [] }] }]),
  check: responsesCheck
}

const converse = (shape: Shape) =>
  Effect.gen(function*() {
    const server = yield* FakeServer.make
    for (const [turn] of questions.entries()) yield* server.reply(shape.call(turn), shape.text(turn))
    const store = yield* RunLogStore.makeMemory
    const services = Layer.mergeAll(
      shape.layer(server.baseUrl).pipe(Layer.provide(NodeHttpClient.layerUndici)),
      NativeToolCallParser.layer(),
      Layer.orDie(ToolRegistry.layerExecutor(registry)),
      EventSink.layerNoop,
      Layer.succeed(RunLogStore.RunLogStore, store)
    )
    for (const [i, text] of questions.entries()) {
      const result = yield* Agent.send({ runId: runId("chat"), messageId: `m${i}`, text, agent, tools: registry }).pipe(Effect.provide(services))
      assert.strictEqual(result.stopReason._tag, "Completed", `turn ${i}`)
    }
    return yield* server.all
  })

describe("a conversation's requests on each provider's wire", () => {
  for (const [name, shape] of [["Chat Completions", chatShape], ["Responses", responsesShape], ["Anthropic", anthropicShape]] as const) {
    it.scopedLive(`${name}: every call answered once, in order; every message of the person, in order`, () =>
      Effect.gen(function*() {
        const received = yield* converse(shape)
        assert.lengthOf(received, questions.length * 2)
        for (const [k, request] of received.entries()) {
          const users = shape.check(request.body)
          // Request k belongs to turn ⌊k / 2⌋: it holds that many messages, the last one its turn's.
          assert.deepStrictEqual(users.filter((u) => questions.includes(u)), questions.slice(0, Math.floor(k / 2) + 1), `request ${k}`)
        }
      }))
  }

  it.effect("a multi-turn history with calls, rendered by each client, is a value of the provider's own request type", () =>
    Effect.gen(function*() {
      // Two turns, each a lookup then (for the first) an answer: the second turn's last request.
      const model = yield* ScriptedModel.make((request) =>
        request.messages.at(-1)!._tag === "User"
          ? ModelReply.make({ text: "", toolCalls: [{ id: "", name: "lookup", argumentsText: JSON.stringify({ order: "17" }) }] })
          : ModelReply.make({ text: "Shipped." })
      )
      const store = yield* RunLogStore.makeMemory
      const services = Layer.mergeAll(model.layer, NativeToolCallParser.layer(), Layer.orDie(ToolRegistry.layerExecutor(registry)), EventSink.layerNoop, Layer.succeed(RunLogStore.RunLogStore, store))
      for (const [i, text] of questions.slice(0, 2).entries()) {
        yield* Agent.send({ runId: runId("typed"), messageId: `m${i}`, text, agent, tools: registry }).pipe(Effect.provide(services))
      }
      const last = (yield* model.requests).at(-1)!.request
      const bodyOf = (wire: WireRender.Wire) => Effect.flatMap(WireRender.renderer(wire), (render) => render(last))
      const parameters = {
        $schema: "http://json-schema.org/draft-07/schema#",
        type: "object" as const,
        required: ["order"],
        properties: { order: { type: "string" } },
        additionalProperties: false
      }
      const args = JSON.stringify({ order: "17" })

      // Chat Completions: the `openai` package's request type.
      const chat = {
        model: "recorded",
        messages: [
          { role: "system", content: "Answer about orders." },
          { role: "user", content: questions[0]! },
          { role: "assistant", content: null, tool_calls: [{ id: "call_s0_0", type: "function", function: { name: "lookup", arguments: args } }] },
          { role: "tool", tool_call_id: "call_s0_0", content: "order 17: shipped" },
          { role: "assistant", content: "Shipped." },
          { role: "user", content: questions[1]! },
          { role: "assistant", content: null, tool_calls: [{ id: "call_s2_0", type: "function", function: { name: "lookup", arguments: args } }] },
          { role: "tool", tool_call_id: "call_s2_0", content: "order 17: shipped" }
        ] satisfies Array<ChatCompletionMessageParam>,
        tools: [{ type: "function", function: { name: "lookup", description: "Looks an order up", parameters } }]
      } satisfies ChatCompletionCreateParamsNonStreaming
      assert.deepStrictEqual(yield* bodyOf("Chat Completions"), chat)

      // Responses: the `openai` package's request type (a past answer is an EasyInputMessage).
      const responses = {
        model: "o3",
        input: [
          { role: "developer", content: "Answer about orders." },
          { role: "user", content: [{ type: "input_text", text: questions[0]! }] },
          { type: "function_call", call_id: "call_s0_0", name: "lookup", arguments: args },
          { type: "function_call_output", call_id: "call_s0_0", output: "order 17: shipped" },
          { role: "assistant", content: "Shipped." },
          { role: "user", content: [{ type: "input_text", text: questions[1]! }] },
          { type: "function_call", call_id: "call_s2_0", name: "lookup", arguments: args },
          { type: "function_call_output", call_id: "call_s2_0", output: "order 17: shipped" }
        ] satisfies Array<ResponseInputItem>,
        include: [],
        text: { format: { type: "text" } },
        tools: [{ type: "function", name: "lookup", description: "Looks an order up", parameters, strict: false }],
        tool_choice: "auto"
      } satisfies ResponseCreateParamsNonStreaming
      assert.deepStrictEqual(yield* bodyOf("Responses"), responses)

      // Messages: `@anthropic-ai/sdk`'s request type.
      const anthropic = {
        max_tokens: 4096,
        model: "claude-sonnet-4-5",
        system: [{ type: "text", text: "Answer about orders." }],
        messages: [
          { role: "user", content: [{ type: "text", text: questions[0]! }] },
          { role: "assistant", content: [{ type: "tool_use", id: "call_s0_0", name: "lookup", input: { order: "17" } }] },
          { role: "user", content: [{ type: "tool_result", tool_use_id: "call_s0_0", content: "order 17: shipped", is_error: false }] },
          { role: "assistant", content: [{ type: "text", text: "Shipped." }] },
          { role: "user", content: [{ type: "text", text: questions[1]! }] },
          { role: "assistant", content: [{ type: "tool_use", id: "call_s2_0", name: "lookup", input: { order: "17" } }] },
          { role: "user", content: [{ type: "tool_result", tool_use_id: "call_s2_0", content: "order 17: shipped", is_error: false }] }
        ] satisfies Array<MessageParam>,
        tools: [{ name: "lookup", description: "Looks an order up", input_schema: parameters }],
        tool_choice: { type: "auto" }
      } satisfies MessageCreateParamsNonStreaming
      assert.deepStrictEqual(yield* bodyOf("Anthropic"), anthropic)
      // And each pairs its calls (the checks the property uses).
      assert.deepStrictEqual(chatCheck(chat), questions.slice(0, 2))
      assert.deepStrictEqual(responsesCheck(responses), questions.slice(0, 2))
      assert.deepStrictEqual(anthropicCheck(anthropic), questions.slice(0, 2))
    }))

  it("the Chat Completions messages are the openai package's ChatCompletionMessageParam; a recorded multi-turn request is what polyloop sends", () => {
    // Type-checked: every message polyloop sends is one the `openai` package accepts.
    const asSdk = (message: Message.Message): ChatCompletionMessageParam => OpenAiCompatible.toWireMessage(message)
    const recorded = Replay.json("openai-chat-multi-turn-request.json") as { readonly messages: ReadonlyArray<Record<string, unknown>> }
    const [u1, a1, u2, a2, u3, call, result] = recorded.messages
    const text = (m: Record<string, unknown> | undefined) => String(m?.content)
    const toolCall = list(record(call).tool_calls).map(record)[0]!
    const history: ReadonlyArray<Message.Message> = [
      { _tag: "User", text: text(u1) },
      { _tag: "Assistant", text: text(a1), toolCalls: [] },
      { _tag: "User", text: text(u2) },
      { _tag: "Assistant", text: text(a2), toolCalls: [] },
      { _tag: "User", text: text(u3) },
      { _tag: "Assistant", text: "", toolCalls: [{ id: String(toolCall.id), name: String(record(toolCall.function).name), argumentsText: String(record(toolCall.function).arguments) }] },
      { _tag: "Tool", callId: String(record(result).tool_call_id), name: "fetchHtml", text: text(result) }
    ]
    const sent = history.map(asSdk)
    // The same messages, but for the empty text of a message with calls: the recorded client sent
    // "", polyloop sends null (both are what the API documents for a message of calls only).
    const expected = recorded.messages.map((m) => (m.role === "assistant" && m.tool_calls !== undefined ? { ...m, content: null } : m))
    assert.deepStrictEqual(JSON.parse(JSON.stringify(sent)), expected)
    assert.deepStrictEqual(chatCheck(recorded), chatCheck({ messages: sent }))
  })
})

describe("random turn sequences, kill points and approval outcomes on the three wires", () => {
  const refund = Tool.make({
    name: "refund",
    description: "Refunds an order (a clerk approves each call)",
    parameters: Schema.Struct({ order: Schema.String }),
    approval: "Required",
    handler: ({ order }) => Effect.succeed(`refunded ${order}`)
  })
  const tools = ToolRegistry.make(lookup, refund)
  const deskAgent = AgentDefinition.make({ name: "desk", systemPrompt: "Answer about orders.", budget: { maxSteps: 4 } })

  /** The person's last message (what the turn answers). */
  const lastUser = (request: ModelRequest): string => request.messages.filter((m) => m._tag === "User").at(-1)?.text ?? ""

  /** Each turn: a refund first when asked for one, then `lookups` lookups, then an answer. */
  const desk = (lookups: number): ScriptedModel.Script => (request) => {
    const question = lastUser(request)
    const messages = request.messages
    let since = 0
    for (let i = messages.length - 1; i >= 0 && !(messages[i]!._tag === "User" && messages[i]!.text === question); i--) {
      if (messages[i]!._tag === "Assistant") since++
    }
    const order = /\d+/.exec(question)?.[0] ?? "0"
    if (question.includes("refund") && since === 0) return ModelReply.make({ text: "", toolCalls: [{ id: "", name: "refund", argumentsText: JSON.stringify({ order }) }] })
    if (since < lookups) return ModelReply.make({ text: "", toolCalls: [{ id: "", name: "lookup", argumentsText: JSON.stringify({ order }) }] })
    return ModelReply.make({ text: `Answer to "${question}"` })
  }

  it.effect.prop(
    "every request of the loop, rendered for Chat Completions, Responses and Anthropic, pairs each call with one answer, in order, and holds every message",
    [
      fc.array(fc.record({ refund: fc.boolean(), approve: fc.boolean(), lookups: fc.integer({ min: 0, max: 2 }) }), { minLength: 1, maxLength: 4 }),
      fc.integer({ min: 0, max: 10 })
    ],
    ([turns, killAt]) =>
      Effect.gen(function*() {
        const store = yield* RunLogStore.makeMemory
        const texts = turns.map((t, i) => (t.refund ? `Please refund order ${i}.` : `Where is order ${i}?`) + " ".repeat(t.lookups))
        const requests: Array<ModelRequest> = []
        let killed = false
        let steps = 0
        for (const [i, text] of texts.entries()) {
          for (let attempt = 0; attempt < 6; attempt++) {
            const reached = yield* Deferred.make<void>()
            const sink = EventSink.layer((e) => {
              if (e._tag === "StepCompleted") steps++
              return !killed && e._tag === "StepCompleted" && steps === killAt + 1 ? Effect.zipRight(Deferred.succeed(reached, undefined), Effect.never) : Effect.void
            })
            const model = yield* ScriptedModel.make(desk(1 + (turns[i]!.lookups % 2)))
            const services = Layer.mergeAll(model.layer, NativeToolCallParser.layer(), Layer.orDie(ToolRegistry.layerExecutor(tools)), sink, Layer.succeed(RunLogStore.RunLogStore, store))
            const fiber = yield* Effect.fork(Effect.either(Agent.send({ runId: runId("chat"), messageId: `m${i}`, text, agent: deskAgent, tools }).pipe(Effect.provide(services))))
            const done = yield* Effect.raceFirst(Effect.as(Deferred.await(reached), undefined), Fiber.join(fiber))
            for (const seen of yield* model.requests) requests.push(seen.request)
            if (done === undefined) {
              killed = true
              yield* Fiber.interrupt(fiber)
              continue
            }
            if (done._tag === "Right") break
            if (done.left._tag !== "Suspended") return yield* Effect.dieMessage(`unexpected ${done.left._tag}`)
            const waiting = done.left.waiting[0]!
            yield* Approval.decide({
              runId: runId("chat"),
              callId: waiting.callId,
              decision: turns[i]!.approve ? { _tag: "Approve" } : { _tag: "Reject", reason: "not eligible" },
              by: "clerk",
              actionHash: waiting.actionHash
            }).pipe(Effect.provideService(RunLogStore.RunLogStore, store))
          }
        }
        assert.strictEqual((yield* store.readLog(runId("chat"))).turns.length, texts.length)
        assert.deepStrictEqual(RunLogAudit.logProblems(yield* store.readLog(runId("chat"))), [])
        const checks = [["Chat Completions", chatCheck], ["Responses", responsesCheck], ["Anthropic", anthropicCheck]] as const
        for (const [wire, check] of checks) {
          const render = yield* WireRender.renderer(wire)
          for (const [k, request] of requests.entries()) {
            const users = check(yield* render(request))
            // Every message of the person so far, in order, the last one the turn's.
            const asked = users.filter((u) => texts.includes(u))
            assert.deepStrictEqual(asked, texts.slice(0, asked.length), `${wire}, request ${k}`)
            assert.strictEqual(asked.at(-1), lastUser(request), `${wire}, request ${k}`)
          }
        }
      }),
    { fastCheck: { numRuns: 15 } }
  )
})
