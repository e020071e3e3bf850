import { describe, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import { DecisionParser } from "@polyloop/core/DecisionParser"
import * as ModelReply from "@polyloop/core/ModelReply"
import * as ParsedReply from "@polyloop/core/ParsedReply"
import * as DecisionParserContract from "../src/DecisionParserContract.js"
import { holdsAll, registerBroken } from "./helpers.js"

/** A small correct parser: `ACT <name>` acts, `DONE <answer>` finishes, anything else is invalid. */
const decide = (reply: ModelReply.ModelReply): ParsedReply.ParsedReply => {
  const text = reply.text.trim()
  if (text.startsWith("ACT ")) return ParsedReply.act({ _tag: "ToolCall", id: "", name: text.slice(4), arguments: {} })
  if (text.startsWith("DONE ")) return ParsedReply.finish(text.slice(5))
  return ParsedReply.invalid(text.length === 0 ? "the reply is empty" : "write ACT <tool> or DONE <answer>")
}
const good = (overrides: Partial<DecisionParser.Service> = {}): Layer.Layer<DecisionParser> =>
  Layer.sync(DecisionParser, () => ({ id: "Toy", parse: (reply) => Effect.sync(() => decide(reply)), ...overrides }))

const own = [ModelReply.make({ text: "ACT search" }), ModelReply.make({ text: "DONE 42" })]
const all = DecisionParserContract.properties(good(), { replies: own })

describe("DecisionParserContract", () => {
  it.live("a correct parser satisfies every property", () => holdsAll(all), 120_000)

  registerBroken(all, [
    {
      name: "a parser that throws on an empty reply",
      props: () =>
        DecisionParserContract.properties(
          good({
            parse: (reply) =>
              Effect.sync(() => {
                if (reply.text.length === 0 && reply.toolCalls.length === 0) throw new TypeError("nothing to parse")
                return decide(reply)
              })
          })
        ),
      breaks: { neverFails: /defect TypeError: nothing to parse.*must never fail or die/ }
    },
    {
      name: "a parser that fails in its error channel on bad input",
      props: () =>
        DecisionParserContract.properties(
          good({
            parse: (reply) => (decide(reply)._tag === "InvalidDecision" ? (Effect.fail("unparseable") as unknown as Effect.Effect<ParsedReply.ParsedReply>) : Effect.sync(() => decide(reply)))
          })
        ),
      breaks: { neverFails: /failure "unparseable"/ }
    },
    {
      name: "a parser that returns something that is not a ParsedReply",
      props: () =>
        DecisionParserContract.properties(
          good({ parse: (reply) => Effect.succeed((reply.text.includes("{") ? { _tag: "Maybe" } : decide(reply)) as ParsedReply.ParsedReply) })
        ),
      breaks: { neverFails: /which is not a ParsedReply/ }
    },
    {
      name: "a parser that overflows its stack on huge input",
      props: () =>
        DecisionParserContract.properties(
          good({
            parse: (reply) =>
              Effect.sync(() => {
                const depth = (i: number): number => (i >= reply.text.length + (reply.toolCalls[0]?.argumentsText.length ?? 0) ? 0 : 1 + depth(i + 1))
                depth(0)
                return decide(reply)
              })
          })
        ),
      breaks: { hugeReplies: /defect RangeError/ }
    },
    {
      name: "a parser that numbers its explanations",
      props: () =>
        DecisionParserContract.properties(
          Layer.sync(DecisionParser, () => {
            let calls = 0
            return { id: "Counting", parse: () => Effect.sync(() => ParsedReply.invalid(`attempt ${++calls}: unreadable`)) }
          })
        ),
      breaks: { deterministic: /parsing it again gave another decision/ }
    },
    {
      name: "a parser whose id carries a timestamp",
      props: () =>
        DecisionParserContract.properties(
          Layer.effect(DecisionParser, Effect.map(Effect.sync(() => process.hrtime.bigint()), (t) => ({ id: `Toy@${t}`, parse: (reply: ModelReply.ModelReply) => Effect.sync(() => decide(reply)) })))
        ),
      breaks: { stableId: /a fresh instance has id/ }
    }
  ])
})
