/**
 * Child process for the store tests: opens the SQLite store at argv[2], then (argv[3]) either
 * `write`s a run `child-run` (start + one reply) or `read`s it, and prints one JSON line:
 * `{"ok":true,"records":n}` or `{"error":{"_tag","reason","path","message"}}`.
 * Used where the test must run as another user (a read-only directory means nothing to root).
 */
import { runId } from "@polyloop/core/Ids"
import * as RunLog from "@polyloop/core/RunLog"
import * as RunLogStore from "@polyloop/core/RunLogStore"
import * as SqlRunLogStore from "@polyloop/sql/SqlRunLogStore"
import * as Effect from "effect/Effect"
import * as F from "../fixtures.js"

const filename = process.argv[2] ?? ""
const mode = process.argv[3] ?? "write"
const id = runId("child-run")

const program = Effect.gen(function*() {
  const store = yield* RunLogStore.RunLogStore
  if (mode === "write") {
    yield* store.start(F.started(id))
    yield* store.appendReply(id, F.replied(1, 0))
  }
  return RunLog.size(yield* store.readLog(id))
}).pipe(Effect.provide(SqlRunLogStore.layerSqlite({ filename })))

Effect.runPromise(Effect.either(program)).then(
  (result) => {
    if (result._tag === "Right") {
      process.stdout.write(JSON.stringify({ ok: true, records: result.right }) + "\n")
    } else {
      const e = result.left
      process.stdout.write(
        JSON.stringify({ error: { _tag: e._tag, reason: "reason" in e ? e.reason : undefined, path: "path" in e ? e.path : undefined, message: e.message } }) + "\n"
      )
    }
  },
  (defect: unknown) => {
    process.stdout.write(JSON.stringify({ defect: String(defect) }) + "\n")
    process.exitCode = 1
  }
)
