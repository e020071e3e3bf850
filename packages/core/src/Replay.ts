/**
 * Replay (design 0170): a recorded run served back as a `ModelClient`. `Replay.model(log)`
 * answers each request with the recorded reply of its step (the step is the number of
 * `Assistant` messages in the request) after checking the request against the recorded
 * fingerprint (`ModelReplied.requestHash`); the first request that differs fails with
 * `ReplayDiverged`, naming the step and the first differing path of the request
 * (`messages[0].text`, `tools[1].description`, `settings.temperature`). Requests are not
 * stored: the expected one is rebuilt from the log, and its hash checked against the recorded
 * one. Logs written before fingerprints are checked against the rebuilt request only.
 *
 * `Replay.run` runs an agent under it on a new run id and compares the two logs record by
 * record, apart from ids, timestamps and elapsed times: with deterministic tools, a recorded
 * run is reproduced byte for byte.
 *
 * @since 0.1.0
 */
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as FiberRef from "effect/FiberRef"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Schema from "effect/Schema"
import * as Agent from "./Agent.js"
import * as Approval from "./Approval.js"
import { ModelError, type RunError, type StoreError, Suspended } from "./Errors.js"
import * as Approvals from "./internal/approvals.js"
import * as Child from "./internal/child.js"
import * as HistoryPolicy from "./HistoryPolicy.js"
import * as Fingerprint from "./internal/fingerprint.js"
import * as Recorded from "./internal/recorded.js"
import type { RunId } from "./Ids.js"
import type * as Message from "./Message.js"
import { currentCall, ModelClient, type ModelRequest } from "./ModelClient.js"
import * as ModelReplyModule from "./ModelReply.js"
import type { ModelReply } from "./ModelReply.js"
import * as RunLog from "./RunLog.js"
import { RunLogStore } from "./RunLogStore.js"
import * as Snapshot from "./Snapshot.js"

/**
 * A request differs from the one the recorded run answered at `step`. `expected` / `actual`
 * are the request fingerprints (`expected` is "" when the recorded run has no reply for the
 * step); `path` is the first differing path of the request, with the recorded and current
 * values there (absent: no such member).
 */
export class ReplayDiverged extends Schema.TaggedError<ReplayDiverged>()("ReplayDiverged", {
  runId: Schema.String,
  step: Schema.Int,
  expected: Schema.String,
  actual: Schema.String,
  path: Schema.String,
  recorded: Schema.optional(Schema.Unknown),
  current: Schema.optional(Schema.Unknown)
}) {
  override get message(): string {
    if (this.path.startsWith("approvals[")) {
      return `replay of ${this.runId} diverged at step ${this.step}: the replayed run asks for a decision (${this.path}) that the recorded run does not have`
    }
    if (this.path.startsWith("summaries[")) {
      return `replay of ${this.runId} diverged at step ${this.step}: the replayed run asks for a history summary ${
        this.expected === "" ? "that the recorded run did not make" : "of other steps than the recorded run's"
      }`
    }
    if (this.expected === "") return `replay of ${this.runId} diverged at step ${this.step}: the recorded run has no reply for this step`
    const show = (value: unknown) => (value === undefined ? "(absent)" : preview(JSON.stringify(value)))
    return `replay of ${this.runId} diverged at step ${this.step}: ${this.path} differs (recorded ${
      show(this.recorded)
    }, now ${show(this.current)})`
  }
}

const preview = (text: string): string => (text.length > 120 ? `${text.slice(0, 119)}…` : text)

/** The step of a request: the number of `Assistant` messages (the loop renders one per completed step). */
const stepOf = (messages: ReadonlyArray<Message.Message>): number => {
  let n = 0
  for (const message of messages) if (message._tag === "Assistant") n++
  return n
}

const asModelError = (diverged: ReplayDiverged) => new ModelError({ retryable: false, message: diverged.message, cause: diverged })

/**
 * The divergence of `request` from what the recorded run sent at `step`, if any: the first
 * differing path between the rebuilt recorded request and the current one.
 */
