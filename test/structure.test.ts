/**
 * The packages' structure (issue 46, design 0390): inside each package in `packages/*`, no import
 * circle — type imports and `export … from` count — and no file in `src/` over 450 lines unless
 * the first comment block of the file has a line starting with `Why one file:` that says why.
 * The import graph is madge's (TypeScript's module resolution through the package's tsconfig);
 * a failure names every circle and every long file.
 *
 * The checks are themselves checked on small packages written to a temporary folder: a circle of
 * type imports only is found, a marker outside the header does not count.
 */
import { afterAll, assert, describe, it } from "@effect/vitest"
import madge from "madge"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { fileURLToPath } from "node:url"

const root = fileURLToPath(new URL("..", import.meta.url))

/** Longest a file in `src/` may be without a reason in its header. */
const maxLines = 450

/** The marker of a reason, at the start of a line of the file's first comment block (design 0390). */
const marker = "Why one file:"

/** The packages: every folder of `packages/` with a `src/` and a `tsconfig.json`. */
const packages = fs.readdirSync(path.join(root, "packages")).filter((name) =>
  fs.existsSync(path.join(root, "packages", name, "src")) && fs.existsSync(path.join(root, "packages", name, "tsconfig.json"))
).sort()

/** The `.ts` files under `dir`, relative to it, with `/` separators. */
const sourceFiles = (dir: string): ReadonlyArray<string> =>
  (fs.readdirSync(dir, { recursive: true, encoding: "utf8" }))
    .filter((file) => file.endsWith(".ts"))
    .map((file) => file.split(path.sep).join("/"))
    .sort()

/** The number of lines of a text, as `wc -l` counts them. */
const lineCount = (text: string): number => {
  let lines = 0
  for (let i = 0; i < text.length; i++) if (text.charCodeAt(i) === 10) lines++
  return text.length > 0 && !text.endsWith("\n") ? lines + 1 : lines
}

/** The file's first comment block (`/* … *\/` before any code), or "" when it has none. */
const header = (text: string): string => {
  const start = text.search(/\S/)
  if (start < 0 || !text.startsWith("/*", start)) return ""
  const end = text.indexOf("*/", start + 2)
  return end < 0 ? "" : text.slice(start, end)
}

/** Does the header give a reason for the file's length? A line of it starts with the marker (after the comment's `*`). */
const hasReason = (text: string): boolean =>
  header(text).split("\n").some((line) => line.replace(/^\s*(\/\*+|\*)?\s*/, "").startsWith(marker))

/** The files of `src` over `maxLines` lines without a reason, as "path (N lines)". */
const longFiles = (src: string): ReadonlyArray<string> =>
  sourceFiles(src).flatMap((file) => {
    const text = fs.readFileSync(path.join(src, file), "utf8")
    const lines = lineCount(text)
    return lines > maxLines && !hasReason(text) ? [`${file} (${lines} lines)`] : []
  })

/** The import graph of `src` as madge reads it, type imports included. */
const graphOf = (src: string, tsConfig: string) =>
  madge(src, { fileExtensions: ["ts"], tsConfig, detectiveOptions: { ts: { skipTypeImports: false } } })

describe("structure: no import circle inside a package (type imports count)", () => {
  for (const pkg of packages) {
    it(pkg, async () => {
      const src = path.join(root, "packages", pkg, "src")
      const graph = await graphOf(src, path.join(root, "packages", pkg, "tsconfig.json"))
      // Every file was read (the graph may also hold a file outside src, e.g. `../package.json`),
      // and every import madge could not resolve is another package's: an unresolved relative
      // import would hide its circles.
      const read = new Set(Object.keys(graph.obj()))
      assert.deepStrictEqual(sourceFiles(src).filter((file) => !read.has(file)), [], `${pkg}/src: files madge did not read`)
      const unresolved = graph.warnings().skipped.filter((name) => name.startsWith("."))
      assert.deepStrictEqual(unresolved, [], `${pkg}: relative imports madge could not resolve`)
      const circles = graph.circular().map((circle) => circle.join(" → "))
      assert.deepStrictEqual(circles, [], `${pkg}/src has ${circles.length} import circle(s):\n  ${circles.join("\n  ")}\n`)
    })
  }
})

describe(`structure: no file in packages/*/src over ${maxLines} lines without "${marker}" in its header`, () => {
  for (const pkg of packages) {
    it(pkg, () => {
      const long = longFiles(path.join(root, "packages", pkg, "src"))
      assert.deepStrictEqual(long, [], `${pkg}/src: over ${maxLines} lines and no "${marker}" line in the header:\n  ${long.join("\n  ")}\n`)
    })
  }
})

describe("structure: the checks themselves", () => {
  const made: Array<string> = []
  afterAll(() => {
    for (const dir of made) fs.rmSync(dir, { recursive: true, force: true })
  })

  /** A package of `files` in a fresh temporary folder, with a tsconfig like the packages'. */
  const fixture = (files: Record<string, string>): { readonly src: string; readonly tsConfig: string } => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), "polyloop-structure-"))
    made.push(dir)
    const tsConfig = path.join(dir, "tsconfig.json")
    fs.writeFileSync(tsConfig, JSON.stringify({ compilerOptions: { module: "NodeNext", moduleResolution: "NodeNext", strict: true } }))
    for (const [file, text] of Object.entries(files)) {
      fs.mkdirSync(path.dirname(path.join(dir, "src", file)), { recursive: true })
      fs.writeFileSync(path.join(dir, "src", file), text)
    }
    return { src: path.join(dir, "src"), tsConfig }
  }

  it("a circle of type imports only, through an internal folder, is found", async () => {
    const { src, tsConfig } = fixture({
      "A.ts": "import type { B } from \"./internal/b.js\"\nexport interface A { readonly b?: B }\n",
      "internal/b.ts": "import type { A } from \"../A.js\"\nexport interface B { readonly a?: A }\n",
      "C.ts": "export { type A } from \"./A.js\"\n"
    })
    const graph = await graphOf(src, tsConfig)
    assert.deepStrictEqual(graph.circular(), [["A.ts", "internal/b.ts"]])
  })

  it("a package without a circle passes, `export … from` included", async () => {
    const { src, tsConfig } = fixture({
      "A.ts": "export { b } from \"./internal/b.js\"\n",
      "internal/b.ts": "import type { C } from \"../C.js\"\nexport const b = (c: C): C => c\n",
      "C.ts": "export type C = number\n"
    })
    assert.deepStrictEqual((await graphOf(src, tsConfig)).circular(), [])
  })

  it("a long file passes only with the marker in its first comment block", () => {
    const body = "export const x = 1\n".repeat(maxLines)
    const { src } = fixture({
      "Reasoned.ts": `/**\n * A module.\n *\n * ${marker} a single linear parser.\n */\n${body}`,
      "Late.ts": `/**\n * A module.\n */\n${body}/**\n * ${marker} said too late.\n */\n`,
      "Bare.ts": body + "export const y = 2\n",
      "Short.ts": `/** A module. */\n${"export const x = 1\n".repeat(maxLines - 1)}`
    })
    assert.deepStrictEqual(longFiles(src), [`Bare.ts (${maxLines + 1} lines)`, `Late.ts (${maxLines + 6} lines)`])
  })

  it("counts lines as wc -l does", () => {
    assert.strictEqual(lineCount(""), 0)
    assert.strictEqual(lineCount("a\n"), 1)
    assert.strictEqual(lineCount("a\nb"), 2)
    assert.strictEqual(lineCount("a\n\nb\n"), 3)
  })
})
