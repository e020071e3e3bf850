/**
 * What a run in flight holds (issue 35): `--runs` runs (default 1,000) on the memory store,
 * parked at the middle of `--steps` steps; then a heap snapshot, summarised by the objects' kind
 * and constructor, in bytes per run (the same summary of a snapshot taken before the runs is
 * subtracted).
 * The runs' services are provided once around them all; `--provide-each` provides them to each run.
 *   tsx --conditions=@polyloop/source bench/profile/heap.ts [--runs 1000] [--steps 20] [--sqlite] [--provide-each]
 */
import * as RunLogStore from "@polyloop/core/RunLogStore"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import * as v8 from "node:v8"
import * as F from "../lib/fixtures.js"
import { option } from "../lib/measure.js"
import { withSqlite } from "../lib/store.js"

const RUNS = Number(option("--runs") ?? 1000)
const STEPS = Number(option("--steps") ?? 20)

interface Snapshot {
  readonly snapshot: { readonly meta: { readonly node_fields: ReadonlyArray<string>; readonly node_types: ReadonlyArray<ReadonlyArray<string> | string> } }
  readonly nodes: ReadonlyArray<number>
  readonly strings: ReadonlyArray<string>
}

const summarise = (file: string): Map<string, number> => {
  const snap = JSON.parse(fs.readFileSync(file, "utf8")) as Snapshot
  const fields = snap.snapshot.meta.node_fields
  const types = snap.snapshot.meta.node_types[0] as ReadonlyArray<string>
  const width = fields.length
  const typeAt = fields.indexOf("type")
  const nameAt = fields.indexOf("name")
  const sizeAt = fields.indexOf("self_size")
  const out = new Map<string, number>()
  for (let i = 0; i < snap.nodes.length; i += width) {
    const type = types[snap.nodes[i + typeAt]!]!
    const name = type === "object" || type === "closure" || type === "native" ? snap.strings[snap.nodes[i + nameAt]!]! : ""
    const key = `${type} ${name}`.slice(0, 90)
    out.set(key, (out.get(key) ?? 0) + snap.nodes[i + sizeAt]!)
  }
  return out
}

const program = (store: RunLogStore.RunLogStore.Service) =>
  Effect.gen(function*() {
    const script = F.replies(STEPS)
    const parkAt = Math.floor(STEPS / 2)
    const allParked = yield* Deferred.make<void>()
    const release = yield* Deferred.make<void>()
    let parked = 0
    const onCall = (step: number) =>
      step !== parkAt ? Effect.void : Effect.zipRight(
        Effect.suspend(() => (++parked === RUNS ? Deferred.succeed(allParked, undefined) : Effect.void)),
        Deferred.await(release)
      )
    const model = F.model(script, { onCall })
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), "polyloop-heap-"))
    globalThis.gc?.()
    const before = summarise(v8.writeHeapSnapshot(path.join(dir, "before.heapsnapshot")))
    const requests = Array.from({ length: RUNS }, (_, i) => F.request(`heap-${i}`, STEPS))
    const fiber = yield* Effect.fork(
      process.argv.includes("--provide-each")
        ? Effect.forEach(requests, (request) => F.runOn(store, model, request), { concurrency: "unbounded", discard: true })
        : F.runAllOn(store, model, requests)
    )
    yield* Deferred.await(allParked)
    globalThis.gc?.()
    const during = summarise(v8.writeHeapSnapshot(path.join(dir, "during.heapsnapshot")))
    yield* Deferred.succeed(release, undefined)
    yield* Fiber.join(fiber)
    fs.rmSync(dir, { recursive: true, force: true })
    const rows = [...during].map(([k, v]) => [k, (v - (before.get(k) ?? 0)) / RUNS] as const).filter(([, v]) => Math.abs(v) >= 16).sort((a, b) => b[1] - a[1])
    const total = rows.reduce((s, [, v]) => s + v, 0)
    process.stdout.write(`bytes per run in flight (self sizes): ${Math.round(total)}\n`)
    for (const [k, v] of rows.slice(0, 45)) process.stdout.write(`${String(Math.round(v)).padStart(7)}  ${k}\n`)
  })

const main = async () => {
  if (process.argv.includes("--sqlite")) {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), "polyloop-heap-db-"))
    await withSqlite(path.join(dir, "runs.db"), program)
    fs.rmSync(dir, { recursive: true, force: true })
  } else {
    await Effect.runPromise(Effect.flatMap(RunLogStore.makeMemory, program))
  }
}
main().catch((e) => {
  process.stderr.write(`${String(e)}\n`)
  process.exit(1)
})
