/**
 * Forks (design 0170): a new run that starts from a recorded run's step `atStep`. Its log holds
 * a `RunStarted` with `forkedFrom { runId, step, snapshotHash, differences }` and a copy of the
 * parent's records of the steps before `atStep` (replies and results, never re-executed),
 * written in one atomic append. The configuration may change (an ablation): omitted parts keep
 * the parent's, and every difference from the parent's snapshot is recorded. The parent is
 * only read. `Agent.run` on the fork's id continues from `atStep` (`Agent.fork` is this
 * module's `fork`).
 *
 * @since 0.1.0
 */
import * as Clock from "effect/Clock"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Option from "effect/Option"
import * as Schema from "effect/Schema"
import type { AgentDefinition } from "./AgentDefinition.js"
import type { ConcurrentWriter, RunBusy, StoreError } from "./Errors.js"
import { type RunId, StepIndex } from "./Ids.js"
import * as HistoryPolicy from "./HistoryPolicy.js"
import * as Fingerprint from "./internal/fingerprint.js"
import * as History from "./internal/history.js"
import * as Rendering from "./internal/rendering.js"
import * as State from "./internal/state.js"
import * as TokenCounter from "./TokenCounter.js"
import { formatIssues } from "./internal/issues.js"
import * as Recorded from "./internal/recorded.js"
import * as RunLog from "./RunLog.js"
import { RunLogStore } from "./RunLogStore.js"
import * as Snapshot from "./Snapshot.js"
import type { ToolRegistry } from "./ToolRegistry.js"

/** What to fork. Omitted `agent`, `task`, `tools`, `parserId` keep the parent's. */
export interface ForkOptions {
  /** The parent run. */
  readonly from: RunId
  /** The fork copies the parent's steps before this one and continues from it (0 … completed steps). */
  readonly atStep: number
  /** The fork's run id (must not exist yet). */
  readonly runId: RunId
  readonly agent?: AgentDefinition
  readonly task?: string
  readonly tools?: ToolRegistry<unknown>
  /** The decision parser's `id` the fork will run with. */
  readonly parserId?: string
}

/** Why a fork was refused (nothing was written). */
export const InvalidForkReason = Schema.Literal("NoParent", "StepOutOfRange", "RunExists", "ParentSnapshot", "StoreCannotFork")
/** @since 0.1.0 */
export type InvalidForkReason = typeof InvalidForkReason.Type

/** A fork was refused; nothing was written. */
export class InvalidFork extends Schema.TaggedError<InvalidFork>()("InvalidFork", {
  reason: InvalidForkReason,
  from: Schema.String,
  runId: Schema.String,
  message: Schema.String
}) {}

/** What a fork wrote. */
export interface Forked {
  readonly runId: RunId
  readonly forkedFrom: RunLog.ForkedFrom
  readonly snapshotHash: string
  /** The number of parent records copied. */
  readonly copiedRecords: number
}

const decodeSnapshot = Schema.decodeUnknownEither(Snapshot.Snapshot)

/** Is this a fork on which nothing has run yet (only its copied steps are in the log)? */
export const isUntouched = (log: RunLog.RunLog): boolean => {
  if (Option.isNone(log.started) || Option.isSome(log.finished)) return false
  const forkedFrom = log.started.value.forkedFrom
  return forkedFrom !== undefined &&
    log.resumes.length === 0 &&
    log.steps.length === forkedFrom.step &&
    log.replies.length === forkedFrom.step
}

/** The fork's parent, if the log is a fork's. */
export const parentOf = (log: RunLog.RunLog): Option.Option<RunLog.ForkedFrom> =>
  Option.flatMap(log.started, (started) => Option.fromNullable(started.forkedFrom))

/** One difference of `Snapshot.diff` as recorded (a fork's, or a conversation's redeploy between turns). @internal */
export const toDifference = ([path, parent, fork]: readonly [string, unknown, unknown]): RunLog.ForkDifference => ({
  path,
  ...(parent === undefined ? {} : { parent }),
  ...(fork === undefined ? {} : { fork })
})

/** Does the fork's configuration differ from its parent's (an ablation)? */
const forkDiffers = (forkedFrom: RunLog.ForkedFrom): boolean => forkedFrom.differences.length > 0

/**
 * The copied records with each copied reply's `requestHash` recomputed under the fork's own
 * configuration (issue 29): the fingerprint of the request the fork's configuration makes from
 * the copied history at that step — what a replay of the fork sends there. The parent's hashes
 * are the parent's requests; kept, a fork under a changed prompt could never be replayed.
 * Replies without a hash (logs from before fingerprints) stay without one. Linear in the copied
 * history: one rebuild, one incremental fingerprint.
 */
