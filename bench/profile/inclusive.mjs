// Reads a .cpuprofile and prints, for each function, the share of samples with it on the stack
// (each sample counted once per function), among samples under an Effect fiber (runLoop) only.
import * as fs from "node:fs"
const [file, topArg, filter] = process.argv.slice(2)
const top = Number(topArg ?? 60)
const profile = JSON.parse(fs.readFileSync(file, "utf8"))
const byId = new Map(profile.nodes.map((n) => [n.id, n]))
const parent = new Map()
for (const n of profile.nodes) for (const c of n.children ?? []) parent.set(c, n.id)
const keyOf = (n) => {
  const cf = n.callFrame
  const short = cf.url.replace(/^.*\/(node_modules|packages)\//, "$1/").replace("node_modules/effect/dist/esm/", "effect/")
  return `${cf.functionName || "(anon)"} ${short}:${cf.lineNumber + 1}`
}
const counts = new Map()
let total = 0
const stackCache = new Map()
const stackOf = (id) => {
  let s = stackCache.get(id)
  if (s) return s
  const keys = new Set()
  let inFiber = false
  for (let cur = id; cur !== undefined; cur = parent.get(cur)) {
    const n = byId.get(cur)
    const k = keyOf(n)
    if (n.callFrame.functionName === "runLoop") inFiber = true
    keys.add(k)
  }
  s = { keys, inFiber }
  stackCache.set(id, s)
  return s
}
for (let i = 0; i < profile.samples.length; i++) {
  const s = stackOf(profile.samples[i])
  if (!s.inFiber) continue
  const dt = profile.timeDeltas[i] ?? 0
  total += dt
  for (const k of s.keys) counts.set(k, (counts.get(k) ?? 0) + dt)
}
console.log(`samples under a fiber: ${(total / 1000).toFixed(0)} ms`)
for (const [k, t] of [...counts].filter(([k]) => !filter || k.includes(filter)).sort((a, b) => b[1] - a[1]).slice(0, top)) console.log(`${(100 * t / total).toFixed(1).padStart(5)}%  ${k}`)
