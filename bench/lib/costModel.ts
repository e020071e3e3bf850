/**
 * The cluster's cost model (issue 35): from the CPU milliseconds a step costs in a runner, in
 * PostgreSQL and in the client (`bench/results.cluster.json`, measured unpinned with 1 runner),
 * the throughput N runner machines of R cores against one PostgreSQL of C cores would reach,
 * and — when `results.cluster.pinned.json` exists — the model's prediction for each pinned
 * figure next to what was measured.
 *
 * The model: every part is CPU-bound and scales linearly with cores, so steps per second are
 * min(N · R · 1000 / runner ms, C · 1000 / PostgreSQL ms); runs per second divide by the steps of
 * a run. Its assumptions are written out in the text it renders.
 */

interface Figure {
  readonly setup: string
  readonly runsPerSecond: number
  readonly pinned?: string
  readonly cpuMsPerStep?: { readonly client: number; readonly runners: number; readonly postgres: number | null }
}

interface Results {
  readonly steps: number
  readonly figures: ReadonlyArray<Figure>
}

const isCluster1 = (f: Figure) => f.setup.startsWith("cluster, 1 runner process ")
const isStore = (f: Figure) => f.setup.startsWith("PostgreSQL store, one process")

const fmt = (x: number) => (x >= 100 ? Math.round(x).toLocaleString("en-US") : x.toFixed(1))

/** The model's section of `bench/CLUSTER.md`, or a line saying what is missing. */
export const render = (results: Results, pinned: Results | undefined): string => {
  const one = results.figures.find(isCluster1)
  const store = results.figures.find(isStore)
  const cost = one?.cpuMsPerStep
  if (one === undefined || cost === undefined || cost.postgres === null) return "No cost model: the 1-runner figure has no CPU figures (run `npm run bench:cluster` with the bench's own PostgreSQL server)."
  const runner = cost.runners
  const pg = cost.postgres
  const steps = results.steps
  const predict = (runnerCores: number, pgCores: number) => Math.min((runnerCores * 1000) / runner, (pgCores * 1000) / pg) / steps
  const lines: Array<string> = []
  lines.push("## A cost model for scale-out")
  lines.push("")
  lines.push(`Measured above (1 runner, unpinned): a step costs **${runner.toFixed(2)} CPU ms in the runner**, **${pg.toFixed(2)} in PostgreSQL** and ${cost.client.toFixed(2)} in the client (submitting and polling), ${steps} steps a run.` +
    (store?.cpuMsPerStep !== undefined && store.cpuMsPerStep.postgres !== null
      ? ` The PostgreSQL store alone, in one process: ${store.cpuMsPerStep.client.toFixed(2)} ms in the process and ${store.cpuMsPerStep.postgres.toFixed(2)} in PostgreSQL.`
      : ""))
  lines.push("")
  lines.push("Assumptions: every part is CPU-bound (no disk or network wait is the limit: PostgreSQL's commits share `fsync`s under load, as measured here), each scales linearly with its cores, runners do not contend with each other except through PostgreSQL, the client's share is negligible or on its own machine, and the workload is this bench's (no model latency: a real model's seconds per call make runs wait, not cost). Steps per second = min(N · R · 1000 / runner ms, C · 1000 / PostgreSQL ms).")
  lines.push("")
  const pgCores = [2, 8, 32]
  lines.push(`| runner machines (2 cores each) | ${pgCores.map((c) => `PostgreSQL ${c} cores: runs/s`).join(" | ")} |`)
  lines.push(`|---:|${pgCores.map(() => "---:").join("|")}|`)
  for (const n of [1, 2, 4, 8, 16, 64]) lines.push(`| ${n} | ${pgCores.map((c) => fmt(predict(2 * n, c))).join(" | ")} |`)
  lines.push("")
  const saturate = (c: number) => Math.ceil(((c * 1000) / pg) / ((2 * 1000) / runner))
  lines.push(`PostgreSQL is the bound from ${pgCores.map((c) => `${saturate(c)} runner machines at ${c} cores`).join(", ")}: beyond that, more runners add nothing; what a step costs PostgreSQL is what to cut next.`)
  if (pinned !== undefined) {
    lines.push("")
    lines.push("### The model checked on this machine (`npm run bench:cluster -- --pin`)")
    lines.push("")
    lines.push("Runners and client pinned to CPU 0, PostgreSQL to CPU 1 (`taskset`): the model predicts runs/s = min(1000 / runner ms, 1000 / PostgreSQL ms) / steps — one core for all runners together, one for PostgreSQL, the client's share taken off CPU 0.")
    lines.push("")
    lines.push("| pinned figure | predicted runs/s | measured runs/s | measured / predicted |")
    lines.push("|---|---:|---:|---:|")
    for (const f of pinned.figures) {
      if (f.cpuMsPerStep === undefined || f.cpuMsPerStep.postgres === null) continue
      const onCore0 = isStore(f) ? f.cpuMsPerStep.client : runner + cost.client
      const predicted = Math.min(1000 / onCore0, 1000 / pg) / steps
      lines.push(`| ${f.setup} | ${fmt(predicted)} | ${fmt(f.runsPerSecond)} | ${(f.runsPerSecond / predicted).toFixed(2)} |`)
    }
  }
  return lines.join("\n")
}
