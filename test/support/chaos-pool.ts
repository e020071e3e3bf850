/**
 * The pre-forked pool of crash-suite children (design 0220). Starting a child is what a
 * scenario costs most (every scenario kills at least one), so children are started ahead of
 * need, from a V8 start-up snapshot of their bundle (`bundle.ts`, `startupSnapshot`), and kept
 * warm: a job (one life of a scenario, `chaos-child.ts`) goes to a waiting child over its stdin;
 * a child whose life ended without a kill takes the next job; a killed child is replaced at once
 * by a fresh one, started while the other jobs run.
 *
 * The child reports on file descriptor 3 (points passed, acknowledged writes, the kill, the end:
 * see `chaos-child.ts`); `run` resolves when the life ended or the child died, with everything
 * it reported.
 */
import { type ChildProcess, spawn } from "node:child_process"
import * as Path from "node:path"
import type { Readable, Writable } from "node:stream"
import { fileURLToPath } from "node:url"
import { repoRoot, type Start, startupSnapshot } from "./bundle.js"
import type { End, Job } from "./chaos-scripts.js"

const here = Path.dirname(fileURLToPath(import.meta.url))

/** An acknowledged write: records `first..last` of run `runId`, the last of them a `tag`. */
export interface Ack {
  readonly runId: string
  readonly first: number
  readonly last: number
  readonly tag: string
}

/** What one life reported. */
export interface Life {
  /** The point it killed itself at (`null`: not killed by its crash point). */
  readonly killedAt: { readonly ordinal: number; readonly name: string } | null
  /** How it ended when not killed (`null` when the child died). */
  readonly end: End | null
  /** The child died (by its own SIGKILL, or otherwise: `exit`). */
  readonly died: boolean
  readonly exit: string
  readonly points: ReadonlyArray<string>
  readonly acks: ReadonlyArray<Ack>
  /** The child's last output (stdout and stderr), for failure reports. */
  readonly output: string
}

interface Current {
  readonly points: Array<string>
  readonly acks: Array<Ack>
  killedAt: Life["killedAt"]
  readonly resolve: (life: Life) => void
}

interface Child {
  readonly process: ChildProcess
  current: Current | null
  output: string
  dead: boolean
  /** Lives it ran to their end: 0 for a fresh (cold) child. */
  lives: number
}

/** The pool. */
export interface Pool {
  /** Runs one life on a warm child. */
  readonly run: (job: Job) => Promise<Life>
  /** How many children were started so far. */
  readonly started: () => number
  readonly start: Start
  readonly close: () => void
}

const keep = (text: string, more: string) => (text + more).slice(-4000)

/** The most lives a child runs before it is retired. */
const maxLives = 200

/**
 * V8 flags of the children: `--no-opt`, no TurboFan. A child lives for a few lives of a few
 * tenths of a second, most of its code run once or a few times: the optimizing compiler's work
 * (on a background thread, CPU all the same) never pays off. Measured side by side (100
 * `approval.sqlite` scenarios each, load ≈ 22): 0.56 CPU-s per scenario without flags, 0.50
 * with `--no-opt`, 0.51 with `--no-opt --no-lazy-feedback-allocation` (design 0220, Decision 5).
 */
export const defaultV8Flags: ReadonlyArray<string> = ["--no-opt"]

