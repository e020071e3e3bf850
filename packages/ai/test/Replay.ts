/**
 * Replaying recorded provider payloads (`fixtures/recorded/`, sources in its `SOURCES.md`) from
 * the loopback `FakeServer`: a fixture file is served byte for byte with its status, and with
 * the headers of its `<name>.headers.json` sidecar when there is one.
 *
 * Not collected by vitest (no `.test.ts`).
 */
import * as fs from "node:fs"
import * as FakeServer from "./FakeServer.js"

const directory = new URL("./fixtures/recorded/", import.meta.url)

/** The text of a recorded payload. */
export const text = (file: string): string => fs.readFileSync(new URL(file, directory), "utf8")

/** A recorded payload parsed as JSON. */
export const json = (file: string): unknown => JSON.parse(text(file))

/** The recorded headers of a payload (its `.headers.json` sidecar), or none. */
export const headers = (file: string): Readonly<Record<string, string>> => {
  const sidecar = new URL(file.replace(/\.json$/, ".headers.json"), directory)
  return fs.existsSync(sidecar) ? (JSON.parse(fs.readFileSync(sidecar, "utf8")) as Record<string, string>) : {}
}

/** The status a file name says (`name.429.json` → 429), 200 otherwise. */
export const statusOf = (file: string): number => {
  const match = /\.(\d{3})\.json$/.exec(file)
  return match === null ? 200 : Number(match[1])
}

/** The recorded payload as the server's answer: its status, its bytes, its headers. */
export const reply = (file: string): FakeServer.Reply => FakeServer.raw(statusOf(file), text(file), "application/json", headers(file))

/** Every recorded payload file (sidecars excluded). */
export const all = (): ReadonlyArray<string> =>
  fs.readdirSync(directory).filter((file) => file.endsWith(".json") && !file.endsWith(".headers.json")).sort()
