/**
 * The cost of code actions in the sandbox (issue 33, design 0330).
 *
 *   npx tsx --conditions=@polyloop/source bench/sandbox.ts [--quick]
 *   npm run bench:sandbox
 *
 * Measured on a SQLite store (`synchronous=FULL`) in a temporary directory, Python in bubblewrap:
 *
 * - the first action of a run: starting the sandbox and the interpreter, the action, its snapshot
 *   (wall ms, median of several runs);
 * - one trivial action (`x = 1`) on a warm run: the action and its snapshot (variables pickled,
 *   workspace walked, blobs and ref written), wall ms per action, median over 50;
 * - the snapshot as a function of state size: a trivial action after the run holds a variable of
 *   n MB (pickled again at every action), and after the workspace holds a file of n MB (hashed
 *   and stored once, then found in the hash cache) — wall ms per action, median over 10.
 *
 * Prints a table and writes `bench/results.sandbox.json`.
 */
import * as ActionExecutor from "@polyloop/core/ActionExecutor"
import * as ToolContext from "@polyloop/core/ToolContext"
import * as Sandbox from "@polyloop/sandbox/Sandbox"
import * as SqlRunLogStore from "@polyloop/sql/SqlRunLogStore"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"

const quick = process.argv.includes("--quick")
const dir = fs.mkdtempSync(path.join(os.tmpdir(), "polyloop-bench-sandbox-"))
fs.chmodSync(dir, 0o711)

const median = (xs: ReadonlyArray<number>): number => {
  const sorted = [...xs].sort((a, b) => a - b)
  return sorted[Math.floor(sorted.length / 2)]!
}

const layer = Sandbox.layer({ root: path.join(dir, "sessions"), wallTime: "120 seconds", memoryBytes: 2 * 1024 ** 3, maxFileBytes: 1024 ** 3 }).pipe(
  Layer.provide(SqlRunLogStore.layerSqlite({ filename: path.join(dir, "runs.db") }))
)

const act = (runId: string, step: number, code: string) =>
  Effect.gen(function*() {
    const executor = yield* ActionExecutor.ActionExecutor
    const start = performance.now()
    const outcome = yield* Effect.provideService(
      executor.execute({ _tag: "CodeAction", language: "python", code }),
      ToolContext.ToolContext,
      ToolContext.make({ runId, step, callId: `c${step}` })
    )
    if (outcome.status !== "Executed" || outcome.observation.includes("Error")) {
      return yield* Effect.dieMessage(`step ${step} of ${runId}: ${outcome.status} ${outcome.observation}`)
    }
    return performance.now() - start
  })

const program = Effect.gen(function*() {
  const results: Record<string, number> = {}
  const firsts: Array<number> = []
  for (let i = 0; i < (quick ? 2 : 5); i++) firsts.push(yield* act(`first-${i}`, 0, "x = 1"))
  results.firstActionMs = median(firsts)

  const trivial: Array<number> = []
  const n = quick ? 10 : 50
  for (let step = 0; step <= n; step++) {
    const ms = yield* act("trivial", step, "x = 1")
    if (step > 0) trivial.push(ms)
  }
  results.trivialActionMs = median(trivial)

  const sizes = quick ? [1, 10] : [1, 10, 50, 100]
  for (const mb of sizes) {
    const variable = `var-${mb}`
    yield* act(variable, 0, `state = bytes(${mb} * 1024 * 1024)`)
    const varTimes: Array<number> = []
    for (let step = 1; step <= (quick ? 3 : 10); step++) varTimes.push(yield* act(variable, step, "x = 1"))
    results[`variable${mb}MbActionMs`] = median(varTimes)

    const file = `file-${mb}`
    yield* act(file, 0, `open('data.bin', 'wb').write(__import__('os').urandom(${mb} * 1024 * 1024))`)
    const fileTimes: Array<number> = []
    for (let step = 1; step <= (quick ? 3 : 10); step++) fileTimes.push(yield* act(file, step, "x = 1"))
    results[`file${mb}MbActionMs`] = median(fileTimes)
  }
  return results
})

const results = await Effect.runPromise(Effect.provide(program, layer))
fs.rmSync(dir, { recursive: true, force: true })
const table = Object.entries(results).map(([name, ms]) => `${name.padEnd(24)} ${ms.toFixed(1).padStart(8)} ms`).join("\n")
console.log(`sandbox (Python in bubblewrap, SQLite synchronous=FULL, ${os.cpus().length} cores, node ${process.version})\n${table}`)
if (!quick) {
  fs.writeFileSync(
    new URL("./results.sandbox.json", import.meta.url),
    JSON.stringify({ date: new Date().toISOString(), node: process.version, cores: os.cpus().length, results }, null, 2) + "\n"
  )
}