const divergence = (
  recorded: Recorded.Recorded,
  log: RunLog.RunLog,
  step: number,
  request: ModelRequest,
  expectedHash: string | undefined,
  actualHash: string
): Effect.Effect<Option.Option<ReplayDiverged>, StoreError> =>
  Effect.map(Recorded.requestAt(recorded, log, step), (rebuilt) => {
    const differences = Snapshot.diff(Fingerprint.canonicalValue(rebuilt), Fingerprint.canonicalValue(request))
    const expected = expectedHash ?? Fingerprint.ofRequest(rebuilt)
    if (differences.length === 0 && expected === actualHash) return Option.none()
    // The rebuilt request is the one sent, but its fingerprint is not the recorded one (the log's
    // hash was made from another request: edited, or copied from elsewhere): the path names the hash.
    const [path, recordedValue, currentValue] = differences[0] ?? ["requestHash", expected, actualHash]
    return Option.some(
      new ReplayDiverged({
        runId: recorded.runId,
        step,
        expected,
        actual: actualHash,
        path,
        ...(recordedValue === undefined ? {} : { recorded: recordedValue }),
        ...(currentValue === undefined ? {} : { current: currentValue })
      })
    )
  })

/**
 * A `ModelClient` serving the recorded replies of `log` (see the module header). Within the
 * loop a divergence is a non-retryable `ModelError` whose `cause` is the `ReplayDiverged`
 * (`ModelClient` fails only with `ModelError`); `Replay.run` turns it back into the typed error.
 */
export const make = (log: RunLog.RunLog): ModelClient.Service => {
  const fixed = Recorded.fromLog(log)
  // The loop sends one growing message array per run: fingerprint it incrementally while the
  // requests extend the same array, from scratch otherwise.
  let fingerprinter: { readonly messages: unknown; readonly tools: unknown; readonly settings: unknown; readonly hash: Fingerprint.Fingerprinter } | undefined
  const fingerprint = (request: ModelRequest): string => {
    if (
      fingerprinter === undefined || fingerprinter.messages !== request.messages || fingerprinter.tools !== request.tools ||
      fingerprinter.settings !== request.settings
    ) {
      fingerprinter = { messages: request.messages, tools: request.tools, settings: request.settings, hash: Fingerprint.make(request.tools, request.settings) }
    }
    return fingerprinter.hash.hash(request.messages)
  }
  // Steps whose first request the recorded provider refused as too long (design 0300): the
  // replayed run is refused the same way once, so it takes the same emergency step.
  const refused = new Set<number>()
  for (const compaction of log.compactions) if (compaction.reason === "ContextExceeded") refused.add(compaction.step)
  return {
    generate: (request) =>
      Effect.flatMap(FiberRef.get(currentCall), (call) => Effect.suspend((): Effect.Effect<ModelReply, ModelError> => {
        if (Either.isLeft(fixed)) {
          return Effect.fail(new ModelError({ retryable: false, message: `cannot replay: ${fixed.left}` }))
        }
        const recorded = fixed.right
        // A summary (design 0300): the recorded one, for the same summariser request.
        if (call !== undefined && call.purpose === "Summary") {
          const actual = Fingerprint.ofRequest(request)
          const summary = log.compactions.find((c) => c.step === call.step && c.summary !== undefined)
          if (summary === undefined || summary.requestHash !== actual) {
            return Effect.fail(asModelError(new ReplayDiverged({
              runId: recorded.runId,
              step: call.step,
              expected: summary?.requestHash ?? "",
              actual,
              path: `summaries[${call.step}]`
            })))
          }
          return Effect.succeed(ModelReplyModule.make({ text: summary.summary!, ...(summary.usage === undefined ? {} : { usage: summary.usage }) }))
        }
        // Under a compacting policy the loop names the step (dropped steps took their Assistant messages along).
        const step = call !== undefined ? call.step : stepOf(request.messages)
        if (refused.delete(step)) {
          return Effect.fail(
            new ModelError({
              retryable: false,
              code: "context_length_exceeded",
              message: `replay: the recorded run's request of step ${step} was refused as longer than the context window`
            })
          )
        }
        const actual = fingerprint(request)
        const replied = log.replies[step]
        if (replied === undefined || replied.step !== step) {
          return Effect.fail(asModelError(new ReplayDiverged({ runId: recorded.runId, step, expected: "", actual, path: `replies[${step}]` })))
        }
        if (replied.requestHash !== undefined && replied.requestHash === actual) return Effect.succeed(replied.reply)
        return divergence(recorded, log, step, request, replied.requestHash, actual).pipe(
          Effect.mapError((error) => new ModelError({ retryable: false, message: `cannot replay: ${error.message}`, cause: error })),
          Effect.flatMap(Option.match({
            onNone: () => Effect.succeed(replied.reply),
            onSome: (diverged) => Effect.fail(asModelError(diverged))
          }))
        )
      }))
  }
}

