/**
 * The enumerated crash suite: for the scripted run of `crash-scenario.ts` (a `"Never"` tool, an
 * `"Always"` tool, a reply without action, an invalid decision, an unknown tool, a completing
 * tool), every crash point the run passes (`chaos-child.ts`: the claim, each store write before
 * and after, inside each write's transaction, each tool's side effect before and after) is a
 * scenario: a child process SIGKILLs itself exactly there, then the run is resumed — sometimes
 * crashing again at a later point, chosen by the scenario's seed — until it finishes, and every
 * invariant is checked:
 *
 * - the log decodes in full (`readLog` with `verify`) and has no structural problem
 *   (`RunLogAudit`: no gap, no duplicate, every result with its step);
 * - every acknowledged write (a store write that returned before the kill) is in the log;
 * - no `"Never"` call ran twice (the side file counts executions);
 * - the final log equals the uncrashed run's, apart from `RunResumed` records and the steps whose
 *   `"Never"` action was interrupted (recorded `NotExecuted` with the synthetic text).
 *
 * A scenario's id is `s<steps>-p<point>-r<seed>`; `runScenario` replays one by its id.
 */
import * as RunLog from "@polyloop/core/RunLog"
import * as RunLogAudit from "@polyloop/core/RunLogAudit"
import * as RunLogStore from "@polyloop/core/RunLogStore"
import * as SqlRunLogStore from "@polyloop/sql/SqlRunLogStore"
import * as Effect from "effect/Effect"
import { spawn } from "node:child_process"
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import { fileURLToPath } from "node:url"
import { bundle } from "./bundle.js"
import { prng } from "./crash-child.js"
import * as Scenario from "./crash-scenario.js"

const here = Path.dirname(fileURLToPath(import.meta.url))

/** The compiled child (built once per process). */
export const childScript = (): Promise<string> => bundle(Path.join(here, "chaos-child.ts"))

interface Life {
  readonly code: number | null
  readonly signal: NodeJS.Signals | null
  readonly points: ReadonlyArray<string>
  readonly stdout: string
  readonly stderr: string
}

const live = (script: string, files: Files, steps: number, crashAt: number): Promise<Life> =>
  new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [script, files.db, files.side, files.ack, String(steps), String(crashAt)], {
      stdio: ["ignore", "pipe", "pipe"]
    })
    let stdout = ""
    let stderr = ""
    child.stdout.setEncoding("utf8").on("data", (chunk: string) => (stdout += chunk))
    child.stderr.setEncoding("utf8").on("data", (chunk: string) => (stderr += chunk))
    child.on("error", reject)
    child.on("close", (code, signal) => {
      const points = stdout.split("\n").filter((line) => line.startsWith("point ")).map((line) => line.replace(/^point \d+ /, ""))
      resolve({ code, signal, points, stdout, stderr })
    })
  })

interface Files {
  readonly dir: string
  readonly db: string
  readonly side: string
  readonly ack: string
}

const freshFiles = (): Files => {
  const dir = Fs.mkdtempSync(Path.join(Os.tmpdir(), "polyloop-chaos-"))
  return { dir, db: Path.join(dir, "run.db"), side: Path.join(dir, "side.jsonl"), ack: Path.join(dir, "ack.txt") }
}

const readLog = (db: string) =>
  Effect.runPromise(
    Effect.flatMap(RunLogStore.RunLogStore, (store) => Effect.either(store.readLog(Scenario.runId, { verify: true }))).pipe(
      Effect.provide(SqlRunLogStore.layerSqlite({ filename: db }))
    )
  )

/** The uncrashed run: its crash points, in order, and its log. */
export interface Reference {
  readonly steps: number
  readonly points: ReadonlyArray<string>
  readonly log: RunLog.RunLog
}

/** Runs the scenario once without a crash. */
export const reference = async (script: string, steps: number): Promise<Reference> => {
  const files = freshFiles()
  try {
    const life = await live(script, files, steps, 0)
    if (life.code !== 0 || !life.stdout.includes("\nfinished ")) {
      throw new Error(`the uncrashed run did not finish (exit ${life.code}):\n${life.stdout.slice(-2000)}\n${life.stderr.slice(-2000)}`)
    }
    const log = await readLog(files.db)
    if (log._tag === "Left") throw new Error(`the uncrashed run's log does not verify: ${log.left.message}`)
    return { steps, points: life.points, log: log.right }
  } finally {
    Fs.rmSync(files.dir, { recursive: true, force: true })
  }
}

