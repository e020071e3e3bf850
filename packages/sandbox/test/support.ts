/**
 * Helpers of the sandbox tests: the executor over a store, actions run as the loop runs them
 * (under a `ToolContext` naming the run and step).
 */
import type * as ActionOutcome from "@polyloop/core/ActionOutcome"
import { ActionExecutor } from "@polyloop/core/ActionExecutor"
import * as ToolContext from "@polyloop/core/ToolContext"
import * as Sandbox from "@polyloop/sandbox/Sandbox"
import * as Effect from "effect/Effect"
import { spawnSync } from "node:child_process"
import * as fs from "node:fs"

/** Options the tests run with: short limits, so that a kill costs little. */
export const testOptions: Sandbox.Options = {
  languages: ["python", "javascript"],
  wallTime: "4 seconds",
  cpuTime: "3 seconds",
  memoryBytes: 512 * 1024 * 1024,
  maxProcesses: 32,
  outputLimit: 2_000
}

/** Runs `code` as step `step` of `runId`. */
export const run = (runId: string, step: number, code: string, language: string = "python"): Effect.Effect<ActionOutcome.ActionOutcome, never, ActionExecutor> =>
  Effect.flatMap(ActionExecutor, (executor) =>
    Effect.provideService(
      executor.execute({ _tag: "CodeAction", language, code }),
      ToolContext.ToolContext,
      ToolContext.make({ runId, step, callId: `call_${step}` })
    ))

const tail = (text: string | null | undefined): string => (text ?? "").trimEnd().split("\n").slice(-20).join("\n")

/**
 * Makes sure Debian's `bubblewrap` and `python3-dill` are installed (as `.ci/run` does): with
 * apt-get when missing and we are root, `apt-get update` and again when that fails. Throws
 * saying what was tried otherwise.
 */
export const ensureTools = (): void => {
  const missing: Array<string> = []
  if (!fs.existsSync("/usr/bin/bwrap")) missing.push("bubblewrap")
  if (spawnSync("/usr/bin/python3", ["-c", "import dill"]).status !== 0) missing.push("python3-dill")
  if (missing.length === 0) return
  if (typeof process.getuid !== "function" || process.getuid() !== 0) {
    throw new Error(`the sandbox tests need Debian's ${missing.join(" and ")}; install them (apt-get install ${missing.join(" ")})`)
  }
  const env = { ...process.env, DEBIAN_FRONTEND: "noninteractive" }
  const install = () => spawnSync("apt-get", ["install", "-y", "-q", "--no-install-recommends", ...missing], { env, encoding: "utf8", timeout: 600_000 })
  let result = install()
  if (result.status !== 0) {
    spawnSync("apt-get", ["update", "-q"], { env, encoding: "utf8", timeout: 600_000 })
    result = install()
  }
  if (result.status !== 0) throw new Error(`apt-get install ${missing.join(" ")} failed:\n${tail(result.stdout)}\n${tail(result.stderr)}`)
}