/** `make` as a layer. */
export const model = (log: RunLog.RunLog): Layer.Layer<ModelClient> => Layer.sync(ModelClient, () => make(log))

/** Two logs compared: identical (apart from ids, timestamps, elapsed times and resumes), or the first difference. */
export type Comparison =
  | { readonly _tag: "Identical"; readonly records: number }
  | {
    readonly _tag: "Differs"
    /** The index of the first differing record (RunResumed records not counted). */
    readonly index: number
    readonly path: string
    readonly recorded: unknown
    readonly replayed: unknown
  }

/**
 * A record as the comparison sees it: its encoded JSON without what differs between two runs of
 * one configuration by nature — the run id, sequence numbers, timestamps, elapsed times, the
 * resumed count, a fork's parent, the log's schema version. `RunResumed` records are dropped before comparing, and a
 * reply's `requestHash` is compared only when both sides have one (logs written before
 * fingerprints have none).
 */
const normalize = (record: RunLog.RunRecord): unknown => {
  const value = JSON.parse(JSON.stringify(Schema.encodeSync(RunLog.RunRecord)(record))) as Record<string, unknown>
  delete value.seq
  switch (record._tag) {
    case "RunStarted":
      delete value.runId
      delete value.startedAt
      delete value.forkedFrom
      // The schema version of the code that wrote it, not what the run did.
      delete value.logVersion
      break
    case "StepCompleted":
      delete value.elapsed
      delete value.modelElapsed
      break
    case "ModelReplied":
      delete value.modelElapsed
      break
    case "ApprovalRequested":
    case "ApprovalDecided":
      // The hash binds the decision to its run id; the time is when a person acted.
      delete value.actionHash
      delete value.at
      break
    case "UserMessaged":
      delete value.at
      break
    case "ActionResulted": {
      // A child's run id is derived from its parent's (design 0392); its log is compared on its own.
      const child = value.child as Record<string, unknown> | undefined
      if (child !== undefined) delete child.runId
      break
    }
    case "TurnFinished":
    case "RunFinished": {
      // A turn's end or the run's: when, and the time and resumes it took, differ by nature.
      delete value.finishedAt
      const counters = value.counters as Record<string, unknown>
      delete counters.elapsed
      delete counters.resumedCount
      break
    }
    default:
      break
  }
  return value
}

/** Compares a recorded log with its replay (see `Comparison`). */
export const compare = (recorded: RunLog.RunLog, replayed: RunLog.RunLog): Comparison => {
  const a = RunLog.records(recorded).filter((r) => r._tag !== "RunResumed").map(normalize)
  const b = RunLog.records(replayed).filter((r) => r._tag !== "RunResumed").map(normalize)
  const n = Math.max(a.length, b.length)
  for (let i = 0; i < n; i++) {
    const x = a[i] as Record<string, unknown> | undefined
    const y = b[i] as Record<string, unknown> | undefined
    // A log written before fingerprints has none to compare.
    if (x?._tag === "ModelReplied" && y?._tag === "ModelReplied" && (x.requestHash === undefined || y.requestHash === undefined)) {
      delete x.requestHash
      delete y.requestHash
    }
    const differences = Snapshot.diff(x, y)
    if (differences.length > 0) {
      const [path, x, y] = differences[0]!
      return { _tag: "Differs", index: i, path, recorded: x, replayed: y }
    }
  }
  return { _tag: "Identical", records: a.length }
}

