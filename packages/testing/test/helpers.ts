/**
 * Helpers for the kit's own tests: run a property programmatically and require that it holds
 * (on a correct implementation) or that it fails for the expected reason (on a broken one).
 */
import { assert, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import type * as RunLogStoreContract from "../src/RunLogStoreContract.js"
import * as Property from "../src/internal/property.js"

type Props = Readonly<Partial<Record<string, RunLogStoreContract.Property>>>

/** Requires every property of `props` to hold. */
export const holdsAll = (props: Props) =>
  Effect.forEach(Object.values(props), (property) =>
    Effect.map(Property.run(property!), (report) => {
      assert.isTrue(report.passed, `${report.id} should hold but failed:\n${report.details}`)
    }), { discard: true })

/** Requires the property `id` to fail with an error matching `reason`. */
export const breaks = (props: Props, id: string, reason: RegExp) =>
  Effect.gen(function*() {
    const property = props[id]
    assert.isDefined(property, `no property ${id}`)
    const report = yield* Property.run(property!)
    assert.isFalse(report.passed, `${id} should fail on the broken implementation, but held`)
    assert.match(report.error, reason, `${id} failed for another reason:\n${report.details}`)
  })

/** One broken implementation and the properties it must break, with the reason each reports. */
export interface Broken<P> {
  readonly name: string
  readonly props: () => Readonly<Partial<Record<string, RunLogStoreContract.Property>>>
  readonly breaks: Partial<Record<keyof P & string, RegExp>>
}

/**
 * Registers one test per (broken implementation, property) pair, plus a test that every
 * property of `all` is broken by at least one implementation: a property no broken
 * implementation can fail is not a property.
 */
export const registerBroken = <P extends Readonly<Partial<Record<string, RunLogStoreContract.Property>>>>(
  all: P,
  brokens: ReadonlyArray<Broken<P>>
): void => {
  for (const broken of brokens) {
    for (const [id, reason] of Object.entries(broken.breaks)) {
      it.live(`${broken.name} breaks ${id}`, () => breaks(broken.props(), id, reason as RegExp), 60_000)
    }
  }
  it("every property is broken by at least one broken implementation", () => {
    const covered = new Set(brokens.flatMap((b) => Object.keys(b.breaks)))
    for (const id of Object.keys(all)) assert.isTrue(covered.has(id), `no broken implementation fails property ${id}`)
  })
}
