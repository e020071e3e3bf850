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

const streams = new URL("./fixtures/recorded/streams/", import.meta.url)

/** The text of a recorded stream (`fixtures/recorded/streams/`). */
export const streamText = (file: string): string => fs.readFileSync(new URL(file, streams), "utf8")

/**
 * A recorded stream as the events a server sends, each with its blank line: a `.sse` file is
 * split at its blank lines; a `.chunks.txt` file (one chunk's JSON per line, as vercel/ai keeps
 * its recordings) becomes one `data:` event per line and the closing `data: [DONE]`, as the
 * Chat Completions API sends them — or, for Anthropic's (`anthropic-*`), one event per line
 * named by its `type` (`event: message_start`), as the Messages API sends them.
 */
export const streamEvents = (file: string): ReadonlyArray<string> => {
  const text = streamText(file)
  if (file.endsWith(".sse")) return text.split(/\n\n/).filter((event) => event.trim() !== "").map((event) => `${event}\n\n`)
  const lines = text.split("\n").filter((line) => line.trim() !== "")
  if (file.startsWith("anthropic-")) {
    return lines.map((line) => `event: ${(JSON.parse(line) as { readonly type: string }).type}\ndata: ${line}\n\n`)
  }
  return [...lines.map((line) => `data: ${line}\n\n`), "data: [DONE]\n\n"]
}

/** The JSON chunks of a recorded Chat Completions stream (`[DONE]` left out). */
export const streamChunks = (file: string): ReadonlyArray<unknown> =>
  streamEvents(file).map((event) => event.replace(/^data: /, "").trim()).filter((data) => data !== "[DONE]").map((data) => JSON.parse(data))
