/**
 * The contract of a store's blobs (design 0330), for any `RunLogStore` whose `blobs` capability
 * is set: `BlobsContract.suite("my store", myStore, options)`. Blobs read back byte for byte
 * under the SHA-256 of their bytes; putting the same bytes twice gives the same hash; a hash never
 * put reads as `None`; `has` names exactly the stored ones; refs are replaced by name, listed by
 * prefix in name order, and two runs never see each other's refs; and, with `survivesRestart`,
 * all of it reads back after the storage is reopened.
 *
 * @since 0.1.0
 */
import * as Blobs from "@polyloop/core/Blobs"
import { RunLogStore } from "@polyloop/core/RunLogStore"
import * as Effect from "effect/Effect"
import * as FastCheck from "effect/FastCheck"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import type * as Scope from "effect/Scope"
import * as Property from "./internal/property.js"
import { build, describeError } from "./internal/subject.js"
import { register } from "./internal/suite.js"

export {
  /** A contract was broken; the message says what was expected and what was seen. */
  ContractViolation,
  /** A property of a suite. */
  type Property
} from "./internal/property.js"

/** Runs one property outside vitest. */
export const check: (property: Property.Property, options?: Property.RunOptions) => Effect.Effect<Property.Report> = Property.run

/**
 * The store under test: a layer (each build a fresh store), or a scoped effect preparing fresh
 * storage and returning a layer that opens it (built again to reopen it).
 */
export type StoreUnderTest<E = never> =
  | Layer.Layer<RunLogStore, E>
  | Effect.Effect<Layer.Layer<RunLogStore, E>, E, Scope.Scope>

/** What the store can do beyond the contract. */
export interface Options {
  /** Reopening the storage reads back every blob and ref (needs the `Effect` form). */
  readonly survivesRestart?: boolean
  /** Multiplies every property's number of generated cases (default 1). */
  readonly runsFactor?: number
  /** Per-test timeout in milliseconds (default 30 000). */
  readonly timeout?: number
  /** A fast-check seed. */
  readonly seed?: number
}

/** The identifiers of the blob properties. */
export type PropertyId = "roundTrip" | "unknown" | "refs" | "concurrent" | "survivesRestart"

const bytes = FastCheck.uint8Array({ maxLength: 300 })

const open = <E>(subject: StoreUnderTest<E>) =>
  Effect.gen(function*() {
    const layer: Layer.Layer<RunLogStore, E> = Layer.isLayer(subject)
      ? subject as Layer.Layer<RunLogStore, E>
      : yield* Effect.mapError(
        subject as Effect.Effect<Layer.Layer<RunLogStore, E>, E, Scope.Scope>,
        (error) => new Property.ContractViolation({ message: `could not prepare the storage: ${describeError(error)}` })
      )
    const reopen = Effect.flatMap(build(RunLogStore, layer, "the store"), (store) =>
      store.blobs === undefined
        ? Property.violation("the store has no blobs capability (RunLogStore.Service.blobs is absent)")
        : Effect.succeed(store.blobs))
    return { first: yield* reopen, reopen }
  })

const sameBytes = (a: Uint8Array, b: Uint8Array): boolean => a.length === b.length && a.every((x, i) => x === b[i])

const fail = (what: string) => (error: unknown) => new Property.ContractViolation({ message: `${what} failed: ${describeError(error)}` })

