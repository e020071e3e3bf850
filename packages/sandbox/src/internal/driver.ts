/**
 * One interpreter process of a session (design 0330, decision 1): the driver started inside
 * bubblewrap (or, named explicitly, as a plain child), through `@effect/platform`'s `Command`.
 * Requests go to its standard input as JSON lines; replies come back as JSON lines on its
 * standard error; the code's output (standard output and error merged by the driver) is read from
 * its standard output by an `Output` collector that keeps the first `limit` characters, counts the
 * rest, and ends the action's output at the boundary token the driver writes after it.
 *
 * @internal
 */
import * as Command from "@effect/platform/Command"
import type * as CommandExecutor from "@effect/platform/CommandExecutor"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Queue from "effect/Queue"
import * as Schedule from "effect/Schedule"
import * as Scope from "effect/Scope"
import * as Stream from "effect/Stream"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { StringDecoder } from "node:string_decoder"
import { SessionFailure } from "./failure.js"
import * as Memory from "./memory.js"

/** The languages the sandbox runs. */
export type Language = "python" | "javascript"

/** Where the tools are and what the sandbox may use. */
export interface Environment {
  readonly isolation: "bubblewrap" | "none"
  readonly bwrap: string
  readonly prlimit: string
  /** `setpriv`, used to start the sandbox as `nobody` when the host process is root. */
  readonly setpriv: string | undefined
  readonly python: string
  readonly node: string
  /** The directory holding the drivers (bound read-only). */
  readonly drivers: string
  readonly memoryBytes: number
  readonly maxProcesses: number
  readonly maxFileBytes: number
  readonly maxOpenFiles: number
  /** The kernel's clock ticks per second (`getconf CLK_TCK`), the unit of `/proc/<pid>/stat`'s CPU times. */
  readonly clockTicks: number
  /** How the sandbox's total memory is bounded (design 0331, decision 6). */
  readonly memory: Memory.Control
}

/** The sandbox's view of the session's directories. */
export const sandboxWorkspace = "/workspace"
const sandboxDrivers = "/.polyloop/driver"
const sandboxState = "/.polyloop/state"

/** The uid and gid the sandbox runs as when the host is root. */
export const nobody = { uid: 65534, gid: 65534 } as const

/** Whether the host process is root (the sandbox then drops to `nobody` through `setpriv`). */
export const hostIsRoot = (): boolean => typeof process.getuid === "function" && process.getuid() === 0

/** The state file of a language, inside the sandbox and on the host. */
export const stateFile = (language: Language) => `${language}.state`

/** Paths of one session on the host. */
export interface SessionDirs {
  readonly workspace: string
  readonly state: string
}

/** What the interpreter sees as its paths (bwrap) or the host paths (none). */
export const viewOf = (env: Environment, dirs: SessionDirs) =>
  env.isolation === "bubblewrap"
    ? { workspace: sandboxWorkspace, state: sandboxState, drivers: sandboxDrivers }
    : { workspace: dirs.workspace, state: dirs.state, drivers: env.drivers }

const systemLinks = ["/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"]

/** The bubblewrap arguments of a session (see design 0330 for each). */
const bwrapArgs = (env: Environment, dirs: SessionDirs, interpreter: string): Array<string> => {
  const args = [
    "--unshare-all",
    "--die-with-parent",
    "--new-session",
    "--hostname", "sandbox",
    "--ro-bind", "/usr", "/usr"
  ]
  for (const link of systemLinks) {
    let stat: fs.Stats
    try {
      stat = fs.lstatSync(link)
    } catch {
      continue
    }
    if (stat.isSymbolicLink()) args.push("--symlink", fs.readlinkSync(link), link)
    else if (stat.isDirectory()) args.push("--ro-bind", link, link)
  }
  // An interpreter installed outside /usr (e.g. a node under /opt): its prefix, read-only.
  const real = fs.realpathSync(interpreter)
  if (!real.startsWith("/usr/")) {
    const prefix = path.dirname(path.dirname(real))
    args.push("--ro-bind", prefix, prefix)
  }
  args.push(
    "--proc", "/proc",
    "--dev", "/dev",
    // The private /tmp can never hold more than the whole sandbox may (design 0331, decision 6).
    "--size", String(env.memoryBytes),
    "--tmpfs", "/tmp",
    "--dir", "/.polyloop",
    "--ro-bind", env.drivers, sandboxDrivers,
    "--bind", dirs.state, sandboxState,
    "--bind", dirs.workspace, sandboxWorkspace,
    "--chdir", sandboxWorkspace
  )
  return args
}

