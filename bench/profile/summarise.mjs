// Reads a .cpuprofile (V8) and prints self time by function and by file, top N.
import * as fs from "node:fs"
const [file, topArg] = process.argv.slice(2)
const top = Number(topArg ?? 40)
const profile = JSON.parse(fs.readFileSync(file, "utf8"))
const byId = new Map(profile.nodes.map((n) => [n.id, n]))
const self = new Map()
const dt = profile.timeDeltas
for (let i = 0; i < profile.samples.length; i++) self.set(profile.samples[i], (self.get(profile.samples[i]) ?? 0) + (dt[i] ?? 0))
const total = [...self.values()].reduce((a, b) => a + b, 0)
const fn = new Map(), files = new Map()
for (const [id, t] of self) {
  const n = byId.get(id); const cf = n.callFrame
  const short = cf.url.replace(/^.*\/(node_modules|packages)\//, "$1/")
  const key = `${cf.functionName || "(anon)"} ${short}:${cf.lineNumber + 1}`
  fn.set(key, (fn.get(key) ?? 0) + t)
  const fk = short.replace(/^node_modules\/effect\/dist\/esm\//, "effect/") || "(native)"
  files.set(fk, (files.get(fk) ?? 0) + t)
}
const pr = (m, label) => {
  console.log(`\n== ${label} (total ${(total / 1000).toFixed(0)} ms)`)
  for (const [k, t] of [...m].sort((a, b) => b[1] - a[1]).slice(0, top)) console.log(`${(100 * t / total).toFixed(1).padStart(5)}%  ${k}`)
}
pr(files, "self time by file")
pr(fn, "self time by function")
