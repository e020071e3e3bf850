/**
 * Bytes allocated per step by function (issue 35): the loop bench's 1,000-step in-memory run,
 * warmed up, then `--runs` runs under V8's sampling heap profiler with collected objects kept in
 * the profile (`includeObjectsCollectedByMajorGC/MinorGC`), so every allocation counts, not only
 * what survives. Prints bytes per step by allocating function (self) and by file.
 *   tsx bench/profile/allocations.ts [--runs 20] [--steps 1000] [--top 40]
 * (Run it on the compiled packages, after `tsc -b`.)
 */
import * as RunLogStore from "@polyloop/core/RunLogStore"
import * as Effect from "effect/Effect"
import * as inspector from "node:inspector"
import * as F from "../lib/fixtures.js"
import { option } from "../lib/measure.js"

const RUNS = Number(option("--runs") ?? 20)
const STEPS = Number(option("--steps") ?? 1000)
const TOP = Number(option("--top") ?? 40)
/** `--who <function name>`: also print the callers that allocate through that function (e.g. `Map`). */
const WHO = option("--who")

interface Node {
  readonly callFrame: { readonly functionName: string; readonly url: string; readonly lineNumber: number }
  readonly selfSize: number
  readonly children: ReadonlyArray<Node>
}

const session = new inspector.Session()
session.connect()
const post = <A>(method: string, params?: object) =>
  new Promise<A>((resolve, reject) => session.post(method, params ?? {}, (error, result) => (error ? reject(error) : resolve(result as A))))

const script = F.replies(STEPS)
const once = async (i: number) => {
  const store = Effect.runSync(RunLogStore.makeMemory)
  const result = await Effect.runPromise(F.runOn(store, F.model(script), F.request(`alloc-${i}`, STEPS)))
  if (result.steps !== STEPS) throw new Error("wrong step count")
}
for (let i = 0; i < 5; i++) await once(-i - 1)
await post("HeapProfiler.enable")
await post("HeapProfiler.startSampling", { samplingInterval: 512, includeObjectsCollectedByMajorGC: true, includeObjectsCollectedByMinorGC: true })
for (let i = 0; i < RUNS; i++) await once(i)
const { profile } = await post<{ profile: { head: Node } }>("HeapProfiler.stopSampling")
const byFunction = new Map<string, number>()
const byFile = new Map<string, number>()
let total = 0
const callers = new Map<string, number>()
const walk = (node: Node, parent?: Node) => {
  const { functionName, lineNumber, url } = node.callFrame
  const file = url.replace(/^.*\/(node_modules|packages)\//, "$1/").replace("node_modules/effect/dist/esm/", "effect/") || "(native)"
  if (node.selfSize > 0) {
    const key = `${functionName || "(anon)"} ${file}:${lineNumber + 1}`
    byFunction.set(key, (byFunction.get(key) ?? 0) + node.selfSize)
    byFile.set(file, (byFile.get(file) ?? 0) + node.selfSize)
    total += node.selfSize
    if (WHO !== undefined && functionName === WHO && parent !== undefined) {
      const p = parent.callFrame
      const caller = `${p.functionName || "(anon)"} ${p.url.replace(/^.*\/(node_modules|packages)\//, "$1/")}:${p.lineNumber + 1}`
      callers.set(caller, (callers.get(caller) ?? 0) + node.selfSize)
    }
  }
  for (const child of node.children) walk(child, node)
}
walk(profile.head)
const steps = RUNS * STEPS
const print = (title: string, map: Map<string, number>) => {
  process.stdout.write(`\n== ${title}\n`)
  for (const [key, bytes] of [...map].sort((a, b) => b[1] - a[1]).slice(0, TOP)) {
    process.stdout.write(`${(bytes / steps).toFixed(0).padStart(7)} B/step  ${key}\n`)
  }
}
process.stdout.write(`allocated: ${(total / steps).toFixed(0)} B per step (${RUNS} runs of ${STEPS} steps, sampled)\n`)
print("by file", byFile)
print("by function", byFunction)
if (WHO !== undefined) print(`callers of ${WHO}`, callers)
