/**
 * Running TypeScript scripts in child processes (with `tsx`), for tests that need a second
 * process, another user, or SIGKILL.
 */
import * as Effect from "effect/Effect"
import type * as Scope from "effect/Scope"
import { type ChildProcess, spawn } from "node:child_process"
import * as path from "node:path"
import { fileURLToPath } from "node:url"

/** The repository root. */
export const repoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../../../..")

/**
 * Node with tsx's loader. Not the `tsx` binary: that one runs the script in a second process,
 * so a SIGKILL would kill the wrapper and leave the script running.
 */
export const nodeArgs: ReadonlyArray<string> = ["--import", "tsx"]

/** A script of this folder. */
export const script = (name: string): string => path.join(path.dirname(fileURLToPath(import.meta.url)), name)

/** Spawn options: run as another user (root only). */
export interface SpawnOptions {
  readonly uid?: number
  readonly gid?: number
}

/** A running child with its stdout collected line by line. */
export interface Child {
  readonly process: ChildProcess
  readonly lines: Array<string>
  /** Resolves with the first line matching, or rejects when the child exits first. */
  readonly waitFor: (predicate: (line: string) => boolean) => Promise<string>
  /** Resolves with the exit code (null when killed by a signal) and signal. */
  readonly exited: Promise<{ readonly code: number | null; readonly signal: NodeJS.Signals | null }>
}

/** Spawns `node --import tsx <file> ...args` with piped stdout/stderr. */
export const spawnScript = (file: string, args: ReadonlyArray<string>, options: SpawnOptions = {}): Child => {
  const child = spawn(process.execPath, [...nodeArgs, file, ...args], {
    cwd: repoRoot,
    stdio: ["ignore", "pipe", "pipe"],
    ...(options.uid === undefined ? {} : { uid: options.uid }),
    ...(options.gid === undefined ? {} : { gid: options.gid })
  })
  const lines: Array<string> = []
  const waiters: Array<{ predicate: (line: string) => boolean; resolve: (line: string) => void }> = []
  let buffer = ""
  child.stdout?.setEncoding("utf8")
  child.stdout?.on("data", (chunk: string) => {
    buffer += chunk
    let index = buffer.indexOf("\n")
    while (index >= 0) {
      const line = buffer.slice(0, index)
      buffer = buffer.slice(index + 1)
      lines.push(line)
      for (let i = waiters.length - 1; i >= 0; i--) {
        const waiter = waiters[i]!
        if (waiter.predicate(line)) {
          waiters.splice(i, 1)
          waiter.resolve(line)
        }
      }
      index = buffer.indexOf("\n")
    }
  })
  let stderr = ""
  child.stderr?.setEncoding("utf8")
  child.stderr?.on("data", (chunk: string) => {
    stderr += chunk
  })
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) => {
    child.on("close", (code, signal) => resolve({ code, signal }))
  })
  const waitFor = (predicate: (line: string) => boolean) =>
    new Promise<string>((resolve, reject) => {
      const found = lines.find(predicate)
      if (found !== undefined) return resolve(found)
      waiters.push({ predicate, resolve })
      void exited.then(({ code, signal }) =>
        reject(new Error(`child exited (code ${code}, signal ${signal}) before the expected line; stdout: ${lines.join("\n")}; stderr: ${stderr}`))
      )
    })
  return { process: child, lines, waitFor, exited }
}

/** A child that is SIGKILLed (if still running) when the scope closes. */
export const scopedChild = (file: string, args: ReadonlyArray<string>, options: SpawnOptions = {}): Effect.Effect<Child, never, Scope.Scope> =>
  Effect.acquireRelease(Effect.sync(() => spawnScript(file, args, options)), (child) =>
    Effect.promise(async () => {
      if (child.process.exitCode === null && child.process.signalCode === null) {
        child.process.kill("SIGKILL")
        await child.exited
      }
    }))

/** Runs a script to its end; returns its stdout lines. */
export const runScript = (file: string, args: ReadonlyArray<string>, options: SpawnOptions = {}) =>
  Effect.promise(async () => {
    const child = spawnScript(file, args, options)
    const exit = await child.exited
    return { ...exit, lines: child.lines }
  })
