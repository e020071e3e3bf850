/**
 * What a run in flight holds, by source location (issue 35): `--runs` runs parked mid-run (as
 * `heap.ts` does), a heap snapshot before and during, and for every object new in the second
 * snapshot: closures grouped by the place in the source that made them (file:line:column, from
 * the snapshot's locations and the inspector's script ids), with their contexts; other objects by
 * their first retainer that is a new closure, context or named object. Bytes per run.
 *   tsx bench/profile/retainers.ts [--runs 500] [--steps 20] [--sqlite]
 * (Run it on the compiled packages, without `--conditions=@polyloop/source`, after `tsc -b`.)
 */
import * as RunLogStore from "@polyloop/core/RunLogStore"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as fs from "node:fs"
import * as inspector from "node:inspector"
import * as os from "node:os"
import * as path from "node:path"
import * as v8 from "node:v8"
import * as F from "../lib/fixtures.js"
import { option } from "../lib/measure.js"
import { withSqlite } from "../lib/store.js"

const RUNS = Number(option("--runs") ?? 500)
const STEPS = Number(option("--steps") ?? 20)

const scripts = new Map<string, string>()
const session = new inspector.Session()
session.connect()
session.on("Debugger.scriptParsed", (message) => {
  scripts.set(String(message.params.scriptId), message.params.url.replace(/^.*\/(node_modules|packages)\//, "$1/"))
})
session.post("Debugger.enable")

interface Snap {
  readonly snapshot: { readonly meta: { readonly node_fields: ReadonlyArray<string>; readonly node_types: ReadonlyArray<ReadonlyArray<string> | string>; readonly edge_fields: ReadonlyArray<string>; readonly edge_types: ReadonlyArray<ReadonlyArray<string> | string>; readonly location_fields: ReadonlyArray<string> } }
  readonly nodes: ReadonlyArray<number>
  readonly edges: ReadonlyArray<number>
  readonly locations: ReadonlyArray<number>
  readonly strings: ReadonlyArray<string>
}

const load = (file: string) => {
  const s = JSON.parse(fs.readFileSync(file, "utf8")) as Snap
  const nf = s.snapshot.meta.node_fields
  const ef = s.snapshot.meta.edge_fields
  const W = nf.length
  const EW = ef.length
  const types = s.snapshot.meta.node_types[0] as ReadonlyArray<string>
  const etypes = s.snapshot.meta.edge_types[0] as ReadonlyArray<string>
  const count = s.nodes.length / W
  const firstEdge = new Int32Array(count + 1)
  const ec = nf.indexOf("edge_count")
  for (let i = 0, e = 0; i < count; i++) {
    firstEdge[i] = e
    e += s.nodes[i * W + ec]! * EW
  }
  firstEdge[count] = s.edges.length
  return { s, W, EW, types, etypes, count, firstEdge, t: nf.indexOf("type"), n: nf.indexOf("name"), id: nf.indexOf("id"), size: nf.indexOf("self_size"), et: ef.indexOf("type"), en: ef.indexOf("name_or_index"), to: ef.indexOf("to_node") }
}

const program = (store: RunLogStore.RunLogStore.Service) =>
  Effect.gen(function*() {
    const parkAt = Math.floor(STEPS / 2)
    const allParked = yield* Deferred.make<void>()
    const release = yield* Deferred.make<void>()
    let parked = 0
    const onCall = (step: number) =>
      step !== parkAt ? Effect.void : Effect.zipRight(Effect.suspend(() => (++parked === RUNS ? Deferred.succeed(allParked, undefined) : Effect.void)), Deferred.await(release))
    const model = F.model(F.replies(STEPS), { onCall })
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), "polyloop-retainers-"))
    globalThis.gc?.()
    const beforeFile = v8.writeHeapSnapshot(path.join(dir, "before.heapsnapshot"))
    const fiber = yield* Effect.fork(F.runAllOn(store, model, Array.from({ length: RUNS }, (_, i) => F.request(`ret-${i}`, STEPS))))
    yield* Deferred.await(allParked)
    const duringFile = v8.writeHeapSnapshot(path.join(dir, "during.heapsnapshot"))
    yield* Deferred.succeed(release, undefined)
    yield* Fiber.join(fiber)
    const before = load(beforeFile)
    const old = new Set<number>()
    for (let i = 0; i < before.count; i++) old.add(before.s.nodes[i * before.W + before.id]!)
    const d = load(duringFile)
    fs.rmSync(dir, { recursive: true, force: true })
    const { s, W, EW } = d
    const isNew = new Uint8Array(d.count)
    for (let i = 0; i < d.count; i++) if (!old.has(s.nodes[i * W + d.id]!)) isNew[i] = 1
    // Locations: node index → "file:line:col".
    const where = new Map<number, string>()
    const lf = s.snapshot.meta.location_fields
    const LW = lf.length
    for (let k = 0; k < s.locations.length; k += LW) {
      const node = s.locations[k + lf.indexOf("object_index")]! / W
      where.set(node, `${scripts.get(String(s.locations[k + lf.indexOf("script_id")])) ?? "?"}:${s.locations[k + lf.indexOf("line")]! + 1}:${s.locations[k + lf.indexOf("column")]! + 1}`)
    }
    // Each new node's owner: a new closure (by location) that reaches it first, breadth-first from
    // the new closures through new nodes only (weak edges skipped).
    const owner = new Int32Array(d.count).fill(-1)
    const queue: Array<number> = []
    for (let i = 0; i < d.count; i++) {
      if (isNew[i] && d.types[s.nodes[i * W + d.t]!] === "closure") {
        owner[i] = i
        queue.push(i)
      }
    }
    for (let q = 0; q < queue.length; q++) {
      const i = queue[q]!
      for (let e = d.firstEdge[i]!; e < d.firstEdge[i + 1]!; e += EW) {
        const et = d.etypes[s.edges[e + d.et]!]
        if (et === "weak") continue
        const j = s.edges[e + d.to]! / W
        if (!isNew[j] || owner[j] !== -1) continue
        if (d.types[s.nodes[j * W + d.t]!] === "closure") continue
        owner[j] = owner[i]!
        queue.push(j)
      }
    }
    const byPlace = new Map<string, number>()
    let unowned = 0
    const unownedByKind = new Map<string, number>()
    for (let i = 0; i < d.count; i++) {
      if (!isNew[i]) continue
      const size = s.nodes[i * W + d.size]!
      const o = owner[i]!
      if (o === -1) {
        unowned += size
        const type = d.types[s.nodes[i * W + d.t]!]!
        const key = `${type} ${type === "object" ? s.strings[s.nodes[i * W + d.n]!] : ""}`
        unownedByKind.set(key, (unownedByKind.get(key) ?? 0) + size)
        continue
      }
      const key = `${s.strings[s.nodes[o * W + d.n]!] || "(anon)"} ${where.get(o) ?? "?"}`
      byPlace.set(key, (byPlace.get(key) ?? 0) + size)
    }
    let owned = 0
    for (const v of byPlace.values()) owned += v
    process.stdout.write(`new bytes per run: owned by closures ${Math.round(owned / RUNS)}, other ${Math.round(unowned / RUNS)}\n`)
    for (const [k, v] of [...byPlace].sort((a, b) => b[1] - a[1]).slice(0, 60)) if (v / RUNS >= 40) process.stdout.write(`${String(Math.round(v / RUNS)).padStart(6)}  ${k}\n`)
    // The fibers new during the snapshot and their continuation stacks (`_stack`: one frame per
    // pending flatMap/onExit/…), by frame kind (the frame's constructor or closure name).
    let fibers = 0
    let frames = 0
    const frameKinds = new Map<string, number>()
    const edgeName = (e: number) => (d.etypes[s.edges[e + d.et]!] === "element" || d.etypes[s.edges[e + d.et]!] === "hidden" ? "" : s.strings[s.edges[e + d.en]!]!)
    for (let i = 0; i < d.count; i++) {
      if (!isNew[i] || d.types[s.nodes[i * W + d.t]!] !== "object" || s.strings[s.nodes[i * W + d.n]!] !== "FiberRuntime") continue
      fibers++
      for (let e = d.firstEdge[i]!; e < d.firstEdge[i + 1]!; e += EW) {
        if (edgeName(e) !== "_stack") continue
        const stack = s.edges[e + d.to]! / W
        for (let f = d.firstEdge[stack]!; f < d.firstEdge[stack + 1]!; f += EW) {
          if (d.etypes[s.edges[f + d.et]!] !== "element") continue
          const frame = s.edges[f + d.to]! / W
          frames++
          // A frame's kind: its `_op` and where its continuations were made.
          let op = s.strings[s.nodes[frame * W + d.n]!]!
          const made: Array<string> = []
          for (let g = d.firstEdge[frame]!; g < d.firstEdge[frame + 1]!; g += EW) {
            const to = s.edges[g + d.to]! / W
            const name = edgeName(g)
            if (name === "_op") op = s.strings[s.nodes[to * W + d.n]!]!
            else if (d.types[s.nodes[to * W + d.t]!] === "closure") made.push(`${s.strings[s.nodes[to * W + d.n]!] || "(anon)"}@${where.get(to) ?? "?"}`)
          }
          const kind = `${op} ${made.join(" ")}`
          frameKinds.set(kind, (frameKinds.get(kind) ?? 0) + 1)
        }
      }
    }
    process.stdout.write(`new fibers per run ${(fibers / RUNS).toFixed(2)}, continuation frames per run ${(frames / RUNS).toFixed(1)}:\n`)
    for (const [k, v] of [...frameKinds].sort((a, b) => b[1] - a[1]).slice(0, 40)) if (v / RUNS >= 0.5) process.stdout.write(`${(v / RUNS).toFixed(1).padStart(6)}  ${k}\n`)
    process.stdout.write("not under a new closure:\n")
    for (const [k, v] of [...unownedByKind].sort((a, b) => b[1] - a[1]).slice(0, 20)) if (v / RUNS >= 40) process.stdout.write(`${String(Math.round(v / RUNS)).padStart(6)}  ${k}\n`)
  })

const main = async () => {
  if (process.argv.includes("--sqlite")) {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), "polyloop-retainers-db-"))
    await withSqlite(path.join(dir, "runs.db"), program)
    fs.rmSync(dir, { recursive: true, force: true })
  } else {
    await Effect.runPromise(Effect.flatMap(RunLogStore.makeMemory, program))
  }
  session.disconnect()
}
main().catch((e) => {
  process.stderr.write(`${String(e)}\n`)
  process.exit(1)
})
