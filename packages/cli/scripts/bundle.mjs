#!/usr/bin/env node
// Builds the bundle the `polyloop` launcher runs (design 0213): the compiled `dist/bin.js` and
// everything it imports, tree-shaken into one minified CommonJS file, `bundle/polyloop.cjs`.
// Run after `tsc -b` (it bundles the JavaScript tsc emitted): `npm run build` at the root,
// `npm run bundle` here, and `prepack` (a tarball always carries the bundle of its `dist/`).
//
// - better-sqlite3 (a native addon) is loaded by `require` from the package's `node_modules`;
//   pg-native (node-postgres' optional native binding) is never installed by us: both external.
// - `import.meta.url` is the bundle's own file URL (the store loads its driver with
//   `createRequire(import.meta.url)`).
// - The viewer's files are found from the bundle's folder: the one relative path in
//   `internal/viewer/assets.js` is rewritten (the build fails if it is no longer there).
// - Written to a temporary name and renamed: a command started meanwhile reads a whole file.
import { build } from "esbuild"
import * as fs from "node:fs"
import * as path from "node:path"
import { fileURLToPath } from "node:url"

const packageDir = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..")
const entry = path.join(packageDir, "dist", "bin.js")
const outDir = path.join(packageDir, "bundle")
const outFile = path.join(outDir, "polyloop.cjs")

/** The viewer's folder seen from `dist/internal/viewer/` and, in the bundle, from `bundle/`. */
const viewerPath = { dist: "\"../../../viewer/\"", bundle: "\"../viewer/\"" }

const viewerFolder = {
  name: "viewer-folder",
  setup(b) {
    b.onLoad({ filter: /[\\/]dist[\\/]internal[\\/]viewer[\\/]assets\.js$/ }, (args) => {
      const source = fs.readFileSync(args.path, "utf8")
      if (!source.includes(`new URL(${viewerPath.dist}, import.meta.url)`)) {
        throw new Error(`${args.path} no longer finds the viewer at new URL(${viewerPath.dist}, import.meta.url): update scripts/bundle.mjs`)
      }
      return { contents: source.replace(viewerPath.dist, viewerPath.bundle), loader: "js" }
    })
  }
}

if (!fs.existsSync(entry)) {
  process.stderr.write(`bundle.mjs: ${path.relative(process.cwd(), entry)} is missing: build the packages first (tsc -b)\n`)
  process.exit(1)
}

const result = await build({
  entryPoints: [entry],
  bundle: true,
  platform: "node",
  target: "node20",
  format: "cjs",
  minify: true,
  write: false,
  outfile: outFile,
  logLevel: "error",
  // tsx loads a user's TypeScript experiment module (design 0363), on the path that runs dist/, never the bundle.
  external: ["better-sqlite3", "pg-native", "tsx", "tsx/*"],
  define: { "import.meta.url": "__polyloopBundleUrl" },
  banner: { js: "var __polyloopBundleUrl=require(\"node:url\").pathToFileURL(__filename).href;" },
  legalComments: "none",
  plugins: [viewerFolder]
})

const [output] = result.outputFiles
fs.mkdirSync(outDir, { recursive: true })
const temporary = path.join(outDir, `.polyloop.cjs.${process.pid}.tmp`)
fs.writeFileSync(temporary, output.contents)
fs.renameSync(temporary, outFile)
