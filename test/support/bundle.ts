/**
 * Compiling a child-process entry point once per test process, so that each child starts in
 * plain `node` from one JavaScript file instead of going through `tsx` (which transforms and
 * loads every TypeScript module of the workspace again in each child: about a second per child
 * on a loaded machine; the bundle starts in a fraction of that). esbuild bundles the entry with
 * the workspace's sources; the native SQLite driver and the PostgreSQL driver stay outside
 * (resolved from the repository's `node_modules`, next to which the bundle is written).
 *
 * `startupSnapshot` goes one step further for the crash suite's children (design 0220): a
 * CommonJS bundle whose module evaluation is captured in a V8 start-up snapshot
 * (`node --snapshot-blob … --build-snapshot`), so a child starts with every module already
 * evaluated. The drivers cannot be in a snapshot (a native addon, sockets): they are replaced
 * by proxies that load the real module on first use.
 */
import { build, type BuildOptions, type Plugin } from "esbuild"
import { execFile } from "node:child_process"
import * as Fs from "node:fs"
import { createRequire } from "node:module"
import * as Path from "node:path"
import { fileURLToPath } from "node:url"

const here = Path.dirname(fileURLToPath(import.meta.url))
export const repoRoot = Path.resolve(here, "..", "..")
const outDir = Path.join(repoRoot, "test", "build", "bundles")

const built = new Map<string, Promise<string>>()

/** What every bundle of a child shares: a Node bundle of the workspace's sources. */
const common: BuildOptions = {
  bundle: true,
  platform: "node",
  target: "node20",
  logLevel: "error",
  // The workspace's packages from their TypeScript source, not their built dist/ (design 0210).
  conditions: ["@polyloop/source"]
}

/**
 * The path of a bundle of `entry` (an absolute path to a TypeScript file), built on first use
 * in this process; a file name of its own per process, so parallel test files do not race.
 */
export const bundle = (entry: string): Promise<string> => {
  const existing = built.get(entry)
  if (existing !== undefined) return existing
  const outfile = Path.join(outDir, `${Path.basename(entry, ".ts")}-${process.pid}.mjs`)
  const promise = (async () => {
    Fs.mkdirSync(outDir, { recursive: true })
    await build({
      ...common,
      entryPoints: [entry],
      outfile,
      format: "esm",
      // A map beside the bundle, not inside it: an inline map doubles what each child parses
      // at start-up (node reads the map only with --enable-source-maps).
      sourcemap: "linked",
      external: ["better-sqlite3", "pg", "pg-native"],
      // Bundled CommonJS modules call `require`; give the ES module one.
      banner: { js: "import { createRequire as __polyloopCreateRequire } from 'node:module'; const require = __polyloopCreateRequire(import.meta.url);" }
    })
    return outfile
  })()
  built.set(entry, promise)
  return promise
}

const requireFromRoot = createRequire(Path.join(repoRoot, "package.json"))

/**
 * The drivers as proxies loading the real module on first use. `import * as Pg from "pg"`
 * copies the module's keys when the importing module is evaluated (as getters): the proxy
 * lists them from the real module, read here at build time.
 */
const lazyDrivers: Plugin = {
  name: "lazy-drivers",
  setup(b) {
    b.onResolve({ filter: /^(better-sqlite3|pg)$/ }, (args) => ({ path: args.path, namespace: "lazy-driver" }))
    b.onLoad({ filter: /.*/, namespace: "lazy-driver" }, (args) => {
      const keys = Object.keys(requireFromRoot(args.path) as object)
      return { contents: `module.exports = __polyloopLazy(${JSON.stringify(args.path)}, ${JSON.stringify(keys)})`, loader: "js" }
    })
    // The store loads better-sqlite3 with `createRequire(import.meta.url)` (sqliteFile.ts).
    b.onLoad({ filter: /sqliteFile\.ts$/ }, (args) => {
      const source = Fs.readFileSync(args.path, "utf8")
      if (!source.includes("createRequire(import.meta.url)")) throw new Error(`${args.path} no longer loads its driver with createRequire(import.meta.url): update bundle.ts`)
      return { contents: source.replace("createRequire(import.meta.url)", "((name: string) => __polyloopLazy(name, []))"), loader: "ts" }
    })
  }
}

const lazyBanner = `var __polyloopLazy = (name, keys) => {
  let real;
  const load = () => real ??= require("node:module").createRequire(${JSON.stringify(Path.join(repoRoot, "package.json"))})(name);
  return new Proxy(function () {}, {
    construct: (_t, args) => new (load())(...args),
    apply: (_t, self, args) => load().apply(self, args),
    get: (_t, key) => load()[key],
    has: (_t, key) => key in load(),
    ownKeys: (t) => [...new Set([...keys, ...Reflect.ownKeys(t)])],
    getOwnPropertyDescriptor: (t, key) => keys.includes(key) && Reflect.getOwnPropertyDescriptor(t, key)?.configurable !== false ? { configurable: true, enumerable: true, get: () => load()[key] } : Reflect.getOwnPropertyDescriptor(t, key)
  });
};`

const run = (args: ReadonlyArray<string>): Promise<void> =>
  new Promise((resolve, reject) =>
    execFile(process.execPath, args, { cwd: repoRoot, maxBuffer: 16 * 1024 * 1024 }, (error, _stdout, stderr) =>
      error === null ? resolve() : reject(new Error(`${error.message}\n${stderr}`))))

/** How to start a child of `entry` in plain `node`: the arguments before the child's own. */
export interface Start {
  readonly args: ReadonlyArray<string>
  /** Whether the child starts from a start-up snapshot (else from its CommonJS bundle). */
  readonly snapshot: boolean
  /** Why there is no snapshot, when there is none. */
  readonly fallback?: string
}

const snapshots = new Map<string, Promise<Start>>()

/**
 * A CommonJS bundle of `entry` and a V8 start-up snapshot of it (`entry` must call
 * `v8.startupSnapshot.setDeserializeMainFunction` while the snapshot is built, and run its main
 * otherwise); when node cannot build the snapshot, the bundle alone (the reason in `fallback`).
 * `v8Flags` are given to node both when the snapshot is built and when a child starts from it
 * (V8 refuses a snapshot built with other flags).
 */
export const startupSnapshot = (entry: string, options?: { readonly v8Flags?: ReadonlyArray<string> }): Promise<Start> => {
  const flags = options?.v8Flags ?? []
  const key = JSON.stringify([entry, flags])
  const existing = snapshots.get(key)
  if (existing !== undefined) return existing
  const base = Path.join(outDir, `${Path.basename(entry, ".ts")}-${process.pid}-${snapshots.size}`)
  const promise = (async (): Promise<Start> => {
    Fs.mkdirSync(outDir, { recursive: true })
    await build({
      ...common,
      entryPoints: [entry],
      outfile: `${base}.cjs`,
      format: "cjs",
      external: ["pg-native"],
      plugins: [lazyDrivers],
      banner: { js: lazyBanner }
    })
    try {
      // V8 loads a snapshot only with the flags it was built with: the same flags for both.
      await run([...flags, "--snapshot-blob", `${base}.blob`, "--build-snapshot", `${base}.cjs`])
      return { args: [...flags, "--snapshot-blob", `${base}.blob`], snapshot: true }
    } catch (error) {
      return { args: [...flags, `${base}.cjs`], snapshot: false, fallback: error instanceof Error ? error.message : String(error) }
    }
  })()
  snapshots.set(key, promise)
  return promise
}
