// Regenerates packages/*/src/index.ts: one `export * as Name from "./Name.js"` line per module,
// each under the module's header comment. Run: node scripts/gen-index.mjs
import { readdirSync, readFileSync, writeFileSync, existsSync } from "node:fs"
import { join } from "node:path"

for (const pkg of readdirSync("packages")) {
  const src = join("packages", pkg, "src")
  if (!existsSync(src)) continue
  const modules = readdirSync(src)
    .filter((f) => f.endsWith(".ts") && f !== "index.ts" && f !== "bin.ts" && /^[A-Z]/.test(f))
    .sort()
  if (modules.length === 0) continue
  const lines = [`/**\n * @polyloop/${pkg}\n *\n * @since 0.1.0\n */`]
  for (const file of modules) {
    const name = file.slice(0, -3)
    const text = readFileSync(join(src, file), "utf8")
    const header = /^\/\*\*([\s\S]*?)\*\//.exec(text)
    const summary = header
      ? header[1].split("\n").map((l) => l.replace(/^\s*\*\s?/, "").trim()).join("\n").trim().split(/\n\s*\n/)[0].replace(/\n/g, " ")
      : name
    lines.push(`\n/**\n * ${summary}\n */\nexport * as ${name} from "./${name}.js"`)
  }
  writeFileSync(join(src, "index.ts"), lines.join("\n") + "\n")
}
