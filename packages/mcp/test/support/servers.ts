/**
 * How the tests reach their MCP servers: the reference filesystem server and the test server,
 * both run from this repository's `node_modules` over stdio (nothing is downloaded), and small
 * helpers to read the test server's records.
 */
import { existsSync, readFileSync } from "node:fs"
import { createRequire } from "node:module"
import * as Path from "node:path"
import { fileURLToPath } from "node:url"
import * as Effect from "effect/Effect"
import * as Schedule from "effect/Schedule"
import * as McpClient from "@polyloop/mcp/McpClient"

const here = Path.dirname(fileURLToPath(import.meta.url))
/** The repository's root (where `--import tsx` resolves). */
export const repoRoot = Path.resolve(here, "..", "..", "..", "..")

/** The reference filesystem server's entry point, from node_modules. */
export const filesystemServerEntry: string = createRequire(import.meta.url).resolve("@modelcontextprotocol/server-filesystem/dist/index.js")

/** The reference filesystem server over stdio, allowed to use `dir`. */
export const filesystemServer = (dir: string): McpClient.StdioTransport =>
  McpClient.stdio({ command: process.execPath, args: [filesystemServerEntry, dir], cwd: repoRoot })

/** The test server over stdio; records to `recordFile` if given; `variant` changes its tools. */
export const testServer = (options: { readonly recordFile?: string; readonly variant?: string } = {}): McpClient.StdioTransport =>
  McpClient.stdio({
    command: process.execPath,
    args: ["--import", "tsx", Path.join(here, "stdioServer.ts"), options.recordFile ?? "-", ...(options.variant === undefined ? [] : [options.variant])],
    cwd: repoRoot
  })

/** The lines the test server recorded so far. */
export const records = (file: string): ReadonlyArray<string> =>
  existsSync(file) ? readFileSync(file, "utf8").split("\n").filter((line) => line !== "") : []

/** Waits (polling every 25 ms, up to 2 minutes of real time, a guard for loaded machines) until `file` has a line matching `pattern`. */
export const awaitRecord = (file: string, pattern: RegExp): Effect.Effect<string, Error> =>
  Effect.suspend(() => {
    const line = records(file).find((l) => pattern.test(l))
    return line === undefined ? Effect.fail(new Error(`no record matching ${pattern} in ${file}: ${JSON.stringify(records(file))}`)) : Effect.succeed(line)
  }).pipe(Effect.retry({ schedule: Schedule.spaced("25 millis"), times: 4_800 }))

/** The pid the test server recorded. */
export const serverPid = (file: string): Effect.Effect<number, Error> =>
  Effect.map(awaitRecord(file, /^pid \d+$/), (line) => Number(line.slice(4)))
