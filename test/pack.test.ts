/**
 * The packages as a user gets them (issue 21, design 0210): every package is packed (`npm pack`)
 * and the tarballs installed into a fresh project outside the monorepo — a plain `package.json`,
 * no workspace links, no `@polyloop/source` condition, no tsx loader in NODE_OPTIONS. There the README's example is
 * compiled with `tsc` and run with plain `node`, a TypeScript file using the public API
 * type-checks, the installed `polyloop demo` and `polyloop runs` work — `runs` from the packed
 * bundle (design 0213; which code ran is read from a CPU profile of the process) — and
 * `polyloop replay --agent <module>` with a user's module runs the unbundled `dist/` on the
 * project's one `effect`, and `npm ls effect` shows one copy.
 *
 * Installing: third-party packages come from the npm registry through the npm cache
 * (`--prefer-offline`: what `npm ci` of the monorepo cached is not fetched again). Install
 * scripts are not run (`--ignore-scripts`): better-sqlite3's would fetch a prebuilt binary from
 * GitHub (prebuild-install) or compile SQLite (node-gyp, a minute on this machine); the test
 * copies in the native binary the monorepo's own better-sqlite3 of the same version built, and
 * checks the versions match. Nothing else the packages need has an install script.
 */
import { afterAll, assert, beforeAll, describe, it } from "@effect/vitest"
import * as fs from "node:fs"
import { createRequire } from "node:module"
import * as os from "node:os"
import * as path from "node:path"
import { fileURLToPath } from "node:url"
import { type Result, ranUnder, spawnCommand, spawnProfiled } from "./support/cli-process.js"

const root = fileURLToPath(new URL("..", import.meta.url))
const work = fs.mkdtempSync(path.join(os.tmpdir(), "polyloop-pack-"))
const require = createRequire(import.meta.url)
const packages = ["core", "testing", "sql", "ai", "eval", "cli", "mcp", "cluster", "sandbox"] as const
const tscCli = require.resolve("typescript/bin/tsc")

/** The environment of a user's shell: none of the monorepo's NODE_OPTIONS (source condition, tsx). */
const userEnv = (): NodeJS.ProcessEnv => {
  const env: NodeJS.ProcessEnv = { ...process.env }
  for (const name of ["NODE_OPTIONS", "FORCE_COLOR", "POLYLOOP_API_KEY", "POLYLOOP_BASE_URL", "POLYLOOP_MODEL", "VITEST", "VITEST_POOL_ID", "VITEST_WORKER_ID", "TSX_TSCONFIG_PATH"]) {
    delete env[name]
  }
  for (const name of Object.keys(env)) if (name.startsWith("npm_")) delete env[name]
  // The command's compile cache (design 0213) in the test's own directory, not the user's.
  env["XDG_CACHE_HOME"] = path.join(work, "cache")
  return env
}

const run = (command: string, args: ReadonlyArray<string>, cwd: string): Promise<Result> => spawnCommand(command, args, { cwd, env: userEnv() })

const ok = async (command: string, args: ReadonlyArray<string>, cwd: string): Promise<Result> => {
  const result = await run(command, args, cwd)
  assert.strictEqual(result.code, 0, `${command} ${args.join(" ")} in ${cwd}:\n${result.stdout}\n${result.stderr}`)
  return result
}

const versionOf = (dir: string): string => (JSON.parse(fs.readFileSync(path.join(dir, "package.json"), "utf8")) as { version: string }).version

/** The README's example: its TypeScript code block that wires with `Agent.layer`. */
const readmeExample = (): string => {
  const readme = fs.readFileSync(path.join(root, "README.md"), "utf8")
  const blocks = [...readme.matchAll(/```ts\n([\s\S]*?)```/g)].map((match) => match[1]!)
  const example = blocks.find((block) => block.includes("Agent.layer({"))
  assert.isDefined(example, "README.md has a ts block using Agent.layer")
  return example!
}

