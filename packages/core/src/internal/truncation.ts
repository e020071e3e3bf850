/**
 * A reply cut off at the output token limit is never acted on (design 0140, decision 2): its
 * decision is `InvalidDecision` with the snapshot's `truncated` text, whatever the parser would
 * have read (a tool call with cut-off arguments, or cut-off text taken for an answer). A pure
 * function of the reply and the snapshot, so a resumed step decides the same.
 *
 * @internal
 */
import * as Effect from "effect/Effect"
import type { DecisionParser } from "../DecisionParser.js"
import { isTruncated, type ModelReply } from "../ModelReply.js"
import * as ParsedReply from "../ParsedReply.js"
import * as SyntheticObservations from "../SyntheticObservations.js"

/** The `truncated` explanation for a reply, filled (`{tool}`: the cut calls' names, `{tools}`: the registry's). @internal */
export const explanation = (reply: ModelReply, synthetic: SyntheticObservations.SyntheticObservations, tools: string): string =>
  SyntheticObservations.fill(SyntheticObservations.truncatedOf(synthetic), {
    tool: reply.toolCalls.length === 0 ? "(none)" : reply.toolCalls.map((call) => call.name).join(", "),
    issues: "the reply was cut off at the output token limit",
    tools
  })

/** The decision of a reply: the parser's, unless the reply was cut off. @internal */
export const decide = (
  parser: DecisionParser.Service,
  reply: ModelReply,
  synthetic: SyntheticObservations.SyntheticObservations,
  tools: string
): Effect.Effect<ParsedReply.ParsedReply> =>
  isTruncated(reply) ? Effect.succeed(ParsedReply.invalid(explanation(reply, synthetic, tools))) : parser.parse(reply)