/**
 * Compares a recorded log with its replay, then each sub-agent's child with its replay (design
 * 0392), depth first in call order: the first difference, its path prefixed with the calls that
 * lead to it (`children[<step>/<callId>].…`).
 */
const compareTree = (
  store: RunLogStore.Service,
  recorded: RunLog.RunLog,
  replayed: RunLog.RunLog,
  prefix: string
): Effect.Effect<Comparison, StoreError> =>
  Effect.gen(function*() {
    const own = compare(recorded, replayed)
    if (own._tag === "Differs") return prefix === "" ? own : { ...own, path: `${prefix}${own.path}` }
    let records = own.records
    const theirs = new Map<string, RunId>(replayed.results.flatMap((r) => (r.child === undefined ? [] : [[`${r.step}/${r.callIndex}`, r.child.runId] as const])))
    for (const result of recorded.results) {
      if (result.child === undefined) continue
      const key = `${result.step}/${result.callIndex}`
      const replayedId = theirs.get(key)
      const path = `${prefix}children[${result.step}/${result.action._tag === "ToolCall" ? result.action.id : result.callIndex}].`
      if (replayedId === undefined) return { _tag: "Differs", index: 0, path, recorded: result.child.runId, replayed: undefined }
      const child = yield* compareTree(store, yield* store.readLog(result.child.runId), yield* store.readLog(replayedId), path)
      if (child._tag === "Differs") return child
      records += child.records
    }
    return { _tag: "Identical", records }
  })

/**
 * Records, for each call a suspended replay waits on, the decision the recorded run has for the
 * same call (same step, call id and action); `ReplayDiverged` (path `approvals[<callId>]`) when
 * the recorded run has none — it never asked, asked for another action, or was never decided.
 */
const serveDecisions = (recorded: RunLog.RunLog, suspended: Suspended): Effect.Effect<void, ReplayDiverged | RunError, RunLogStore> =>
  Effect.forEach(suspended.waiting, (waiting): Effect.Effect<void, ReplayDiverged | RunError, RunLogStore> => {
    const request = recorded.approvals.find((r): r is RunLog.ApprovalRequested =>
      r._tag === "ApprovalRequested" && r.step === waiting.step && r.callId === waiting.callId &&
      Snapshot.canonicalJson(r.action) === Snapshot.canonicalJson(waiting.action)
    )
    const decided = request === undefined ? undefined : Option.getOrUndefined(Approvals.decisionOf(recorded, request))
    if (decided === undefined) {
      return Effect.fail(
        new ReplayDiverged({
          runId: Option.match(recorded.started, { onNone: () => suspended.runId, onSome: (s) => s.runId }),
          step: waiting.step,
          expected: "",
          actual: waiting.actionHash,
          path: `approvals[${waiting.callId}]`,
          current: waiting.action,
          ...(request === undefined ? {} : { recorded: request.action })
        })
      )
    }
    return Approval.decide({ runId: suspended.runId, callId: waiting.callId, decision: decided.decision, by: decided.by, actionHash: waiting.actionHash }).pipe(
      Effect.catchAll((error): Effect.Effect<void, RunError> =>
        error._tag === "StoreError" || error._tag === "ConcurrentWriter"
          ? Effect.fail(error)
          : Effect.die(new Error(`replay could not record the recorded decision on ${waiting.callId}: ${error.message}`)))
    )
  }, { discard: true })

/** What `run` needs: the recorded log, and the request to run under replay (a new run id). */
export interface RunOptions {
  readonly recorded: RunLog.RunLog
  readonly request: Agent.RunRequest
}

/** The services `run` needs: `Agent.run`'s, without the model. */
export type Requirements = Exclude<Agent.Requirements, ModelClient>

