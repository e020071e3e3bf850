/**
 * Typed errors. Environment failure (`ToolEnvironmentError`, `StoreError`) and ordinary failure
 * are different types, never collapsed into `Error`.
 *
 * @since 0.1.0
 */
import * as Duration from "effect/Duration"
import * as Schema from "effect/Schema"
import { Action } from "./Action.js"
import { FiniteDurationFromMillis } from "./Budget.js"
import { StepIndex } from "./Ids.js"
import { JsonValue } from "./internal/jsonValue.js"

/**
 * A tool handler's way to say "the environment is broken" (cannot connect, protocol violated):
 * the action ends with status `EnvError` and the run with `StopReason.EnvError`. Any other
 * failure of a handler is an ordinary error the model sees and can correct.
 */
export class ToolEnvironmentError extends Schema.TaggedError<ToolEnvironmentError>()("ToolEnvironmentError", {
  message: Schema.String,
  cause: Schema.optional(Schema.Defect)
}) {}

/** `ToolRegistry.executor()` was called on a registry where some tools have no handler. */
export class MissingToolHandler extends Schema.TaggedError<MissingToolHandler>()("MissingToolHandler", {
  tools: Schema.Array(Schema.String)
}) {
  override get message(): string {
    return `no handler for tool(s): ${this.tools.join(", ")}`
  }
}

/** The derived executor in context was not derived from the request's tools. */
export class ExecutorRegistryMismatch extends Schema.TaggedError<ExecutorRegistryMismatch>()(
  "ExecutorRegistryMismatch",
  {
    requestTools: Schema.Array(Schema.String),
    executorTools: Schema.Array(Schema.String)
  }
) {
  override get message(): string {
    return `the executor was derived from another registry (request tools: [${this.requestTools.join(", ")}], executor tools: [${this.executorTools.join(", ")}])`
  }
}

/**
 * The model could not answer. `retryable`: transport failure, rate limit, server error (a quota
 * or billing refusal is not, whatever its status). What the provider said about it (design
 * 0140): `retryAfter` (its "retry after" hint, encoded as milliseconds), its error `code`,
 * `type` and `param`, and the `requestId` to quote to its support. Never the API key, a prompt
 * or the provider's free-text message (it may quote the prompt).
 */
export class ModelError extends Schema.TaggedError<ModelError>()("ModelError", {
  retryable: Schema.Boolean,
  message: Schema.String,
  status: Schema.optional(Schema.Int),
  /** How long the provider asked to wait before trying again. */
  retryAfter: Schema.optional(FiniteDurationFromMillis),
  /** The provider's error code, e.g. `insufficient_quota`, `context_length_exceeded`, `model_not_found`. */
  code: Schema.optional(Schema.String),
  /** The provider's error type, e.g. `invalid_request_error`, `overloaded_error`. */
  type: Schema.optional(Schema.String),
  /** The request parameter the provider blamed, e.g. `messages`, `max_tokens`. */
  param: Schema.optional(Schema.String),
  /** The provider's id of the request (`x-request-id`, `request-id`, …). */
  requestId: Schema.optional(Schema.String),
  /** The model's context window in tokens, when a refusal of a request too long states it (design 0361). */
  contextWindow: Schema.optional(Schema.Int),
  cause: Schema.optional(Schema.Defect)
}) {
  /** What the provider said, as one line: `code insufficient_quota · type … · param … · request req_…`; empty when nothing. */
  get providerDetails(): string {
    return [
      this.code === undefined ? undefined : `code ${this.code}`,
      this.type === undefined ? undefined : `type ${this.type}`,
      this.param === undefined ? undefined : `param ${this.param}`,
      this.retryAfter === undefined ? undefined : `retry after ${Duration.format(this.retryAfter)}`,
      this.requestId === undefined ? undefined : `request ${this.requestId}`
    ].filter((part) => part !== undefined).join(" · ")
  }
}

