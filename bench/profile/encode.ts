/**
 * What encoding a step's records costs (issue 35): one 5-step run on the memory store, then each
 * kind of record of its last step encoded many times with `RunLogStore.encodeRecord`.
 *   tsx bench/profile/encode.ts
 */
import * as RunLogStore from "@polyloop/core/RunLogStore"
import * as Ids from "@polyloop/core/Ids"
import * as Effect from "effect/Effect"
import * as F from "../lib/fixtures.js"
import { cpuMicros } from "../lib/measure.js"

const store = Effect.runSync(RunLogStore.makeMemory)
Effect.runSync(F.runOn(store, F.model(F.replies(5)), F.request("enc", 5)).pipe(Effect.asVoid))
const log = Effect.runSync(store.readLog(Ids.runId("enc")))
const last = [log.replies[3]!, log.results[3]!, log.steps[3]!]
for (const record of last) {
  const N = 100_000
  let sink = 0
  for (let i = 0; i < 10_000; i++) sink += RunLogStore.encodeRecord(record).length
  const c0 = cpuMicros()
  for (let i = 0; i < N; i++) sink += RunLogStore.encodeRecord(record).length
  const c1 = cpuMicros()
  const s0 = cpuMicros()
  for (let i = 0; i < N; i++) sink += JSON.stringify(record).length
  const s1 = cpuMicros()
  process.stdout.write(`${record._tag.padEnd(16)} ${RunLogStore.encodeRecord(record).length} bytes: encodeRecord ${((c1 - c0) / N).toFixed(2)} µs, JSON.stringify ${((s1 - s0) / N).toFixed(2)} µs ${sink > 0 ? "" : "!"}\n`)
}
process.stdout.write(`${RunLogStore.encodeRecord(last[0]!)}\n`)
