/**
 * The store contract's properties of claims (SPEC §7): one owner at a time per run, released
 * when its scope closes or its fiber is interrupted, and — where the store declares
 * `claimsAcrossInstances` — exclusive across instances over the same storage (design 0390).
 *
 * @internal
 */
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as FastCheck from "effect/FastCheck"
import * as Fiber from "effect/Fiber"
import * as Arb from "../arbitraries.js"
import { show } from "../equal.js"
import * as Property from "../property.js"
import { claimIn, claimOk, expectBusy, ok, openFresh, prepare, type Properties, type StoreContext } from "./harness.js"

/** The claims' properties: exclusive, released on close and on interruption, across instances. */
export const properties = <E>(ctx: StoreContext<E>): Properties => {
  const { options, runs, store } = ctx
  const props: Properties = {}
  props.claimExclusive = Property.make({
    id: "claimExclusive",
    name: "claim is exclusive per run: a second claim of a claimed run fails with RunBusy, other runs stay free",
    numRuns: runs(15),
    arbitrary: Arb.runIds(2),
    check: ([a, b]) =>
      Effect.scoped(
        Effect.gen(function*() {
          const s = yield* openFresh(store)
          const release = yield* claimIn(s, a!)
          yield* expectBusy(s, a!, "while the first is held")
          yield* claimOk(s, b!, `of another run while ${show(a)} is claimed`)
          yield* release
        })
      )
  })

  props.claimReleasedOnClose = Property.make({
    id: "claimReleasedOnClose",
    name: "a claim is released when its scope closes",
    numRuns: runs(10),
    arbitrary: FastCheck.record({ runId: Arb.runId, times: FastCheck.integer({ min: 2, max: 4 }) }),
    check: ({ runId, times }) =>
      Effect.scoped(
        Effect.gen(function*() {
          const s = yield* openFresh(store)
          for (let i = 0; i < times; i++) yield* claimOk(s, runId, i === 0 ? "on a fresh store" : `after the claim's scope closed (${i} time(s))`)
        })
      )
  })

  props.claimReleasedOnInterruption = Property.make({
    id: "claimReleasedOnInterruption",
    name: "a claim is released when the fiber holding it is interrupted",
    numRuns: runs(10),
    arbitrary: Arb.runId,
    check: (runId) =>
      Effect.scoped(
        Effect.gen(function*() {
          const s = yield* openFresh(store)
          const claimed = yield* Deferred.make<void, unknown>()
          const holder = yield* Effect.fork(
            Effect.scoped(
              s.claim(runId).pipe(
                Effect.tapError((error) => Deferred.fail(claimed, error)),
                Effect.zipRight(Deferred.succeed(claimed, undefined)),
                Effect.zipRight(Effect.never)
              )
            )
          )
          yield* ok(`claim(${show(runId)})`, Deferred.await(claimed))
          yield* Fiber.interrupt(holder)
          yield* claimOk(s, runId, "after the fiber holding the claim was interrupted")
        })
      )
  })

  if (options.claimsAcrossInstances === true) {
    props.claimsAcrossInstances = Property.make({
      id: "claimsAcrossInstances",
      name: "a claim held by one instance excludes every other instance over the same storage until released",
      numRuns: runs(10),
      arbitrary: Arb.runId,
      check: (runId) =>
        Effect.scoped(
          Effect.gen(function*() {
            const storage = yield* prepare(store)
            const a = yield* storage.open
            const b = yield* storage.open
            const release = yield* claimIn(a, runId)
            yield* expectBusy(b, runId, "from another instance over the same storage")
            yield* release
            yield* claimOk(b, runId, "from another instance after the first released it")
          })
        )
    })
  }
  return props
}
