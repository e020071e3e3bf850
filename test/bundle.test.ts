/**
 * The `polyloop` launcher and the bundled command (design 0213), in plain `node` as a user runs
 * it: the build writes one self-contained bundle; the launcher runs it (which code ran is read
 * from a CPU profile of the process: the files whose functions executed), from a V8 code cache
 * after the first start; `runs`, `show`, `verify`, `export`, `stats` and their failures print
 * exactly what the unbundled `dist/` prints; `replay --agent <module>` runs `dist/` (the user's
 * module shares its `effect`); under the `@polyloop/source` condition the source runs; without a
 * bundle the launcher runs `dist/`, silently; `serve` from the bundle finds the viewer's files;
 * `--version` is the CLI package's own version whichever build runs.
 */
import { afterAll, assert, beforeAll, describe, it } from "@effect/vitest"
import { spawn } from "node:child_process"
import * as fs from "node:fs"
import { createRequire } from "node:module"
import * as os from "node:os"
import * as path from "node:path"
import { fileURLToPath, pathToFileURL } from "node:url"
import { type Profiled, ranUnder, type Result, spawnCommand, spawnProfiled } from "./support/cli-process.js"

const root = fileURLToPath(new URL("..", import.meta.url))
const require = createRequire(import.meta.url)
const cliDir = path.join(root, "packages", "cli")
const launcher = path.join(cliDir, "bin", "polyloop.js")
const bundleFile = path.join(cliDir, "bundle", "polyloop.cjs")
const distBin = path.join(cliDir, "dist", "bin.js")
const targetModule = path.join(root, "test", "support", "demo-replay-target.mjs")

interface Database {
  prepare(source: string): { run(...params: ReadonlyArray<unknown>): unknown }
  close(): void
}
const Sqlite = require("better-sqlite3") as new(filename: string) => Database

const work = fs.mkdtempSync(path.join(os.tmpdir(), "polyloop-bundle-"))

/** A user's shell: no source condition, no tsx, no colour; the compile cache under `cache`. */
const plainEnv = (cache = path.join(work, "cache")): NodeJS.ProcessEnv => {
  const env: NodeJS.ProcessEnv = { ...process.env, XDG_CACHE_HOME: cache }
  for (const name of ["NODE_OPTIONS", "FORCE_COLOR", "NO_COLOR", "POLYLOOP_API_KEY", "POLYLOOP_BASE_URL", "POLYLOOP_MODEL", "NODE_DISABLE_COMPILE_CACHE"]) {
    delete env[name]
  }
  return env
}

const ok = async (command: string, args: ReadonlyArray<string>, cwd: string, env: NodeJS.ProcessEnv = plainEnv()): Promise<Result> => {
  const result = await spawnCommand(command, args, { cwd, env })
  assert.strictEqual(result.code, 0, `${command} ${args.join(" ")}:\n${result.stdout}\n${result.stderr}`)
  return result
}

let profiles = 0

/** `node <script> <args>` with a CPU profile: its result and the files whose code ran. */
const profiled = (script: string, args: ReadonlyArray<string>, env: NodeJS.ProcessEnv = plainEnv()): Promise<Profiled> =>
  spawnProfiled([script, ...args], { cwd: work, env, profileDir: path.join(work, `profile-${profiles++}`) })

const effectDir = path.join(root, "node_modules", "effect")

