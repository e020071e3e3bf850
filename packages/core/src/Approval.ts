/**
 * Human approval that survives restarts (design 0160). A tool declares `approval` (see `Tool`);
 * when a step's call needs it, the loop records `ApprovalRequested` and `Agent.run` stops with
 * `Suspended`, holding nothing. `decide` records a person's `ApprovalDecided`, bound to the
 * requested action's hash; the next `Agent.run` resumes: an approved call runs once, a rejected
 * one is `NotExecuted` with the `rejected` text.
 *
 * @since 0.1.0
 */
import * as Clock from "effect/Clock"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import * as ParseResult from "effect/ParseResult"
import * as Schema from "effect/Schema"
import type { Action } from "./Action.js"
import * as Errors from "./Errors.js"
import type { ConcurrentWriter, StoreError } from "./Errors.js"
import * as EventSink from "./EventSink.js"
import { RunId } from "./Ids.js"
import * as Approvals from "./internal/approvals.js"
import * as RunLog from "./RunLog.js"
import { RunLogStore } from "./RunLogStore.js"

/** The decision to run the call. */
export const approve: RunLog.Decision = { _tag: "Approve" }

/** The decision not to run the call; the model is told `reason` (through the `rejected` text). */
export const reject = (reason: string): RunLog.Decision => ({ _tag: "Reject", reason })

/** The hash binding a decision to one action of one step of one run (SHA-256 of canonical JSON). */
export const actionHash: (runId: RunId | string, step: number, callId: string, action: Action) => string = Approvals.actionHash

/** A call waiting for a decision. */
export const Waiting = Errors.Waiting
/** @since 0.1.0 */
export type Waiting = Errors.Waiting

const waitingOf = (runId: string, request: RunLog.ApprovalRequested): Waiting => ({
  runId,
  step: request.step,
  callId: request.callId,
  tool: request.action._tag === "ToolCall" ? request.action.name : request.action.language,
  action: request.action,
  actionHash: request.actionHash,
  requestedAt: request.at
})

/** The calls of a run waiting for a decision (none for a finished run or one that waits for nothing). */
export const waiting = (log: RunLog.RunLog): ReadonlyArray<Waiting> =>
  Option.match(log.started, {
    onNone: () => [],
    onSome: (started) => (Option.isSome(log.finished) ? [] : Approvals.undecided(log).map((r) => waitingOf(started.runId, r)))
  })

/** Is the run suspended: unfinished, with a requested call that has no decision? */
export const isSuspended: (log: RunLog.RunLog) => boolean = Approvals.isSuspended

/** `Agent.run` stopped because calls wait for a person's decision (a `RunError`; see `Errors.Suspended`). */
export const Suspended = Errors.Suspended
/** @since 0.1.0 */
export type Suspended = Errors.Suspended

/** `decide` on a run that waits for no decision: no such run, a finished run, or none pending. */
export class NotSuspended extends Schema.TaggedError<NotSuspended>()("NotSuspended", {
  runId: Schema.String,
  reason: Schema.Literal("NotFound", "Finished", "NotWaiting")
}) {
  override get message(): string {
    const why = this.reason === "NotFound" ? "there is no such run" : this.reason === "Finished" ? "the run is finished" : "the run waits for no decision"
    return `run ${this.runId} is not suspended: ${why}`
  }
}

/** The call already has a decision; the first one stands and is reported here. Nothing was written. */
export class AlreadyDecided extends Schema.TaggedError<AlreadyDecided>()("AlreadyDecided", {
  runId: Schema.String,
  callId: Schema.String,
  decision: RunLog.Decision,
  by: Schema.String,
  at: Schema.Finite
}) {
  override get message(): string {
    const what = this.decision._tag === "Approve" ? "approved" : `rejected (${this.decision.reason})`
    return `run ${this.runId}: call ${this.callId} was already ${what} by ${this.by}; the first decision stands`
  }
}

/** The run waits, but not for this call id. */
export class UnknownCall extends Schema.TaggedError<UnknownCall>()("UnknownCall", {
  runId: Schema.String,
  callId: Schema.String,
  waiting: Schema.Array(Schema.String)
}) {
  override get message(): string {
    return `run ${this.runId} waits for no call ${JSON.stringify(this.callId)}; waiting: ${this.waiting.join(", ")}`
  }
}

/** The decision named another action than the one requested (a forged or stale hash); refused. */
export class ActionMismatch extends Schema.TaggedError<ActionMismatch>()("ActionMismatch", {
  runId: Schema.String,
  callId: Schema.String,
  requested: Schema.String,
  given: Schema.String
}) {
  override get message(): string {
    return `run ${this.runId}: call ${this.callId} requests action ${this.requested.slice(0, 16)}…, the decision names ${this.given.slice(0, 16)}…; refused`
  }
}

/** The decision's input is not valid (an empty `by` or rejection reason, a bad run id). */
export class InvalidDecision extends Schema.TaggedError<InvalidDecision>()("InvalidDecision", {
  issues: Schema.String
}) {
  override get message(): string {
    return `invalid decision: ${this.issues}`
  }
}

