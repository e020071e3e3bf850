/**
 * The writer the killed-writer property (`RunLogStoreContract`, option `killedWriter`) runs in a
 * child process and kills with SIGKILL: it opens the user's store over `storage` with the
 * user's module, and performs the seed's run from write `from` on, printing `wrote <i>` after
 * each write returns (stdout to a pipe is synchronous on Linux: a printed acknowledgement was
 * printed before any later kill). Lines: `ready`, `wrote <i>`…, `done`, or `error <message>`.
 *
 * Usage: node --import tsx killedWriter.ts <module URL> <export> <storage> <seed> <from> [hold]
 *
 * With `hold` (a child that is to be killed), the child does not end its run: its last write
 * done, it prints `holding` instead of acknowledging it and waits for its kill — so the kill
 * lands before the child ends, whatever the machine's speed.
 *
 * @internal
 */
import { RunLogStore } from "@polyloop/core/RunLogStore"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import { describeError } from "./subject.js"
import { killedWriterRun, perform } from "./writes.js"

const say = (line: string) => process.stdout.write(`${line}\n`)

const [href, exportName, storage, seedText, fromText, holdText] = process.argv.slice(2)
if (href === undefined || exportName === undefined || storage === undefined || seedText === undefined || fromText === undefined) {
  say("error usage: killedWriter.ts <module URL> <export> <storage> <seed> <from>")
  process.exit(2)
}

const imported: Record<string, unknown> = await import(href)
const open = imported[exportName]
if (typeof open !== "function") {
  say(`error ${href} has no function export "${exportName}" (storage: string) => Layer<RunLogStore>`)
  process.exit(2)
}
const layer: unknown = open(storage)
if (!Layer.isLayer(layer)) {
  say(`error ${exportName}(storage) of ${href} did not return a Layer`)
  process.exit(2)
}

const run = killedWriterRun(Number(seedText))
const program = Effect.gen(function*() {
  const store = yield* RunLogStore
  say("ready")
  for (let i = Number(fromText); i < run.writes.length; i++) {
    yield* perform(store, run.runId, run.writes[i]!)
    if (holdText === "hold" && i === run.writes.length - 1) {
      say("holding")
      return yield* Effect.never
    }
    say(`wrote ${i}`)
  }
  say("done")
}).pipe(Effect.provide(layer as Layer.Layer<RunLogStore, unknown>))

Effect.runPromise(program).catch((error: unknown) => {
  say(`error ${describeError(error).replace(/\n/g, " ")}`)
  process.exitCode = 1
})
