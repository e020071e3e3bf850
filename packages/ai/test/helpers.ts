/**
 * Test helpers: build a `ModelClient` from a layer inside the test's scope, collect a
 * `ModelError`, and check that no secret leaked into it.
 */
import { assert } from "@effect/vitest"
import * as Cause from "effect/Cause"
import * as Context from "effect/Context"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Fiber from "effect/Fiber"
import * as Layer from "effect/Layer"
import type * as Scope from "effect/Scope"
import { ModelError } from "@polyloop/core/Errors"
import { ModelClient, type ModelRequest } from "@polyloop/core/ModelClient"
import * as ModelDelta from "@polyloop/core/ModelDelta"
import * as FakeServer from "./FakeServer.js"

/** The `ModelClient` of a layer, alive for the current scope. */
export const clientOf = <E>(layer: Layer.Layer<ModelClient, E>): Effect.Effect<ModelClient.Service, E, Scope.Scope> =>
  Effect.map(Layer.build(layer), Context.get(ModelClient))

/** The `ModelError` an effect fails with (fails the test if it succeeds). */
export const modelError = <A, R>(effect: Effect.Effect<A, ModelError, R>): Effect.Effect<ModelError, never, R> =>
  effect.pipe(
    Effect.flatMap((value) => Effect.dieMessage(`expected a ModelError, got ${JSON.stringify(value)}`)),
    Effect.flip,
    Effect.tap((error) => assert.instanceOf(error, ModelError))
  )

/** Every way the error can be shown (message, string, JSON, pretty cause) contains none of `secrets`. */
export const assertNothingLeaks = (error: ModelError, secrets: ReadonlyArray<string>): void => {
  const renderings = [error.message, String(error), JSON.stringify(error), Cause.pretty(Cause.fail(error))]
  for (const secret of secrets) {
    for (const rendering of renderings) {
      assert.notInclude(rendering, secret)
    }
  }
}

/** The client's `stream` (fails the test if the client does not stream). */
export const streamOf = (client: ModelClient.Service): NonNullable<ModelClient.Service["stream"]> => {
  const stream = client.stream
  if (stream === undefined) throw new Error("the client under test must stream")
  return stream
}

/**
 * Interrupts a stream's consumer once it has read a first delta, the server stalling before
 * event `stallAt`: the consumer must exit interrupted, and the server see the connection close.
 */
export const interruptedMidStream = (
  client: ModelClient.Service,
  server: FakeServer.FakeServer,
  request: ModelRequest,
  events: ReadonlyArray<string>,
  stallAt: number
) =>
  Effect.gen(function*() {
    yield* server.reply(FakeServer.events(events, { gate: (i) => (i === stallAt ? new Promise<void>(() => undefined) : undefined) }))
    const first = yield* Deferred.make<void>()
    const fiber = yield* Effect.fork(ModelDelta.collect(streamOf(client)(request), () => Deferred.succeed(first, undefined)))
    yield* Deferred.await(first)
    const received = yield* server.next
    yield* Fiber.interrupt(fiber)
    const exit = yield* Fiber.await(fiber)
    assert.isTrue(Exit.isFailure(exit) && Cause.isInterruptedOnly(exit.cause))
    yield* Deferred.await(received.abortedByClient)
  })
