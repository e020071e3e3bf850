/**
 * 5. Many runs: N concurrent runs in one process, on the in-memory store and on SQLite (one
 * file shared by all runs): total steps per second, and heap bytes per run in flight.
 *
 * Every run is parked once at its middle step until all N have reached it; the heap is then
 * measured after a full collection (minus the heap before the runs started), and the pause is
 * taken out of the time. The runs' services are provided once around them all, as a process
 * carrying many runs has them (design 0350).
 */
import * as RunLogStore from "@polyloop/core/RunLogStore"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as path from "node:path"
import * as F from "../lib/fixtures.js"
import { heapUsed, now, type Reps, settledHeapUsed, stat, type Stat } from "../lib/measure.js"
import * as Raw from "../lib/sqlite.js"
import { withSqlite } from "../lib/store.js"

/** One line of the many-runs table. */
export interface ManyRow {
  readonly store: "memory" | "sqlite"
  readonly runs: number
  readonly stepsPerRun: number
  readonly stepsPerSecond: Stat
  /** Heap bytes per run in flight (parked at its middle step). */
  readonly bytesPerRun: Stat
}

let counter = 0

/** Runs `runs` concurrent runs on `store`: [steps per second, heap bytes per run]. */
const once = (store: RunLogStore.RunLogStore.Service, runs: number, stepsPerRun: number) =>
  Effect.gen(function*() {
    const script = F.replies(stepsPerRun)
    const parkAt = Math.floor(stepsPerRun / 2)
    const allParked = yield* Deferred.make<void>()
    const release = yield* Deferred.make<void>()
    let parked = 0
    const onCall = (step: number) =>
      step !== parkAt
        ? Effect.void
        : Effect.zipRight(
            Effect.suspend(() => {
              parked += 1
              return parked === runs ? Deferred.succeed(allParked, undefined) : Effect.void
            }),
            Deferred.await(release)
          )
    const model = F.model(script, { onCall })
    const batch = ++counter
    // Settled: the last repetition's store (tens of MB for the memory store's logs) could still
    // be reachable for a while after it ended; measured at once, it was counted in "before" and
    // collected during the runs, and the figure read low, even below zero.
    const before = yield* Effect.promise(settledHeapUsed)
    const t0 = now()
    const fiber = yield* Effect.fork(
      F.runAllOn(store, model, Array.from({ length: runs }, (_, i) => F.request(`many-${batch}-${i}`, stepsPerRun)))
    )
    yield* Deferred.await(allParked)
    const p0 = now()
    const during = heapUsed()
    const p1 = now()
    yield* Deferred.succeed(release, undefined)
    yield* Fiber.join(fiber)
    const t1 = now()
    const seconds = (t1 - t0 - (p1 - p0)) / 1000
    return [(runs * stepsPerRun) / seconds, (during - before) / runs] as const
  })

/** Runs the section. */
export const run = async (
  dir: string,
  options: { readonly runs: number; readonly memorySteps: number; readonly sqliteSteps: number; readonly reps: Reps; readonly sqliteReps: Reps }
): Promise<ReadonlyArray<ManyRow>> => {
  const rows: Array<ManyRow> = []
  const collect = async (storeName: "memory" | "sqlite", stepsPerRun: number, one: () => Promise<readonly [number, number]>) => {
    const speed: Array<number> = []
    const bytes: Array<number> = []
    const reps = storeName === "memory" ? options.reps : options.sqliteReps
    for (let i = 0; i < reps.warmup + reps.reps; i++) {
      const [s, b] = await one()
      if (i >= reps.warmup) {
        speed.push(s)
        bytes.push(b)
      }
    }
    rows.push({ store: storeName, runs: options.runs, stepsPerRun, stepsPerSecond: stat(speed), bytesPerRun: stat(bytes) })
  }
  await collect("memory", options.memorySteps, () =>
    Effect.runPromise(Effect.flatMap(RunLogStore.makeMemory, (store) => once(store, options.runs, options.memorySteps))))
  let files = 0
  await collect("sqlite", options.sqliteSteps, async () => {
    const file = path.join(dir, `many-${++files}.db`)
    const out = await withSqlite(file, (store) => once(store, options.runs, options.sqliteSteps))
    Raw.remove(file)
    return out
  })
  return rows
}
