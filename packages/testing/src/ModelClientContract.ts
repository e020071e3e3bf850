/**
 * The `ModelClient` contract suite (SPEC §5, §11): for any request, a provider that answers
 * gives a valid `ModelReply` (exactly the provider's, with `exactReplies`); transport failures,
 * rate limits (429) and server errors (5xx) fail with `ModelError { retryable: true }`; every
 * other rejection (4xx) with `retryable: false`; nothing else escapes (no defect); and,
 * when the client supports a hanging provider, interrupting `generate` aborts the call in
 * flight. The caller maps each generated `Condition` onto its transport (e.g. a fake HTTP
 * server on loopback answering with that status) and returns a client facing it. A client
 * whose provider cannot express some requests (a setting its API lacks) declares them with
 * `refuses`: it must refuse those with a non-retryable `ModelError`. A client that streams
 * (design 0180) must stream what it generates: facing the same provider, its deltas fold into
 * exactly `generate`'s reply, and it fails where `generate` fails, as retryably.
 *
 * @since 0.1.0
 */
import * as Arbitrary from "effect/Arbitrary"
import * as Cause from "effect/Cause"
import * as Chunk from "effect/Chunk"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as FastCheck from "effect/FastCheck"
import * as Fiber from "effect/Fiber"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Predicate from "effect/Predicate"
import * as Schema from "effect/Schema"
import type * as Scope from "effect/Scope"
import * as Stream from "effect/Stream"
import * as TestServices from "effect/TestServices"
import type { ModelError } from "@polyloop/core/Errors"
import { ModelClient, ModelRequest, ToolDefinition } from "@polyloop/core/ModelClient"
import * as ModelDelta from "@polyloop/core/ModelDelta"
import { ModelReply } from "@polyloop/core/ModelReply"
import { jsonSafe, jsonValue, modelReply } from "./internal/arbitraries.js"
import { diff, show } from "./internal/equal.js"
import * as Property from "./internal/property.js"
import { build, describeCause, describeError } from "./internal/subject.js"
import { register } from "./internal/suite.js"

export {
  /** A contract was broken; the message says what was expected and what was seen. */
  ContractViolation,
  /** A property of a suite: `id`, `name`, `numRuns` and its generated cases. */
  type Property,
  /** The result of `check`. */
  type Report
} from "./internal/property.js"

/** Runs one property outside vitest (e.g. to prove it fails on a broken client). */
export const check: (property: Property.Property, options?: Property.RunOptions) => Effect.Effect<Property.Report> = Property.run

/** What the provider does with the next call. */
export type Condition =
  /** The provider answers with this reply. */
  | { readonly _tag: "Reply"; readonly reply: ModelReply }
  /** The connection fails (refused, reset, DNS): no HTTP status. */
  | { readonly _tag: "TransportFailure" }
  /** The provider answers with this HTTP status and an error body. */
  | { readonly _tag: "HttpStatus"; readonly status: number }
  /**
   * The provider never answers. Complete `started` when the request reaches the provider and
   * `aborted` when the provider sees it abandoned (connection closed, abort signal).
   */
  | { readonly _tag: "Hang"; readonly started: Deferred.Deferred<void>; readonly aborted: Deferred.Deferred<void> }

/** A client facing a condition: a layer, or a scoped effect making the service. */
export type ClientUnderTest<E = never> = (
  condition: Condition
) => Layer.Layer<ModelClient, E> | Effect.Effect<ModelClient.Service, E, Scope.Scope>

/** Options of the model client suite. */
export interface Options {
  /** The client returns the provider's reply exactly (deep equality), not merely a valid one. */
  readonly exactReplies?: boolean
  /**
   * The requests the client cannot express for its provider (e.g. a setting its API lacks), which
   * it refuses with `ModelError { retryable: false }` rather than send them altered. `replies`
   * checks that refusal; the other properties draw only requests the client accepts (so most
   * generated requests must be accepted). Default: none, every request must be served.
   */
  readonly refuses?: (request: ModelRequest) => boolean
  /**
   * The replies the provider's wire format can express (e.g. Chat Completions has no place for
   * cache-write tokens): the `replies` property draws only those. Default: every `ModelReply`.
   */
  readonly expressible?: (reply: ModelReply) => boolean
  /** The client can face a provider that never answers: enables the interruption property. */
  readonly hang?: boolean
  /** How long to wait for a hanging call to start and to be aborted, in milliseconds (default 5 000). */
  readonly hangTimeout?: number
  /** Multiplies every property's number of generated cases (default 1). */
  readonly runsFactor?: number
  /** Per-test timeout in milliseconds for `suite` (default 30 000). */
  readonly timeout?: number
  /** A fast-check seed, to replay a failure printed by a previous run. */
  readonly seed?: number
}

