/**
 * Child process for the claim tests: opens the SQLite store at argv[2] with a lease of argv[4]
 * milliseconds (heartbeat every fifth of it), claims run argv[3], prints `claimed` and holds
 * the claim until it is killed.
 */
import { runId } from "@polyloop/core/Ids"
import * as RunLogStore from "@polyloop/core/RunLogStore"
import * as SqlRunLogStore from "@polyloop/sql/SqlRunLogStore"
import * as Effect from "effect/Effect"

const filename = process.argv[2] ?? ""
const id = runId(process.argv[3] ?? "held")
const lease = Number(process.argv[4] ?? "2000")

const program = Effect.gen(function*() {
  const store = yield* RunLogStore.RunLogStore
  yield* store.claim(id)
  yield* Effect.sync(() => process.stdout.write("claimed\n"))
  return yield* Effect.never
}).pipe(
  Effect.scoped,
  Effect.provide(
    SqlRunLogStore.layerSqlite({ filename, leaseDuration: lease, heartbeatInterval: Math.max(1, Math.floor(lease / 5)) })
  )
)

Effect.runPromise(program).catch((error: unknown) => {
  process.stdout.write(`failed: ${String(error)}\n`)
  process.exitCode = 1
})
