/**
 * Building the implementation under test: a `Layer` (built afresh for every case) or a scoped
 * `Effect` making one instance. Build failures become contract violations naming the cause.
 *
 * @internal
 */
import * as Cause from "effect/Cause"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Layer from "effect/Layer"
import * as Predicate from "effect/Predicate"
import type * as Scope from "effect/Scope"
import { ContractViolation } from "./property.js"

/** An implementation under test: a layer, or a scoped effect making a fresh instance. */
export type Subject<Id, Service, E = never, R = never> =
  | Layer.Layer<Id, E, R>
  | Effect.Effect<Service, E, R | Scope.Scope>

/** `Tag: message` for a typed error, the message of an `Error`, or a JSON rendering. */
export const describeError = (error: unknown): string => {
  const text = describeErrorFull(error)
  return text.length > 600 ? `${text.slice(0, 600)}…` : text
}

const describeErrorFull = (error: unknown): string => {
  if (Predicate.hasProperty(error, "_tag") && typeof error._tag === "string") {
    return Predicate.hasProperty(error, "message") && typeof error.message === "string" && error.message.length > 0
      ? `${error._tag}: ${error.message}`
      : error._tag
  }
  if (error instanceof Error) return `${error.name}: ${error.message}`
  try {
    return JSON.stringify(error) ?? String(error)
  } catch {
    return String(error)
  }
}

/** A short rendering of an exit: the value, or the cause. */
export const describeExit = <A, E>(exit: Exit.Exit<A, E>, showValue: (a: A) => string): string =>
  Exit.isSuccess(exit) ? `success (${showValue(exit.value)})` : describeCause(exit.cause)

/** A one-line-ish rendering of a cause: failures, defects, interruptions. */
export const describeCause = <E>(cause: Cause.Cause<E>): string => {
  const parts: Array<string> = []
  for (const failure of Cause.failures(cause)) parts.push(`failure ${describeError(failure)}`)
  for (const defect of Cause.defects(cause)) parts.push(`defect ${describeError(defect)}`)
  if (Cause.isInterrupted(cause)) parts.push("interruption")
  return parts.length === 0 ? "an empty cause" : parts.join(", ")
}

/** Builds one fresh instance of the subject in the current scope. */
export const build = <Id, Service, E, R>(
  tag: Context.Tag<Id, Service>,
  subject: Subject<Id, Service, E, R>,
  what: string
): Effect.Effect<Service, ContractViolation, R | Scope.Scope> => {
  const made: Effect.Effect<Service, E, R | Scope.Scope> = Layer.isLayer(subject)
    ? Effect.map(Layer.build(subject as Layer.Layer<Id, E, R>), Context.get(tag))
    : (subject as Effect.Effect<Service, E, R | Scope.Scope>)
  return Effect.mapError(made, (error) => new ContractViolation({ message: `could not build ${what}: ${describeError(error)}` }))
}
