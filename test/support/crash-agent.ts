/**
 * Child process of the crash-recovery test: runs (or resumes) the scripted agent of
 * `crash-scenario.ts` on a SQLite file (or, when <db> is a `postgres://` URL, a PostgreSQL
 * database), with `Agent.run`, until the run finishes.
 *
 *   node --import tsx crash-agent.ts <db> <side-file> <history-file> <steps> [kill-between-writes | runs=<k> | multi | history | chat]
 *
 * Prints `ready` once the store is open, `running` once the run is started or resumed (its
 * `RunStarted`/`RunResumed` record is durable), `finished <RunResult JSON>` at the end, or
 * `error <tag>` when `Agent.run` fails (e.g. `RunBusy` while a killed child's lease lasts). The last
 * request the model saw (the whole history) is written to <history-file> at each model call
 * (atomically: a temporary file renamed over it). With `kill-between-writes`, the process
 * SIGKILLs itself inside the store's transaction of the first step that has an action result:
 * after its `ActionResulted` row is inserted and before its `StepCompleted` row is. With
 * `runs=<k>`, k runs of the scenario (`Scenario.runOf(i)`) run at once on the one store, so
 * their appends are group-committed; `running` is printed as each starts or resumes, and no
 * history file is written. With `multi`, the run's replies call three tools each
 * (`Scenario.multiScript`, design 0150). With `history`, the run reads long files under masking,
 * summaries and a token budget (`Scenario.historyAgent`, design 0300); its summariser writes to
 * the side file too. With `chat`, the conversation of `Scenario.chatTurns` turns is sent message by
 * message (`Agent.send`, each retried by the next life: the message ids make it safe).
 *
 * With `POLYLOOP_CRASH_HOLD=before-finish` in the environment, a life never ends its run: where
 * it would write `RunFinished` it prints `holding before finish` and stops for good, so the parent
 * kills every such life (at its random moment, or there at the latest).
 */
import * as ActionExecutor from "@polyloop/core/ActionExecutor"
import * as Agent from "@polyloop/core/Agent"
import * as EventSink from "@polyloop/core/EventSink"
import * as HistoryPolicy from "@polyloop/core/HistoryPolicy"
import type * as Ids from "@polyloop/core/Ids"
import * as NativeToolCallParser from "@polyloop/core/NativeToolCallParser"
import * as RunLogStore from "@polyloop/core/RunLogStore"
import * as SqlRunLogStore from "@polyloop/sql/SqlRunLogStore"
import * as ScriptedModel from "@polyloop/testing/ScriptedModel"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Redacted from "effect/Redacted"
import * as fs from "node:fs"
import * as Scenario from "./crash-scenario.js"

const [db, sideFile, historyFile, stepsText, mode] = process.argv.slice(2)
if (db === undefined || sideFile === undefined || historyFile === undefined || stepsText === undefined) {
  process.stderr.write("usage: crash-agent.ts <db> <side-file> <history-file> <steps> [kill-between-writes | runs=<k> | multi | history | chat]\n")
  process.exit(2)
}
const steps = Number(stepsText)

const faultPoint: SqlRunLogStore.FaultPoint = ({ index, stage }) =>
  Effect.sync(() => {
    if (mode === "kill-between-writes" && stage === "BeforeRecord" && index === 1) {
      process.stdout.write("killing myself between the two writes\n")
      process.kill(process.pid, "SIGKILL")
    }
  })

const saveHistory = (messages: unknown) =>
  Effect.sync(() => {
    const tmp = `${historyFile}.${process.pid}.tmp`
    fs.writeFileSync(tmp, JSON.stringify(messages))
    fs.renameSync(tmp, historyFile)
  })

/** The store, but with `POLYLOOP_CRASH_HOLD=before-finish` a `finish` that never comes: the life waits for its kill. */
const holding = Layer.effect(
  RunLogStore.RunLogStore,
  Effect.map(RunLogStore.RunLogStore, (store): RunLogStore.RunLogStore.Service =>
    process.env["POLYLOOP_CRASH_HOLD"] === "before-finish"
      ? {
        ...store,
        finish: () => Effect.zipRight(Effect.sync(() => process.stdout.write("holding before finish\n")), Effect.never),
        // A conversation ends its last turn, not the run.
        appendTurn: (runId, record) =>
          record._tag === "TurnFinished" && record.turn === Scenario.chatTurns - 1
            ? Effect.zipRight(Effect.sync(() => process.stdout.write("holding before finish\n")), Effect.never)
            : store.appendTurn(runId, record)
      }
      : store)
)