/** The identifiers of the model client properties. */
export type PropertyId = "replies" | "retryable" | "notRetryable" | "streams" | "interruption"

const Json = Schema.Unknown.annotations({ arbitrary: () => () => jsonValue })

/** Requests generated from the `ModelRequest` Schema, tool parameters as JSON, numbers finite. */
const requests: FastCheck.Arbitrary<ModelRequest> = Arbitrary.make(
  Schema.Struct({ ...ModelRequest.fields, tools: Schema.Array(Schema.Struct({ ...ToolDefinition.fields, parameters: Json })) })
).filter(jsonSafe)

const isModelReply = Schema.is(ModelReply)

/**
 * The replies a stream can carry: those its deltas give back whole (`ModelDelta.fromReply`
 * folds into the reply itself) — every reply a client makes (a finish reason normalised with
 * the raw word kept only when it differs, the text being the refusal when there is no other, a
 * call id on every call), not an arbitrary combination of the schema's optional fields.
 */
const streamable = modelReply
  .map((reply) => Object.fromEntries(Object.entries(reply).filter(([, value]) => value !== undefined)) as ModelReply)
  .filter((reply) => Option.isNone(diff(reply, ModelDelta.fold(ModelDelta.fromReply(reply)))))

const retryableConditions: FastCheck.Arbitrary<Condition> = FastCheck.oneof(
  FastCheck.constant<Condition>({ _tag: "TransportFailure" }),
  FastCheck.constant<Condition>({ _tag: "HttpStatus", status: 429 }),
  FastCheck.integer({ min: 500, max: 599 }).map((status): Condition => ({ _tag: "HttpStatus", status }))
)

const permanentConditions: FastCheck.Arbitrary<Condition> = FastCheck.integer({ min: 400, max: 499 })
  .filter((status) => status !== 429)
  .map((status): Condition => ({ _tag: "HttpStatus", status }))

const describeCondition = (condition: Condition): string => {
  switch (condition._tag) {
    case "HttpStatus":
      return `HTTP ${condition.status}`
    case "TransportFailure":
      return "a transport failure"
    case "Reply":
      return "a provider that answers"
    case "Hang":
      return "a provider that never answers"
  }
}

