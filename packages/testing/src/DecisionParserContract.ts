/**
 * The `DecisionParser` contract suite (SPEC §5, design 0007 decision 3): on any reply —
 * arbitrary unicode, lone surrogates, empty, huge, dense in the syntax parsers react to, plus
 * replies in the caller's own format — `parse` never fails and never dies, returns a valid
 * `ParsedReply`, and is deterministic (resume re-parses); `id` is stable. The suite never
 * assumes an action language: the caller's well-formed replies come in through `replies`.
 *
 * @since 0.1.0
 */
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as FastCheck from "effect/FastCheck"
import * as Option from "effect/Option"
import * as Schema from "effect/Schema"
import type * as Scope from "effect/Scope"
import type * as Layer from "effect/Layer"
import { DecisionParser } from "@polyloop/core/DecisionParser"
import type { ModelReply } from "@polyloop/core/ModelReply"
import { ParsedReply } from "@polyloop/core/ParsedReply"
import { diff, show } from "./internal/equal.js"
import * as Property from "./internal/property.js"
import { hugeReplies, replies } from "./internal/replies.js"
import { build, describeCause } from "./internal/subject.js"
import { register } from "./internal/suite.js"

export {
  /** A contract was broken; the message says what was expected and what was seen. */
  ContractViolation,
  /** A property of a suite: `id`, `name`, `numRuns` and its generated cases. */
  type Property,
  /** The result of `check`. */
  type Report
} from "./internal/property.js"

/** Runs one property outside vitest (e.g. to prove it fails on a broken parser). */
export const check: (property: Property.Property, options?: Property.RunOptions) => Effect.Effect<Property.Report> = Property.run

/** The parser under test: a layer (built afresh per case) or a scoped effect making one. */
export type ParserUnderTest<E = never> = Layer.Layer<DecisionParser, E> | Effect.Effect<DecisionParser.Service, E, Scope.Scope>

/** Options of the parser suite. */
export interface Options {
  /**
   * Replies in your parser's own format (well-formed actions, answers, near misses), mixed into
   * the generated ones so the checks reach your parser's happy paths.
   */
  readonly replies?: FastCheck.Arbitrary<ModelReply> | ReadonlyArray<ModelReply>
  /** Multiplies every property's number of generated cases (default 1). */
  readonly runsFactor?: number
  /** Per-test timeout in milliseconds for `suite` (default 30 000). */
  readonly timeout?: number
  /** A fast-check seed, to replay a failure printed by a previous run. */
  readonly seed?: number
}

/** The identifiers of the parser properties. */
export type PropertyId = "neverFails" | "hugeReplies" | "deterministic" | "stableId"

const isParsedReply = Schema.is(ParsedReply)

const parseOnce = (parser: DecisionParser.Service, reply: ModelReply, what: string) =>
  Effect.exit(Effect.suspend(() => parser.parse(reply))).pipe(
    Effect.flatMap((exit) =>
      Exit.isSuccess(exit)
        ? isParsedReply(exit.value)
          ? Effect.succeed(exit.value)
          : Property.violation(`${what} returned ${show(exit.value)}, which is not a ParsedReply`)
        : Property.violation(`${what} did not return a decision: ${describeCause(exit.cause)}; parse must never fail or die`)
    )
  )

/** The properties of the parser contract, keyed by id. */
export const properties = <E>(parser: ParserUnderTest<E>, options: Options = {}): Readonly<Record<PropertyId, Property.Property>> => {
  const factor = options.runsFactor ?? 1
  const runs = (n: number) => Math.max(1, Math.round(n * factor))
  const extra = options.replies === undefined || (Array.isArray(options.replies) && options.replies.length === 0)
    ? undefined
    : Array.isArray(options.replies)
    ? FastCheck.constantFrom(...(options.replies as ReadonlyArray<ModelReply>))
    : (options.replies as FastCheck.Arbitrary<ModelReply>)
  const arbitrary = replies(extra)
  const fresh = build(DecisionParser, parser, "the parser")

  return {
    neverFails: Property.make({
      id: "neverFails",
      name: "parse never fails and never dies: any reply gives a valid ParsedReply",
      numRuns: runs(200),
      arbitrary,
      check: (reply) => Effect.scoped(Effect.flatMap(fresh, (p) => parseOnce(p, reply, "parse")))
    }),
    hugeReplies: Property.make({
      id: "hugeReplies",
      name: "parse never fails and never dies on huge replies (100k–400k characters)",
      numRuns: runs(4),
      arbitrary: hugeReplies,
      check: (reply) => Effect.scoped(Effect.flatMap(fresh, (p) => parseOnce(p, reply, `parse of a ${reply.text.length + (reply.toolCalls[0]?.argumentsText.length ?? 0)}-character reply`)))
    }),
    deterministic: Property.make({
      id: "deterministic",
      name: "parse is deterministic: the same reply gives equal decisions, again and on a fresh instance",
      numRuns: runs(100),
      arbitrary,
      check: (reply) =>
        Effect.scoped(
          Effect.gen(function*() {
            const a = yield* fresh
            const first = yield* parseOnce(a, reply, "parse")
            const again = yield* parseOnce(a, reply, "a second parse")
            const b = yield* fresh
            const elsewhere = yield* parseOnce(b, reply, "parse on a fresh instance")
            for (const [label, other] of [["parsing it again", again], ["parsing it on a fresh instance", elsewhere]] as const) {
              yield* Option.match(diff(first, other), {
                onNone: () => Effect.void,
                onSome: (d) => Property.violation(`${label} gave another decision: ${d}`)
              })
            }
          })
        )
    }),
    stableId: Property.make({
      id: "stableId",
      name: "id is a non-empty string, equal across instances and unchanged by parsing",
      numRuns: runs(20),
      arbitrary,
      check: (reply) =>
        Effect.scoped(
          Effect.gen(function*() {
            const a = yield* fresh
            const id = a.id
            yield* Property.ensure(typeof id === "string" && id.length > 0, () => `id is ${show(id)}; it must be a non-empty string`)
            yield* parseOnce(a, reply, "parse")
            yield* Property.ensure(a.id === id, () => `id changed from ${show(id)} to ${show(a.id)} after a parse`)
            const b = yield* fresh
            yield* Property.ensure(b.id === id, () => `a fresh instance has id ${show(b.id)}, the first had ${show(id)}`)
          })
        )
    })
  }
}

/** Registers the parser contract as vitest tests. Call it at the top level of a test file. */
export const suite = <E>(name: string, parser: ParserUnderTest<E>, options: Options = {}): void =>
  register(`DecisionParser contract: ${name}`, properties(parser, options), {
    ...(options.timeout === undefined ? {} : { timeout: options.timeout }),
    ...(options.seed === undefined ? {} : { seed: options.seed })
  })
