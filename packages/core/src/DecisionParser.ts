/**
 * The decision parser port: reads a decision out of a model reply.
 *
 * Contract (design 0007, decision 3): `parse` **never fails** (its error channel is `never`);
 * anything it cannot interpret is `InvalidDecision` with the explanation to feed back. It is
 * deterministic: the same reply gives the same `ParsedReply` (resume re-parses an interrupted
 * step). A defect in a parser is not caught by the library: it crashes the run, which stays
 * resumable. `id` names the parser and its configuration; it is part of the snapshot.
 *
 * @since 0.1.0
 */
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import type { ModelReply } from "./ModelReply.js"
import type { ParsedReply } from "./ParsedReply.js"

/** The decision parser port. */
export class DecisionParser extends Context.Tag("@polyloop/core/DecisionParser")<DecisionParser, DecisionParser.Service>() {}

/** @since 0.1.0 */
export declare namespace DecisionParser {
  /** @since 0.1.0 */
  export interface Service {
    /** A stable identifier of the parser and its options, e.g. `CodeBlockParser(python)`. */
    readonly id: string
    readonly parse: (reply: ModelReply) => Effect.Effect<ParsedReply>
  }
}

/**
 * A parser from a pure, total decision function: `parse` runs it synchronously. A throw inside
 * `decide` is a defect (a bug), which the loop does not catch.
 */
export const fromDecide = (id: string, decide: (reply: ModelReply) => ParsedReply): DecisionParser.Service => ({
  id,
  parse: (reply) => Effect.sync(() => decide(reply))
})

/** A layer from a service. */
export const layer = (service: DecisionParser.Service): Layer.Layer<DecisionParser> => Layer.succeed(DecisionParser, service)
