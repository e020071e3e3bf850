/**
 * The sandbox's processes as the host sees them in `/proc` (`proc(5)`): a process's command,
 * parent, CPU time, state and start time; the chain from the started process down to the
 * interpreter; and the per-action CPU limit set with `prlimit --pid` (design 0330, amendment 1).
 *
 * @internal
 */
import * as Command from "@effect/platform/Command"
import type * as CommandExecutor from "@effect/platform/CommandExecutor"
import * as Effect from "effect/Effect"
import * as Stream from "effect/Stream"
import * as fs from "node:fs"
import { type Environment, hostIsRoot, nobody } from "./command.js"
import { SessionFailure } from "./failure.js"

export interface Stat {
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
export const statOf = (pid: number): Stat | undefined => {
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
export const chainUnder = (pid: number): Array<number> => {
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
export const running = (pid: number, start: string): boolean => {
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
  live: { readonly pid: number; readonly comm: string },
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
