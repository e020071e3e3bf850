/**
 * How a session's interpreter is started (design 0330, decision 1; design 0331): the sandbox's
 * view of its directories, bubblewrap's arguments, the rlimits, the interpreter's command line,
 * and the shell line that puts it in its memory cgroup.
 *
 * @internal
 */
import * as Command from "@effect/platform/Command"
import * as fs from "node:fs"
import * as path from "node:path"
import type * as Memory from "./memory.js"

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
