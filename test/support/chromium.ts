/**
 * The browser of the browser tests: Debian's `chromium` package at /usr/bin/chromium, installed
 * with apt-get when it is missing and we are root (`.ci/run` installs it first), and launched by
 * `playwright-core` headless with a fresh profile and every background connection off — nothing
 * is downloaded at run time (playwright-core never fetches a browser of its own).
 */
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import { type BrowserContext, chromium } from "playwright-core"
import * as Apt from "./apt.js"

/** Where Debian puts the browser. */
export const executablePath = "/usr/bin/chromium"

/** The flags: headless, no sandbox (root in a container), no GPU, nothing fetched in the background. */
export const flags: ReadonlyArray<string> = [
  "--headless",
  "--no-sandbox",
  "--disable-gpu",
  "--disable-quic",
  "--no-first-run",
  "--disable-background-networking",
  "--disable-component-update",
  "--disable-sync"
]

/** Makes sure the browser is there, installing Debian's package when missing (root only). */
export const ensure = (log: (line: string) => void = (line) => process.stderr.write(`${line}\n`)): void => {
  if (Fs.existsSync(executablePath)) return
  Apt.install("chromium", "Chromium (/usr/bin/chromium)", log)
  if (!Fs.existsSync(executablePath)) throw new Error(`apt-get installed chromium but ${executablePath} is not there`)
}

/** A running browser with a fresh profile; `close` stops it and removes the profile. */
export interface Browser {
  readonly context: BrowserContext
  /** The profile directory (the browser's `Default/History` database is in it). */
  readonly profile: string
  readonly close: () => Promise<void>
}

/** Launches the browser with a fresh profile directory. */
export const launch = async (options: { readonly width?: number; readonly height?: number } = {}): Promise<Browser> => {
  ensure()
  const profile = Fs.mkdtempSync(Path.join(Os.tmpdir(), "polyloop-chromium-profile-"))
  const context = await chromium.launchPersistentContext(profile, {
    executablePath,
    headless: true,
    args: [...flags],
    viewport: { width: options.width ?? 1280, height: options.height ?? 900 }
  })
  return {
    context,
    profile,
    close: async () => {
      await context.close()
      Fs.rmSync(profile, { recursive: true, force: true })
    }
  }
}

/**
 * Opens the URL `polyloop serve` printed (`/#login=<code>`, design 0370) in a new page and waits
 * until the page has exchanged the code for its session (kept in the origin's `localStorage`),
 * so that the next pages of this browser are logged in. Resolves with the page, left open.
 */
export const login = async (context: BrowserContext, printedUrl: string) => {
  const page = await context.newPage()
  await page.goto(printedUrl)
  for (let tries = 0; tries < 600; tries++) {
    if (await page.evaluate(`localStorage.getItem("polyloop-session") !== null`)) return page
    await page.waitForTimeout(50)
  }
  throw new Error(`the page of ${new URL(printedUrl).origin} never stored its session`)
}
