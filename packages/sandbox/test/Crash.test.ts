/**
 * Crash recovery of the sandbox by SIGKILL (design 0330, decision 4), on SQLite and PostgreSQL:
 * a child process (`support/crash-agent.ts`) runs a scripted data analysis in the sandbox; it
 * kills itself between an action and its snapshot and between the snapshot and the step's
 * result, then the parent kills it at random moments (mid-action included: every program sleeps)
 * — `POLYLOOP_SANDBOX_KILLS` times per store (default 4 here; `npm run test:sandbox-crash` runs
 * 30), the seed printed and replayable with `POLYLOOP_SANDBOX_SEED` — and restarts it until the
 * run finishes. Every run must end with the same final answer as an uncrashed run, and its last
 * snapshot must hold the same variables and the same workspace files (by hash).
 */
import { assert, beforeAll, describe, it } from "@effect/vitest"
import * as RunLogStore from "@polyloop/core/RunLogStore"
import { runId } from "@polyloop/core/Ids"
import * as Sandbox from "@polyloop/sandbox/Sandbox"
import * as SqlRunLogStore from "@polyloop/sql/SqlRunLogStore"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Redacted from "effect/Redacted"
import { spawn } from "node:child_process"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { fileURLToPath } from "node:url"
import { expectedAnswer } from "./support/crash-script.js"
import { ensureTools } from "./support.js"

beforeAll(ensureTools, 600_000)

const KILLS = Number(process.env["POLYLOOP_SANDBOX_KILLS"] ?? 4)
const SEED = Number(process.env["POLYLOOP_SANDBOX_SEED"] ?? Math.floor(Math.random() * 2 ** 31))
const agentScript = fileURLToPath(new URL("./support/crash-agent.ts", import.meta.url))

const prng = (seed: number): (() => number) => {
  let a = seed >>> 0
  return () => {
    a = (a + 0x6d2b79f5) >>> 0
    let t = a
    t = Math.imul(t ^ (t >>> 15), t | 1)
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61)
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296
  }
}

interface Child {
  readonly running: Promise<boolean>
  readonly exited: Promise<{ readonly code: number | null; readonly signal: NodeJS.Signals | null; readonly output: string }>
  readonly kill: () => void
}

/** Starts the agent (NODE_OPTIONS from vitest's config give it tsx and the source condition). */
const startChild = (args: ReadonlyArray<string>): Child => {
  const child = spawn(process.execPath, [agentScript, ...args], { stdio: ["ignore", "pipe", "pipe"] })
  let output = ""
  let onRunning: (running: boolean) => void = () => {}
  const running = new Promise<boolean>((resolve) => {
    onRunning = resolve
  })
  child.stdout.setEncoding("utf8").on("data", (chunk: string) => {
    output += chunk
    if (output.includes("running")) onRunning(true)
  })
  child.stderr.setEncoding("utf8").on("data", (chunk: string) => {
    output += chunk
  })
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null; output: string }>((resolve) =>
    child.on("close", (code, signal) => {
      onRunning(false)
      resolve({ code, signal, output })
    })
  )
  return { running, exited, kill: () => child.kill("SIGKILL") }
}

/** What a finished run left: its answer (the last observation), its last snapshot. */
const readBack = (store: Layer.Layer<RunLogStore.RunLogStore, unknown>, id: string) =>
  Effect.runPromise(
    Effect.gen(function*() {
      const s = yield* RunLogStore.RunLogStore
      const log = yield* s.readLog(runId(id), { verify: true })
      const refs = yield* s.blobs!.listRefs(id, Sandbox.refPrefix)
      const bytes = yield* s.blobs!.get(refs[refs.length - 1]!.hash)
      const manifest = JSON.parse(Buffer.from(Option.getOrThrow(bytes)).toString("utf8")) as Sandbox.Manifest
      const last = log.results[log.results.length - 1]!
      return {
        finished: Option.isSome(log.finished),
        answer: last.outcome.observation,
        resumes: log.resumes.length,
        variables: manifest.states["python"]?.saved ?? [],
        files: manifest.entries.map((e) => `${e.kind} ${e.path} ${e.kind === "file" ? e.hash : ""}`)
      }
    }).pipe(Effect.provide(store))
  )