/** Starts a pool of `size` warm children. */
export const make = async (options: { readonly size: number; readonly v8Flags?: ReadonlyArray<string> }): Promise<Pool> => {
  const start = await startupSnapshot(Path.join(here, "chaos-child.ts"), { v8Flags: options.v8Flags ?? defaultV8Flags })
  const idle: Array<Child> = []
  const waiting: Array<(child: Child) => void> = []
  let started = 0
  let closed = false

  const release = (child: Child) => {
    if (child.dead || closed) return
    const taker = waiting.shift()
    if (taker !== undefined) taker(child)
    else idle.push(child)
  }

  const onLine = (child: Child, line: string) => {
    const current = child.current
    if (line === "r" || current === null) return
    const kind = line[0]
    const rest = line.slice(2)
    if (kind === "p") current.points.push(rest)
    else if (kind === "a") {
      const [first, last, tag, runId] = rest.split(" ")
      current.acks.push({ runId: runId ?? "", first: Number(first), last: Number(last), tag: tag ?? "" })
    } else if (kind === "k") {
      const space = rest.indexOf(" ")
      current.killedAt = { ordinal: Number(rest.slice(0, space)), name: rest.slice(space + 1) }
    } else if (kind === "e") {
      child.current = null
      current.resolve({
        killedAt: null,
        end: JSON.parse(rest) as End,
        died: false,
        exit: "",
        points: current.points,
        acks: current.acks,
        output: child.output
      })
      child.output = ""
      child.lives++
      // A warm child may now outlive thousands of scenarios: retired after `maxLives` (its stdin
      // ended, it exits; `close` starts another), so nothing it keeps can grow for the whole run.
      if (child.lives >= maxLives) (child.process.stdin as Writable).end()
      else release(child)
    }
  }

  const spawnChild = () => {
    if (closed) return
    started++
    const proc = spawn(process.execPath, [...start.args], {
      cwd: repoRoot,
      env: { ...process.env, POLYLOOP_REPO_ROOT: repoRoot },
      stdio: ["pipe", "pipe", "pipe", "pipe"]
    })
    const child: Child = { process: proc, current: null, output: "", dead: false, lives: 0 }
    let buffer = ""
    const reports = proc.stdio[3] as Readable
    reports.setEncoding("utf8")
    reports.on("data", (chunk: string) => {
      buffer += chunk
      let newline = buffer.indexOf("\n")
      while (newline >= 0) {
        onLine(child, buffer.slice(0, newline))
        buffer = buffer.slice(newline + 1)
        newline = buffer.indexOf("\n")
      }
    })
    proc.stdout!.setEncoding("utf8").on("data", (chunk: string) => (child.output = keep(child.output, chunk)))
    proc.stderr!.setEncoding("utf8").on("data", (chunk: string) => (child.output = keep(child.output, chunk)))
    ;(proc.stdin as Writable).on("error", () => {})
    proc.on("close", (code, signal) => {
      child.dead = true
      const at = idle.indexOf(child)
      if (at >= 0) idle.splice(at, 1)
      const current = child.current
      child.current = null
      if (current !== null) {
        current.resolve({
          killedAt: current.killedAt,
          end: null,
          died: true,
          exit: signal ?? `exit ${code}`,
          points: current.points,
          acks: current.acks,
          output: child.output
        })
      }
      // A fresh child in its place, started while the other jobs run.
      spawnChild()
    })
    release(child)
  }

  for (let i = 0; i < options.size; i++) spawnChild()

  /**
   * A child for a job. A life that will be killed goes to a fresh child, a life that will not
   * to the warmest one: a child is killed once, and the code it runs the first time (lazily
   * compiled, without type feedback) costs about twice a warm run, so a fresh child's first
   * life is best the one that dies part-way, and the lives that survive run warm.
   */
  const take = (killed: boolean): Promise<Child> => {
    if (idle.length === 0) return new Promise((resolve) => waiting.push(resolve))
    let best = 0
    for (let i = 1; i < idle.length; i++) {
      if (killed ? idle[i]!.lives < idle[best]!.lives : idle[i]!.lives > idle[best]!.lives) best = i
    }
    return Promise.resolve(idle.splice(best, 1)[0]!)
  }

  return {
    start,
    started: () => started,
    run: async (job) => {
      const child = await take(job.crash !== null)
      return new Promise<Life>((resolve) => {
        child.current = { points: [], acks: [], killedAt: null, resolve }
        ;(child.process.stdin as Writable).write(JSON.stringify(job) + "\n")
      })
    },
    close: () => {
      closed = true
      for (const child of idle.splice(0)) child.process.kill("SIGKILL")
    }
  }
}
