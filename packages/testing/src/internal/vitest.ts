/**
 * `@effect/vitest`, loaded only where it can be: inside a vitest run. The suites register vitest
 * tests and need it; the rest of the kit (`ScriptedModel`, `FaultInjection`, each contract's
 * `properties` run with `check`) works in any program — a script, a benchmark, a demo — where
 * importing vitest throws ("Vitest failed to access its internal state"). So the import is
 * dynamic, its failure kept, and reported only when a suite is registered outside vitest.
 *
 * @internal
 */
/** `@effect/vitest`'s module, as a type. */
export type EffectVitest = typeof import("@effect/vitest")

/** vitest's `assert`, as a type: assertion functions must be bound to an annotated name. */
export type Assert = EffectVitest["assert"]

const loaded: EffectVitest | Error = await import("@effect/vitest").catch((cause: unknown) =>
  cause instanceof Error ? cause : new Error(String(cause))
)

/** `@effect/vitest` for `caller`, which registers tests; throws, saying why, outside vitest. */
export const vitest = (caller: string): EffectVitest => {
  if (!(loaded instanceof Error)) return loaded
  const reason = loaded.message.split("\n")[0] ?? ""
  throw new Error(
    `${caller} registers vitest tests: call it in a test file that vitest runs (here @effect/vitest cannot be loaded: ${reason}). ` +
      "Outside vitest, run each property of the contract's `properties(...)` with its `check`."
  )
}