/**
 * V8 reserves address space it never uses (code range, cages): Node gets `memoryBytes` as its
 * heap limit (`--max-old-space-size`, three quarters of it) and 3 GiB more address space.
 */
const nodeReserve = 3 * 1024 * 1024 * 1024

const limits = (env: Environment, language: Language): Array<string> => [
  `--as=${language === "javascript" ? env.memoryBytes + nodeReserve : env.memoryBytes}`,
  `--nproc=${env.maxProcesses}`,
  `--fsize=${env.maxFileBytes}`,
  `--nofile=${env.maxOpenFiles}`,
  "--core=0"
]

/** The interpreter's command line (inside the sandbox's view). */
const interpreterArgs = (env: Environment, language: Language, drivers: string): Array<string> =>
  language === "python"
    // Not -I: it implies -E, which ignores PYTHONHASHSEED (design 0331, decision 8); the
    // environment is built from nothing (`extendEnv: false`), so no other PYTHON* variable applies.
    ? [env.python, "-s", "-u", path.join(drivers, "python.py")]
    : [env.node, `--max-old-space-size=${Math.max(32, Math.floor((env.memoryBytes * 0.75) / (1024 * 1024)))}`, path.join(drivers, "javascript.cjs")]

/**
 * The whole command of a session's interpreter; with a memory cgroup, started by a shell line that
 * moves itself into the cgroup before it `exec`s the sandbox, so nothing of it runs outside.
 */
export const commandOf = (env: Environment, dirs: SessionDirs, language: Language, group?: string): Command.Command => {
  const view = viewOf(env, dirs)
  const interpreter = interpreterArgs(env, language, view.drivers)
  const limited = [env.prlimit, ...limits(env, language), "--", ...interpreter]
  const argv = env.isolation === "bubblewrap"
    ? [
      ...(env.setpriv !== undefined && hostIsRoot()
        ? [env.setpriv, `--reuid=${nobody.uid}`, `--regid=${nobody.gid}`, "--clear-groups", "--inh-caps=-all", "--"]
        : []),
      env.bwrap,
      ...bwrapArgs(env, dirs, language === "python" ? env.python : env.node),
      "--",
      ...limited
    ]
    : limited
  const grouped = group === undefined ? argv : ["/bin/sh", "-c", "echo $$ > \"$0\" && exec \"$@\"", path.join(group, "cgroup.procs"), ...argv]
  const [head, ...rest] = grouped
  const command = Command.make(head!, ...rest).pipe(
    Command.env({
      PATH: "/usr/local/bin:/usr/bin:/bin",
      HOME: view.workspace,
      TMPDIR: "/tmp",
      LANG: "C.UTF-8",
      PYTHONDONTWRITEBYTECODE: "1",
      PYTHONHASHSEED: "0"
    }, { extendEnv: false }),
    Command.workingDirectory(dirs.workspace)
  )
  return command
}

/**
 * The output of the current action: the first `limit` characters kept, the rest counted; ends at
 * the boundary token. Between actions, output is dropped.
 */
export class Output {
  private kept = ""
  private truncated = 0
  private decoder = new StringDecoder("utf8")
  private boundary: Buffer | undefined
  private carry: Buffer = Buffer.alloc(0)
  private done: Deferred.Deferred<void> | undefined

  constructor(private readonly limit: number) {}

  /** Starts collecting one action's output, ending at `boundary`. */
  begin(boundary: string, done: Deferred.Deferred<void>): void {
    this.kept = ""
    this.truncated = 0
    this.decoder = new StringDecoder("utf8")
    this.boundary = Buffer.from(boundary, "utf8")
    this.carry = Buffer.alloc(0)
    this.done = done
  }

  private add(text: string): void {
    if (text.length === 0) return
    const room = this.limit - this.kept.length
    if (room >= text.length) this.kept += text
    else {
      if (room > 0) this.kept += text.slice(0, room)
      this.truncated += text.length - Math.max(0, room)
    }
  }

