/**
 * Is a request valid for every provider (design 0300, decision 7)? Every `Assistant` message with
 * calls is followed by exactly one answer (`Tool` message) per call, in call order, and no answer
 * stands without its call — the rule whose breach providers refuse with a 400 ("No tool call
 * found", "tool_call_id not found", "tool_use ids were found without tool_result blocks").
 *
 * @since 0.2.0
 */
import type * as Message from "@polyloop/core/Message"

/** What breaks the rule in `messages`, one line per problem; empty when it holds. Linear in the messages. */
export const problems = (messages: ReadonlyArray<Message.Message>): ReadonlyArray<string> => {
  const found: Array<string> = []
  for (let i = 0; i < messages.length; i++) {
    const m = messages[i]!
    if (m._tag === "Tool") {
      found.push(`message ${i} answers ${m.callId} without its call before it`)
      continue
    }
    if (m._tag !== "Assistant" || m.toolCalls.length === 0) continue
    for (let k = 0; k < m.toolCalls.length; k++) {
      const answer = messages[i + 1 + k]
      const id = m.toolCalls[k]!.id
      if (answer === undefined || answer._tag !== "Tool") found.push(`call ${id} of message ${i} has no answer right after it`)
      else if (answer.callId !== id) found.push(`call ${id} of message ${i} is answered by ${answer.callId}`)
    }
    i += m.toolCalls.length
  }
  return found
}
