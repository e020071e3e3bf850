/**
 * Properties: the unit of every contract suite. A property is a named fast-check arbitrary of
 * cases, each carrying its input (printed in a counterexample) and the effect that checks it
 * on a fresh instance. Suites register properties with vitest; the kit's own tests run them
 * programmatically to prove that each one catches a broken implementation.
 *
 * @internal
 */
import * as Cause from "effect/Cause"
import * as Data from "effect/Data"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as FastCheck from "effect/FastCheck"

/** A contract was broken: `message` says what the property expected and what it saw. */
export class ContractViolation extends Data.TaggedError("ContractViolation")<{
  readonly message: string
}> {}

/** Fails with a `ContractViolation`. */
export const violation = (message: string): Effect.Effect<never, ContractViolation> =>
  Effect.fail(new ContractViolation({ message }))

/** Fails with a `ContractViolation` unless `condition` holds. */
export const ensure = (condition: boolean, message: () => string): Effect.Effect<void, ContractViolation> =>
  condition ? Effect.void : violation(message())

/** One generated case: the effect checking it, printed as its input. */
export interface Case {
  readonly input: unknown
  readonly check: Effect.Effect<void, ContractViolation>
}

/** A named property: generated cases, each checked on a fresh instance. */
export interface Property {
  /** A stable identifier, e.g. `prefix`. */
  readonly id: string
  /** What the property states, used as the test name. */
  readonly name: string
  /** How many cases fast-check generates. */
  readonly numRuns: number
  /**
   * Report the first failing case as it is, without shrinking it: for properties whose failing
   * case costs a deadline (a liveness check), where shrinking would wait out that deadline again
   * for every smaller case tried.
   */
  readonly endOnFailure?: boolean
  readonly cases: FastCheck.Arbitrary<Case>
}

const MAX_PRINTED = 2_000

const printInput = (input: unknown): string => {
  const text = FastCheck.stringify(input)
  return text.length > MAX_PRINTED ? `${text.slice(0, MAX_PRINTED)}… (${text.length} characters)` : text
}

/** Makes a property from an arbitrary of inputs and the check of one input. */
export const make = <A>(options: {
  readonly id: string
  readonly name: string
  readonly numRuns: number
  readonly endOnFailure?: boolean
  readonly arbitrary: FastCheck.Arbitrary<A>
  readonly check: (input: A) => Effect.Effect<void, ContractViolation>
}): Property => ({
  id: options.id,
  name: options.name,
  numRuns: options.numRuns,
  ...(options.endOnFailure === true ? { endOnFailure: true } : {}),
  cases: options.arbitrary.map((input): Case => ({
    input,
    check: Effect.asVoid(Effect.suspend(() => options.check(input))),
    [FastCheck.toStringMethod]: () => printInput(input)
  } as Case))
})

/** Makes a property with a single case (no input). */
export const single = (options: {
  readonly id: string
  readonly name: string
  readonly check: Effect.Effect<void, ContractViolation>
}): Property =>
  make({ id: options.id, name: options.name, numRuns: 1, arbitrary: FastCheck.constant(null), check: () => options.check })

/** Parameters of a programmatic run. */
export interface RunOptions {
  readonly numRuns?: number
  readonly seed?: number
}

/** The result of running a property programmatically. */
export interface Report {
  readonly id: string
  readonly passed: boolean
  /** The error of the first failing case (empty when passed). */
  readonly error: string
  /** fast-check's report: counterexample, seed and path to replay. */
  readonly details: string
}

/** Turns the exit of a case into a thrown error fast-check records. */
const runCase = (c: Case): Promise<void> =>
  Effect.runPromiseExit(c.check).then((exit) => {
    if (Exit.isSuccess(exit)) return
    throw new Error(Cause.pretty(exit.cause))
  })

/** Runs a property outside vitest and reports whether it held. */
export const run = (property: Property, options?: RunOptions): Effect.Effect<Report> =>
  Effect.promise(() =>
    FastCheck.check(FastCheck.asyncProperty(property.cases, runCase), {
      numRuns: options?.numRuns ?? property.numRuns,
      ...(property.endOnFailure === true ? { endOnFailure: true } : {}),
      ...(options?.seed === undefined ? {} : { seed: options.seed })
    })
  ).pipe(
    Effect.map((details): Report => {
      const error = details.errorInstance instanceof Error ? details.errorInstance.message : String(details.errorInstance ?? "")
      return {
        id: property.id,
        passed: !details.failed,
        error: details.failed ? error : "",
        details: details.failed ? (FastCheck.defaultReportMessage(details) ?? error) : ""
      }
    })
  )