/** The properties, by id (`survivesRestart` only when the option is set). */
export const properties = <E>(subject: StoreUnderTest<E>, options: Options = {}): Readonly<Partial<Record<PropertyId, Property.Property>>> => {
  const runs = (n: number) => Math.max(1, Math.round(n * (options.runsFactor ?? 1)))
  const props: Partial<Record<PropertyId, Property.Property>> = {
    roundTrip: Property.make({
      id: "roundTrip",
      name: "blobs read back byte for byte under the SHA-256 of their bytes; the same bytes put twice are one blob",
      numRuns: runs(20),
      arbitrary: FastCheck.array(bytes, { maxLength: 6 }),
      check: (items) =>
        Effect.scoped(Effect.gen(function*() {
          const { first: blobs } = yield* open(subject)
          const hashes = yield* Effect.mapError(blobs.putAll(items), fail("putAll"))
          const again = yield* Effect.mapError(Effect.forEach(items, (item) => blobs.put(item)), fail("put"))
          for (let i = 0; i < items.length; i++) {
            const item = items[i]!
            yield* Property.ensure(hashes[i] === Blobs.hashOf(item) && again[i] === hashes[i], () => `blob ${i}: hash ${hashes[i]} / ${again[i]}, expected ${Blobs.hashOf(item)}`)
            const read = yield* Effect.mapError(blobs.get(hashes[i]!), fail("get"))
            yield* Property.ensure(Option.isSome(read) && sameBytes(read.value, item), () => `blob ${i} (${item.length} bytes) did not read back as written`)
          }
          const present = yield* Effect.mapError(blobs.has(hashes), fail("has"))
          yield* Property.ensure(hashes.every((hash) => present.has(hash)), () => "has() does not name every stored blob")
        }))
    }),
    unknown: Property.make({
      id: "unknown",
      name: "a hash never put reads as None and is not named by has()",
      numRuns: runs(10),
      arbitrary: bytes,
      check: (item) =>
        Effect.scoped(Effect.gen(function*() {
          const { first: blobs } = yield* open(subject)
          const hash = Blobs.hashOf(Uint8Array.from([...item, 1, 2, 3]))
          const read = yield* Effect.mapError(blobs.get(hash), fail("get"))
          yield* Property.ensure(Option.isNone(read), () => `get(${hash}) of a blob never put returned bytes`)
          const present = yield* Effect.mapError(blobs.has([hash]), fail("has"))
          yield* Property.ensure(present.size === 0, () => "has() names a blob never put")
        }))
    }),
    refs: Property.make({
      id: "refs",
      name: "refs are replaced by name, listed by prefix in name order, and never seen by another run",
      numRuns: runs(15),
      arbitrary: FastCheck.array(FastCheck.tuple(FastCheck.constantFrom("a", "b"), FastCheck.constantFrom("x/1", "x/2", "x/10", "y/1", "x")), { maxLength: 10 }),
      check: (sets) =>
        Effect.scoped(Effect.gen(function*() {
          const { first: blobs } = yield* open(subject)
          const expected = new Map<string, Map<string, Blobs.BlobHash>>([["a", new Map()], ["b", new Map()]])
          for (let i = 0; i < sets.length; i++) {
            const [run, name] = sets[i]!
            const hash = yield* Effect.mapError(blobs.put(Uint8Array.from([i])), fail("put"))
            yield* Effect.mapError(blobs.setRef(`blobs-contract-${run}`, name, hash), fail("setRef"))
            expected.get(run)!.set(name, hash)
          }
          for (const [run, refs] of expected) {
            for (const prefix of ["", "x/", "y"]) {
              const listed = yield* Effect.mapError(blobs.listRefs(`blobs-contract-${run}`, prefix), fail("listRefs"))
              const want = [...refs.entries()].filter(([name]) => name.startsWith(prefix)).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))
              const got = listed.map((ref) => [ref.name, ref.hash] as const)
              yield* Property.ensure(JSON.stringify(got) === JSON.stringify(want), () => `run ${run}, prefix "${prefix}": listed ${JSON.stringify(got)}, expected ${JSON.stringify(want)}`)
            }
          }
        }))
    }),
    concurrent: Property.make({
      id: "concurrent",
      name: "puts of many blobs from several fibers at once, with refs set and blobs read meanwhile, all succeed and read back",
      numRuns: runs(3),
      arbitrary: FastCheck.tuple(FastCheck.integer({ min: 2, max: 4 }), FastCheck.integer({ min: 0, max: 255 })),
      check: ([fibers, salt]) =>
        Effect.scoped(Effect.gen(function*() {
          const { first: blobs } = yield* open(subject)
          // Enough statements per put that a fiber yields in the middle of one (Effect's scheduler
          // yields every 2,048 operations): a put must not leave its work open to another's.
          const batchOf = (fiber: number) => Array.from({ length: 1500 }, (_, i) => Uint8Array.from([salt, fiber, i >> 8, i & 255]))
          const puts = yield* Effect.mapError(
            Effect.forEach(Array.from({ length: fibers }, (_, f) => f), (fiber) =>
              Effect.zipLeft(
                blobs.putAll(batchOf(fiber)),
                Effect.zipRight(blobs.put(Uint8Array.from([salt, fiber, 255, 255, 1])), blobs.listRefs(`blobs-contract-concurrent-${fiber}`))
              ), { concurrency: "unbounded" }),
            fail("concurrent putAll")
          )
          for (let fiber = 0; fiber < fibers; fiber++) {
            const hashes = puts[fiber]!
            const present = yield* Effect.mapError(blobs.has(hashes), fail("has"))
            yield* Property.ensure(hashes.every((hash) => present.has(hash)), () => `fiber ${fiber}: ${hashes.length - present.size} of its blobs are missing`)
            const last = yield* Effect.mapError(blobs.get(hashes[hashes.length - 1]!), fail("get"))
            yield* Property.ensure(Option.isSome(last) && sameBytes(last.value, batchOf(fiber)[hashes.length - 1]!), () => `fiber ${fiber}: its last blob did not read back`)
          }
        }))
    })
  }
  if (options.survivesRestart === true) {
    props.survivesRestart = Property.make({
      id: "survivesRestart",
      name: "blobs and refs read back after the storage is reopened",
      numRuns: runs(5),
      arbitrary: FastCheck.array(bytes, { minLength: 1, maxLength: 4 }),
      check: (items) =>
        Effect.scoped(Effect.gen(function*() {
          const { first, reopen } = yield* open(subject)
          const hashes = yield* Effect.mapError(first.putAll(items), fail("putAll"))
          yield* Effect.mapError(first.setRef("blobs-contract-restart", "last", hashes[hashes.length - 1]!), fail("setRef"))
          const reopened = yield* Effect.scoped(Effect.gen(function*() {
            const blobs = yield* reopen
            const read = yield* Effect.mapError(Effect.forEach(hashes, (hash) => blobs.get(hash)), fail("get after reopening"))
            const refs = yield* Effect.mapError(blobs.listRefs("blobs-contract-restart"), fail("listRefs after reopening"))
            return { read, refs }
          }))
          for (let i = 0; i < items.length; i++) {
            const read = reopened.read[i]!
            yield* Property.ensure(Option.isSome(read) && sameBytes(read.value, items[i]!), () => `blob ${i} did not survive reopening`)
          }
          yield* Property.ensure(reopened.refs.length === 1 && reopened.refs[0]!.hash === hashes[hashes.length - 1], () => `refs after reopening: ${JSON.stringify(reopened.refs)}`)
        }))
    })
  }
  return props
}

/** Registers the blob properties with vitest. */
export const suite = <E>(name: string, subject: StoreUnderTest<E>, options: Options = {}): void =>
  register(`Blobs contract: ${name}`, properties(subject, options) as Readonly<Record<string, Property.Property>>, {
    ...(options.timeout === undefined ? {} : { timeout: options.timeout }),
    ...(options.seed === undefined ? {} : { seed: options.seed })
  })