/** Why a store operation failed. */
export const StoreErrorReason = Schema.Literal(
  "Unavailable",
  "Corrupt",
  "ReadOnly",
  "DiskFull",
  "SchemaVersion",
  "Decode",
  "Encode",
  "Unknown"
)
/** @since 0.1.0 */
export type StoreErrorReason = typeof StoreErrorReason.Type

/** A storage failure. Nothing already written is lost; the run can be resumed. */
export class StoreError extends Schema.TaggedError<StoreError>()("StoreError", {
  reason: StoreErrorReason,
  message: Schema.String,
  path: Schema.optional(Schema.String),
  runId: Schema.optional(Schema.String),
  cause: Schema.optional(Schema.Defect)
}) {}

/** One difference between the recorded and the current snapshot: `[path, recorded, current]`. */
export const SnapshotDifference = Schema.Tuple(Schema.String, JsonValue, JsonValue)
/** @since 0.1.0 */
export type SnapshotDifference = typeof SnapshotDifference.Type

/**
 * Resume under another configuration was refused; nothing was written. `tools` names the tools
 * whose entries differ, were added or were removed (e.g. an MCP server's tool that changed
 * between start and resume; design 0230).
 */
export class SnapshotMismatch extends Schema.TaggedError<SnapshotMismatch>()("SnapshotMismatch", {
  runId: Schema.String,
  differences: Schema.Array(SnapshotDifference),
  tools: Schema.optional(Schema.Array(Schema.String))
}) {
  override get message(): string {
    const paths = this.differences.map(([path]) => path || "(root)")
    const tools = this.tools === undefined || this.tools.length === 0 ? "" : `; tools changed: ${this.tools.join(", ")}`
    return `run ${this.runId} was started with another configuration; differing: ${paths.join(", ")}${tools}`
  }
}

/** The run is being run by another owner; nothing was done. */
export class RunBusy extends Schema.TaggedError<RunBusy>()("RunBusy", {
  runId: Schema.String,
  owner: Schema.optional(Schema.String)
}) {
  override get message(): string {
    return `run ${this.runId} is being run by ${this.owner ?? "another owner"}`
  }
}

/**
 * A record's sequence number was a duplicate or left a gap: someone else wrote to the run. A
 * store with expiring claims also fences a writer whose claim was lost: then `leaseHolder` names
 * the claim's current owner ("" when nobody holds it).
 */
export class ConcurrentWriter extends Schema.TaggedError<ConcurrentWriter>()("ConcurrentWriter", {
  runId: Schema.String,
  expectedSeq: Schema.Int,
  actualSeq: Schema.Int,
  leaseHolder: Schema.optional(Schema.String)
}) {
  override get message(): string {
    if (this.leaseHolder !== undefined) {
      return `run ${this.runId}: record sequence ${this.actualSeq} rejected: this writer's claim expired and is now held by ${
        this.leaseHolder === "" ? "nobody" : this.leaseHolder
      } (another writer may have taken over)`
    }
    return `run ${this.runId}: record sequence ${this.actualSeq} rejected, the log expects ${this.expectedSeq} (another writer?)`
  }
}

/** An event sink could not deliver an event. Counted, never interrupts the loop. */
export class EventDeliveryError extends Schema.TaggedError<EventDeliveryError>()("EventDeliveryError", {
  message: Schema.String,
  cause: Schema.optional(Schema.Defect)
}) {}

/** The call names a tool the registry does not have. */
export class UnknownTool extends Schema.TaggedError<UnknownTool>()("UnknownTool", {
  name: Schema.String,
  available: Schema.Array(Schema.String)
}) {
  override get message(): string {
    return `unknown tool "${this.name}"`
  }
}

/** The call's arguments do not match the tool's parameter schema. */
export class InvalidArguments extends Schema.TaggedError<InvalidArguments>()("InvalidArguments", {
  tool: Schema.String,
  issues: Schema.String
}) {
  override get message(): string {
    return `invalid arguments for "${this.tool}": ${this.issues}`
  }
}