  /** Feeds a chunk of the process's standard output. */
  feed(chunk: Uint8Array): void {
    const boundary = this.boundary
    if (boundary === undefined) return
    const data = this.carry.length === 0 ? Buffer.from(chunk.buffer, chunk.byteOffset, chunk.byteLength) : Buffer.concat([this.carry, chunk])
    const at = data.indexOf(boundary)
    if (at >= 0) {
      this.add(this.decoder.write(data.subarray(0, at)))
      this.add(this.decoder.end())
      this.boundary = undefined
      this.carry = Buffer.alloc(0)
      const done = this.done
      this.done = undefined
      if (done !== undefined) Deferred.unsafeDone(done, Exit.void)
      return
    }
    const keep = Math.min(data.length, boundary.length - 1)
    this.add(this.decoder.write(data.subarray(0, data.length - keep)))
    this.carry = Buffer.from(data.subarray(data.length - keep))
  }

  /** What was collected so far (the action ended or was cut short). */
  result(): { readonly text: string; readonly truncated: number } {
    if (this.boundary !== undefined) {
      this.add(this.decoder.write(this.carry))
      this.add(this.decoder.end())
      this.boundary = undefined
      this.carry = Buffer.alloc(0)
    }
    return { text: this.kept, truncated: this.truncated }
  }
}

/** A running interpreter. */
export interface Live {
  readonly language: Language
  readonly process: CommandExecutor.Process
  readonly scope: Scope.CloseableScope
  readonly output: Output
  /** Lines of the reply channel; `null` once it ended (the process is gone); `flood` when the code wrote to it. */
  readonly replies: Queue.Queue<ReplyLine>
  readonly input: Queue.Queue<Uint8Array>
  /** The last lines on the reply channel that were not replies (bwrap's and the runtime's own messages). */
  readonly diagnostics: Array<string>
  readonly ready: Record<string, unknown>
  /** The interpreter's pid on the host (the end of the process chain under `process`) and its command name. */
  readonly pid: number
  readonly comm: string
  /** The processes from the started one down to the interpreter (pid and start time), waited for by `kill`. */
  readonly chain: ReadonlyArray<{ readonly pid: number; readonly start: string }>
  /** The interpreter's memory cgroup, if the host has them. */
  readonly group: string | undefined
  /** Bytes written to the reply channel that were not the driver's (design 0331, decision 5). */
  readonly foreign: { bytes: number; flooded: boolean }
  /** Set by the measured fallback when it killed the sandbox for its memory. */
  readonly memory: { exceeded: boolean }
  nextId: number
}

/** What the reply channel's reader passes on: a line, the channel's end, or a flood. */
export type ReplyLine = string | null | typeof flood
/** The code wrote more to the driver's reply channel than a driver ever does. */
export const flood: unique symbol = Symbol.for("@polyloop/sandbox/flood")

/** The longest line the reply channel may carry; what the code may write there besides, in all. */
export const maxReplyBytes = 16 * 1024 * 1024

/**
 * Splits a byte stream into lines of at most `max` bytes: an oversized line is not held, only
 * counted (`onOversized` with its size once it ends), so what the host keeps is bounded whatever
 * is written (design 0331, decision 5).
 */
export class LineSplitter {
  private parts: Array<Buffer> = []
  private held = 0
  private dropped = 0

  constructor(
    private readonly max: number,
    private readonly onLine: (line: string) => void,
    private readonly onOversized: (bytes: number) => void
  ) {}

  /** Bytes held now (at most `max`). */
  get holding(): number {
    return this.held
  }

  feed(chunk: Uint8Array): void {
    let data = Buffer.from(chunk.buffer, chunk.byteOffset, chunk.byteLength)
    while (data.length > 0) {
      const newline = data.indexOf(10)
      const piece = newline < 0 ? data : data.subarray(0, newline)
      if (this.dropped > 0 || this.held + piece.length > this.max) {
        this.dropped += this.held + piece.length
        this.parts = []
        this.held = 0
      } else if (piece.length > 0) {
        this.parts.push(Buffer.from(piece))
        this.held += piece.length
      }
      if (newline < 0) return
      this.end()
      data = data.subarray(newline + 1)
    }
  }