/**
 * What a program hands `polyloop replay --agent <module>` (exported as `replayTarget`): the run
 * request for a recorded run (its run id is replaced by the replay's), and the parser,
 * executor and event sink to run it with (the model is the replay; the store is the command's).
 */
export interface Target<E = never> {
  readonly request: (recorded: { readonly runId: RunId; readonly task: string; readonly snapshot: unknown }) => Omit<Agent.RunRequest, "runId">
  readonly layer: Layer.Layer<Exclude<Requirements, RunLogStore>, E>
}

/**
 * Runs `options.request` under `model(options.recorded)` (its log is written to the store in
 * context) and compares the replayed log with the recorded one. Fails with `ReplayDiverged` at
 * the first request that differs, and with the run's own errors.
 */
export const run = (options: RunOptions): Effect.Effect<Comparison, ReplayDiverged | RunError, Requirements> =>
  Effect.gen(function*() {
    // Summaries are served from the record too, whoever the recorded run's summariser was.
    const served = Layer.provideMerge(Layer.effect(HistoryPolicy.Summariser, ModelClient), model(options.recorded))
    // A conversation (design 0300) is replayed message by message, each sent as it was recorded;
    // a message already answered in an earlier pass (before a suspension) answers again at once.
    const started = Option.getOrUndefined(options.recorded.started)
    const conversation = started?.conversation
    const messages = conversation === undefined || started === undefined
      ? []
      : [{ messageId: conversation.messageId, text: started.task }, ...options.recorded.userMessages.map((m) => ({ messageId: m.messageId, text: m.text }))]
    const request = options.request
    const driven: Effect.Effect<Agent.RunResult, RunError, Agent.Requirements> = conversation === undefined
      ? Agent.run(request)
      : Effect.reduce(messages, undefined as Agent.RunResult | undefined, (_, m) =>
        Agent.send({ runId: request.runId, messageId: m.messageId, text: m.text, agent: request.agent, tools: request.tools, ...(request.streaming === undefined ? {} : { streaming: request.streaming }) })).pipe(
          Effect.map((result) => result!)
        )
    // Each sub-agent's child is served the recorded child's replies (design 0392): the replayed
    // child of a call is mapped to the recorded child of the same step and call id.
    const store = yield* RunLogStore
    const recordedOf = new Map<string, RunId>()
    if (started !== undefined) recordedOf.set(request.runId, started.runId)
    const childModels: Child.ChildModels = (parent, child, step, callId) => {
      const recordedParent = recordedOf.get(parent)
      if (recordedParent === undefined) return Effect.succeed(undefined)
      const recordedChild = Child.childRunId(recordedParent, step, callId)
      recordedOf.set(child, recordedChild)
      return Effect.map(store.readLog(recordedChild), (log) => (Option.isSome(log.started) ? make(log) : undefined))
    }
    const replaying = driven.pipe(
      Effect.locally(Child.childModels, childModels),
      Effect.provide(served),
      Effect.catchTag("ModelError", (error) => Effect.fail(error.cause instanceof ReplayDiverged ? error.cause : error))
    )
    // A call that needs a person's decision suspends the replayed run as it did the recorded
    // one; the recorded decision is given (as `Agent.decide` records one) and the run goes on.
    // Each suspension needs a decision the recorded run has, so this ends.
    const decisions = options.recorded.approvals.filter((r) => r._tag === "ApprovalDecided").length
    for (let suspensions = 0;; suspensions++) {
      const outcome = yield* Effect.either(Effect.catchTag(replaying, "Suspended", (suspended) => Effect.succeed(suspended)))
      if (Either.isLeft(outcome)) return yield* outcome.left
      if (!(outcome.right instanceof Suspended)) break
      if (suspensions > decisions) return yield* outcome.right
      yield* serveDecisions(options.recorded, outcome.right)
    }
    const replayed = yield* store.readLog(options.request.runId)
    return yield* compareTree(store, options.recorded, replayed, "")
  }).pipe(Effect.withSpan("Replay.run", { attributes: { "polyloop.run_id": options.request.runId } }))
