/**
 * Child Node processes for the end-to-end tests: `spawnNode` runs a Node script and collects
 * its exit code and output; `polyloop` runs the command through its launcher (`node
 * packages/cli/bin/polyloop.js`) in a given directory.
 */
import { spawn } from "node:child_process"
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
