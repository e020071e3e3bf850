/**
 * The store contract's properties of the log itself (SPEC §7): `readLog` gives back exactly
 * the prefix written, records round-trip, an unknown run reads as the empty log, instances are
 * independent, out-of-sequence writes are refused, `listRuns` lists every started run once
 * (design 0390).
 *
 * @internal
 */
import * as Effect from "effect/Effect"
import * as FastCheck from "effect/FastCheck"
import * as Option from "effect/Option"
import * as Arb from "../arbitraries.js"
import { diff, show } from "../equal.js"
import * as Property from "../property.js"
import { describeError } from "../subject.js"
import { describeWrite } from "../writes.js"
import {
  type BadKind,
  badWrite,
  claimIn,
  claimOk,
  expectEmpty,
  expectLog,
  ok,
  openFresh,
  type Properties,
  type StoreContext,
  writeAll,
  writeOk
} from "./harness.js"

/** The log's properties: prefix, round trip, unknown run, isolation, sequence, listing. */
export const properties = <E>(ctx: StoreContext<E>): Properties => {
  const { runs, store } = ctx
  const props: Properties = {}
  props.prefix = Property.make({
    id: "prefix",
    name: "readLog returns exactly the records written, after every write",
    numRuns: runs(25),
    arbitrary: Arb.run(),
    check: (run) =>
      Effect.scoped(
        Effect.gen(function*() {
          const s = yield* openFresh(store)
          for (let i = 0; i < run.writes.length; i++) {
            const write = run.writes[i]!
            yield* writeOk(s, run.runId, write)
            yield* expectLog(s, run.runId, Arb.logUpTo(run, i + 1), `after ${describeWrite(write)}`)
          }
        })
      )
  })

  props.roundTrip = Property.make({
    id: "roundTrip",
    name: "records round-trip exactly (long texts, raw unicode, lone surrogates, large JSON snapshots)",
    numRuns: runs(10),
    arbitrary: Arb.extremeRun,
    check: (run) =>
      Effect.scoped(
        Effect.gen(function*() {
          const s = yield* openFresh(store)
          yield* writeAll(s, run)
          yield* expectLog(s, run.runId, Arb.logUpTo(run, run.writes.length), "after the whole run")
          // The store's front trusts its own rows on the hot path; the full schema decode of
          // what it wrote must give the same records.
          yield* expectLog(s, run.runId, Arb.logUpTo(run, run.writes.length), "after the whole run", true)
        })
      )
  })

  props.unknownRun = Property.make({
    id: "unknownRun",
    name: "readLog of an unknown run is the empty log, never an error",
    numRuns: runs(15),
    arbitrary: FastCheck.record({ run: Arb.run({ maxSteps: 2 }), other: Arb.runId }).filter(({ other, run }) => other !== run.runId),
    check: ({ other, run }) =>
      Effect.scoped(
        Effect.gen(function*() {
          const s = yield* openFresh(store)
          yield* expectEmpty(s, other, "on a fresh store")
          yield* writeAll(s, run)
          yield* expectEmpty(s, other, "on a store holding another run")
        })
      )
  })

  props.isolation = Property.make({
    id: "isolation",
    name: "two instances never see each other's state (logs and claims)",
    numRuns: runs(10),
    arbitrary: Arb.run({ maxSteps: 2 }),
    check: (run) =>
      Effect.scoped(
        Effect.gen(function*() {
          const a = yield* openFresh(store)
          const b = yield* openFresh(store)
          yield* writeAll(a, run)
          yield* expectEmpty(b, run.runId, "on a second, independent instance after the first wrote it")
          const release = yield* claimIn(a, run.runId)
          yield* claimOk(b, run.runId, "on an independent instance while the first instance holds it")
          yield* release
        })
      )
  })

  props.sequence = Property.make({
    id: "sequence",
    name: "a duplicate or gapped sequence number is rejected with ConcurrentWriter and changes nothing",
    numRuns: runs(30),
    arbitrary: FastCheck.record({
      run: Arb.run({ maxSteps: 3 }),
      kind: FastCheck.constantFrom<BadKind>("Start", "Reply", "Results", "ResultsGapInside", "Complete", "CompleteGapInside", "Resume", "Finish"),
      duplicate: FastCheck.boolean(),
      offset: FastCheck.integer({ min: 1, max: 3 }),
      templates: Arb.templates
    }),
    check: ({ duplicate, kind, offset, run, templates }) =>
      Effect.scoped(
        Effect.gen(function*() {
          const s = yield* openFresh(store)
          yield* writeAll(s, run)
          const next = Arb.recordsUpTo(run, run.writes.length).length
          const seq =
            kind === "CompleteGapInside" || kind === "ResultsGapInside" ? next : duplicate ? Math.max(0, next - offset) : next + offset
          const bad = badWrite(kind, seq, templates, run.runId)
          const error = yield* bad.perform(s, run.runId).pipe(
            Effect.flip,
            Effect.mapError(
              () =>
                new Property.ContractViolation({
                  message: `${bad.label} on a log of ${next} record(s) succeeded; it must fail with ConcurrentWriter`
                })
            )
          )
          yield* Property.ensure(
            typeof error === "object" && error !== null && "_tag" in error && error._tag === "ConcurrentWriter",
            () => `${bad.label} on a log of ${next} record(s) failed with ${describeError(error)}; it must fail with ConcurrentWriter`
          )
          yield* expectLog(s, run.runId, Arb.logUpTo(run, run.writes.length), `after the rejected ${bad.label}`)
        })
      )
  })

  props.listRuns = Property.make({
    id: "listRuns",
    name: "listRuns lists every started run once with its status and step count, newest first, honouring status and limit",
    numRuns: runs(10),
    arbitrary: FastCheck.uniqueArray(Arb.run({ maxSteps: 3 }), { minLength: 1, maxLength: 4, selector: (r) => r.runId }),
    check: (generated) =>
      Effect.scoped(
        Effect.gen(function*() {
          const s = yield* openFresh(store)
          for (const run of generated) yield* writeAll(s, run)
          const all = yield* ok("listRuns()", s.listRuns())
          const listed = all.map((summary) => summary.runId).sort()
          const expected = generated.map((r) => r.runId as string).sort()
          yield* Option.match(diff(expected, listed), {
            onNone: () => Effect.void,
            onSome: (d) => Property.violation(`listRuns() does not list each started run exactly once: ${d}`)
          })
          for (const run of generated) {
            const log = Arb.logUpTo(run, run.writes.length)
            const summary = all.find((x) => x.runId === run.runId)!
            const status = Option.isSome(log.finished) ? "Finished" : "Unfinished"
            yield* Property.ensure(summary.status === status, () => `listRuns() reports run ${show(run.runId)} as ${summary.status}; it is ${status}`)
            yield* Property.ensure(
              summary.steps === log.steps.length,
              () => `listRuns() reports ${summary.steps} step(s) for run ${show(run.runId)}; it has ${log.steps.length}`
            )
          }
          for (let i = 1; i < all.length; i++) {
            yield* Property.ensure(all[i - 1]!.startedAt >= all[i]!.startedAt, () => "listRuns() is not ordered newest first (by startedAt)")
          }
          const finished = yield* ok("listRuns({ status: \"Finished\" })", s.listRuns({ status: "Finished" }))
          const finishedIds = generated.filter((r) => r.writes.some((w) => w._tag === "Finish")).map((r) => r.runId as string).sort()
          yield* Option.match(diff(finishedIds, finished.map((x) => x.runId).sort()), {
            onNone: () => Effect.void,
            onSome: (d) => Property.violation(`listRuns({ status: "Finished" }) does not list exactly the finished runs: ${d}`)
          })
          const limited = yield* ok("listRuns({ limit: 1 })", s.listRuns({ limit: 1 }))
          yield* Property.ensure(limited.length === 1, () => `listRuns({ limit: 1 }) returned ${limited.length} runs`)
        })
      )
  })
  return props
}
