/**
 * Model replies for the parser suite: arbitrary texts (printable, full unicode, lone
 * surrogates, control characters), texts dense in the fragments every shipped action
 * language reacts to (braces, quotes, fences, markers), native tool calls with arbitrary
 * argument texts, the empty reply, and huge replies.
 *
 * @internal
 */
import * as Arbitrary from "effect/Arbitrary"
import * as FastCheck from "effect/FastCheck"
import * as ModelReply from "@polyloop/core/ModelReply"
import { text } from "./arbitraries.js"

const fragments = FastCheck.constantFrom(
  "{", "}", "[", "]", "\"", "\\", ":", ",", "'", "`", "```", "```json\n", "```python\n", "~~~", "\n", "\r\n", " ", "\t",
  "\"tool\"", "\"name\"", "\"arguments\"", "(", ")", "final_answer(", "Final Answer:", "0", "-1e9", "true", "null",
  "\\u", "\\ud800", "\u0000", "é", "😀", "\ud800", "\udfff", "\u202e"
)

/** Texts dense in syntax fragments. */
const fuzz = FastCheck.array(fragments, { maxLength: 60 }).map((parts) => parts.join(""))

/** Arbitrary texts. */
export const texts: FastCheck.Arbitrary<string> = FastCheck.oneof(
  text({ maxLength: 80 }),
  fuzz,
  FastCheck.json().map((json) => `\`\`\`json\n${json}\n\`\`\``),
  FastCheck.constant("")
)

const toolCall = FastCheck.record({
  id: FastCheck.string({ maxLength: 12 }),
  name: text({ maxLength: 12 }),
  argumentsText: FastCheck.oneof(FastCheck.json(), texts)
})

/** Arbitrary replies; `extra` (the caller's own format) is mixed in when given. */
export const replies = (extra?: FastCheck.Arbitrary<ModelReply.ModelReply>): FastCheck.Arbitrary<ModelReply.ModelReply> => {
  const generic = FastCheck.oneof(
    texts.map((t) => ModelReply.make({ text: t })),
    FastCheck.record({ text: texts, toolCalls: FastCheck.array(toolCall, { maxLength: 3 }) }).map((r) => ModelReply.make(r)),
    Arbitrary.make(ModelReply.ModelReply),
    FastCheck.constant(ModelReply.make({}))
  )
  return extra === undefined ? generic : FastCheck.oneof(generic, extra)
}

/** Huge replies: 100 000 to 400 000 characters of fragments or raw unicode. */
export const hugeReplies: FastCheck.Arbitrary<ModelReply.ModelReply> = FastCheck.tuple(
  FastCheck.oneof(fuzz.filter((s) => s.length > 0), FastCheck.string({ unit: "binary", minLength: 1, maxLength: 20 })),
  FastCheck.integer({ min: 100_000, max: 400_000 }),
  FastCheck.boolean()
).map(([unit, length, asToolCall]) => {
  const big = unit.repeat(Math.ceil(length / unit.length)).slice(0, length)
  return asToolCall
    ? ModelReply.make({ text: "", toolCalls: [{ id: "call_0", name: "tool", argumentsText: big }] })
    : ModelReply.make({ text: big })
})
