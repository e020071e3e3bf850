/**
 * Request fingerprints (design 0170) as the loop computes them: each message's canonical text
 * written directly (`canonicalMessage`) is exactly `Snapshot.canonicalJson` of its Schema
 * encoding, for any message (excess properties dropped as Schema drops them), and the
 * incremental fingerprinter — whose constant `settings`/`tools` end is made once per tool list
 * and settings — gives the hash of the whole canonical request at every step.
 */
import { assert, describe, it } from "@effect/vitest"
import * as Message from "@polyloop/core/Message"
import * as ModelClient from "@polyloop/core/ModelClient"
import * as ModelSettings from "@polyloop/core/ModelSettings"
import * as Snapshot from "@polyloop/core/Snapshot"
import * as Arbitrary from "effect/Arbitrary"
import * as FastCheck from "effect/FastCheck"
import * as Schema from "effect/Schema"
import * as Fingerprint from "../src/internal/fingerprint.js"

const encodeMessage = Schema.encodeSync(Message.Message)
const schemaText = (message: Message.Message): string => Snapshot.canonicalJson(encodeMessage(message))

/** A string of any UTF-16 units: quotes, control characters, lone surrogates. */
const anyText = FastCheck.oneof(FastCheck.string(), FastCheck.string({ unit: "binary" }), FastCheck.constantFrom('"', "\\", "\u0000", "\ud800", "a\ud83d\ude00b"))

const messageArb: FastCheck.Arbitrary<Message.Message> = FastCheck.oneof(
  Arbitrary.make(Message.Message),
  FastCheck.record({ text: anyText }).map((m): Message.Message => ({ _tag: "User", ...m })),
  FastCheck.record({ callId: anyText, name: anyText, text: anyText }).map((m): Message.Message => ({ _tag: "Tool", ...m })),
  FastCheck.record({ text: anyText, toolCalls: FastCheck.array(FastCheck.record({ id: anyText, name: anyText, argumentsText: anyText })) })
    .map((m): Message.Message => ({ _tag: "Assistant", ...m }))
)

const settingsArb = Arbitrary.make(ModelSettings.ModelSettings)
const toolsArb = Arbitrary.make(Schema.Array(ModelClient.ToolDefinition))

describe("request fingerprints", () => {
  it.prop("a message's canonical text is canonicalJson of its Schema encoding", [messageArb], ([message]) => {
    assert.strictEqual(Fingerprint.canonicalMessage(message), schemaText(message))
    const excess = { ...message, extra: "dropped", n: 1 } as unknown as Message.Message
    assert.strictEqual(Fingerprint.canonicalMessage(excess), schemaText(message), "excess properties are dropped, as Schema drops them")
  }, { fastCheck: { numRuns: 500 } })

  it("a message whose fields are not strings is refused, as Schema refuses it", () => {
    const bad = [
      { _tag: "User", text: 1 },
      { _tag: "Tool", callId: "c", name: null, text: "t" },
      { _tag: "Assistant", text: "t", toolCalls: [{ id: "c", name: "n", argumentsText: 3 }] },
      { _tag: "Assistant", text: "t", toolCalls: [null] }
    ] as unknown as ReadonlyArray<Message.Message>
    for (const message of bad) assert.throws(() => Fingerprint.canonicalMessage(message))
  })

  it.prop(
    "the incremental fingerprint is the hash of the whole canonical request at every step, for any tools and settings",
    [FastCheck.array(messageArb, { maxLength: 12 }), toolsArb, settingsArb],
    ([messages, tools, settings]) => {
      // Two fingerprinters on the same tools and settings (the second reuses the first's constant end).
      for (const fingerprinter of [Fingerprint.make(tools, settings), Fingerprint.make(tools, settings)]) {
        for (let n = 0; n <= messages.length; n++) {
          const prefix = messages.slice(0, n)
          assert.strictEqual(fingerprinter.hash(prefix), Fingerprint.ofRequest({ messages: prefix, tools, settings }))
        }
      }
    },
    { fastCheck: { numRuns: 100 } }
  )
})
