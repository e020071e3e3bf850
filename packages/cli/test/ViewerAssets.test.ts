/**
 * The viewer's vendored charting library (design 0342) is the installed chart.js's UMD build
 * (as `npm run vendor-viewer` copies it, without the source map comment), so the pinned version
 * in package.json is what the page runs.
 */
import { assert, describe, it } from "@effect/vitest"
import * as fs from "node:fs"
import { createRequire } from "node:module"
import * as path from "node:path"
import { fileURLToPath } from "node:url"

const require = createRequire(import.meta.url)
const installed = path.resolve(path.dirname(require.resolve("chart.js")), "..")
const vendored = fileURLToPath(new URL("../viewer/vendor/chart.umd.min.js", import.meta.url))

describe("viewer assets", () => {
  it("the vendored Chart.js is the pinned, installed version's UMD build", () => {
    const version = (JSON.parse(fs.readFileSync(path.join(installed, "package.json"), "utf8")) as { readonly version: string }).version
    const packageJson = JSON.parse(fs.readFileSync(fileURLToPath(new URL("../package.json", import.meta.url)), "utf8")) as { readonly devDependencies: Record<string, string> }
    assert.strictEqual(packageJson.devDependencies["chart.js"], version, "pinned exactly")
    const expected = fs.readFileSync(path.join(installed, "dist", "chart.umd.min.js"), "utf8").replace(/\n\/\/# sourceMappingURL=\S+\s*$/, "\n")
    const actual = fs.readFileSync(vendored, "utf8")
    assert.isTrue(actual === expected, "viewer/vendor/chart.umd.min.js differs from the installed chart.js: run npm run vendor-viewer in packages/cli")
    assert.include(actual.slice(0, 200), `Chart.js v${version}`)
  })
})
