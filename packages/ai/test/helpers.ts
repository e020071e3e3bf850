/**
 * Test helpers: build a `ModelClient` from a layer inside the test's scope, collect a
 * `ModelError`, and check that no secret leaked into it.
 */
import { assert } from "@effect/vitest"
import * as Cause from "effect/Cause"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import type * as Scope from "effect/Scope"
import { ModelError } from "@polyloop/core/Errors"
import { ModelClient } from "@polyloop/core/ModelClient"

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
