/**
 * Where a resume of a long run spends its CPU (issue 35): the resume of a 10,000-step run's copy,
 * 12 times, split at the store's `readLog` and the first model call: before the read (claim,
 * snapshot), the read, from the read to the model call (the fold), and from the call to the end
 * (the request's fingerprint over the whole history, the step, the finish). CPU ms, medians.
 *   tsx bench/profile/resume-phases.ts
 */
import * as Effect from "effect/Effect"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import * as F from "../lib/fixtures.js"
import { cpuMicros, median } from "../lib/measure.js"
import * as Raw from "../lib/sqlite.js"
import { withSqlite } from "../lib/store.js"
const STEPS = 10000
const dir = fs.mkdtempSync(path.join(os.tmpdir(), "rs-"))
const source = path.join(dir, "source.db")
const runId = "rs"
await withSqlite(source, (store) => Effect.either(F.runOn(store, F.model(F.replies(STEPS + 1), { failAt: STEPS }), F.request(runId, STEPS + 1))), "NORMAL")
Raw.checkpoint(source)
const script = F.replies(STEPS + 1)
const parts: Record<string, Array<number>> = { beforeRead: [], readLog: [], afterRead: [], callToReply: [], replyToEnd: [], resume: [] }
for (let i = 0; i < 12; i++) {
  const file = path.join(dir, `copy-${i}.db`)
  fs.copyFileSync(source, file)
  await withSqlite(file, (store) => Effect.gen(function*() {
    let r0 = 0, r1 = 0, m = 0, a = 0
    const wrapped = { ...store, appendReply: (id: Parameters<typeof store.appendReply>[0], rec: Parameters<typeof store.appendReply>[1]) => Effect.zipRight(Effect.sync(() => { if (a === 0) a = cpuMicros() }), store.appendReply(id, rec)), readLog: (id: Parameters<typeof store.readLog>[0], o?: Parameters<typeof store.readLog>[1]) => Effect.zipRight(Effect.sync(() => { r0 = cpuMicros() }), Effect.tap(store.readLog(id, o), () => Effect.sync(() => { r1 = cpuMicros() }))) }
    const c0 = cpuMicros()
    const result = yield* F.runOn(wrapped, F.model(script, { onCall: () => Effect.sync(() => { if (parts.afterRead!.length === i) { m = cpuMicros(); parts.afterRead!.push((m - r1) / 1000) } }) }), F.request(runId, STEPS + 1))
    parts.resume!.push((cpuMicros() - c0) / 1000)
    parts.readLog!.push((r1 - r0) / 1000); parts.beforeRead!.push((r0 - c0) / 1000); parts.callToReply!.push((a - m) / 1000); parts.replyToEnd!.push((cpuMicros() - a) / 1000)
    if (result.steps !== STEPS + 1) throw new Error("wrong")
  }))
  Raw.remove(file)
}
for (const [k, v] of Object.entries(parts)) console.log(k, median(v.slice(2)).toFixed(1))
fs.rmSync(dir, { recursive: true, force: true })
