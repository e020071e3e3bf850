/**
 * The `RunLogStore` contract suite (SPEC §7, §14): property-based checks any store runs inside
 * its own vitest file — `RunLogStoreContract.suite("my store", myLayer, options)`. Generated runs
 * read back as exactly the prefix written, records round-trip exactly, unknown runs read as the
 * empty log, out-of-sequence writes are rejected with `ConcurrentWriter`, `completeStep` is
 * atomic (under interruption, and under injected storage faults), interrupted operations leak
 * nothing later ones wait for, claims are exclusive and released, and instances never see each
 * other's state; and, run in a child process killed by SIGKILL at random moments, the store
 * keeps whole writes, every acknowledged one among them. Capabilities a store may lack are
 * options (`survivesRestart`, `claimsAcrossInstances`, `faultInjection`, `killedWriter`), never
 * adapter names.
 *
 * This module assembles the kit; each concern is one file under `internal/store/`: `log.ts`
 * (prefix, round trip, unknown run, isolation, sequence, listing), `atomicity.ts` (interruption,
 * leaks, storage faults), `claims.ts`, `durability.ts` (restart, killed writer). They share
 * `harness.ts` (opening the store under test, the expectations) and `types.ts` (design 0390).
 * Adding a property: add its id to `PropertyId` and `propertyIds` (`internal/store/types.ts`) and
 * its `Property.make` to the group it belongs to.
 *
 * @since 0.1.0
 */
import type * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Property from "./internal/property.js"
import * as Atomicity from "./internal/store/atomicity.js"
import * as Claims from "./internal/store/claims.js"
import * as Durability from "./internal/store/durability.js"
import type { Properties, StoreContext } from "./internal/store/harness.js"
import * as Log from "./internal/store/log.js"
import { type Options, type PropertyId, propertyIds, type StoreUnderTest } from "./internal/store/types.js"
import { register } from "./internal/suite.js"

export {
  /** A contract was broken; the message says what was expected and what was seen. */
  ContractViolation,
  /** A property of a suite: `id`, `name`, `numRuns` and its generated cases. */
  type Property,
  /** The result of `check`. */
  type Report
} from "./internal/property.js"
export { type KilledWriterOptions, type Options, type PropertyId, type StoreUnderTest } from "./internal/store/types.js"

/** Runs one property outside vitest (e.g. to prove it fails on a broken store). */
export const check: (property: Property.Property, options?: Property.RunOptions) => Effect.Effect<Property.Report> = Property.run

/** The groups of properties, by concern. */
const groups: ReadonlyArray<<E>(ctx: StoreContext<E>) => Properties> = [
  Log.properties,
  Atomicity.properties,
  Claims.properties,
  Durability.properties
]

/**
 * The properties of the store contract, keyed by id, for a store under test. Properties that
 * need a capability are present only when `options` declares it.
 */
export const properties = <E>(store: StoreUnderTest<E>, options: Options<E> = {}): Readonly<Partial<Record<PropertyId, Property.Property>>> => {
  const factor = options.runsFactor ?? 1
  const runs = (n: number) => Math.max(1, Math.round(n * factor))
  const reopenable = !Layer.isLayer(store)
  if ((options.survivesRestart === true || options.claimsAcrossInstances === true) && !reopenable) {
    throw new Error(
      "RunLogStoreContract: survivesRestart and claimsAcrossInstances need the Effect form of the store under test (an effect preparing storage and returning a layer that opens it), so the suite can open the same storage twice"
    )
  }
  const ctx: StoreContext<E> = { store, options, runs }
  const found: Properties = Object.assign({}, ...groups.map((group) => group(ctx)))
  // In the fixed order of `propertyIds`, whatever group each is in: the order the suite registers them.
  const props: Properties = {}
  for (const id of propertyIds) {
    const property = found[id]
    if (property !== undefined) props[id] = property
  }
  return props
}

/**
 * Registers the store contract as vitest tests, in a `describe` block named after the store.
 * Call it at the top level of a test file.
 */
export const suite = <E>(name: string, store: StoreUnderTest<E>, options: Options<E> = {}): void =>
  register(`RunLogStore contract: ${name}`, properties(store, options) as Readonly<Record<string, Property.Property>>, {
    ...(options.timeout === undefined ? {} : { timeout: options.timeout }),
    ...(options.seed === undefined ? {} : { seed: options.seed })
  })
