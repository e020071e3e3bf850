/**
 * Laws of the Chat Completions mapping, over generated values: a reply served by a server parses
 * back to itself (tool-call ids and argument text verbatim, usage exact), and a history sent to
 * a server can be read back message for message (tool results keep their call id).
 */
import { assert, describe, it } from "@effect/vitest"
import * as Arbitrary from "effect/Arbitrary"
import * as Either from "effect/Either"
import * as Message from "@polyloop/core/Message"
import * as ModelReply from "@polyloop/core/ModelReply"
import * as OpenAiCompatible from "@polyloop/ai/OpenAiCompatible"

const endpoint = "http://127.0.0.1/v1/chat/completions"

/** A reply as a compatible server would serve it. */
const serve = (reply: ModelReply.ModelReply): string =>
  JSON.stringify({
    id: "chatcmpl-law",
    object: "chat.completion",
    choices: [{
      index: 0,
      message: {
        role: "assistant",
        content: reply.toolCalls.length > 0 && reply.text === "" ? null : reply.text,
        ...(reply.toolCalls.length === 0
          ? {}
          : {
            tool_calls: reply.toolCalls.map((call) => ({
              id: call.id,
              type: "function",
              function: { name: call.name, arguments: call.argumentsText }
            }))
          })
      },
      ...(reply.finishReason === undefined ? {} : { finish_reason: reply.finishReason })
    }],
    usage: {
      prompt_tokens: reply.usage.inputTokens,
      completion_tokens: reply.usage.outputTokens,
      total_tokens: reply.usage.inputTokens + reply.usage.outputTokens
    }
  })

/** The inverse of `toWireMessage`, written independently from the wire format's definition. */
const readBack = (wire: unknown): Message.Message => {
  const value = JSON.parse(JSON.stringify(wire)) as {
    role: string
    content: string | null
    tool_call_id?: string
    tool_calls?: Array<{ id: string; function: { name: string; arguments: string } }>
  }
  switch (value.role) {
    case "system":
      return Message.System.make({ text: value.content ?? "" })
    case "user":
      return Message.User.make({ text: value.content ?? "" })
    case "assistant":
      return Message.Assistant.make({
        text: value.content ?? "",
        toolCalls: (value.tool_calls ?? []).map((call) => ({ id: call.id, name: call.function.name, argumentsText: call.function.arguments }))
      })
    default:
      return Message.Tool.make({ callId: value.tool_call_id ?? "", name: "", text: value.content ?? "" })
  }
}

/**
 * Replies a Chat Completions server can express in the fields this law serves: text, tool calls,
 * usage and a finish reason (the normalised word served as is).
 */
const replies = Arbitrary.make(ModelReply.ModelReply).map(({ rawFinishReason: _r, reasoning: _s, refusal: _f, usage, ...reply }) => ({
  ...reply,
  // A call with an empty id is served without one, and reads back as `call_<index>` (design 0362).
  toolCalls: reply.toolCalls.map((call, index) => (call.id === "" ? { ...call, id: `call_${index}` } : call)),
  usage: { inputTokens: usage.inputTokens, outputTokens: usage.outputTokens }
}))

describe("OpenAiCompatible laws", () => {
  it.prop("a reply served as a chat completion parses back to itself", [replies], ([reply]) => {
    const parsed = OpenAiCompatible.parseCompletion(serve(reply), endpoint)
    assert.isTrue(Either.isRight(parsed))
    // An explicit `finishReason: undefined` is an absent key on the wire.
    if (Either.isRight(parsed)) {
      const { finishReason, ...rest } = reply
      assert.deepStrictEqual(parsed.right, finishReason === undefined ? rest : { ...rest, finishReason })
    }
  }, { fastCheck: { numRuns: 200 } })

  it.prop("a history sent as chat messages reads back message for message", [Message.Message], ([message]) => {
    const back = readBack(OpenAiCompatible.toWireMessage(message))
    // The tool name is not part of a Chat Completions tool message; everything else survives.
    assert.deepStrictEqual(back, message._tag === "Tool" ? { ...message, name: "" } : message)
  }, { fastCheck: { numRuns: 300 } })
})
