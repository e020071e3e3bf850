/**
 * One interpreter process of a session (design 0330, decision 1): the driver started inside
 * bubblewrap (or, named explicitly, as a plain child), through `@effect/platform`'s `Command`
 * (its command line in `command.ts`, its streams' readers in `channels.ts`, what the host reads
 * of its processes in `/proc` in `processes.ts`; this module re-exports them).
 * Requests go to its standard input as JSON lines; replies come back as JSON lines on its
 * standard error; the code's output (standard output and error merged by the driver) is read from
 * its standard output by an `Output` collector that keeps the first `limit` characters, counts the
 * rest, and ends the action's output at the boundary token the driver writes after it.
 *
 * @internal
 */
import * as Command from "@effect/platform/Command"
import type * as CommandExecutor from "@effect/platform/CommandExecutor"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Queue from "effect/Queue"
import * as Schedule from "effect/Schedule"
import * as Scope from "effect/Scope"
import * as Stream from "effect/Stream"
import * as fs from "node:fs"
import * as os from "node:os"
import { flood, LineSplitter, maxReplyBytes, Output, type ReplyLine } from "./channels.js"
import { commandOf, type Environment, type Language, type SessionDirs } from "./command.js"
import { SessionFailure } from "./failure.js"
import * as Memory from "./memory.js"
import { chainUnder, running, statOf } from "./processes.js"

export * from "./channels.js"
export * from "./command.js"
export { limitCpu } from "./processes.js"

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
