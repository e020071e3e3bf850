/**
 * Compiling a child-process entry point once per test process, so that each child starts in
 * plain `node` from one JavaScript file instead of going through `tsx` (which transforms and
 * loads every TypeScript module of the workspace again in each child: about a second per child
 * on a loaded machine; the bundle starts in a fraction of that). esbuild bundles the entry with
 * the workspace's sources; the native SQLite driver and the PostgreSQL driver stay outside
 * (resolved from the repository's `node_modules`, next to which the bundle is written).
 */
import { build } from "esbuild"
import * as Fs from "node:fs"
import * as Path from "node:path"
import { fileURLToPath } from "node:url"

const here = Path.dirname(fileURLToPath(import.meta.url))
const repoRoot = Path.resolve(here, "..", "..")
const outDir = Path.join(repoRoot, "test", "build", "bundles")

const built = new Map<string, Promise<string>>()

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
      entryPoints: [entry],
      outfile,
      bundle: true,
      platform: "node",
      format: "esm",
      target: "node20",
      // A map beside the bundle, not inside it: an inline map doubles what each child parses
      // at start-up (node reads the map only with --enable-source-maps).
      sourcemap: "linked",
      logLevel: "error",
      external: ["better-sqlite3", "pg", "pg-native"],
      // The workspace's packages from their TypeScript source, not their built dist/ (design 0210).
      conditions: ["@polyloop/source"],
      // Bundled CommonJS modules call `require`; give the ES module one.
      banner: { js: "import { createRequire as __polyloopCreateRequire } from 'node:module'; const require = __polyloopCreateRequire(import.meta.url);" }
    })
    return outfile
  })()
  built.set(entry, promise)
  return promise
}