/** A program against the public API, type-checked only: the wiring's types as a user meets them. */
const consumer = `import { Agent, AgentDefinition, Ids, JsonActionParser, RunLogStore, StopReason, Tool, ToolRegistry } from "@polyloop/core"
import * as Telemetry from "@polyloop/core/Telemetry"
import { SqlRunLogStore } from "@polyloop/sql"
import { OpenAiCompatible } from "@polyloop/ai"
import * as ScriptedModel from "@polyloop/testing/ScriptedModel"
import { Effect, Layer, Schema } from "effect"

const add = Tool.make({
  name: "add",
  description: "Adds two numbers.",
  parameters: Schema.Struct({ a: Schema.Number, b: Schema.Number }),
  handler: ({ a, b }) => Effect.succeed(String(a + b))
})
const tools = ToolRegistry.make(add)
// Every tool has its handler: deriving the executor cannot fail.
const executor: Layer.Layer<import("@polyloop/core").ActionExecutor.ActionExecutor, never, never> = ToolRegistry.layerExecutor(tools)
const agent = AgentDefinition.make({ name: "adder", systemPrompt: "Add.", budget: { maxSteps: 3 } })
const services = Agent.layer({ store: RunLogStore.inMemory(), model: ScriptedModel.layer(["3"]), parser: JsonActionParser.layer(), tools })
const inMemory: Effect.Effect<Agent.RunResult, import("@polyloop/core").Errors.RunError> = Agent.run({ runId: Ids.runId("a"), agent, task: "1+2", tools }).pipe(
  Effect.provide(services)
)
const durable = Agent.run({ runId: Ids.runId("b"), agent, task: "1+2", tools }).pipe(
  Effect.provide(Agent.layer({ store: SqlRunLogStore.layerSqlite({ filename: "x.db" }), model: OpenAiCompatible.layerConfig(), parser: JsonActionParser.layer(), executor }))
)
export const programs = [inMemory.pipe(Effect.map((r) => StopReason.format(r.stopReason))), durable, Telemetry.annotateModel({ model: "m" })] as const
`

const consumerTsconfig = {
  compilerOptions: {
    target: "ES2022",
    module: "NodeNext",
    moduleResolution: "NodeNext",
    strict: true,
    exactOptionalPropertyTypes: true,
    skipLibCheck: true,
    types: ["node"],
    outDir: "out"
  },
  include: ["*.ts"]
}

