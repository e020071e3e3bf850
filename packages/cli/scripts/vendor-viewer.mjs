// Copies the viewer's charting library (the pinned devDependency chart.js) into viewer/vendor/,
// where `polyloop serve` serves it from (design 0340's follow-up: no network at view time).
import * as fs from "node:fs"
import { createRequire } from "node:module"
import * as path from "node:path"
import { fileURLToPath } from "node:url"

const require = createRequire(import.meta.url)
// chart.js exports neither package.json nor the UMD file: find the package folder from its main entry.
const packageDir = path.resolve(path.dirname(require.resolve("chart.js")), "..")
const target = fileURLToPath(new URL("../viewer/vendor/", import.meta.url))
fs.mkdirSync(target, { recursive: true })
// The source map comment is dropped: the map is not served.
const code = fs.readFileSync(path.join(packageDir, "dist", "chart.umd.min.js"), "utf8").replace(/\n\/\/# sourceMappingURL=\S+\s*$/, "\n")
fs.writeFileSync(path.join(target, "chart.umd.min.js"), code)
fs.copyFileSync(path.join(packageDir, "LICENSE.md"), path.join(target, "chart.js-LICENSE.md"))
process.stdout.write(`viewer/vendor: chart.js ${JSON.parse(fs.readFileSync(path.join(packageDir, "package.json"), "utf8")).version}\n`)
