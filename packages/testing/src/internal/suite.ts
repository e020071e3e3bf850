/**
 * Registering properties with vitest (`it.live.prop` from `@effect/vitest`): one `describe`
 * per suite, one property test per property. Implementations run with the live clock, as in
 * production.
 *
 * @internal
 */
import type { Vitest } from "@effect/vitest"
import type { Property } from "./property.js"
import { vitest } from "./vitest.js"

/** Options common to every suite's registration. */
export interface RegisterOptions {
  /** Per-test timeout in milliseconds (default 30 000). */
  readonly timeout?: number
  /** Overrides every property's number of runs. */
  readonly numRuns?: number
  /** A fast-check seed, to replay a failure. */
  readonly seed?: number
}

/** Registers a suite's properties as vitest tests. */
export const register = (
  title: string,
  properties: Readonly<Record<string, Property>>,
  options?: RegisterOptions,
  api?: Pick<Vitest.Methods, "live">
): void => {
  const { describe, it } = vitest(`the suite "${title}"`)
  const methods = api ?? it
  describe(title, () => {
    for (const property of Object.values(properties)) {
      methods.live.prop(property.name, [property.cases], ([c]) => c.check, {
        timeout: options?.timeout ?? 30_000,
        fastCheck: {
          numRuns: options?.numRuns ?? property.numRuns,
          ...(property.endOnFailure === true ? { endOnFailure: true } : {}),
          ...(options?.seed === undefined ? {} : { seed: options.seed })
        }
      })
    }
  })
}