const backends: ReadonlyArray<{
  readonly name: string
  readonly args: (dir: string) => ReadonlyArray<string>
  readonly store: (dir: string) => Layer.Layer<RunLogStore.RunLogStore, unknown>
}> = [
  {
    name: "SQLite",
    args: (dir) => ["sqlite", path.join(dir, "runs.db")],
    store: (dir) => SqlRunLogStore.layerSqlite({ filename: path.join(dir, "runs.db") })
  },
  {
    name: "PostgreSQL",
    args: () => ["pg", process.env["POLYLOOP_TEST_PG_URL"] ?? "postgres://missing"],
    store: () => SqlRunLogStore.layerPg({ url: Redacted.make(process.env["POLYLOOP_TEST_PG_URL"] ?? "postgres://missing"), maxConnections: 2 })
  }
]

describe.sequential("sandbox crash recovery by SIGKILL", () => {
  for (const backend of backends) {
    it(`${backend.name}: every run killed ${KILLS} times (and at both snapshot points) ends with the uncrashed run's answer, variables and files`, async () => {
      if (backend.name === "PostgreSQL") assert.isDefined(process.env["POLYLOOP_TEST_PG_URL"], process.env["POLYLOOP_TEST_PG_ERROR"] ?? "no test PostgreSQL")
      console.log(`sandbox crash test (${backend.name}): seed ${SEED} (POLYLOOP_SANDBOX_SEED), ${KILLS} kills`)
      const random = prng(SEED)
      const dir = fs.mkdtempSync(path.join(os.tmpdir(), "polyloop-sandbox-crash-"))
      fs.chmodSync(dir, 0o711)
      const root = path.join(dir, "sessions")
      const tag = `${process.pid}-${Date.now().toString(36)}`
      const life = async (id: string, crash: string) => {
        const child = startChild([...backend.args(dir), id, root, crash])
        return child.exited
      }
      // The uncrashed run.
      const reference = `crash-ref-${tag}`
      const clean = await life(reference, "none")
      assert.strictEqual(clean.code, 0, clean.output)
      const expected = await readBack(backend.store(dir), reference)
      assert.strictEqual(expected.answer, expectedAnswer)
      assert.includeMembers([...expected.variables], ["rows", "total", "count", "scale", "scaled", "summary", "csv", "time", "json"])

      let kills = 0
      let runs = 0
      while (kills < KILLS || runs === 0) {
        const id = `crash-${tag}-${runs++}`
        // Killed by itself between an action and its snapshot, then between the snapshot and the result.
        for (const crash of ["BeforeSnapshot:2", "AfterSnapshot:4"]) {
          const exit = await life(id, crash)
          assert.strictEqual(exit.signal, "SIGKILL", `the child was to kill itself at ${crash}: ${exit.output}`)
          kills++
        }
        // Then at random moments, until the run finishes.
        while (true) {
          const child = startChild([...backend.args(dir), id, root, "none"])
          const started = await child.running
          if (!started) {
            const exit = await child.exited
            assert.strictEqual(exit.code, 0, exit.output)
            break
          }
          const delay = 100 + Math.floor(random() * 1500)
          const outcome = await Promise.race([
            child.exited.then((exit) => ({ exit })),
            new Promise<"timer">((resolve) => setTimeout(() => resolve("timer"), delay))
          ])
          if (outcome !== "timer") {
            assert.strictEqual(outcome.exit.code, 0, outcome.exit.output)
            break
          }
          child.kill()
          await child.exited
          kills++
        }
        const got = await readBack(backend.store(dir), id)
        assert.isTrue(got.finished)
        assert.isAbove(got.resumes, 0)
        assert.strictEqual(got.answer, expectedAnswer, `run ${id} (seed ${SEED})`)
        assert.deepStrictEqual([...got.variables].sort(), [...expected.variables].sort(), `run ${id}: the variables`)
        assert.deepStrictEqual(got.files, expected.files, `run ${id}: the workspace ${JSON.stringify(got.files)} vs ${JSON.stringify(expected.files)}`)
      }
      console.log(`sandbox crash test (${backend.name}): ${kills} kills over ${runs} runs`)
      fs.rmSync(dir, { recursive: true, force: true })
    }, 900_000)
  }
})