  private end(): void {
    if (this.dropped > 0) {
      const bytes = this.dropped
      this.dropped = 0
      this.onOversized(bytes)
      return
    }
    const line = Buffer.concat(this.parts).toString("utf8")
    this.parts = []
    this.held = 0
    this.onLine(line)
  }

  /** The stream ended: what is held is a last line. */
  finish(): void {
    if (this.dropped > 0) this.onOversized(this.dropped + this.held)
    else if (this.held > 0) this.onLine(Buffer.concat(this.parts).toString("utf8"))
    this.parts = []
    this.held = 0
    this.dropped = 0
  }
}

const signalNames = new Map<number, string>(Object.entries(os.constants.signals).map(([name, n]) => [n, name]))

/** How the process ended, in words (`status 3`, `signal SIGKILL`). */
export const exitOf = (live: Live): Effect.Effect<{ readonly code?: number; readonly signal?: string }> =>
  Effect.map(Effect.either(live.process.exitCode), (exit) => {
    if (exit._tag === "Right") {
      // bubblewrap exits with 128 + n when the sandboxed process died of signal n.
      const code = exit.right
      const signal = code > 128 ? signalNames.get(code - 128) : undefined
      return signal === undefined ? { code } : { signal }
    }
    const signal = /signal: (\w+)/.exec(String(exit.left.message))?.[1]
    return signal === undefined ? {} : { signal }
  })

/** The JSON reply of request `id`, or `undefined` when the reply channel ended first. */
export const awaitReply = (live: Live, id: number): Effect.Effect<Record<string, unknown> | undefined> =>
  Effect.gen(function*() {
    while (true) {
      const line = yield* Queue.take(live.replies)
      if (line === null) {
        // Keep the end marker for whoever waits next.
        yield* Queue.offer(live.replies, null)
        return undefined
      }
      // The code wrote to the driver's channel: its protocol cannot be trusted (the caller kills it).
      if (line === flood) return undefined
      let message: unknown
      try {
        message = JSON.parse(line)
      } catch {
        message = undefined
      }
      if (typeof message === "object" && message !== null && !Array.isArray(message)) {
        const record = message as Record<string, unknown>
        if (record.id === id) return record
        if (record.ready === true || "id" in record) continue
      }
      live.diagnostics.push(line.length > 500 ? `${line.slice(0, 500)}…` : line)
      if (live.diagnostics.length > 20) live.diagnostics.shift()
      live.foreign.bytes += line.length + 1
      if (live.foreign.bytes > maxReplyBytes) {
        live.foreign.flooded = true
        return undefined
      }
    }
  })

/** Sends a request; returns its id. */
export const send = (live: Live, request: Record<string, unknown>): Effect.Effect<number> =>
  Effect.suspend(() => {
    const id = live.nextId++
    return Effect.as(Queue.offer(live.input, Buffer.from(`${JSON.stringify({ ...request, id })}\n`, "utf8")), id)
  })

/** Kills the process tree (bwrap's pid namespace goes with it) and closes its scope. */
export const kill = (live: Live): Effect.Effect<void> =>
  Effect.zipRight(
    // Without a pid namespace (`isolation: "none"`), what the interpreter started goes first.
    Effect.sync(() => killDescendants(live, true)),
    Effect.zipRight(
    Effect.ignore(Effect.timeout(live.process.kill("SIGKILL"), "5 seconds")),
    Scope.close(live.scope, Exit.void)
  ).pipe(
    // bwrap's pid 1 takes the namespace's processes with it as it exits, after the started process
    // is gone: wait (a few seconds at most) until the chain down to the interpreter has exited, so
    // that nothing of the sandbox still runs when this returns.
    Effect.zipRight(Effect.ignore(Effect.timeout(
      Effect.repeat(Effect.sleep("10 millis"), { until: () => live.chain.every((p) => !running(p.pid, p.start)) }),
      "5 seconds"
    )))
  )).pipe(
    Effect.zipRight(live.group === undefined ? Effect.void : Effect.ignore(Effect.timeout(
      Effect.repeat(Effect.sleep("10 millis"), { until: () => (Memory.removeGroup(live.group!), !fs.existsSync(live.group!)) }),
      "2 seconds"
    )))
  )