/** The run request is not valid (e.g. an agent definition that does not satisfy its schema); nothing was written. */
export class InvalidRunRequest extends Schema.TaggedError<InvalidRunRequest>()("InvalidRunRequest", {
  runId: Schema.String,
  issues: Schema.String
}) {
  override get message(): string {
    return `run ${this.runId}: invalid request: ${this.issues}`
  }
}

/**
 * A conversation's message id was sent again with another text (design 0360): an idempotency
 * key reused with another body. Nothing was written; `turn` is the turn that holds the id.
 */
export class MessageIdReused extends Schema.TaggedError<MessageIdReused>()("MessageIdReused", {
  runId: Schema.String,
  messageId: Schema.String,
  /** Absent while the first message waits in this process's queue (no turn yet). */
  turn: Schema.optional(Schema.Int)
}) {
  override get message(): string {
    const where = this.turn === undefined ? "queued" : `turn ${this.turn} holds it`
    return `run ${this.runId}: message id "${this.messageId}" was sent with another text (${where}); a message id names one message, send another text under a new id`
  }
}

/** A call waiting for a person's decision (design 0160). */
export const Waiting = Schema.Struct({
  runId: Schema.String,
  step: StepIndex,
  callId: Schema.String,
  /** The tool's name (or the code's language). */
  tool: Schema.String,
  action: Action,
  actionHash: Schema.String,
  /** Epoch milliseconds. */
  requestedAt: Schema.Finite
})
/** @since 0.1.0 */
export interface Waiting extends Schema.Schema.Type<typeof Waiting> {}

/**
 * `Agent.run` stopped because calls of the run wait for a person's decision (design 0160). Not
 * a fault: nothing is held, the process may exit; `Agent.decide`, then `Agent.run` again resumes.
 */
export class Suspended extends Schema.TaggedError<Suspended>()("Suspended", {
  runId: Schema.String,
  waiting: Schema.Array(Waiting)
}) {
  override get message(): string {
    return `run ${this.runId} is suspended: waiting for a decision on ${this.waiting.map((w) => `${w.callId} (${w.tool})`).join(", ")}`
  }
}

/**
 * A step's request is longer than the context window and the run's history policy could not
 * shrink it (design 0300, decision 4; design 0361): the provider refused it (`cause`) under
 * `keepAll`, with nothing left to drop, or a second time after the emergency step — or the
 * policy's budget (`window − headroom`) cannot hold what it never drops (the last step, a
 * person's messages), and the request was not sent (no `cause`). `window`: the policy's window
 * when it names one, else the model's when the provider stated it; `requestTokens`: the
 * request's counted size. Nothing is lost: the run can be resumed under a policy that shrinks
 * (a fork changes the policy).
 */
export class ContextWindowExceeded extends Schema.TaggedError<ContextWindowExceeded>()("ContextWindowExceeded", {
  runId: Schema.String,
  step: StepIndex,
  window: Schema.optional(Schema.Int),
  requestTokens: Schema.Int,
  cause: Schema.optional(ModelError)
}) {
  override get message(): string {
    return `run ${this.runId}: the request of step ${this.step} (${this.requestTokens} tokens counted) exceeds the ${
      this.cause === undefined ? "history policy's budget within the" : "model's"
    } context window${this.window === undefined ? "" : ` (${this.window} tokens)`} and the history policy cannot shrink it further${
      this.cause === undefined ? " (not sent)" : `: ${this.cause.message}`
    }`
  }
}

/** What `Agent.run` can fail with. */
export type RunError =
  | ModelError
  | StoreError
  | SnapshotMismatch
  | RunBusy
  | ConcurrentWriter
  | ExecutorRegistryMismatch
  | InvalidRunRequest
  | MessageIdReused
  | Suspended
  | ContextWindowExceeded

/** Schema of `RunError`. */
export const RunError = Schema.Union(
  ModelError,
  StoreError,
  SnapshotMismatch,
  RunBusy,
  ConcurrentWriter,
  ExecutorRegistryMismatch,
  InvalidRunRequest,
  MessageIdReused,
  Suspended,
  ContextWindowExceeded
)