/** `runs=<k>`: k runs at once in this process (`<runId>-0` … `<runId>-<k-1>`), on one store. */
const runsMatch = /^runs=(\d+)$/.exec(mode ?? "")
const runCount = runsMatch === null ? 1 : Number(runsMatch[1])

const runOne = (runId: Ids.RunId, onCall: ScriptedModel.Options["onCall"]) =>
  Effect.gen(function*() {
    const history = mode === "history"
    const model = yield* ScriptedModel.make(mode === "multi" ? Scenario.multiScript(steps) : history ? Scenario.historyScript(steps) : Scenario.script(steps), {
      latency: "2 millis",
      ...(onCall === undefined ? {} : { onCall })
    })
    const tools = history ? Scenario.historyTools(sideFile, "4 millis") : Scenario.tools(sideFile, "4 millis")
    const executor = yield* Effect.orDie(tools.executor())
    const summariser = yield* Scenario.historySummariser(sideFile)
    return yield* Agent.run({ runId, agent: history ? Scenario.historyAgent(steps) : Scenario.agent(steps), task: Scenario.task, tools }).pipe(
      Effect.provide(
        Layer.mergeAll(
          model.layer,
          Layer.succeed(HistoryPolicy.Summariser, summariser.client),
          ActionExecutor.layer(executor),
          NativeToolCallParser.layer({ onText: "NoAction" }),
          EventSink.layer((event) =>
            Effect.sync(() => {
              if (event._tag === "RunStarted" || event._tag === "RunResumed") process.stdout.write("running\n")
            })
          )
        )
      )
    )
  })

/** `chat`: the conversation of `Scenario.chatTurns` messages, each sent (again) until its turn is answered. */
const chat = Effect.gen(function*() {
  const model = yield* ScriptedModel.make(Scenario.chatScript, { latency: "2 millis" })
  const tools = Scenario.tools(sideFile, "4 millis")
  const executor = yield* Effect.orDie(tools.executor())
  let last: unknown
  for (let i = 0; i < Scenario.chatTurns; i++) {
    last = yield* Agent.send({ runId: Scenario.runId, messageId: `m${i}`, text: Scenario.chatMessage(i), agent: Scenario.chatAgent, tools }).pipe(
      Effect.provide(
        Layer.mergeAll(
          model.layer,
          ActionExecutor.layer(executor),
          NativeToolCallParser.layer({ onText: "NoAction" }),
          EventSink.layer((event) =>
            Effect.sync(() => {
              if (event._tag === "RunStarted" || event._tag === "RunResumed" || event._tag === "TurnStarted") process.stdout.write("running\n")
            })
          )
        )
      )
    )
  }
  return last
})

const program = Effect.gen(function*() {
  yield* Effect.sync(() => process.stdout.write("ready\n"))
  if (mode === "chat") {
    const result = yield* chat
    yield* Effect.sync(() => process.stdout.write(`finished ${JSON.stringify(result)}\n`))
    return
  }
  if (runCount === 1) {
    const result = yield* runOne(Scenario.runId, (_call, request) => saveHistory(request.messages))
    yield* Effect.sync(() => process.stdout.write(`finished ${JSON.stringify(result)}\n`))
    return
  }
  // Several runs claimed on one store: their appends are committed in groups.
  const results = yield* Effect.forEach(
    Array.from({ length: runCount }, (_, i) => Scenario.runOf(i)),
    (runId) => runOne(runId, undefined),
    { concurrency: "unbounded" }
  )
  yield* Effect.sync(() => process.stdout.write(`finished ${JSON.stringify(results)}\n`))
}).pipe(
  Effect.tapError((error) => Effect.sync(() => process.stdout.write(`error ${error._tag}\n`))),
  // A short lease: a killed child's claim must expire before the next child starts (about a
  // second later), as a dead worker's does.
  // The fault hook only when it is to kill: a store with a hook appends record by record in a
  // transaction, and the random kills must hit the store as applications run it (one statement
  // per append, the client's connection held by the store).
  // A `postgres://` <db> is a PostgreSQL database (design 0350: grouped appends and claims there).
  Effect.provide(
    holding.pipe(Layer.provide(
      db.startsWith("postgres://") || db.startsWith("postgresql://")
        ? SqlRunLogStore.layerPg({ url: Redacted.make(db), maxConnections: 8, leaseDuration: "300 millis", heartbeatInterval: "75 millis" })
        : SqlRunLogStore.layerSqlite({
          filename: db,
          ...(mode === "kill-between-writes" ? { faultPoint } : {}),
          leaseDuration: "300 millis",
          heartbeatInterval: "75 millis"
        })
    ))
  )
)

Effect.runPromise(program).catch((error: unknown) => {
  process.stdout.write(`failed: ${String(error)}\n`)
  process.exitCode = 1
})