/** What one scenario found. */
export interface Outcome {
  readonly id: string
  /** The name of the crash point of the first kill. */
  readonly point: string
  readonly deaths: number
  readonly invariants: number
  readonly failures: ReadonlyArray<string>
}

/** The scenario id of the kill at `point` (1-based) with `seed`. */
export const scenarioId = (steps: number, point: number, seed: number): string => `s${steps}-p${point}-r${seed}`

/** Parses a scenario id. */
export const parseId = (id: string): { readonly steps: number; readonly point: number; readonly seed: number } => {
  const match = /^s(\d+)-p(\d+)-r(\d+)$/.exec(id)
  if (match === null) throw new Error(`${JSON.stringify(id)} is not a scenario id (s<steps>-p<point>-r<seed>)`)
  return { steps: Number(match[1]), point: Number(match[2]), seed: Number(match[3]) }
}

/** The records of a log that the uncrashed run must share, in order, without sequence numbers and times. */
const comparable = (log: RunLog.RunLog): ReadonlyArray<RunLog.RunRecord> => RunLog.records(log).filter((r) => r._tag !== "RunResumed")

/** Why `crashed` differs from `uncrashed`, apart from what a crash may change; undefined when they agree. */
const difference = (crashed: RunLog.RunRecord, uncrashed: RunLog.RunRecord): string | undefined => {
  if (crashed._tag !== uncrashed._tag) return `${crashed._tag} where the uncrashed run has ${uncrashed._tag}`
  switch (crashed._tag) {
    case "RunStarted":
      return crashed.snapshotHash === (uncrashed as RunLog.RunStarted).snapshotHash ? undefined : "another snapshot"
    case "ModelReplied": {
      const other = uncrashed as RunLog.ModelReplied
      return crashed.step === other.step && JSON.stringify(crashed.reply) === JSON.stringify(other.reply) ? undefined : `another reply at step ${crashed.step}`
    }
    case "ActionResulted": {
      const other = uncrashed as RunLog.ActionResulted
      if (crashed.step !== other.step || JSON.stringify(crashed.action) !== JSON.stringify(other.action)) return `another action at step ${crashed.step}`
      if (JSON.stringify(crashed.outcome) === JSON.stringify(other.outcome)) return undefined
      const interrupted = crashed.outcome.status === "NotExecuted" && crashed.outcome.observationIsSynthetic
      return interrupted ? undefined : `another outcome at step ${crashed.step}: ${JSON.stringify(crashed.outcome)}`
    }
    case "StepCompleted": {
      const other = uncrashed as RunLog.StepCompleted
      return crashed.step === other.step && JSON.stringify(crashed.decision) === JSON.stringify(other.decision) ? undefined : `another decision at step ${crashed.step}`
    }
    case "RunFinished":
      return JSON.stringify(crashed.stopReason) === JSON.stringify((uncrashed as RunLog.RunFinished).stopReason) ? undefined : "another stop reason"
    default:
      return undefined
  }
}

/** The most lives a scenario gets before it counts as not finishing. */
const maxLives = 6

/**
 * Runs one scenario: a child killed at `point`, then resumed until the run finishes (each
 * resumed child, while the seed says so and at most twice, killed again at a point of its own),
 * then every invariant checked.
 */