/** The properties of the model client contract, keyed by id (`interruption` only with `hang`). */
export const properties = <E>(client: ClientUnderTest<E>, options: Options = {}): Readonly<Partial<Record<PropertyId, Property.Property>>> => {
  const factor = options.runsFactor ?? 1
  const runs = (n: number) => Math.max(1, Math.round(n * factor))
  const refuses = options.refuses
  const accepted = refuses === undefined ? requests : requests.filter((request) => !refuses(request))
  const facing = (condition: Condition) => {
    const subject = client(condition)
    return build(ModelClient, subject, `the client facing ${describeCondition(condition)}`)
  }

  const failsWith = (retryable: boolean) => ({ condition, request }: { readonly condition: Condition; readonly request: ModelRequest }) =>
    Effect.scoped(
      Effect.gen(function*() {
        const service = yield* facing(condition)
        const exit = yield* Effect.exit(Effect.suspend(() => service.generate(request)))
        const what = `generate facing ${describeCondition(condition)}`
        if (Exit.isSuccess(exit)) return yield* Property.violation(`${what} returned a reply ${show(exit.value)}; it must fail with ModelError`)
        const failures = Chunk.toReadonlyArray(Cause.failures(exit.cause))
        const error = failures[0]
        if (error === undefined || failures.length > 1 || !Chunk.isEmpty(Cause.defects(exit.cause)) || !Predicate.isTagged(error, "ModelError")) {
          return yield* Property.violation(`${what} exited with ${describeCause(exit.cause)}; it must fail with one ModelError`)
        }
        const modelError = error as ModelError
        yield* Property.ensure(
          modelError.retryable === retryable,
          () => `${what} failed with ModelError { retryable: ${modelError.retryable} } (${show(modelError.message)}); it must be retryable: ${retryable}`
        )
        if (condition._tag === "HttpStatus" && modelError.status !== undefined) {
          yield* Property.ensure(
            modelError.status === condition.status,
            () => `${what} failed with ModelError { status: ${modelError.status} }; the provider answered ${condition.status}`
          )
        }
      })
    )

  const answered = ({ reply, request }: { readonly reply: ModelReply; readonly request: ModelRequest }) =>
    Effect.scoped(
      Effect.gen(function*() {
        const service = yield* facing({ _tag: "Reply", reply })
        const got = yield* Effect.mapError(Effect.suspend(() => service.generate(request)), (error) =>
          new Property.ContractViolation({ message: `generate facing a provider that answers failed: ${describeError(error)}` }))
        yield* Property.ensure(isModelReply(got), () => `generate returned ${show(got)}, which is not a ModelReply`)
        if (options.exactReplies === true) {
          yield* Option.match(diff(reply, got), {
            onNone: () => Effect.void,
            onSome: (d) => Property.violation(`generate returned another reply than the provider's: ${d}`)
          })
        }
      })
    )

  const refused = ({ reply, request }: { readonly reply: ModelReply; readonly request: ModelRequest }) =>
    Effect.mapError(failsWith(false)({ condition: { _tag: "Reply", reply }, request }), (violation) =>
      new Property.ContractViolation({ message: `${violation.message} (a request the client declares it refuses)` }))

  /** The outcome of a call, as the `streams` property compares it. */
  const outcome = (exit: Exit.Exit<ModelReply, ModelError>, what: string) => {
    if (Exit.isSuccess(exit)) return Effect.succeed({ reply: exit.value } as const)
    // An interruption is passed on as it is, never judged as the client's failure.
    if (Cause.isInterruptedOnly(exit.cause)) return Effect.interrupt
    const failures = Chunk.toReadonlyArray(Cause.failures(exit.cause))
    const error = failures[0]
    if (error === undefined || failures.length > 1 || !Chunk.isEmpty(Cause.defects(exit.cause)) || !Predicate.isTagged(error, "ModelError")) {
      return Property.violation(`${what} exited with ${describeCause(exit.cause)}; it must fail with one ModelError`)
    }
    return Effect.succeed({ error } as const)
  }

  const streamsAsGenerates = ({ condition, request }: { readonly condition: Condition; readonly request: ModelRequest }) =>
    Effect.scoped(
      Effect.gen(function*() {
        const generating = yield* facing(condition)
        const stream = generating.stream
        if (stream === undefined) return
        const streaming = yield* facing(condition)
        const streamOf = streaming.stream ?? stream
        const where = `facing ${describeCondition(condition)}`
        const generated = yield* outcome(yield* Effect.exit(Effect.suspend(() => generating.generate(request))), `generate ${where}`)
        const streamed = yield* outcome(yield* Effect.exit(ModelDelta.collect(Stream.suspend(() => streamOf(request)))), `the stream ${where}`)
        if ("reply" in generated && "reply" in streamed) {
          return yield* Option.match(diff(generated.reply, streamed.reply), {
            onNone: () => Effect.void,
            onSome: (d) => Property.violation(`the stream ${where} folds into another reply than generate's: ${d}`)
          })
        }
        if ("error" in generated && "error" in streamed) {
          return yield* Property.ensure(
            generated.error.retryable === streamed.error.retryable,
            () => `the stream ${where} failed with ModelError { retryable: ${streamed.error.retryable} }, generate with { retryable: ${generated.error.retryable} }`
          )
        }
        return yield* Property.violation(
          `${where}, generate ${"reply" in generated ? "replied" : `failed (${show(generated.error.message)})`} but the stream ${"reply" in streamed ? "folded into a reply" : `failed (${show(streamed.error.message)})`}`
        )
      })
    )

  const props: Partial<Record<PropertyId, Property.Property>> = {
    replies: Property.make({
      id: "replies",
      name: (options.exactReplies === true
        ? "facing a provider that answers, generate returns exactly the provider's reply, for any request"
        : "facing a provider that answers, generate returns a valid ModelReply, for any request") +
        (refuses === undefined ? "" : " it accepts, and refuses the others with ModelError { retryable: false }"),
      numRuns: runs(25),
      arbitrary: FastCheck.record({
        request: requests,
        reply: options.expressible === undefined ? modelReply : modelReply.filter(options.expressible)
      }),
      check: (input) => refuses !== undefined && refuses(input.request) ? refused(input) : answered(input)
    }),
    retryable: Property.make({
      id: "retryable",
      name: "transport failures, 429 and 5xx fail with ModelError { retryable: true }",
      numRuns: runs(25),
      arbitrary: FastCheck.record({ condition: retryableConditions, request: accepted }),
      check: failsWith(true)
    }),
    notRetryable: Property.make({
      id: "notRetryable",
      name: "every other rejection (4xx but 429) fails with ModelError { retryable: false }",
      numRuns: runs(25),
      arbitrary: FastCheck.record({ condition: permanentConditions, request: accepted }),
      check: failsWith(false)
    }),
    streams: Property.make({
      id: "streams",
      name: "a client that streams folds its stream into exactly generate's reply, and fails where generate fails, as retryably",
      numRuns: runs(20),
      arbitrary: FastCheck.record({
        condition: FastCheck.oneof(
          (options.expressible === undefined ? streamable : streamable.filter(options.expressible)).map((reply): Condition => ({ _tag: "Reply", reply })),
          retryableConditions,
          permanentConditions
        ),
        request: accepted
      }),
      check: streamsAsGenerates
    })
  }

  if (options.hang === true) {
    const limit = options.hangTimeout ?? 5_000
    const within = <A, E2>(effect: Effect.Effect<A, E2>, message: string) =>
      effect.pipe(
        Effect.timeoutFail({ duration: limit, onTimeout: () => new Property.ContractViolation({ message }) }),
        TestServices.provideLive
      )
    props.interruption = Property.make({
      id: "interruption",
      name: "interrupting generate aborts the call in flight and the fiber exits interrupted",
      numRuns: runs(3),
      arbitrary: accepted,
      check: (request) =>
        Effect.scoped(
          Effect.gen(function*() {
            const started = yield* Deferred.make<void>()
            const aborted = yield* Deferred.make<void>()
            const service = yield* facing({ _tag: "Hang", started, aborted })
            const fiber = yield* Effect.forkDaemon(Effect.suspend(() => service.generate(request)))
            const first = yield* within(
              Effect.raceFirst(Effect.as(Deferred.await(started), "started" as const), Effect.map(Fiber.await(fiber), (exit) => ({ exit }))),
              `the call did not reach the hanging provider within ${limit} ms`
            )
            if (first !== "started") {
              return yield* Property.violation(`generate facing a provider that never answers ended: ${describeCause(Exit.isFailure(first.exit) ? first.exit.cause : Cause.empty)}${Exit.isSuccess(first.exit) ? " (a reply)" : ""}`)
            }
            yield* Fiber.interruptFork(fiber)
            const exit = yield* within(Fiber.await(fiber), `generate did not stop within ${limit} ms of being interrupted`)
            yield* Property.ensure(
              Exit.isFailure(exit) && Cause.isInterruptedOnly(exit.cause),
              () => `the interrupted generate exited with ${Exit.isSuccess(exit) ? "a reply" : describeCause(exit.cause)}; it must exit interrupted`
            )
            yield* within(Deferred.await(aborted), `the provider did not see the call aborted within ${limit} ms of the interruption`)
          })
        )
    })
  }
  return props
}

/** Registers the model client contract as vitest tests. Call it at the top level of a test file. */
export const suite = <E>(name: string, client: ClientUnderTest<E>, options: Options = {}): void =>
  register(`ModelClient contract: ${name}`, properties(client, options) as Readonly<Record<string, Property.Property>>, {
    ...(options.timeout === undefined ? {} : { timeout: options.timeout }),
    ...(options.seed === undefined ? {} : { seed: options.seed })
  })
