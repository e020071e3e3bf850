/**
 * Child Node processes for the end-to-end tests: `spawnNode` runs a Node script and collects
 * its exit code and output; `polyloop` runs the command through its launcher (`node
 * packages/cli/bin/polyloop.js`) in a given directory; `spawnProfiled` runs one with a CPU profile
 * and tells which files' code ran.
 */
import { spawn } from "node:child_process"
import * as fs from "node:fs"
import * as path from "node:path"
import { fileURLToPath } from "node:url"

export const launcher = fileURLToPath(new URL("../../packages/cli/bin/polyloop.js", import.meta.url))

export interface Result {
  readonly code: number | null
  readonly stdout: string
  readonly stderr: string
}

/** Runs `node <args>`; resolves when the process exits, however it exits. */
export const spawnNode = (args: ReadonlyArray<string>, options: { readonly cwd?: string; readonly env?: NodeJS.ProcessEnv } = {}): Promise<Result> =>
  spawnCommand(process.execPath, args, options)

/** Runs `command <args>` (a program on PATH or a path); resolves when the process exits, however it exits. */
export const spawnCommand = (
  command: string,
  args: ReadonlyArray<string>,
  options: { readonly cwd?: string; readonly env?: NodeJS.ProcessEnv } = {}
): Promise<Result> =>
  new Promise((resolve, reject) => {
    const child = spawn(command, [...args], {
      ...(options.cwd === undefined ? {} : { cwd: options.cwd }),
      env: options.env ?? process.env,
      stdio: ["ignore", "pipe", "pipe"]
    })
    let stdout = ""
    let stderr = ""
    child.stdout.setEncoding("utf8").on("data", (chunk: string) => (stdout += chunk))
    child.stderr.setEncoding("utf8").on("data", (chunk: string) => (stderr += chunk))
    child.on("error", reject)
    child.on("close", (code) => resolve({ code, stdout, stderr }))
  })

/** Runs `polyloop <args>` in `cwd`; colour and model configuration are off; `env` adds to the test's environment. */
export const polyloop = (cwd: string, args: ReadonlyArray<string>, env: NodeJS.ProcessEnv = {}): Promise<Result> => {
  const full: NodeJS.ProcessEnv = { ...process.env, ...env }
  for (const name of ["FORCE_COLOR", "POLYLOOP_API_KEY", "POLYLOOP_BASE_URL", "POLYLOOP_MODEL"]) delete full[name]
  return spawnNode([launcher, ...args], { cwd, env: full })
}

/** A finished Node process and the files whose code ran in it. */
export interface Profiled extends Result {
  /** The files (absolute paths) at least one of whose functions the process's CPU profile saw running. */
  readonly ran: ReadonlySet<string>
}

/**
 * Runs `node <args>` with a CPU profile written to `profileDir` (a new directory): its result and
 * the files whose code ran — which build of a program a process executed, read from the process
 * itself (a file compiled with `vm.Script` is named by the path it was given).
 */
export const spawnProfiled = async (
  args: ReadonlyArray<string>,
  options: { readonly cwd: string; readonly env: NodeJS.ProcessEnv; readonly profileDir: string }
): Promise<Profiled> => {
  const result = await spawnNode(["--cpu-prof", `--cpu-prof-dir=${options.profileDir}`, "--cpu-prof-interval=100", ...args], options)
  const ran = new Set<string>()
  for (const file of fs.existsSync(options.profileDir) ? fs.readdirSync(options.profileDir) : []) {
    const profile = JSON.parse(fs.readFileSync(path.join(options.profileDir, file), "utf8")) as {
      readonly nodes: ReadonlyArray<{ readonly callFrame: { readonly url: string } }>
    }
    for (const node of profile.nodes) {
      const url = node.callFrame.url
      if (url.startsWith("file://")) ran.add(fileURLToPath(url))
      else if (path.isAbsolute(url)) ran.add(url)
    }
  }
  return { ...result, ran }
}

/** Whether any of `files` is inside `dir`. */
export const ranUnder = (files: ReadonlySet<string>, dir: string): boolean => [...files].some((file) => file.startsWith(dir + path.sep))
