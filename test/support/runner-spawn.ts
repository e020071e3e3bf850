/**
 * Spawning cluster runner processes (`cluster-runner.ts`, compiled once with esbuild so each
 * child starts in plain `node`): SIGKILL kills the runner itself, SIGTERM shuts it down
 * gracefully.
 */
import * as Effect from "effect/Effect"
import type * as Scope from "effect/Scope"
import { type ChildProcess, spawn } from "node:child_process"
import * as Path from "node:path"
import { fileURLToPath } from "node:url"
import { bundle } from "./bundle.js"

const here = Path.dirname(fileURLToPath(import.meta.url))
const repoRoot = Path.resolve(here, "..", "..")

/** A running runner process. */
export interface RunnerProcess {
  readonly id: string
  readonly port: number
  /** `host:port`, as the run index names the runner. */
  readonly address: string
  readonly child: ChildProcess
  /** Resolves when the runner printed `ready <id>`; rejects if it exits first. */
  readonly ready: Promise<void>
  /** Resolves with the exit code and signal. */
  readonly exited: Promise<{ readonly code: number | null; readonly signal: NodeJS.Signals | null }>
  /** What the runner wrote to stderr so far (for failure messages). */
  readonly stderr: () => string
  /** What the runner wrote to stdout so far (its `ready` line, Effect's default logger's lines). */
  readonly stdout: () => string
}

const start = (script: string, url: string, id: string, port: number, extra: ReadonlyArray<string> = [], env: NodeJS.ProcessEnv = {}): RunnerProcess => {
  const child = spawn(process.execPath, [script, url, id, String(port), ...extra], {
    cwd: repoRoot,
    stdio: ["ignore", "pipe", "pipe"],
    env: { ...process.env, ...env }
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
      reject(new Error(`runner ${id} exited (code ${code}, signal ${signal}) before it was ready:\n${stdout}\n${stderr}`))
    )
  })
  // The rejection is observed by whoever awaits `ready`; do not let it go unhandled meanwhile.
  ready.catch(() => {})
  return { id, port, address: `127.0.0.1:${port}`, child, ready, exited, stderr: () => stderr, stdout: () => stdout }
}

const stop = (runner: RunnerProcess) =>
  Effect.promise(async () => {
    if (runner.child.exitCode === null && runner.child.signalCode === null) runner.child.kill("SIGKILL")
    await runner.exited
  })

/** Starts a runner process on `port` (`env` added to its environment); it is killed (SIGKILL) when the scope closes if still running. */
export const spawnRunner = (url: string, id: string, port: number, env: NodeJS.ProcessEnv = {}): Effect.Effect<RunnerProcess, never, Scope.Scope> =>
  Effect.acquireRelease(
    Effect.promise(() => bundle(Path.join(here, "cluster-runner.ts"))).pipe(Effect.map((script) => start(script, url, id, port, [], env))),
    stop
  )

/**
 * Starts `entry` (a runner script under `test/support/`, run from its TypeScript source through
 * the tsx loader vitest puts in NODE_OPTIONS — for code that finds files beside its own module,
 * which a bundle moves) with `<url> <id> <port> ...extra`; killed when the scope closes.
 */
export const spawnSourceRunner = (
  entry: string,
  url: string,
  id: string,
  port: number,
  extra: ReadonlyArray<string>
): Effect.Effect<RunnerProcess, never, Scope.Scope> =>
  Effect.acquireRelease(Effect.sync(() => start(Path.join(here, entry), url, id, port, extra)), stop)