/**
 * Kills the processes under the interpreter (`isolation: "none"`, where the driver cannot: design
 * 0331, decision 2), repeated while new ones appear; with `self`, the interpreter too. In bubblewrap the
 * driver does this itself inside the pid namespace, and the namespace goes with the sandbox.
 */
export const killDescendants = (live: Live, self: boolean): void => {
  if (live.chain.length === 0 || live.chain.length > 1) return
  const root = live.pid
  for (let round = 0; round < 64; round++) {
    const found = Memory.descendants(root).filter((pid) => pid !== root && running(pid, statOf(pid)?.start ?? ""))
    if (found.length === 0) break
    for (const pid of found) {
      try {
        process.kill(pid, "SIGKILL")
      } catch {
        // gone
      }
    }
  }
  if (self) {
    try {
      process.kill(root, "SIGKILL")
    } catch {
      // gone
    }
  }
}

/**
 * Starts the interpreter of `language` for a session and waits for the driver's `ready`
 * (within `startTimeout`). Fails with `SessionFailure { reason: "Start" }` naming what the
 * sandbox or interpreter said.
 */
export const start = (
  env: Environment,
  dirs: SessionDirs,
  language: Language,
  outputLimit: number,
  startTimeout: number
): Effect.Effect<Live, SessionFailure, CommandExecutor.CommandExecutor> =>
  Effect.gen(function*() {
    const scope = yield* Scope.make()
    const input = yield* Queue.unbounded<Uint8Array>()
    // Only one request is outstanding at a time: more lines waiting than this are not the driver's.
    const replies = yield* Queue.sliding<ReplyLine>(64)
    const group = env.memory.base === undefined ? undefined : yield* Effect.try({
      try: () => Memory.makeGroup(env.memory, env.memoryBytes),
      catch: (error) => new SessionFailure({ reason: "Limit", message: `the sandbox's memory cgroup could not be made: ${String(error)}` })
    })
    yield* Scope.addFinalizer(scope, group === undefined ? Effect.void : Effect.sync(() => Memory.removeGroup(group)))
    const command = commandOf(env, dirs, language, group).pipe(Command.stdin(Stream.fromQueue(input)))
    const started = yield* Scope.extend(Command.start(command), scope).pipe(
      Effect.mapError((error) => new SessionFailure({ reason: "Start", message: `the ${language} sandbox could not be started: ${error.message}` })),
      Effect.tapError(() => Scope.close(scope, Exit.void))
    )
    const output = new Output(outputLimit)
    yield* Scope.extend(
      Effect.forkScoped(Stream.runForEach(started.stdout, (chunk) => Effect.sync(() => output.feed(chunk))).pipe(Effect.ignore)),
      scope
    )
    const foreign = { bytes: 0, flooded: false }
    const diagnostics: Array<string> = []
    const note = (line: string) => {
      diagnostics.push(line.length > 500 ? `${line.slice(0, 500)}…` : line)
      if (diagnostics.length > 20) diagnostics.shift()
    }
    const flooded = (bytes: number) => {
      foreign.bytes += bytes
      if (!foreign.flooded && foreign.bytes > maxReplyBytes) {
        foreign.flooded = true
        Queue.unsafeOffer(replies, flood)
      }
    }
    // The reply channel, split by a bounded splitter: a reply (a JSON object with an id, or the
    // ready message) is passed on; anything else is a diagnostic (bwrap's, the runtime's), counted.
    const splitter = new LineSplitter(maxReplyBytes, (line) => {
      if (line.startsWith("{")) {
        Queue.unsafeOffer(replies, line)
        return
      }
      note(line)
      flooded(line.length + 1)
    }, (bytes) => {
      foreign.bytes += maxReplyBytes
      flooded(bytes)
    })
    yield* Scope.extend(
      Effect.forkScoped(
        started.stderr.pipe(
          Stream.runForEach((chunk) => Effect.sync(() => splitter.feed(chunk))),
          Effect.ignore,
          Effect.zipRight(Effect.sync(() => splitter.finish())),
          Effect.zipRight(Queue.offer(replies, null))
        )
      ),
      scope
    )
    const partial: Live = {
      language,
      process: started,
      scope,
      output,
      replies,
      input,
      diagnostics,
      ready: {},
      pid: started.pid,
      comm: "",
      chain: [],
      group,
      foreign,
      memory: { exceeded: false },
      nextId: 1
    }
    const ready = yield* Effect.gen(function*() {
      while (true) {
        const line = yield* Queue.take(replies)
        if (line === null || line === flood) return undefined
        try {
          const message: unknown = JSON.parse(line)
          if (typeof message === "object" && message !== null && (message as Record<string, unknown>).ready === true) {
            return message as Record<string, unknown>
          }
        } catch {
          // not a reply: a diagnostic
        }
        partial.diagnostics.push(line)
      }
    }).pipe(Effect.timeoutOption(startTimeout))
    if (ready._tag === "None" || ready.value === undefined) {
      const exit = ready._tag === "None" ? {} : yield* exitOf(partial)
      yield* kill(partial)
      const said = partial.diagnostics.slice(-5).join(" | ")
      const how = ready._tag === "None"
        ? `did not start within ${startTimeout} ms`
        : `exited before it was ready (${exit.code !== undefined ? `status ${exit.code}` : `signal ${exit.signal ?? "?"}`})`
      return yield* new SessionFailure({ reason: "Start", message: `the ${language} sandbox ${how}${said === "" ? "" : `: ${said}`}` })
    }
    // Ready: the driver runs, nothing of the code yet; the chain under the started process ends at it.
    const chain = chainUnder(started.pid)
    const pid = chain[chain.length - 1]!
    const comm = statOf(pid)?.comm ?? ""
    if (!comm.startsWith(language === "python" ? "python" : "node")) {
      yield* kill(partial)
      return yield* new SessionFailure({ reason: "Start", message: `the ${language} interpreter's process was not found under the sandbox (found ${comm === "" ? "nothing" : comm})` })
    }
    const live: Live = {
      ...partial,
      ready: ready.value,
      pid,
      comm,
      chain: chain.flatMap((p) => {
        const start = statOf(p)?.start
        return start === undefined ? [] : [{ pid: p, start }]
      })
    }
    if (env.memory.accounting === "measured") {
      // The measured fallback (design 0331, decision 6): the sandbox's resident memory and its
      // /tmp, read every 20 ms; past the bound, the whole sandbox is killed (the action sees it gone).
      const inside = env.isolation === "bubblewrap" ? pid : undefined
      yield* Scope.extend(
        Effect.forkScoped(
          Effect.repeat(
            Effect.sync(() => {
              if (Memory.measured(started.pid, inside) <= env.memoryBytes) return false
              live.memory.exceeded = true
              try {
                process.kill(started.pid, "SIGKILL")
              } catch {
                // gone
              }
              killDescendants(live, true)
              return true
            }),
            { schedule: Schedule.spaced("20 millis"), until: (done) => done }
          )
        ),
        scope
      )
    }
    return live
  })

