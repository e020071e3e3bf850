/**
 * Spawning `crash-agent.ts` for the crash-recovery test: `node --import tsx` in one process (the
 * `tsx` binary would run the script in a second process, and SIGKILL would only kill the
 * wrapper), stdout collected line by line, timestamps of `ready` and the exit.
 */
import { type ChildProcess, spawn } from "node:child_process"
import * as Path from "node:path"
import { fileURLToPath } from "node:url"

const here = Path.dirname(fileURLToPath(import.meta.url))
const repoRoot = Path.resolve(here, "..", "..")

/** A running child. */
export interface CrashChild {
  readonly child: ChildProcess
  readonly lines: Array<string>
  /** Resolves with the time (ms, `performance.now()`) `ready` was printed, or null if the child exited first. */
  readonly ready: Promise<number | null>
  /** Resolves with the time `running` was printed (the run started or resumed), or null if the child exited first. */
  readonly running: Promise<number | null>
  /** Resolves when the child is gone (its output fully read). */
  readonly exited: Promise<{ readonly code: number | null; readonly signal: NodeJS.Signals | null; readonly at: number }>
  readonly stderr: () => string
}

/** Starts `crash-agent.ts` (or another script of this folder) with `args`. */
export const startAgent = (args: ReadonlyArray<string>, script = "crash-agent.ts", env: Readonly<Record<string, string>> = {}): CrashChild => {
  const child = spawn(process.execPath, ["--import", "tsx", Path.join(here, script), ...args], {
    cwd: repoRoot,
    env: { ...process.env, ...env },
    stdio: ["ignore", "pipe", "pipe"]
  })
  const lines: Array<string> = []
  let stderr = ""
  let buffer = ""
  let onReady: (at: number | null) => void = () => {}
  const ready = new Promise<number | null>((resolve) => {
    onReady = resolve
  })
  let onRunning: (at: number | null) => void = () => {}
  const running = new Promise<number | null>((resolve) => {
    onRunning = resolve
  })
  child.stdout?.setEncoding("utf8")
  child.stdout?.on("data", (chunk: string) => {
    buffer += chunk
    let index = buffer.indexOf("\n")
    while (index >= 0) {
      const line = buffer.slice(0, index)
      buffer = buffer.slice(index + 1)
      lines.push(line)
      if (line === "ready") onReady(performance.now())
      if (line === "running") onRunning(performance.now())
      index = buffer.indexOf("\n")
    }
  })
  child.stderr?.setEncoding("utf8")
  child.stderr?.on("data", (chunk: string) => {
    stderr += chunk
  })
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null; at: number }>((resolve) => {
    child.on("close", (code, signal) => {
      onReady(null)
      onRunning(null)
      resolve({ code, signal, at: performance.now() })
    })
  })
  return { child, lines, ready, running, exited, stderr: () => stderr }
}

/** A small seeded PRNG (mulberry32): the same seed gives the same kill delays. */
export const prng = (seed: number): (() => number) => {
  let a = seed >>> 0
  return () => {
    a = (a + 0x6d2b79f5) >>> 0
    let t = a
    t = Math.imul(t ^ (t >>> 15), t | 1)
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61)
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296
  }
}
