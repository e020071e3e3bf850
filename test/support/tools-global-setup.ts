/**
 * Vitest `globalSetup`: Debian's `bubblewrap` and `python3-dill` (the code sandbox, design 0330)
 * installed once, before any test, when they are missing and this process is root — as `.ci/run`
 * does — so that every test that runs code in the sandbox finds them, whichever file runs first
 * (the sandbox package's own tests, and `examples/code-agent.ts` run by `test/examples.test.ts`).
 * A failure is printed and left to the tests, which report what is missing.
 */
import { spawnSync } from "node:child_process"
import * as fs from "node:fs"
import * as Apt from "./apt.js"

export default function setup(): void {
  const log = (line: string) => process.stderr.write(`${line}\n`)
  try {
    if (!fs.existsSync("/usr/bin/bwrap")) Apt.install("bubblewrap", "bubblewrap (bwrap, the code sandbox)", log)
    if (spawnSync("/usr/bin/python3", ["-c", "import dill"]).status !== 0) Apt.install("python3-dill", "python3-dill (the sandbox's Python snapshots)", log)
  } catch (error) {
    log(`polyloop test setup: ${error instanceof Error ? error.message : String(error)} (the sandbox tests will report it)`)
  }
}
