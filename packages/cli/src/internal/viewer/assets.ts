/**
 * The page of `polyloop serve`: plain HTML, CSS and JavaScript files in `packages/cli/viewer/`
 * (no build step), read once when the server starts and served from memory. The charting
 * library (Chart.js, MIT) is a copy of the pinned devDependency's UMD build in
 * `viewer/vendor/` (`npm run vendor-viewer` in packages/cli refreshes it; a test checks it is
 * the installed version's file): nothing is fetched from the network at view time.
 *
 * @internal
 */
import * as FileSystem from "@effect/platform/FileSystem"
import * as Effect from "effect/Effect"
import { fileURLToPath } from "node:url"

/** The folder of the page's files. */
export const directory = fileURLToPath(new URL("../../../viewer/", import.meta.url))

/** A file of the page. */
export interface Asset {
  readonly body: string
  readonly contentType: string
}

/** The page's files, by URL path. */
export type Assets = ReadonlyMap<string, Asset>

const files: ReadonlyArray<readonly [urlPath: string, file: string, contentType: string]> = [
  ["/", "index.html", "text/html; charset=utf-8"],
  ["/assets/viewer.css", "viewer.css", "text/css; charset=utf-8"],
  ["/assets/viewer.js", "viewer.js", "text/javascript; charset=utf-8"],
  ["/assets/session.js", "session.js", "text/javascript; charset=utf-8"],
  ["/assets/subagents.js", "subagents.js", "text/javascript; charset=utf-8"],
  ["/assets/chart.umd.min.js", "vendor/chart.umd.min.js", "text/javascript; charset=utf-8"],
  ["/experiments", "experiments.html", "text/html; charset=utf-8"],
  ["/assets/experiments.js", "experiments.js", "text/javascript; charset=utf-8"],
  ["/assets/experiments.css", "experiments.css", "text/css; charset=utf-8"]
]

/** Reads the page's files; the error is the message of the first that cannot be read. */
export const load: Effect.Effect<Assets, string, FileSystem.FileSystem> = Effect.gen(function*() {
  const fs = yield* FileSystem.FileSystem
  const loaded = yield* Effect.forEach(files, ([urlPath, file, contentType]) =>
    fs.readFileString(`${directory}${file}`).pipe(
      Effect.map((body) => [urlPath, { body, contentType }] as const),
      Effect.mapError((error) => `cannot read the viewer's file ${directory}${file}: ${error.message}`)
    ))
  return new Map(loaded)
})
