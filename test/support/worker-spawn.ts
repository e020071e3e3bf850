/**
 * Spawning worker processes (`worker-process.ts`) for the multi-worker test: `node --import tsx`
 * in one process (no `tsx` wrapper process), so SIGKILL kills the worker itself.
 */
import * as Effect from "effect/Effect"
import type * as Scope from "effect/Scope"
import { type ChildProcess, spawn } from "node:child_process"
import * as Path from "node:path"
import { fileURLToPath } from "node:url"

const here = Path.dirname(fileURLToPath(import.meta.url))
const repoRoot = Path.resolve(here, "..", "..")

/** A running worker process. */
export interface WorkerProcess {
  readonly id: string
  readonly child: ChildProcess
  /** Resolves when the worker printed `ready <id>`; rejects if it exits first. */
  readonly ready: Promise<void>
  /** Resolves with the exit code and signal. */
  readonly exited: Promise<{ readonly code: number | null; readonly signal: NodeJS.Signals | null }>
  /** What the worker wrote to stderr so far (for failure messages). */
  readonly stderr: () => string
}

const start = (url: string, id: string): WorkerProcess => {
  const child = spawn(process.execPath, ["--import", "tsx", Path.join(here, "worker-process.ts"), url, id], {
    cwd: repoRoot,
    stdio: ["ignore", "pipe", "pipe"],
    env: { ...process.env }
  })
  let stdout = ""
  let stderr = ""
  child.stderr?.setEncoding("utf8")
  child.stderr?.on("data", (chunk: string) => {
    stderr += chunk
  })
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) => {
    child.on("close", (code, signal) => resolve({ code, signal }))
  })
  const ready = new Promise<void>((resolve, reject) => {
    child.stdout?.setEncoding("utf8")
    child.stdout?.on("data", (chunk: string) => {
      stdout += chunk
      if (stdout.includes(`ready ${id}\n`)) resolve()
    })
    void exited.then(({ code, signal }) =>
      reject(new Error(`worker ${id} exited (code ${code}, signal ${signal}) before it was ready:\n${stdout}\n${stderr}`))
    )
  })
  // The rejection is observed by whoever awaits `ready`; do not let it go unhandled meanwhile.
  ready.catch(() => {})
  return { id, child, ready, exited, stderr: () => stderr }
}

/** Starts a worker process; it is killed (SIGKILL) when the scope closes if still running. */
export const spawnWorker = (url: string, id: string): Effect.Effect<WorkerProcess, never, Scope.Scope> =>
  Effect.acquireRelease(Effect.sync(() => start(url, id)), (worker) =>
    Effect.promise(async () => {
      if (worker.child.exitCode === null && worker.child.signalCode === null) worker.child.kill("SIGKILL")
      await worker.exited
    }))