interface Stat {
  readonly comm: string
  readonly ppid: number
  /** utime + stime, in clock ticks. */
  readonly cpuTicks: number
  /** The state letter (`R`, `S`, `Z` for a zombie, …). */
  readonly state: string
  /** The start time after boot, in clock ticks (with the pid, names one process). */
  readonly start: string
}

/** `/proc/<pid>/stat`'s command, parent and CPU time (`proc(5)`); `undefined` when the process is gone. */
const statOf = (pid: number): Stat | undefined => {
  let text: string
  try {
    text = fs.readFileSync(`/proc/${pid}/stat`, "utf8")
  } catch {
    return undefined
  }
  // The command is in parentheses and may hold spaces or parentheses: the fields follow the last ")".
  const close = text.lastIndexOf(")")
  const fields = text.slice(close + 2).split(" ")
  // After the command: state (3), ppid (4), … utime (14), stime (15), … starttime (22).
  return {
    comm: text.slice(text.indexOf("(") + 1, close),
    state: fields[0] ?? "",
    ppid: Number(fields[1]),
    cpuTicks: Number(fields[11]) + Number(fields[12]),
    start: fields[19] ?? ""
  }
}

/** The chain of only children from `pid` down (bwrap → its pid 1 → the interpreter); `pid` alone in `isolation: "none"`. */
const chainUnder = (pid: number): Array<number> => {
  const children = new Map<number, Array<number>>()
  for (const name of fs.readdirSync("/proc")) {
    if (!/^\d+$/.test(name)) continue
    const stat = statOf(Number(name))
    if (stat === undefined) continue
    const list = children.get(stat.ppid) ?? []
    list.push(Number(name))
    children.set(stat.ppid, list)
  }
  const chain = [pid]
  for (let depth = 0; depth < 8; depth++) {
    const next = children.get(chain[chain.length - 1]!)
    if (next === undefined || next.length !== 1) break
    chain.push(next[0]!)
  }
  return chain
}

