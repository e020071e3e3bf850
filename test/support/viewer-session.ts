/**
 * What the viewer's browser tests share: a SQLite store in a fresh folder with a runtime over it
 * (to seed runs), `polyloop serve` on it in this process, and Chromium logged in. `start` serves
 * and logs in once the store is seeded; `open` gives a page whose errors land in `pageErrors`;
 * `stop` closes the browser, the server and the runtime and removes the folder.
 */
import * as NodeContext from "@effect/platform-node/NodeContext"
import * as Serve from "@polyloop/cli/Serve"
import * as SqlRunLogStore from "@polyloop/sql/SqlRunLogStore"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Layer from "effect/Layer"
import * as ManagedRuntime from "effect/ManagedRuntime"
import * as Scope from "effect/Scope"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import type { Page } from "playwright-core"
import * as Chromium from "./chromium.js"

/** Serve's options a test may set (the port and the live interval are the harness's). */
export interface StartOptions {
  readonly prices?: Serve.Options["prices"]
  readonly width?: number
  readonly height?: number
}

/** A viewer session over a fresh SQLite store; `prefix` names its temporary folder. */
export const make = (prefix: string) => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), prefix))
  const db = path.join(dir, "runs.db")
  const runtime = ManagedRuntime.make(Layer.mergeAll(SqlRunLogStore.layerSqlite({ filename: db }), NodeContext.layer))
  const scope = Effect.runSync(Scope.make())
  const pageErrors: Array<string> = []
  let bound: Serve.Bound | undefined
  let browser: Chromium.Browser | undefined

  const start = async (options: StartOptions = {}): Promise<Serve.Bound> => {
    Chromium.ensure()
    bound = await runtime.runPromise(
      Serve.serve({ port: 0, interval: Duration.millis(200), ...(options.prices === undefined ? {} : { prices: options.prices }) }).pipe(Scope.extend(scope))
    )
    browser = await Chromium.launch({ width: options.width ?? 1280, height: options.height ?? 900 })
    await (await Chromium.login(browser.context, bound.url)).close()
    return bound
  }

  const open = async (pathname: string): Promise<Page> => {
    if (browser === undefined || bound === undefined) throw new Error("the viewer session was not started")
    const page = await browser.context.newPage()
    page.on("pageerror", (error) => pageErrors.push(error.message))
    await page.goto(new URL(pathname, bound.baseUrl).href)
    return page
  }

  const stop = async (): Promise<void> => {
    await browser?.close()
    await Effect.runPromise(Scope.close(scope, Exit.void))
    await runtime.dispose()
    fs.rmSync(dir, { recursive: true, force: true })
  }

  return { db, runtime, pageErrors, start, open, stop }
}