describe.sequential("the packages, packed and installed into a plain Node project", () => {
  const project = path.join(work, "app")
  const tarballs = new Map<string, string>()

  beforeAll(async () => {
    // What `npm test` already did; a no-op when dist/ is up to date.
    await ok(process.execPath, [require.resolve("typescript/bin/tsc"), "-b", ...packages.map((p) => `packages/${p}`)], root)
    for (const name of packages) {
      const packed = await ok("npm", ["pack", "--json", "--pack-destination", work], path.join(root, "packages", name))
      const [info] = JSON.parse(packed.stdout) as Array<{ filename: string; files: Array<{ path: string }> }>
      tarballs.set(name, path.join(work, info!.filename))
      const files = info!.files.map((file) => file.path)
      assert.isTrue(files.some((file) => file === "dist/index.js"), `${name}: dist/index.js packed`)
      assert.isTrue(files.some((file) => file === "dist/index.d.ts"), `${name}: dist/index.d.ts packed`)
      assert.isFalse(files.some((file) => file.startsWith("test/") || file.endsWith(".tsbuildinfo")), `${name}: no tests, no build info`)
      if (name === "cli") assert.include(files, "bundle/polyloop.cjs", "cli: the bundled command is packed (prepack builds it)")
    }
    fs.mkdirSync(project)
    const dependency = (name: string) => `file:${tarballs.get(name)}`
    fs.writeFileSync(
      path.join(project, "package.json"),
      JSON.stringify(
        {
          name: "polyloop-user",
          private: true,
          type: "module",
          dependencies: {
            ...Object.fromEntries(packages.map((name) => [`@polyloop/${name}`, dependency(name)])),
            effect: `^${versionOf(path.join(root, "node_modules", "effect"))}`,
            "@effect/platform-node": `^${versionOf(path.join(root, "node_modules", "@effect/platform-node"))}`
          },
          devDependencies: { "@types/node": versionOf(path.join(root, "node_modules", "@types/node")) },
          // The packages depend on each other by version ("0.1.0"): the packed ones, not the registry's.
          overrides: Object.fromEntries(packages.map((name) => [`@polyloop/${name}`, `$@polyloop/${name}`]))
        },
        null,
        2
      )
    )
    await ok("npm", ["install", "--prefer-offline", "--ignore-scripts", "--no-audit", "--no-fund", "--loglevel=error"], project)
    // better-sqlite3's native binary: the monorepo's build of the same version.
    const ours = path.join(root, "node_modules", "better-sqlite3")
    const theirs = path.join(project, "node_modules", "better-sqlite3")
    assert.strictEqual(versionOf(theirs), versionOf(ours), "the installed better-sqlite3 is the monorepo's version")
    fs.mkdirSync(path.join(theirs, "build", "Release"), { recursive: true })
    fs.copyFileSync(path.join(ours, "build", "Release", "better_sqlite3.node"), path.join(theirs, "build", "Release", "better_sqlite3.node"))
  }, 900_000)

  afterAll(() => fs.rmSync(work, { recursive: true, force: true }))

  it("npm ls effect: one copy of effect, shared by every package", async () => {
    const listed = await ok("npm", ["ls", "effect", "--all", "--parseable"], project)
    const copies = new Set(listed.stdout.split("\n").filter((line) => line.trim() !== ""))
    assert.deepStrictEqual([...copies], [path.join(project, "node_modules", "effect")])
    const tree = await ok("npm", ["ls", "effect", "--all"], project)
    assert.include(tree.stdout, "@polyloop/core@0.1.0")
    assert.notInclude(tree.stdout, "invalid")
  }, 300_000)

  it("the packages resolve to their compiled dist/; tsx is installed only as the CLI's loader of TypeScript experiment modules (design 0363)", async () => {
    const probe = await ok(process.execPath, ["--input-type=module", "-e", "for (const p of ['@polyloop/core', '@polyloop/sql/SqlRunLogStore', '@polyloop/cli/bin']) console.log(import.meta.resolve(p))"], project)
    const resolved = probe.stdout.trim().split("\n")
    assert.strictEqual(resolved.length, 3)
    for (const url of resolved) assert.match(url, /\/node_modules\/@polyloop\/[a-z]+\/dist\/[A-Za-z]+\.js$/)
    // Nothing resolves through tsx: the three modules above are dist/ files. tsx is there only
    // because `polyloop eval <module.ts>` imports a user's TypeScript module with it (design 0363).
    const tsx = await ok("npm", ["ls", "tsx", "--all"], project)
    assert.include(tsx.stdout, "@polyloop/cli@0.1.0")
    assert.include(tsx.stdout, "tsx@4.23.15")
  })

  it("the README's example: compiled by tsc, run with plain node, durable (a second run returns the recorded result)", async () => {
    const dir = path.join(project, "readme")
    fs.mkdirSync(dir)
    fs.writeFileSync(path.join(dir, "example.ts"), readmeExample())
    fs.writeFileSync(path.join(dir, "tsconfig.json"), JSON.stringify(consumerTsconfig))
    await ok(process.execPath, [tscCli, "-p", "tsconfig.json"], dir)
    const first = await ok(process.execPath, ["out/example.js"], dir)
    assert.strictEqual(first.stdout.trim(), "Completed(Answer) after 2 steps")
    assert.isTrue(fs.existsSync(path.join(dir, "weather.db")))
    const second = await ok(process.execPath, ["out/example.js"], dir)
    assert.strictEqual(second.stdout.trim(), "Completed(Answer) after 2 steps")
  }, 300_000)

  it("a TypeScript program against the public API type-checks (strict, exactOptionalPropertyTypes)", async () => {
    const dir = path.join(project, "consumer")
    fs.mkdirSync(dir)
    fs.writeFileSync(path.join(dir, "consumer.ts"), consumer)
    fs.writeFileSync(path.join(dir, "tsconfig.json"), JSON.stringify({ ...consumerTsconfig, compilerOptions: { ...consumerTsconfig.compilerOptions, noEmit: true } }))
    await ok(process.execPath, [tscCli, "-p", "tsconfig.json"], dir)
    // And a wrong program does not: the types are really there (not `any`).
    fs.writeFileSync(path.join(dir, "consumer.ts"), consumer.replace(`task: "1+2", tools }).pipe(\n  Effect.provide(services)`, `task: 12, tools }).pipe(\n  Effect.provide(services)`))
    const wrong = await run(process.execPath, [tscCli, "-p", "tsconfig.json"], dir)
    assert.notStrictEqual(wrong.code, 0)
    assert.match(wrong.stdout, /consumer\.ts\(\d+,\d+\): error TS2322: Type 'number' is not assignable to type 'string'/)
  }, 300_000)

  it("the installed polyloop command: demo (killed mid-step, then resumed) and runs, with plain node", async () => {
    const dir = path.join(project, "demo")
    fs.mkdirSync(dir)
    const bin = path.join(project, "node_modules", ".bin", "polyloop")
    const crashed = await run(bin, ["demo", "--crash-at", "3"], dir)
    assert.strictEqual(crashed.code, null, `killed by SIGKILL mid-step:\n${crashed.stdout}\n${crashed.stderr}`)
    assert.match(crashed.stdout, /SIGKILL at step 3/)
    const resumed = await ok(bin, ["demo", "--resume"], dir)
    assert.match(resumed.stdout, /Completed\(Tool\)/)
    const runs = await ok(bin, ["runs"], dir)
    assert.match(runs.stdout, /^demo-\S+\s+policy-editor\s+finished\s+Completed\(Tool\)/m)
    assert.isTrue(fs.existsSync(path.join(dir, "polyloop.db")))
    // The installed bin runs the packed bundle (design 0213): its code ran, none of the
    // unbundled dist/ or of the project's effect.
    const installed = path.join(project, "node_modules", "@polyloop", "cli")
    const profiledRuns = await spawnProfiled([bin, "runs"], { cwd: dir, env: userEnv(), profileDir: path.join(work, "profile-runs") })
    assert.strictEqual(profiledRuns.code, 0, profiledRuns.stderr)
    assert.strictEqual(profiledRuns.stdout, runs.stdout)
    assert.isTrue(profiledRuns.ran.has(path.join(installed, "bundle", "polyloop.cjs")), "the installed bundle ran")
    assert.isFalse(ranUnder(profiledRuns.ran, path.join(installed, "dist")), "no module of the installed dist/ ran")
    assert.isFalse(ranUnder(profiledRuns.ran, path.join(project, "node_modules", "effect")), "no module of the project's effect ran")
  }, 300_000)

  it("polyloop replay --agent <a user's module>: the installed command runs its dist/ on the project's one effect", async () => {
    // A demo run that was not killed (a resumed run's log holds the interruption, which a replay
    // does not reproduce), replayed with a user's replayTarget module: plain JavaScript importing
    // @polyloop/cli/GovDoc, @polyloop/core and effect from the project.
    const dir = path.join(project, "replay")
    fs.mkdirSync(dir)
    const bin = path.join(project, "node_modules", ".bin", "polyloop")
    await ok(bin, ["demo", "--run", "replayable"], dir)
    fs.copyFileSync(path.join(root, "test", "support", "demo-replay-target.mjs"), path.join(dir, "target.mjs"))
    const replayed = await spawnProfiled([bin, "replay", "replayable", "--agent", "target.mjs"], { cwd: dir, env: userEnv(), profileDir: path.join(work, "profile-replay") })
    assert.strictEqual(replayed.code, 0, `${replayed.stdout}\n${replayed.stderr}`)
    assert.match(replayed.stdout, /^identical: the replay of replayable reproduced its \d+ records/)
    const installed = path.join(project, "node_modules", "@polyloop", "cli")
    assert.isFalse(replayed.ran.has(path.join(installed, "bundle", "polyloop.cjs")), "the bundle did not run")
    assert.isTrue(ranUnder(replayed.ran, path.join(installed, "dist")), "the installed dist/ ran")
    assert.isTrue(ranUnder(replayed.ran, path.join(project, "node_modules", "effect")), "the project's effect ran")
  }, 300_000)
})
