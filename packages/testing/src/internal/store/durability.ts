/**
 * The store contract's properties of durability (SPEC §7), for stores that declare them:
 * reopening the storage reads back everything written and continues the sequence
 * (`survivesRestart`), and a writer in another process killed by SIGKILL at random moments
 * leaves whole writes, every acknowledged one among them (`killedWriter`) (design 0390).
 *
 * @internal
 */
import * as Effect from "effect/Effect"
import * as FastCheck from "effect/FastCheck"
import * as Option from "effect/Option"
import { StepIndex } from "@polyloop/core/Ids"
import * as RunLog from "@polyloop/core/RunLog"
import * as Arb from "../arbitraries.js"
import * as KilledWriter from "../killedWriterCheck.js"
import * as Property from "../property.js"
import { expectLog, ok, prepare, type Properties, type StoreContext, writeAll } from "./harness.js"

/** Durability's properties: surviving a restart and a killed writer. */
export const properties = <E>(ctx: StoreContext<E>): Properties => {
  const { options, runs, store } = ctx
  const props: Properties = {}
  if (options.survivesRestart === true) {
    props.survivesRestart = Property.make({
      id: "survivesRestart",
      name: "reopening the storage reads back everything written and continues the sequence",
      numRuns: runs(10),
      arbitrary: Arb.run({ maxSteps: 3 }),
      check: (run) =>
        Effect.scoped(
          Effect.gen(function*() {
            const storage = yield* prepare(store)
            yield* Effect.scoped(Effect.flatMap(storage.open, (s) => writeAll(s, run)))
            const reopened = yield* storage.open
            const log = Arb.logUpTo(run, run.writes.length)
            yield* expectLog(reopened, run.runId, log, "after reopening the storage")
            if (Option.isNone(log.finished)) {
              yield* ok(
                `appendResume(seq ${RunLog.nextSeq(log)}) after reopening`,
                reopened.appendResume(run.runId, {
                  _tag: "RunResumed",
                  seq: RunLog.nextSeq(log),
                  fromStep: StepIndex.make(log.steps.length),
                  at: 0,
                  logVersion: RunLog.logVersion
                })
              )
            }
          })
        )
    })
  }

  const killedWriter = options.killedWriter
  if (killedWriter !== undefined) {
    const kills = killedWriter.kills ?? 8
    props.survivesKill = Property.make({
      id: "survivesKill",
      name: `a writer in another process killed by SIGKILL at random moments (${kills} times) leaves whole writes, every acknowledged one among them; the next writer goes on to the end`,
      numRuns: runs(2),
      // A seed and a kill schedule: shrinking them says nothing more than the first failure.
      endOnFailure: true,
      arbitrary: FastCheck.record({
        seed: FastCheck.integer(),
        schedule: FastCheck.array(
          FastCheck.record({ acks: FastCheck.integer({ min: 0, max: 3 }), delay: FastCheck.double({ min: 0, max: 1, noNaN: true }) }),
          { minLength: kills, maxLength: kills }
        )
      }),
      check: ({ schedule, seed }) => KilledWriter.check(killedWriter, seed, schedule)
    })
  }
  return props
}
