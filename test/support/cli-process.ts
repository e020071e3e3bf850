/**
 * Runs the `polyloop` command as a subprocess through its launcher (`node
 * packages/cli/bin/polyloop.js`), in a given directory and environment, and collects its exit
 * code and output.
 */
import { spawn } from "node:child_process"
import { fileURLToPath } from "node:url"

export const launcher = fileURLToPath(new URL("../../packages/cli/bin/polyloop.js", import.meta.url))

export interface Result {
  readonly code: number | null
  readonly stdout: string
  readonly stderr: string
}

/** Runs `polyloop <args>` in `cwd`; colour is off; `env` adds to the test's environment. */
export const polyloop = (cwd: string, args: ReadonlyArray<string>, env: NodeJS.ProcessEnv = {}): Promise<Result> =>
  new Promise((resolve, reject) => {
    const full: NodeJS.ProcessEnv = { ...process.env, ...env }
    for (const name of ["FORCE_COLOR", "POLYLOOP_API_KEY", "POLYLOOP_BASE_URL", "POLYLOOP_MODEL"]) delete full[name]
    const child = spawn(process.execPath, [launcher, ...args], { cwd, env: full, stdio: ["ignore", "pipe", "pipe"] })
    let stdout = ""
    let stderr = ""
    child.stdout.setEncoding("utf8").on("data", (chunk: string) => (stdout += chunk))
    child.stderr.setEncoding("utf8").on("data", (chunk: string) => (stderr += chunk))
    child.on("error", reject)
    child.on("close", (code) => resolve({ code, stdout, stderr }))
  })
