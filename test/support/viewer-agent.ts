/**
 * Child process of the viewer tests: runs one scenario of `viewer-scenario.ts` on a SQLite file,
 * as another process than the viewer's, printing `step <n>` after each completed step and
 * `finished <stop reason tag>` at the end, `suspended <call ids>` when the run waits for a
 * decision (run it again after the decision), or `failed: …` if the run fails.
 *
 *   node --import tsx viewer-agent.ts <db> <scenario> <runId> <stepDelayMs | paced>
 *
 * `paced`: after each completed step (once `step <n>` is printed) the run waits for a line on
 * stdin before it goes on, so a test can look at each step before the next is written.
 */
import * as Approval from "@polyloop/core/Approval"
import * as SqlRunLogStore from "@polyloop/sql/SqlRunLogStore"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Scenario from "./viewer-scenario.js"

const [db, name, runId, delayText] = process.argv.slice(2)
if (db === undefined || name === undefined || runId === undefined || !(Scenario.names as ReadonlyArray<string>).includes(name)) {
  process.stderr.write(`usage: viewer-agent.ts <db> <${Scenario.names.join("|")}> <runId> [stepDelayMs]\n`)
  process.exit(2)
}

const paced = delayText === "paced"
/** Lines read from stdin and not yet waited for, and who waits for the next one. */
let pending = 0
const waiting: Array<() => void> = []
if (paced) {
  process.stdin.setEncoding("utf8").on("data", (chunk: string) => {
    pending += chunk.split("\n").length - 1
    while (pending > 0 && waiting.length > 0) {
      pending--
      waiting.shift()!()
    }
  })
}
const nextLine = Effect.async<void>((resume) => {
  if (pending > 0) {
    pending--
    return resume(Effect.void)
  }
  waiting.push(() => resume(Effect.void))
})

const program = Scenario.run(name as Scenario.Name, runId, {
  stepDelay: Duration.millis(paced ? 0 : Number(delayText ?? "0")),
  onEvent: (event) =>
    event._tag === "StepCompleted"
      ? Effect.zipRight(Effect.sync(() => process.stdout.write(`step ${event.step}\n`)), paced ? nextLine : Effect.void)
      : Effect.void
}).pipe(Effect.ensuring(Effect.sync(() => process.stdin.destroy()))).pipe(
  Effect.tap((result) => Effect.sync(() => process.stdout.write(`finished ${result.stopReason._tag}\n`))),
  Effect.catchIf(
    (error): error is Approval.Suspended => error instanceof Approval.Suspended,
    (suspended) => Effect.sync(() => process.stdout.write(`suspended ${suspended.waiting.map((w) => w.callId).join(",")}\n`))
  ),
  Effect.provide(SqlRunLogStore.layerSqlite({ filename: db }))
)

Effect.runPromise(program).catch((error: unknown) => {
  process.stdout.write(`failed: ${String(error)}\n`)
  process.exitCode = 1
})
