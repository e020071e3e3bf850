#!/usr/bin/env node
// Launcher: runs the TypeScript entry point through tsx, so the command works on a fresh clone
// without a build step.
import { spawnSync } from "node:child_process"
import { createRequire } from "node:module"
import { dirname, join } from "node:path"
import { fileURLToPath } from "node:url"

const here = dirname(fileURLToPath(import.meta.url))
const require = createRequire(import.meta.url)
const tsxCli = require.resolve("tsx/cli")
const entry = join(here, "..", "src", "bin.ts")
const result = spawnSync(process.execPath, [tsxCli, entry, ...process.argv.slice(2)], { stdio: "inherit" })
if (result.error) {
  process.stderr.write(`polyloop: ${result.error.message}\n`)
  process.exit(1)
}
process.exit(result.status ?? (result.signal ? 1 : 0))