export const runScenario = async (script: string, ref: Reference, point: number, seed: number): Promise<Outcome> => {
  const id = scenarioId(ref.steps, point, seed)
  const failures: Array<string> = []
  let invariants = 0
  let deaths = 0
  // The seed and the point together choose the later kills: each scenario its own sequence.
  const random = prng(seed * 1_000_003 + point)
  const files = freshFiles()
  try {
    let crashAt = point
    let finished = false
    for (let life = 0; life < maxLives && !finished; life++) {
      const result = await live(script, files, ref.steps, crashAt)
      if (result.signal === "SIGKILL") deaths++
      else if (result.code === 0 && result.stdout.includes("\nfinished ")) finished = true
      else if (!/^error RunBusy$/m.test(result.stdout)) {
        failures.push(`${id}: life ${life + 1} ended with exit ${result.code}: ${(result.stdout + result.stderr).slice(-600)}`)
        break
      }
      if (life === 0 && result.signal !== "SIGKILL") failures.push(`${id}: the first child was not killed at point ${point} (${ref.points[point - 1]})`)
      // A later kill in the next life, sometimes: at a point of the points the run has left.
      crashAt = deaths < 3 && random() < 0.3 ? 1 + Math.floor(random() * Math.max(1, ref.points.length - point)) : 0
    }
    invariants++
    if (!finished) {
      failures.push(`${id}: the run did not finish in ${maxLives} lives`)
      return { id, point: ref.points[point - 1] ?? "?", deaths, invariants, failures }
    }
    const read = await readLog(files.db)
    invariants++
    if (read._tag === "Left") {
      failures.push(`${id}: the log does not verify: ${read.left.message}`)
      return { id, point: ref.points[point - 1] ?? "?", deaths, invariants, failures }
    }
    const log = read.right
    invariants++
    for (const problem of RunLogAudit.logProblems(log)) failures.push(`${id}: ${problem}`)
    // Every acknowledged write is in the log.
    const size = RunLog.size(log)
    const acked = Fs.existsSync(files.ack) ? Fs.readFileSync(files.ack, "utf8").split("\n").filter((l) => l !== "") : []
    for (const line of acked) {
      invariants++
      const last = Number(line.split(" ")[1])
      if (!(last < size)) failures.push(`${id}: the acknowledged write of records ${line} is not in the log of ${size} records`)
    }
    // No "Never" call twice.
    const executions = Scenario.readExecutions(files.side)
    const neverSteps = new Map<number, number>()
    for (const execution of executions) {
      if (execution.replay === "Never") neverSteps.set(execution.step, (neverSteps.get(execution.step) ?? 0) + 1)
    }
    for (const [step, count] of neverSteps) {
      invariants++
      if (count > 1) failures.push(`${id}: the "Never" call of step ${step} ran ${count} times`)
    }
    // The final log is the uncrashed run's, apart from resumes and interrupted actions.
    const mine = comparable(log)
    const theirs = comparable(ref.log)
    invariants++
    if (mine.length !== theirs.length) {
      failures.push(`${id}: ${mine.length} records apart from resumes; the uncrashed run has ${theirs.length}`)
    } else {
      for (let i = 0; i < mine.length; i++) {
        const why = difference(mine[i]!, theirs[i]!)
        if (why !== undefined) {
          failures.push(`${id}: record ${mine[i]!.seq}: ${why}`)
          break
        }
      }
    }
    return { id, point: ref.points[point - 1] ?? "?", deaths, invariants, failures }
  } finally {
    Fs.rmSync(files.dir, { recursive: true, force: true })
  }
}

/** Totals of a set of scenarios. */
export interface Summary {
  readonly scenarios: number
  readonly processDeaths: number
  readonly invariantsChecked: number
  readonly failures: ReadonlyArray<string>
  readonly seconds: number
}

/**
 * Runs every crash point `from..to` (1-based, inclusive, clamped to the run's points) of the
 * run of `steps` steps, `rounds` times with seeds `seed`, `seed + 1`, …, `concurrency` scenarios
 * at a time; `onOutcome` sees each as it ends.
 */
export const runAll = async (options: {
  readonly steps: number
  readonly seed: number
  readonly rounds: number
  readonly from?: number
  readonly to?: number
  readonly concurrency: number
  readonly onOutcome?: (outcome: Outcome) => void
}): Promise<Summary & { readonly reference: Reference }> => {
  const started = performance.now()
  const script = await childScript()
  const ref = await reference(script, options.steps)
  const from = Math.max(1, options.from ?? 1)
  const to = Math.min(ref.points.length, options.to ?? ref.points.length)
  const work: Array<{ point: number; seed: number }> = []
  for (let round = 0; round < options.rounds; round++) {
    for (let point = from; point <= to; point++) work.push({ point, seed: options.seed + round })
  }
  let next = 0
  let deaths = 0
  let invariants = 0
  const failures: Array<string> = []
  const worker = async () => {
    while (next < work.length) {
      const item = work[next++]!
      const outcome = await runScenario(script, ref, item.point, item.seed)
      deaths += outcome.deaths
      invariants += outcome.invariants
      failures.push(...outcome.failures)
      options.onOutcome?.(outcome)
    }
  }
  await Promise.all(Array.from({ length: options.concurrency }, worker))
  return {
    reference: ref,
    scenarios: work.length,
    processDeaths: deaths,
    invariantsChecked: invariants,
    failures,
    seconds: (performance.now() - started) / 1000
  }
}
