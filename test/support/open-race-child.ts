/**
 * Child process for the SQLite open race: loads everything, prints `ready`, waits for a line on
 * stdin (so that every child opens at the same moment), then opens the SQLite store at argv[2]
 * (a brand-new file, shared by all children), starts the run argv[3] in it, and prints one JSON
 * line: `{"ok":true}` or `{"error":{"_tag","reason","message"}}`.
 */
import { runId } from "@polyloop/core/Ids"
import * as RunLogStore from "@polyloop/core/RunLogStore"
import * as SqlRunLogStore from "@polyloop/sql/SqlRunLogStore"
import * as Effect from "effect/Effect"

const filename = process.argv[2] ?? ""
const id = runId(process.argv[3] ?? "race")

const program = Effect.gen(function*() {
  const store = yield* RunLogStore.RunLogStore
  yield* store.start({
    _tag: "RunStarted",
    seq: 0,
    runId: id,
    task: "open the store",
    snapshot: { agent: { name: "racer" } },
    snapshotHash: "0".repeat(64),
    startedAt: 0
  })
}).pipe(Effect.provide(SqlRunLogStore.layerSqlite({ filename })))

process.stdout.write("ready\n")
process.stdin.once("data", () => {
  process.stdin.pause()
  Effect.runPromise(Effect.either(program)).then(
    (result) => {
      process.stdout.write(
        JSON.stringify(
          result._tag === "Right"
            ? { ok: true }
            : { error: { _tag: result.left._tag, reason: "reason" in result.left ? result.left.reason : undefined, message: result.left.message } }
        ) + "\n"
      )
    },
    (defect: unknown) => {
      process.stdout.write(JSON.stringify({ defect: String(defect) }) + "\n")
      process.exitCode = 1
    }
  )
})