const rehashed = (
  first: RunLog.RunStarted,
  copied: ReadonlyArray<RunLog.RunRecord>
): Effect.Effect<ReadonlyArray<RunLog.RunRecord>, StoreError> =>
  Effect.gen(function*() {
    const log = RunLog.fromRecords([first, ...copied])
    const fixed = Recorded.fromLog(log)
    if (Either.isLeft(fixed)) return yield* Recorded.unreadable(first.runId, fixed.left)
    const recorded = fixed.right
    if (HistoryPolicy.partsOf(recorded.snapshot.agent.history) !== undefined) {
      // Under a history policy (design 0300) a request is not a prefix of the history: each is
      // rendered as the loop renders it (its compactions, its mask), one rebuild per copied reply.
      return yield* Effect.forEach(copied, (record) =>
        record._tag === "ModelReplied" && record.requestHash !== undefined
          ? Effect.map(Recorded.requestAt(recorded, log, record.step), (request): RunLog.RunRecord => ({ ...record, requestHash: Fingerprint.ofRequest(request) }))
          : Effect.succeed(record))
    }
    const messages = yield* Recorded.messages(recorded, log)
    const fingerprint = Fingerprint.make(recorded.tools, recorded.snapshot.agent.modelSettings)
    // The request of step s holds the messages before its reply: the s-th Assistant message.
    const hashes = new Map<number, string>()
    let step = 0
    for (let i = 0; i < messages.length; i++) {
      if (messages[i]!._tag !== "Assistant") continue
      hashes.set(step++, fingerprint.hash(messages.slice(0, i)))
    }
    return copied.map((record) =>
      record._tag === "ModelReplied" && record.requestHash !== undefined && hashes.has(record.step)
        ? { ...record, requestHash: hashes.get(record.step)! }
        : record
    )
  })

/**
 * The copied records with the token budget's drops decided again under the fork's policy (design
 * 0300): a drop is a function of the log and the policy, so a fork with another budget holds the
 * drops its own budget makes over the copied steps — what a replay of the fork decides there —
 * not the parent's. Summaries and emergency steps are facts of the parent's run (a model's text, a
 * provider's refusal) and are copied as they are. Unchanged when the fork's policy has no budget
 * or counts with an encoding the `TokenCounter` in context does not have.
 */
const rederived = (
  first: RunLog.RunStarted,
  copied: ReadonlyArray<RunLog.RunRecord>
): Effect.Effect<ReadonlyArray<RunLog.RunRecord>, StoreError> =>
  Effect.gen(function*() {
    const fixed = Recorded.fromLog(RunLog.fromRecords([first, ...copied]))
    if (Either.isLeft(fixed)) return yield* Recorded.unreadable(first.runId, fixed.left)
    const recorded = fixed.right
    const parts = HistoryPolicy.partsOf(recorded.snapshot.agent.history)
    if (parts?.fit === undefined) return copied
    const counters = Option.getOrElse(yield* Effect.serviceOption(TokenCounter.TokenCounter), () => TokenCounter.approximateOnly)
    const count = counters.encoding(parts.fit.tokenizer)
    if (count === undefined) return copied
    const kept = copied.filter((r) => !(r._tag === "HistoryCompacted" && r.reason === "Budget"))
    const log = RunLog.fromRecords([first, ...kept])
    const rebuilt = yield* State.rebuild(first.runId, log, History.initial(recorded.snapshot.agent.systemPrompt, first.task), recorded.texts)
    const state = rebuilt.state
    const renderer = Rendering.make(parts, recorded.tools, recorded.snapshot.agent.modelSettings, count)
    // Step by step, in the order the loop writes them: a summary, then the budget's drop, then an emergency step.
    const inForce: Array<RunLog.HistoryCompacted> = []
    const decided = new Map<number, RunLog.HistoryCompacted>()
    for (let step = 0; step < log.steps.length; step++) {
      const at = log.compactions.filter((c) => c.step === step)
      inForce.push(...at.filter((c) => c.reason === "Threshold"))
      const planned = renderer.plan({
        messages: state.messages,
        stepStarts: state.stepStarts,
        steps: step,
        compactions: inForce,
        lastInputTokens: step === 0 ? 0 : log.replies[step - 1]!.reply.usage.inputTokens,
        turnMessages: state.turnMessages
      })
      if (planned !== undefined) {
        const record: RunLog.HistoryCompacted = {
          _tag: "HistoryCompacted",
          seq: 0,
          step: StepIndex.make(step),
          reason: "Budget",
          toStep: StepIndex.make(planned.toStep),
          requestTokens: planned.requestTokens
        }
        decided.set(step, record)
        inForce.push(record)
      }
      inForce.push(...at.filter((c) => c.reason === "ContextExceeded"))
    }
    // Each drop goes just before the first record of its step that comes after it: the emergency step, or the reply.
    const out: Array<RunLog.RunRecord> = []
    for (const record of kept) {
      const step = record._tag === "ModelReplied" || (record._tag === "HistoryCompacted" && record.reason === "ContextExceeded") ? record.step : undefined
      const drop = step === undefined ? undefined : decided.get(step)
      if (drop !== undefined) {
        out.push(drop)
        decided.delete(step!)
      }
      out.push(record)
    }
    return out.map((record, i): RunLog.RunRecord => ({ ...record, seq: i + 1 }))
  })

