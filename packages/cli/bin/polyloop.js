#!/usr/bin/env node
// The `polyloop` command (design 0213). The agent runs in the process the user started: a
// SIGKILL of the command kills the agent with it, and `polyloop demo --crash-at N` kills the
// process that is running the agent. Which build of the command runs:
//
// 1. the TypeScript source, when this process resolves the package's `bin` module to it (the
//    monorepo's tests: the `@polyloop/source` condition with tsx's loader, design 0210);
// 2. the compiled `dist/` (unbundled), for `replay --agent <module>` and `eval <module>`: the user's module imports
//    the user's `effect`, and must meet the same copy of Effect the command runs on;
// 3. the bundle `bundle/polyloop.cjs` (`scripts/bundle.mjs`), compiled from a V8 code cache
//    kept in the user's cache directory when there is one for this bundle, Node and flags;
// 4. the compiled `dist/` when there is no bundle (a checkout where only `tsc -b` ran).
import { createHash } from "node:crypto"
import * as fs from "node:fs"
import Module, { createRequire } from "node:module"
import * as os from "node:os"
import * as path from "node:path"
import { fileURLToPath } from "node:url"
import * as vm from "node:vm"

const bundle = fileURLToPath(new URL("../bundle/polyloop.cjs", import.meta.url))
const entry = import.meta.resolve("@polyloop/cli/bin")
const args = process.argv.slice(2)
const loadsUserModule = (args.includes("replay") && args.some((arg) => arg === "--agent" || arg.startsWith("--agent="))) ||
  // `eval <module>` imports the user's experiment (design 0320); `eval results` and `eval compare` do not.
  (args[0] === "eval" && args[1] !== "results" && args[1] !== "compare")

/** Where the code cache of `source` is kept (undefined: no cache — turned off, or no home to keep it in). */
const cacheFile = (source) => {
  if (process.env.NODE_DISABLE_COMPILE_CACHE !== undefined) return undefined
  let base
  try {
    base = process.env.XDG_CACHE_HOME || path.join(os.homedir(), ".cache")
  } catch {
    return undefined
  }
  const key = createHash("sha256").update(`${process.version}\0${process.arch}\0${process.execArgv.join(" ")}\0`).update(source).digest("hex")
  return path.join(base, "polyloop", "compile-cache", `${key.slice(0, 40)}.v8`)
}

/** Writes V8's code of `script` (what this run compiled) for the next start; a failure only means no cache. */
const writeCache = (file, script) => {
  try {
    fs.mkdirSync(path.dirname(file), { recursive: true, mode: 0o700 })
    const temporary = `${file}.${process.pid}.tmp`
    fs.writeFileSync(temporary, script.createCachedData(), { mode: 0o600 })
    fs.renameSync(temporary, file)
  } catch {
    // no cache directory, a read-only home: the next start compiles again
  }
}

const runBundle = () => {
  const source = fs.readFileSync(bundle, "utf8")
  const cache = cacheFile(source)
  let cachedData
  if (cache !== undefined) {
    try {
      cachedData = fs.readFileSync(cache)
    } catch {
      cachedData = undefined
    }
  }
  const script = new vm.Script(Module.wrap(source), {
    filename: bundle,
    ...(cachedData === undefined ? {} : { cachedData }),
    ...(vm.constants?.USE_MAIN_CONTEXT_DEFAULT_LOADER === undefined ? {} : { importModuleDynamically: vm.constants.USE_MAIN_CONTEXT_DEFAULT_LOADER })
  })
  if (cache !== undefined && (cachedData === undefined || script.cachedDataRejected)) process.once("exit", () => writeCache(cache, script))
  const module = { exports: {} }
  script.runInThisContext()(module.exports, createRequire(bundle), module, bundle, path.dirname(bundle))
}

if (entry.endsWith(".ts") || loadsUserModule || !fs.existsSync(bundle)) await import(entry)
else runBundle()