describe.sequential("the polyloop launcher and its bundle", () => {
  const db = path.join(work, "demo.db")
  const damaged = path.join(work, "damaged.db")

  beforeAll(async () => {
    // What `npm test` already did (tsc -b, then the bundle); the bundle is written atomically,
    // so a test file packing the CLI at the same time does not disturb this one.
    await ok(process.execPath, [require.resolve("typescript/bin/tsc"), "-b", "packages/cli"], root)
    await ok(process.execPath, [path.join(cliDir, "scripts", "bundle.mjs")], root)
    await ok(process.execPath, [launcher, "demo", "--run", "d1", "--db", db], work)
    const healthy = new Sqlite(db)
    healthy.prepare("PRAGMA wal_checkpoint(TRUNCATE)").run()
    healthy.close()
    fs.copyFileSync(db, damaged)
    const broken = new Sqlite(damaged)
    broken.prepare("UPDATE polyloop_records SET payload = '{\"_tag\": \"ModelRep' WHERE run_id = 'd1' AND seq = 3").run()
    broken.close()
  }, 600_000)

  afterAll(() => fs.rmSync(work, { recursive: true, force: true }))

  it("the build writes one self-contained CommonJS bundle; the root's build, test and demo scripts make it after tsc -b; the package packs it", () => {
    const text = fs.readFileSync(bundleFile, "utf8")
    assert.isAbove(text.length, 100_000)
    const required = new Set([...text.matchAll(/require\("([^"]+)"\)/g)].map((match) => match[1]!).filter((name) => !name.startsWith("node:")))
    for (const name of required) {
      assert.notMatch(name, /^(effect|@effect\/|@polyloop\/)/, `the bundle requires ${name} from outside instead of carrying it`)
    }
    assert.isTrue(required.has("better-sqlite3"), "better-sqlite3 (a native addon) is loaded from node_modules")
    const rootScripts = (JSON.parse(fs.readFileSync(path.join(root, "package.json"), "utf8")) as { scripts: Record<string, string> }).scripts
    for (const name of ["build", "test", "demo"]) {
      assert.match(rootScripts[name]!, /^tsc -b[^&]*&& node packages\/cli\/scripts\/bundle\.mjs/, `npm run ${name} bundles after tsc -b`)
    }
    const cli = JSON.parse(fs.readFileSync(path.join(cliDir, "package.json"), "utf8")) as { files: Array<string>; scripts: Record<string, string> }
    assert.include(cli.files, "bundle/polyloop.cjs")
    assert.strictEqual(cli.scripts["prepack"], "node scripts/bundle.mjs")
  })

  it("plain node: the launcher runs the bundle — no module of dist/ nor of node_modules' effect runs", async () => {
    const runs = await profiled(launcher, ["runs", "--db", db])
    assert.strictEqual(runs.code, 0, runs.stderr)
    assert.match(runs.stdout, /^d1\s+policy-editor\s+finished\s+Completed\(Tool\)/m)
    assert.isTrue(runs.ran.has(bundleFile), `the bundle ran: ${[...runs.ran].slice(0, 5).join(", ")}`)
    assert.isFalse(ranUnder(runs.ran, path.join(cliDir, "dist")), "no module of dist/ ran")
    assert.isFalse(ranUnder(runs.ran, effectDir), "no module of node_modules/effect ran")
  }, 300_000)

  it("runs, show, verify, export, stats, replay and their failures print the same through the bundle as through dist/", async () => {
    const cases: ReadonlyArray<ReadonlyArray<string>> = [
      ["runs", "--db", db],
      ["runs", "--db", db, "--json"],
      ["show", "d1", "--db", db],
      ["show", "d1", "--db", db, "--json"],
      ["verify", "--all", "--db", db],
      ["export", "d1", "--db", db],
      ["stats", "--db", db],
      ["replay", "d1", "--db", db],
      ["runs", "--db", damaged],
      ["verify", "d1", "--db", damaged],
      ["runs", "--db", path.join(work, "missing.db")],
      ["show", "nope", "--db", db],
      ["runs", "--limit", "-1", "--db", db]
    ]
    for (const args of cases) {
      const bundled = await spawnCommand(process.execPath, [launcher, ...args], { cwd: work, env: plainEnv() })
      const unbundled = await spawnCommand(process.execPath, [distBin, ...args], { cwd: work, env: plainEnv() })
      const shown = `polyloop ${args.join(" ")}`
      assert.strictEqual(bundled.code, unbundled.code, `${shown}: exit code\n${bundled.stderr}\n${unbundled.stderr}`)
      assert.strictEqual(bundled.stdout, unbundled.stdout, `${shown}: stdout`)
      assert.strictEqual(bundled.stderr, unbundled.stderr, `${shown}: stderr`)
    }
    // The damaged store is reported, not listed as healthy (the check `runs` makes is kept).
    const warned = await spawnCommand(process.execPath, [launcher, "runs", "--db", damaged], { cwd: work, env: plainEnv() })
    assert.strictEqual(warned.code, 1)
    assert.match(warned.stderr, /^warning: d1: /m)
  }, 900_000)

  it("replay --agent <module>: the launcher runs the unbundled dist/, whose effect is the module's", async () => {
    const replayed = await profiled(launcher, ["replay", "d1", "--db", db, "--agent", targetModule])
    assert.strictEqual(replayed.code, 0, replayed.stderr)
    assert.match(replayed.stdout, /^identical: the replay of d1 reproduced its \d+ records/)
    assert.isFalse(replayed.ran.has(bundleFile), "the bundle did not run")
    assert.isTrue(ranUnder(replayed.ran, path.join(cliDir, "dist")), "dist/ ran")
    assert.isTrue(ranUnder(replayed.ran, effectDir), "node_modules/effect ran (the copy the module imports)")
  }, 300_000)

  it("under the @polyloop/source condition with tsx (the monorepo's tests) the launcher runs the TypeScript source", async () => {
    const env: NodeJS.ProcessEnv = { ...plainEnv(), NODE_OPTIONS: process.env["NODE_OPTIONS"] ?? "" }
    assert.include(env["NODE_OPTIONS"], "--conditions=@polyloop/source", "vitest gives child processes the source condition")
    const runs = await profiled(launcher, ["runs", "--db", db], env)
    assert.strictEqual(runs.code, 0, runs.stderr)
    assert.isTrue(ranUnder(runs.ran, path.join(cliDir, "src")), "packages/cli/src ran")
    assert.isFalse(runs.ran.has(bundleFile), "the bundle did not run")
    assert.isFalse(ranUnder(runs.ran, path.join(cliDir, "dist")), "no module of dist/ ran")
  }, 300_000)

  it("without a bundle the launcher runs dist/, silently, with the same output", async () => {
    // The package as `tsc -b` alone leaves it: its package.json, launcher and dist/, no bundle/.
    const copy = path.join(work, "cli-without-bundle")
    fs.mkdirSync(path.join(copy, "bin"), { recursive: true })
    fs.copyFileSync(path.join(cliDir, "package.json"), path.join(copy, "package.json"))
    fs.copyFileSync(launcher, path.join(copy, "bin", "polyloop.js"))
    fs.symlinkSync(path.join(cliDir, "dist"), path.join(copy, "dist"))
    fs.symlinkSync(path.join(root, "node_modules"), path.join(copy, "node_modules"))
    const withBundle = await ok(process.execPath, [launcher, "runs", "--db", db], work)
    const without = await profiled(path.join(copy, "bin", "polyloop.js"), ["runs", "--db", db])
    assert.strictEqual(without.code, 0, without.stderr)
    assert.strictEqual(without.stdout, withBundle.stdout)
    assert.strictEqual(without.stderr, "")
    assert.isTrue(ranUnder(without.ran, path.join(cliDir, "dist")), "dist/ ran")
    assert.isFalse(without.ran.has(bundleFile), "no bundle ran")
  }, 300_000)

  it("--version prints the version in packages/cli/package.json from the bundle, from dist/ and from the source", async () => {
    const version = (JSON.parse(fs.readFileSync(path.join(cliDir, "package.json"), "utf8")) as { version: string }).version
    const sourceEnv: NodeJS.ProcessEnv = { ...plainEnv(), NODE_OPTIONS: process.env["NODE_OPTIONS"] ?? "" }
    const ways: ReadonlyArray<readonly [string, ReadonlyArray<string>, NodeJS.ProcessEnv]> = [
      ["the launcher (the bundle)", [launcher, "--version"], plainEnv()],
      ["the bundle itself", [bundleFile, "--version"], plainEnv()],
      ["dist/", [distBin, "--version"], plainEnv()],
      ["the source", [launcher, "--version"], sourceEnv]
    ]
    for (const [way, args, env] of ways) {
      const result = await ok(process.execPath, args, work, env)
      assert.strictEqual(result.stdout.trim(), version, way)
      assert.strictEqual(result.stderr, "", way)
    }
    // The bundle carries the version: it reads no package.json when it runs.
    assert.notInclude(fs.readFileSync(bundleFile, "utf8"), "package.json")

    // A copy of the package whose package.json says another version: each build follows it.
    const copy = path.join(work, "cli-other-version")
    fs.mkdirSync(path.join(copy, "scripts"), { recursive: true })
    const manifest = JSON.parse(fs.readFileSync(path.join(cliDir, "package.json"), "utf8")) as Record<string, unknown>
    fs.writeFileSync(path.join(copy, "package.json"), JSON.stringify({ ...manifest, version: "9.8.7-test" }, null, 2))
    fs.cpSync(path.join(cliDir, "dist"), path.join(copy, "dist"), { recursive: true })
    fs.cpSync(path.join(cliDir, "src"), path.join(copy, "src"), { recursive: true })
    fs.copyFileSync(path.join(cliDir, "scripts", "bundle.mjs"), path.join(copy, "scripts", "bundle.mjs"))
    fs.symlinkSync(path.join(root, "node_modules"), path.join(copy, "node_modules"))
    await ok(process.execPath, [path.join(copy, "scripts", "bundle.mjs")], copy)
    const tsx = require.resolve("tsx")
    for (const [way, args] of [
      ["dist/", [path.join(copy, "dist", "bin.js")]],
      ["its bundle", [path.join(copy, "bundle", "polyloop.cjs")]],
      ["its source", ["--conditions=@polyloop/source", `--import=${pathToFileURL(tsx).href}`, path.join(copy, "src", "bin.ts")]]
    ] as const) {
      const result = await ok(process.execPath, [...args, "--version"], work)
      assert.strictEqual(result.stdout.trim(), "9.8.7-test", `the copy's ${way}`)
    }
  }, 300_000)

  it("the compile cache: written after the first start, then used (not rewritten); a damaged cache is replaced; NODE_DISABLE_COMPILE_CACHE keeps none", async () => {
    const cache = path.join(work, "fresh-cache")
    const cacheDir = path.join(cache, "polyloop", "compile-cache")
    const first = await ok(process.execPath, [launcher, "runs", "--db", db], work, plainEnv(cache))
    const files = fs.readdirSync(cacheDir)
    assert.strictEqual(files.length, 1, files.join(", "))
    const file = path.join(cacheDir, files[0]!)
    assert.strictEqual(fs.statSync(cacheDir).mode & 0o777, 0o700, "the user's own directory")
    const written = fs.readFileSync(file)
    assert.isAbove(written.length, 10_000)
    const second = await ok(process.execPath, [launcher, "runs", "--db", db], work, plainEnv(cache))
    assert.strictEqual(second.stdout, first.stdout)
    assert.isTrue(fs.readFileSync(file).equals(written), "V8 accepted the cache: it was not written again")
    fs.writeFileSync(file, "not a code cache")
    const third = await ok(process.execPath, [launcher, "runs", "--db", db], work, plainEnv(cache))
    assert.strictEqual(third.stdout, first.stdout)
    assert.notStrictEqual(fs.readFileSync(file, "latin1"), "not a code cache", "the rejected cache was replaced")
    assert.deepStrictEqual(fs.readdirSync(cacheDir), files)
    const none = path.join(work, "no-cache")
    const disabled = await ok(process.execPath, [launcher, "runs", "--db", db], work, { ...plainEnv(none), NODE_DISABLE_COMPILE_CACHE: "1" })
    assert.strictEqual(disabled.stdout, first.stdout)
    assert.isFalse(fs.existsSync(none))
  }, 300_000)

  it("serve from the bundle serves the viewer's files", async () => {
    const child = spawn(process.execPath, [launcher, "serve", "--db", db, "--port", "0"], { cwd: work, env: plainEnv(), stdio: ["ignore", "pipe", "pipe"] })
    try {
      const url = await new Promise<string>((resolve, reject) => {
        let stdout = ""
        let stderr = ""
        child.stdout.setEncoding("utf8").on("data", (chunk: string) => {
          stdout += chunk
          const match = /polyloop viewer on (http:\/\/\S+)/.exec(stdout)
          if (match !== null) resolve(match[1]!)
        })
        child.stderr.setEncoding("utf8").on("data", (chunk: string) => (stderr += chunk))
        child.on("close", (code) => reject(new Error(`serve exited (${code}) before listening:\n${stdout}\n${stderr}`)))
      })
      const files = [["/", "index.html"], ["/assets/viewer.css", "viewer.css"], ["/assets/viewer.js", "viewer.js"], ["/assets/session.js", "session.js"], ["/assets/subagents.js", "subagents.js"], ["/assets/chart.umd.min.js", "vendor/chart.umd.min.js"]] as const
      for (const [page, file] of files) {
        // The page's files hold no data: served without a credential (design 0370).
        const response = await fetch(new URL(page, url))
        assert.strictEqual(response.status, 200, page)
        assert.strictEqual(await response.text(), fs.readFileSync(path.join(cliDir, "viewer", file), "utf8"), page)
      }
    } finally {
      child.kill("SIGTERM")
    }
  }, 300_000)
})
