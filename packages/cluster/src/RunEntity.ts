/**
 * A polyloop run as an `@effect/cluster` entity (design 0200): the entity `polyloop/Run`, keyed
 * by the run id, and its three messages. `Start` (persisted, one per run: its primary key is
 * fixed) carries the JSON payload the application turns into a `RunRequest`; its reply is the
 * run's end. `Decide` (persisted, one per call id and decision) records a person's decision and wakes the
 * suspended run. `Status` (volatile) asks the runner holding the entity what it is doing.
 *
 * @since 0.1.0
 */
import * as ClusterSchema from "@effect/cluster/ClusterSchema"
import * as Entity from "@effect/cluster/Entity"
import * as Rpc from "@effect/rpc/Rpc"
import * as Agent from "@polyloop/core/Agent"
import * as Approval from "@polyloop/core/Approval"
import * as Errors from "@polyloop/core/Errors"
import * as RunLog from "@polyloop/core/RunLog"
import * as Schema from "effect/Schema"

/** Why a run ended without a result; the reply of `Start` and the `Failed` row's reason. */
export const FailureReason = Schema.Literal(
  /** The payload does not decode with the runner's schema. */
  "Payload",
  /** `resolve` failed (or returned a request for another run). */
  "Resolve",
  /**
   * The request can never run as is (`SnapshotMismatch`, `ExecutorRegistryMismatch`,
   * `InvalidRunRequest`, `ContextWindowExceeded`: a history the policy cannot shrink).
   */
  "Request",
  /** The store or the model kept failing through every retry. */
  "Exhausted",
  /** Another owner held the run for longer than `busyTimeout`. */
  "Busy",
  /** A defect (a bug in a parser or an executor): the log stays resumable, `Cluster.retry` runs it again. */
  "Defect"
)
/** @since 0.1.0 */
export type FailureReason = typeof FailureReason.Type

/** A run that ended without a result; kept in the index with its error. */
export class RunFailed extends Schema.TaggedError<RunFailed>()("RunFailed", {
  runId: Schema.String,
  reason: FailureReason,
  /** The last error, as text (`<Tag>: <message>`). */
  error: Schema.String
}) {
  override get message(): string {
    return `run ${this.runId} failed (${this.reason}): ${this.error}`
  }
}

/** What the runner holding a run is doing (the reply of `Status`). */
export const LiveState = Schema.Literal("Idle", "Running", "Retrying", "Suspended")
/** @since 0.1.0 */
export type LiveState = typeof LiveState.Type

/** The reply of `Status`. */
export const LiveStatus = Schema.Struct({
  runId: Schema.String,
  state: LiveState,
  /** `host:port` of the runner holding the entity. */
  runner: Schema.String,
  /** Attempts of `Agent.run` since the entity started on this runner. */
  attempts: Schema.NonNegativeInt,
  /** The error that made the last attempt retry, if any. */
  lastError: Schema.optional(Schema.String)
})
/** @since 0.1.0 */
export interface LiveStatus extends Schema.Schema.Type<typeof LiveStatus> {}

/** Starts (or resumes) the run; replies with its end. Persisted; a second `Start` of a run is a duplicate. */
export const Start = Rpc.make("Start", {
  payload: { payload: Schema.Unknown },
  success: Agent.RunResult,
  error: RunFailed,
  primaryKey: () => "start"
}).annotate(ClusterSchema.Persisted, true)

/**
 * A person's message to a conversation hosted on the cluster (design 0300): the runner answers it
 * with `Agent.send` (the payload resolved as for `Start`) and replies with the turn's result.
 * Persisted and keyed by the caller's message id: delivered once, across a runner's death; a
 * retried send is a duplicate and gets the first reply.
 */
export const Send = Rpc.make("Send", {
  payload: { payload: Schema.Unknown, messageId: Schema.String, text: Schema.String },
  success: Agent.RunResult,
  error: RunFailed,
  primaryKey: ({ messageId }) => `send/${messageId}`
}).annotate(ClusterSchema.Persisted, true)

/** The errors `Agent.decide` can reply to a `Decide` with. */
export const DecideError = Schema.Union(
  Approval.NotSuspended,
  Approval.AlreadyDecided,
  Approval.UnknownCall,
  Approval.ActionMismatch,
  Approval.InvalidDecision,
  Errors.StoreError,
  Errors.ConcurrentWriter
)

/** Records a person's decision on a waiting call (`Agent.decide`) and wakes the run. Persisted; a repeated identical decision is a duplicate. */
export const Decide = Rpc.make("Decide", {
  payload: {
    callId: Schema.String,
    decision: RunLog.Decision,
    by: Schema.String,
    actionHash: Schema.optional(Schema.String)
  },
  success: RunLog.ApprovalDecided,
  error: DecideError,
  // The same decision delivered again (a retried send) is a duplicate and gets the first reply;
  // another decision for the same call reaches `Agent.decide`, which refuses it (`AlreadyDecided`).
  primaryKey: ({ by, callId, decision }) =>
    `decide/${callId}/${decision._tag === "Approve" ? "approve" : `reject:${decision.reason}`}/${by}`
}).annotate(ClusterSchema.Persisted, true)

/** What the runner holding the run is doing now. Volatile (not persisted). */
export const Status = Rpc.make("Status", { success: LiveStatus })

/** The entity: one per run id. */
export const RunEntity = Entity.make("polyloop/Run", [Start, Send, Decide, Status])