/** What `decide` can fail with; each writes nothing. */
export type DecideError = NotSuspended | AlreadyDecided | UnknownCall | ActionMismatch | InvalidDecision | StoreError | ConcurrentWriter

const NonBlank = Schema.String.pipe(Schema.filter((s) => s.trim().length > 0, { message: () => "must not be empty" }))

/** What `decide` takes. */
export const DecideInput = Schema.Struct({
  runId: RunId,
  callId: NonBlank,
  decision: Schema.Union(Schema.TaggedStruct("Approve", {}), Schema.TaggedStruct("Reject", { reason: NonBlank })),
  /** Who decided (recorded, shown by `polyloop show`). */
  by: NonBlank,
  /** The hash of the action the person saw (`Waiting.actionHash`); when given it must be the request's. */
  actionHash: Schema.optional(Schema.String)
})
/** @since 0.1.0 */
export type DecideInput = Schema.Schema.Encoded<typeof DecideInput>

const decodeInput = Schema.decodeUnknownEither(DecideInput)

/** How many times `decide` reads again after another writer appended first. */
const attempts = 5

const attempt = (input: typeof DecideInput.Type): Effect.Effect<RunLog.ApprovalDecided, DecideError, RunLogStore> =>
  Effect.gen(function*() {
    const store = yield* RunLogStore
    const runId = input.runId
    const log = yield* store.readLog(runId)
    if (Option.isNone(log.started)) return yield* new NotSuspended({ runId, reason: "NotFound" })
    const mine = Approvals.requests(log).filter((request) => request.callId === input.callId)
    const request = mine[mine.length - 1]
    if (request !== undefined) {
      const standing = Approvals.decisionOf(log, request)
      if (Option.isSome(standing)) {
        const first = standing.value
        return yield* new AlreadyDecided({ runId, callId: input.callId, decision: first.decision, by: first.by, at: first.at })
      }
    }
    if (Option.isSome(log.finished)) return yield* new NotSuspended({ runId, reason: "Finished" })
    if (request === undefined) {
      const pending = Approvals.undecided(log)
      if (pending.length === 0) return yield* new NotSuspended({ runId, reason: "NotWaiting" })
      return yield* new UnknownCall({ runId, callId: input.callId, waiting: pending.map((r) => r.callId) })
    }
    if (input.actionHash !== undefined && input.actionHash !== request.actionHash) {
      return yield* new ActionMismatch({ runId, callId: input.callId, requested: request.actionHash, given: input.actionHash })
    }
    const record: RunLog.ApprovalDecided = {
      _tag: "ApprovalDecided",
      seq: RunLog.nextSeq(log),
      step: request.step,
      callId: request.callId,
      actionHash: request.actionHash,
      decision: input.decision,
      by: input.by,
      at: yield* Clock.currentTimeMillis
    }
    yield* store.appendApprovals(runId, [record])
    return record
  })

/**
 * Records a person's decision on a waiting call (`Agent.decide`): appends `ApprovalDecided`,
 * bound to the requested action's hash, and emits the `ApprovalDecided` event when an
 * `EventSink` is in context. Refused, writing nothing: a run that waits for no decision
 * (`NotSuspended`), a call already decided (`AlreadyDecided`, the first decision stands), a
 * call the run does not wait for (`UnknownCall`), an `actionHash` that is not the requested
 * action's (`ActionMismatch`), bad input (`InvalidDecision`). Takes no claim: the store's
 * sequence check orders it against any other writer, and after a concurrent append the log is
 * read and the decision validated again.
 */
export const decide = (input: DecideInput): Effect.Effect<RunLog.ApprovalDecided, DecideError, RunLogStore> =>
  Effect.gen(function*() {
    const decoded = decodeInput(input)
    if (decoded._tag === "Left") {
      return yield* new InvalidDecision({ issues: ParseResult.TreeFormatter.formatErrorSync(decoded.left) })
    }
    const valid = decoded.right
    let tries = 0
    while (true) {
      tries += 1
      const result = yield* Effect.either(attempt(valid))
      if (result._tag === "Right") {
        const record = result.right
        const sink = yield* Effect.serviceOption(EventSink.EventSink)
        if (Option.isSome(sink)) {
          yield* sink.value.emit({
            _tag: "ApprovalDecided",
            runId: valid.runId,
            step: record.step,
            callId: record.callId,
            actionHash: record.actionHash,
            decision: record.decision,
            by: record.by
          }).pipe(Effect.catchAll((error) => Effect.logDebug(`polyloop: event ApprovalDecided not delivered: ${error.message}`)))
        }
        return record
      }
      if (result.left._tag !== "ConcurrentWriter" || tries >= attempts) return yield* result.left
    }
  }).pipe(Effect.withSpan("Agent.decide", { attributes: { "polyloop.run_id": input.runId, "polyloop.call_id": input.callId } }))
