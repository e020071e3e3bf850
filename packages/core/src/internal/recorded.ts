/**
 * What a recorded run showed the model, rebuilt from its log (design 0170): the snapshot gives
 * the system prompt, task, tool definitions and settings; the completed steps are rendered with
 * the loop's own state rebuild, so the messages are exactly those the loop sent. Replay uses it
 * to name where a request differs; the trajectory exports use it for the messages.
 *
 * @internal
 */
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Option from "effect/Option"
import * as Schema from "effect/Schema"
import { StoreError } from "../Errors.js"
import type { RunId } from "../Ids.js"
import type * as Message from "../Message.js"
import type { ModelRequest, ToolDefinition } from "../ModelClient.js"
import * as RunLog from "../RunLog.js"
import * as Snapshot from "../Snapshot.js"
import * as History from "./history.js"
import * as Rendering from "./rendering.js"
import * as HistoryPolicy from "../HistoryPolicy.js"
import { formatIssues } from "./issues.js"
import * as State from "./state.js"

/** A recorded run's fixed parts. @internal */
export interface Recorded {
  readonly runId: RunId
  readonly started: RunLog.RunStarted
  readonly snapshot: Snapshot.Snapshot
  readonly tools: ReadonlyArray<ToolDefinition>
  readonly texts: History.Texts
}

const decodeSnapshot = Schema.decodeUnknownEither(Snapshot.Snapshot)

/** The fixed parts of a started run; `Left(problem)` for the empty log or a snapshot this version cannot read. @internal */
export const fromLog = (log: RunLog.RunLog): Either.Either<Recorded, string> => {
  if (Option.isNone(log.started)) return Either.left("the run has no RunStarted record")
  const started = log.started.value
  // A snapshot recorded before design 0150 reads as the run ran: one action per step.
  const decoded = decodeSnapshot(Snapshot.upgrade(started.snapshot))
  if (Either.isLeft(decoded)) return Either.left(`its snapshot cannot be read: ${formatIssues(decoded.left)}`)
  const snapshot = decoded.right
  return Either.right({
    runId: started.runId,
    started,
    snapshot,
    tools: snapshot.tools.map((tool) => ({ name: tool.name, description: tool.description, parameters: tool.parameters })),
    texts: History.makeTextsFor({
      synthetic: snapshot.agent.syntheticObservations,
      toolNames: snapshot.tools.map((tool) => tool.name),
      observationTemplate: snapshot.agent.historyRendering.observationTemplate,
      observationLimit: snapshot.agent.observationLimit ?? undefined
    })
  })
}

/** The history after the completed steps before `step` (all completed steps when omitted). @internal */
export const messages = (
  recorded: Recorded,
  log: RunLog.RunLog,
  step?: number
): Effect.Effect<ReadonlyArray<Message.Message>, StoreError> => {
  const initial = History.initial(recorded.snapshot.agent.systemPrompt, recorded.started.task)
  const upTo = step ?? log.steps.length
  const prefix = RunLog.fromRecords([recorded.started, ...RunLog.recordsBeforeStep(log, upTo)])
  return Effect.map(State.rebuild(recorded.runId, prefix, initial, recorded.texts), (rebuilt) => rebuilt.state.messages)
}

/**
 * The messages the recorded run sent at `step`: its history policy applied (design 0300) by the
 * loop's own masker, over the state rebuilt from the steps before it. @internal
 */
export const sentAt = (recorded: Recorded, log: RunLog.RunLog, step: number): Effect.Effect<ReadonlyArray<Message.Message>, StoreError> => {
  const parts = HistoryPolicy.partsOf(recorded.snapshot.agent.history)
  if (parts === undefined) return messages(recorded, log, step)
  const initial = History.initial(recorded.snapshot.agent.systemPrompt, recorded.started.task)
  // The compactions written before this step's request count (they carry its step number).
  const prefix = RunLog.fromRecords([
    recorded.started,
    ...RunLog.recordsBeforeStep(log, step),
    ...log.compactions.filter((compaction) => compaction.step === step)
  ])
  return Effect.map(State.rebuild(recorded.runId, prefix, initial, recorded.texts), (rebuilt) =>
    Rendering.makeRendering(parts, recorded.tools, recorded.snapshot.agent.modelSettings).request(rebuilt.state).messages)
}

/** The request the recorded run sent at `step` (the step must have its earlier steps completed). @internal */
export const requestAt = (recorded: Recorded, log: RunLog.RunLog, step: number): Effect.Effect<ModelRequest, StoreError> =>
  Effect.map(sentAt(recorded, log, step), (msgs): ModelRequest =>
    recorded.snapshot.agent.parallelToolCalls
      ? { messages: msgs, tools: recorded.tools, settings: recorded.snapshot.agent.modelSettings }
      : { messages: msgs, tools: recorded.tools, settings: recorded.snapshot.agent.modelSettings, parallelToolCalls: false })

/** A log that does not fit together, as a store error. @internal */
export const unreadable = (runId: string, problem: string) =>
  new StoreError({ reason: "Decode", runId, message: `run ${runId}: ${problem}` })