/** Whether the process `pid` started at `start` still runs (a zombie has exited). */
const running = (pid: number, start: string): boolean => {
  const stat = statOf(pid)
  return stat !== undefined && stat.start === start && stat.state !== "Z" && stat.state !== "X"
}

/** The process's `RLIMIT_CPU` soft limit in seconds (`/proc/<pid>/limits`), `Infinity` when unlimited or unknown. */
const cpuSoftOf = (pid: number): number => {
  try {
    const line = fs.readFileSync(`/proc/${pid}/limits`, "utf8").split("\n").find((l) => l.startsWith("Max cpu time"))
    const soft = line?.slice("Max cpu time".length).trim().split(/\s+/)[0]
    return soft === undefined || soft === "unlimited" ? Infinity : Number(soft)
  } catch {
    return Infinity
  }
}

/**
 * Keeps the interpreter's `RLIMIT_CPU` soft limit at `allowance` seconds more than it has used
 * (amendment 1), with util-linux `prlimit --pid` — as the sandbox's user when that is `nobody` (a
 * root without `CAP_SYS_RESOURCE` may not set another user's limits). Before an action
 * (`"action"`) the limit is set unless it already is what it must be (the limit counts whole
 * seconds: an action that used a few milliseconds seldom moves it); after one (`"save"`, so the
 * snapshot's save is not cut) it is raised again only when less than half an allowance is left.
 * So a process is started only when the limit must move. The current limit is read from
 * `/proc/<pid>/limits` (the code may have changed it). A process that is gone is not an error
 * here (the action finds it gone).
 */
export const limitCpu = (
  env: Environment,
  live: Live,
  allowance: number,
  when: "action" | "save"
): Effect.Effect<void, SessionFailure, CommandExecutor.CommandExecutor> =>
  Effect.gen(function*() {
    const stat = statOf(live.pid)
    // Gone (or its pid already another process's): the action finds the interpreter gone.
    if (stat === undefined || stat.comm !== live.comm) return
    const used = stat.cpuTicks / env.clockTicks
    const want = Math.ceil(used + allowance)
    const soft = cpuSoftOf(live.pid)
    if (when === "action" ? soft === want : soft - used >= allowance / 2) return
    const prlimit = [env.prlimit, "--pid", String(live.pid), `--cpu=${want}:`]
    const argv = env.isolation === "bubblewrap" && env.setpriv !== undefined && hostIsRoot()
      ? [env.setpriv, `--reuid=${nobody.uid}`, `--regid=${nobody.gid}`, "--clear-groups", "--", ...prlimit]
      : prlimit
    const [head, ...rest] = argv
    const result = yield* Command.make(head!, ...rest).pipe(
      Command.env({ PATH: "/usr/bin:/bin", LANG: "C.UTF-8" }, { extendEnv: false }),
      Command.stderr("pipe"),
      (command) => Effect.scoped(Effect.flatMap(Command.start(command), (process) =>
        Effect.all([process.exitCode, Stream.mkString(Stream.decodeText(process.stderr))], { concurrency: 2 }))),
      Effect.mapError((error) => new SessionFailure({ reason: "Limit", message: `prlimit could not be run: ${error.message}` }))
    )
    if (result[0] !== 0 && statOf(live.pid) !== undefined) {
      return yield* new SessionFailure({ reason: "Limit", message: `prlimit could not set the CPU limit (status ${result[0]}): ${result[1].trim()}` })
    }
  })