/**
 * Forks `options.from` at `options.atStep` into `options.runId` (see the module header). Fails
 * with `InvalidFork` — no parent, a step out of range, an existing run id, a parent snapshot
 * this version cannot read, a store without `appendRecords` — before anything is written, and
 * with `RunBusy` when someone is running the new id.
 */
export const fork = (
  options: ForkOptions
): Effect.Effect<Forked, InvalidFork | StoreError | ConcurrentWriter | RunBusy, RunLogStore> =>
  Effect.gen(function*() {
    const store = yield* RunLogStore
    const refuse = (reason: InvalidForkReason, message: string) =>
      new InvalidFork({ reason, from: options.from, runId: options.runId, message: `cannot fork ${options.from} into ${options.runId}: ${message}` })
    const appendRecords = store.appendRecords
    if (appendRecords === undefined) return yield* refuse("StoreCannotFork", "the store has no appendRecords (build it with RunLogStore.make)")
    const parent = yield* store.readLog(options.from)
    if (Option.isNone(parent.started)) return yield* refuse("NoParent", `there is no run ${options.from}`)
    const started = parent.started.value
    const completed = parent.steps.length
    if (!Number.isInteger(options.atStep) || options.atStep < 0 || options.atStep > completed) {
      return yield* refuse("StepOutOfRange", `step ${options.atStep} is not between 0 and ${completed} (the parent's completed steps)`)
    }
    // A snapshot recorded before design 0150 reads as the run ran: one action per step.
    const recorded = Snapshot.upgrade(started.snapshot)
    const decoded = decodeSnapshot(recorded)
    if (decoded._tag === "Left") {
      return yield* refuse("ParentSnapshot", `the parent's snapshot cannot be read: ${formatIssues(decoded.left)}`)
    }
    const base = decoded.right
    const task = options.task ?? started.task
    const tools = options.tools === undefined ? base.tools : Snapshot.toolsPart(options.tools)
    const snapshot = Snapshot.encode({
      polyloop: Snapshot.version,
      agent: options.agent === undefined ? base.agent : Snapshot.agentPart(options.agent, tools, base.agent.parallelToolCalls),
      task,
      tools,
      parser: options.parserId ?? base.parser
    })
    const forkedFrom: RunLog.ForkedFrom = {
      runId: started.runId,
      step: StepIndex.make(options.atStep),
      snapshotHash: started.snapshotHash,
      differences: Snapshot.diff(recorded, snapshot.value).map(toDifference)
    }
    return yield* Effect.scoped(Effect.gen(function*() {
      yield* store.claim(options.runId)
      const existing = yield* store.readLog(options.runId)
      if (!RunLog.isEmpty(existing)) return yield* refuse("RunExists", `run ${options.runId} already exists`)
      const startedAt = yield* Clock.currentTimeMillis
      const first: RunLog.RunStarted = {
        _tag: "RunStarted",
        seq: 0,
        runId: options.runId,
        task,
        snapshot: snapshot.value,
        snapshotHash: snapshot.hash,
        startedAt,
        logVersion: RunLog.logVersion,
        forkedFrom,
        // A fork of a conversation is a conversation (design 0360): it takes further messages.
        ...(started.conversation === undefined ? {} : { conversation: started.conversation })
      }
      const renumbered = RunLog.recordsBeforeStep(parent, options.atStep).map((record, i): RunLog.RunRecord => ({ ...record, seq: i + 1 }))
      const copied = forkDiffers(forkedFrom) ? yield* rehashed(first, yield* rederived(first, renumbered)) : renumbered
      yield* appendRecords(options.runId, [first, ...copied])
      return { runId: options.runId, forkedFrom, snapshotHash: snapshot.hash, copiedRecords: copied.length }
    }))
  }).pipe(Effect.withSpan("Agent.fork", { attributes: { "polyloop.run_id": options.runId, "polyloop.forked_from": options.from } }))
