/**
 * Child process of the enumerated crash suite (`chaos.ts`): runs or resumes the scripted run of
 * `crash-scenario.ts` on a SQLite file, counting crash points as it passes them, and SIGKILLs
 * itself at point number `crashAt` (0: never).
 *
 *   node chaos-child.mjs <db> <side-file> <ack-file> <steps> <crashAt>
 *
 * Crash points, in the order the run passes them: before and after the claim; before and after
 * each store write (start, reply, step completion, resume, finish, …); inside each write's
 * transaction before each record and before the commit (the store's fault hook); before and
 * after each tool's side effect. After each store write returns, its sequence numbers are
 * appended to the ack file (`<first> <last>` per line) before the next point: an acknowledged
 * write. Prints `point <n> <name>` as it passes each point, then `finished <n>` at the end.
 */
import * as ActionExecutor from "@polyloop/core/ActionExecutor"
import * as Agent from "@polyloop/core/Agent"
import * as EventSink from "@polyloop/core/EventSink"
import * as NativeToolCallParser from "@polyloop/core/NativeToolCallParser"
import * as RunLogStore from "@polyloop/core/RunLogStore"
import * as SqlRunLogStore from "@polyloop/sql/SqlRunLogStore"
import * as ScriptedModel from "@polyloop/testing/ScriptedModel"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as fs from "node:fs"
import * as Scenario from "./crash-scenario.js"

const [db, sideFile, ackFile, stepsText, crashAtText] = process.argv.slice(2)
if (db === undefined || sideFile === undefined || ackFile === undefined || stepsText === undefined || crashAtText === undefined) {
  process.stderr.write("usage: chaos-child.mjs <db> <side-file> <ack-file> <steps> <crashAt>\n")
  process.exit(2)
}
const steps = Number(stepsText)
const crashAt = Number(crashAtText)

let passed = 0
/** Passes a crash point: prints it, and dies here if it is the chosen one. */
const point = (name: string) =>
  Effect.sync(() => {
    passed++
    process.stdout.write(`point ${passed} ${name}\n`)
    if (passed === crashAt) process.kill(process.pid, "SIGKILL")
  })

const ack = (first: number, last: number) => Effect.sync(() => fs.appendFileSync(ackFile, `${first} ${last}\n`))

/** The store with crash points around each write and the claim. */
const withPoints = (store: RunLogStore.RunLogStore.Service): RunLogStore.RunLogStore.Service => {
  const around = <A, E, R>(name: string, first: number, last: number, write: Effect.Effect<A, E, R>) =>
    point(`before ${name}`).pipe(
      Effect.zipRight(write),
      Effect.tap(() => ack(first, last)),
      Effect.tap(() => point(`after ${name}`))
    )
  return {
    ...store,
    start: (record) => around("start", record.seq, record.seq, store.start(record)),
    appendReply: (runId, record) => around(`reply ${record.step}`, record.seq, record.seq, store.appendReply(runId, record)),
    appendResults: (runId, results) =>
      around(`results ${results[0].step}`, results[0].seq, results[results.length - 1]!.seq, store.appendResults(runId, results)),
    completeStep: (runId, results, step) =>
      around(`completion ${step.step}`, results[0]?.seq ?? step.seq, step.seq, store.completeStep(runId, results, step)),
    appendResume: (runId, record) => around("resume", record.seq, record.seq, store.appendResume(runId, record)),
    finish: (runId, record) => around("finish", record.seq, record.seq, store.finish(runId, record)),
    ...(store.appendRecords === undefined ? {} : {
      appendRecords: (runId, records) =>
        around(`records ${records[0].seq}`, records[0].seq, records[records.length - 1]!.seq, store.appendRecords!(runId, records))
    }),
    appendApprovals: (runId, records) =>
      around(`approvals ${records[0].seq}`, records[0].seq, records[records.length - 1]!.seq, store.appendApprovals(runId, records)),
    claim: (runId) => point("before claim").pipe(Effect.zipRight(store.claim(runId)), Effect.tap(() => point("after claim")))
  }
}

const storeLayer = Layer.effect(
  RunLogStore.RunLogStore,
  Effect.map(RunLogStore.RunLogStore, withPoints)
).pipe(
  Layer.provide(
    SqlRunLogStore.layerSqlite({
      filename: db,
      faultPoint: ({ stage, index }) => point(`in transaction ${stage} ${index}`),
      leaseDuration: "300 millis",
      heartbeatInterval: "75 millis"
    })
  )
)

const program = Effect.gen(function*() {
  const model = yield* ScriptedModel.make(Scenario.script(steps))
  const tools = Scenario.tools(sideFile, 0, (tool, phase) => point(`${phase === "BeforeEffect" ? "before" : "after"} ${tool} effect`))
  const executor = yield* Effect.orDie(tools.executor())
  yield* Agent.run({ runId: Scenario.runId, agent: Scenario.agent(steps), task: Scenario.task, tools }).pipe(
    Effect.provide(Layer.mergeAll(model.layer, ActionExecutor.layer(executor), NativeToolCallParser.layer({ onText: "NoAction" }), EventSink.layerNoop))
  )
  yield* Effect.sync(() => process.stdout.write(`finished ${passed}\n`))
}).pipe(
  Effect.tapError((error) => Effect.sync(() => process.stdout.write(`error ${error._tag}\n`))),
  Effect.provide(storeLayer)
)

Effect.runPromise(program).catch((error: unknown) => {
  process.stdout.write(`failed: ${String(error)}\n`)
  process.exitCode = 1
})
