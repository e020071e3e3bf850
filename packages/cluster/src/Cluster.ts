/**
 * The client side of the cluster (design 0200): `submit(runId, payload)` sends the run's
 * persisted `Start` (durable in the database before it returns; idempotent by run id),
 * `status` and `list` read the run index, `await` waits for a run's end, `decide` delivers a
 * person's decision to a suspended run, `retry` runs a failed run again, `live` asks the runner
 * holding a run what it is doing. Any process with `Sharding` can use it: a runner, or a client
 * started with `layerClient` (it holds no shard).
 *
 * ```ts
 * const client = Cluster.layerClient().pipe(Layer.provideMerge(SqlRunLogStore.layerPgClient({ url })))
 * yield* Cluster.submit("order-42", { orderId: 42 })
 * const result = yield* Cluster.await("order-42")
 * ```
 *
 * @since 0.1.0
 */
import * as EntityAddress from "@effect/cluster/EntityAddress"
import * as EntityId from "@effect/cluster/EntityId"
import * as MessageStorage from "@effect/cluster/MessageStorage"
import * as Sharding from "@effect/cluster/Sharding"
import * as NodeClusterSocket from "@effect/platform-node/NodeClusterSocket"
import type * as SqlClient from "@effect/sql/SqlClient"
import * as Agent from "@polyloop/core/Agent"
import type * as Approval from "@polyloop/core/Approval"
import { StoreError } from "@polyloop/core/Errors"
import { messageIssues, runId as makeRunId } from "@polyloop/core/Ids"
import { RunLogStore } from "@polyloop/core/RunLogStore"
import type * as RunLog from "@polyloop/core/RunLog"
import type { ConfigError } from "effect/ConfigError"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Schedule from "effect/Schedule"
import * as Schema from "effect/Schema"
import { type SocketOptions, shardingConfig } from "./ClusterRunner.js"
import { describeError } from "./internal/describe.js"
import { type LiveStatus, RunEntity, RunFailed } from "./RunEntity.js"
import * as RunIndex from "./RunIndex.js"

/** `await`, `decide` or `retry` on a run the cluster never received. */
export class NotSubmitted extends Schema.TaggedError<NotSubmitted>()("NotSubmitted", {
  runId: Schema.String
}) {
  override get message(): string {
    return `run ${this.runId} was never submitted to the cluster`
  }
}

/** A message could not be stored or delivered (the cluster's `PersistenceError`, a full mailbox). */
const clusterFailure = (operation: string, runId: string) => (error: { readonly _tag: string }): StoreError =>
  new StoreError({
    reason: "Unavailable",
    runId,
    message: `cluster: ${operation} of run ${runId} failed: ${describeError(error)}`,
    cause: error
  })

/**
 * Submits a run: its `Start` message (with `payload`, JSON) is written to the cluster's message
 * table before this returns, and the runner owning the run's shard is notified. Idempotent by run
 * id: a second submission changes nothing (its payload is ignored). `true` when the run was not
 * in the index before this call.
 */
export const submit = (
  runId: string,
  payload: unknown
): Effect.Effect<boolean, StoreError, Sharding.Sharding | SqlClient.SqlClient> =>
  Effect.gen(function*() {
    const payloadText = yield* RunIndex.encodePayload(runId, payload)
    // The row first, then the message, always: a submitter that dies in between did not return,
    // and submitting again sends the message (a duplicate if it had been stored).
    const fresh = yield* RunIndex.submitted(runId, payloadText)
    const client = yield* RunEntity.client
    yield* client(runId).Start({ payload: JSON.parse(payloadText) }, { discard: true }).pipe(
      Effect.mapError(clusterFailure("submitting", runId))
    )
    return fresh
  }).pipe(Effect.withSpan("Cluster.submit", { attributes: { "polyloop.run_id": runId } }))

/**
 * Sends a person's message to a conversation hosted on the cluster (design 0300): its `Send`
 * message is written to the cluster's message table (durable before anything acts on it; keyed
 * by `messageId`, so a retried send is a duplicate and gets the first reply), the runner owning
 * the conversation's shard answers it with `Agent.send`, and this waits for the turn's result.
 * The first message starts the conversation (its index row is written first, as `submit` does).
 */
export const send = (
  runId: string,
  message: { readonly messageId: string; readonly text: string },
  payload: unknown
): Effect.Effect<Agent.RunResult, RunFailed | StoreError, Sharding.Sharding | SqlClient.SqlClient> =>
  Effect.gen(function*() {
    // A message no conversation can take is refused before anything is written (design 0360):
    // it must not reach the runner, whose refusal would mark the conversation failed.
    const issues = messageIssues(message)
    if (issues !== undefined) return yield* new RunFailed({ runId, reason: "Request", error: `invalid message: ${issues}` })
    const payloadText = yield* RunIndex.encodePayload(runId, payload)
    yield* RunIndex.submitted(runId, payloadText)
    const client = yield* RunEntity.client
    return yield* client(runId).Send({ payload: JSON.parse(payloadText), messageId: message.messageId, text: message.text }).pipe(
      Effect.catchTags({
        PersistenceError: (error) => Effect.fail(clusterFailure("sending a message", runId)(error)),
        MailboxFull: (error) => Effect.fail(clusterFailure("sending a message", runId)(error)),
        AlreadyProcessingMessage: (error) => Effect.fail(clusterFailure("sending a message", runId)(error))
      })
    )
  }).pipe(Effect.withSpan("Cluster.send", { attributes: { "polyloop.run_id": runId } }))

/** Where a run is, read from the run index (no runner is asked). */
export type Status =
  | { readonly _tag: "NotSubmitted"; readonly runId: string }
  /** No runner has started it yet (`entry` is none for a message stored without its row). */
  | { readonly _tag: "Submitted"; readonly runId: string; readonly entry: Option.Option<RunIndex.Entry> }
  | { readonly _tag: "Running" | "Retrying" | "Suspended"; readonly entry: RunIndex.Entry }
  | { readonly _tag: "Finished"; readonly entry: RunIndex.Entry; readonly result: Agent.RunResult }
  | { readonly _tag: "Failed"; readonly entry: RunIndex.Entry; readonly failure: RunFailed }

const statusOf = (entry: RunIndex.Entry): Status => {
  switch (entry.status) {
    case "Finished":
      return Option.match(entry.result, {
        onNone: () => ({ _tag: "Running", entry }),
        onSome: (result) => ({ _tag: "Finished", entry, result })
      })
    case "Failed":
      return {
        _tag: "Failed",
        entry,
        failure: new RunFailed({
          runId: entry.runId,
          reason: Option.getOrElse(entry.reason, () => "Defect" as const),
          error: Option.getOrElse(entry.error, () => "")
        })
      }
    case "Submitted":
      return { _tag: "Submitted", runId: entry.runId, entry: Option.some(entry) }
    default:
      return { _tag: entry.status, entry }
  }
}

/**
 * Where a run is: from its index row, and from its log when the row says it is not over yet (a
 * runner that finished a run while the database was failing may not have updated its row; the
 * log's `RunFinished` is what counts).
 */
export const status = (
  runId: string
): Effect.Effect<Status, StoreError, SqlClient.SqlClient | Sharding.Sharding | MessageStorage.MessageStorage | RunLogStore> =>
  Effect.gen(function*() {
    const row = yield* RunIndex.entry(runId)
    if (Option.isSome(row)) {
      const indexed = statusOf(row.value)
      if (indexed._tag === "Finished" || indexed._tag === "Failed") return indexed
      // The log's `RunFinished` wins over a row whose last write was lost (design 0200).
      const store = yield* RunLogStore
      const log = yield* store.readLog(makeRunId(runId))
      return Option.match(log.finished, {
        onNone: () => indexed,
        onSome: (finished) => ({ _tag: "Finished" as const, entry: row.value, result: Agent.resultOf(makeRunId(runId), finished) })
      })
    }
    // A runner writes a row for a run it meets without one (submitted by an older client).
    return Option.isSome(yield* startRequestId(runId))
      ? { _tag: "Submitted" as const, runId, entry: Option.none() }
      : { _tag: "NotSubmitted" as const, runId }
  })

/** The runs in the index, oldest submission first; optionally only those with one status. */
export const list: (query?: {
  readonly status?: RunIndex.IndexStatus
  readonly limit?: number
}) => Effect.Effect<ReadonlyArray<RunIndex.Entry>, StoreError, SqlClient.SqlClient> = RunIndex.list

/** Options of `await`. */
export interface AwaitOptions {
  /** How often the index is read; default 250 ms. */
  readonly pollInterval?: Duration.DurationInput
}

const pending = Symbol("pending")

/**
 * Waits for a run's end: its `RunResult`, or `RunFailed` with the error it failed with. A
 * suspended run is not ended: this waits through the decision. Fails with `NotSubmitted` for a
 * run the cluster never received.
 */
const awaitRun = (
  runId: string,
  options?: AwaitOptions
): Effect.Effect<
  Agent.RunResult,
  RunFailed | NotSubmitted | StoreError,
  SqlClient.SqlClient | Sharding.Sharding | MessageStorage.MessageStorage | RunLogStore
> =>
  status(runId).pipe(
    Effect.flatMap((s): Effect.Effect<Agent.RunResult, RunFailed | NotSubmitted | typeof pending> => {
      switch (s._tag) {
        case "Finished":
          return Effect.succeed(s.result)
        case "Failed":
          return Effect.fail(s.failure)
        case "NotSubmitted":
          return Effect.fail(new NotSubmitted({ runId }))
        default:
          return Effect.fail(pending)
      }
    }),
    Effect.retry({
      while: (error) => error === pending,
      schedule: Schedule.spaced(options?.pollInterval ?? Duration.millis(250))
    }),
    Effect.catchIf((error): error is typeof pending => error === pending, () => Effect.die("unreachable: await stopped polling")),
    Effect.withSpan("Cluster.await", { attributes: { "polyloop.run_id": runId } })
  )
export { awaitRun as await }

/** What `decide` takes (as `Agent.decide`, without the run id). */
export interface DecideInput {
  readonly callId: string
  readonly decision: RunLog.Decision
  readonly by: string
  readonly actionHash?: string
}

/**
 * Delivers a person's decision on a waiting call to the run's entity (persisted: it reaches the
 * run even across a runner's death), which records it with `Agent.decide` and wakes the run.
 * Replies with the recorded decision or `Agent.decide`'s typed error.
 */
export const decide = (
  runId: string,
  input: DecideInput
): Effect.Effect<RunLog.ApprovalDecided, Approval.DecideError, Sharding.Sharding> =>
  Effect.gen(function*() {
    const client = yield* RunEntity.client
    return yield* client(runId).Decide({
      callId: input.callId,
      decision: input.decision,
      by: input.by,
      ...(input.actionHash === undefined ? {} : { actionHash: input.actionHash })
    }).pipe(
      Effect.catchTags({
        PersistenceError: (error) => Effect.fail(clusterFailure("delivering a decision", runId)(error)),
        MailboxFull: (error) => Effect.fail(clusterFailure("delivering a decision", runId)(error)),
        AlreadyProcessingMessage: (error) => Effect.fail(clusterFailure("delivering a decision", runId)(error))
      })
    )
  }).pipe(Effect.withSpan("Cluster.decide", { attributes: { "polyloop.run_id": runId } }))

/** Asks the runner holding the run what it is doing (waits for the run's shard to have a runner). */
export const live = (runId: string): Effect.Effect<LiveStatus, StoreError, Sharding.Sharding> =>
  Effect.gen(function*() {
    const client = yield* RunEntity.client
    return yield* client(runId).Status().pipe(Effect.mapError(clusterFailure("asking the status", runId)))
  })

const startRequestId = (runId: string) =>
  Effect.gen(function*() {
    const sharding = yield* Sharding.Sharding
    const storage = yield* MessageStorage.MessageStorage
    const address = EntityAddress.EntityAddress.make({
      entityType: RunEntity.type,
      entityId: EntityId.make(runId),
      shardId: sharding.getShardId(EntityId.make(runId), RunEntity.getShardGroup(EntityId.make(runId)))
    })
    return yield* storage.requestIdForPrimaryKey({ address, tag: "Start", id: "start" }).pipe(
      Effect.mapError(clusterFailure("looking up the Start message", runId))
    )
  })

/**
 * Runs a `Failed` run again: clears the reply of its `Start` so the cluster delivers it again
 * (the run resumes from its log). `false` when the run is not `Failed`.
 */
export const retry = (
  runId: string
): Effect.Effect<boolean, StoreError | NotSubmitted, SqlClient.SqlClient | Sharding.Sharding | MessageStorage.MessageStorage | RunLogStore> =>
  Effect.gen(function*() {
    const row = yield* RunIndex.entry(runId)
    if (Option.isNone(row)) return yield* new NotSubmitted({ runId })
    if (row.value.status !== "Failed") return false
    const requestId = yield* startRequestId(runId)
    if (Option.isNone(requestId)) return yield* new NotSubmitted({ runId })
    const storage = yield* MessageStorage.MessageStorage
    yield* RunIndex.transition(runId, JSON.stringify(row.value.payload), { status: "Retrying", error: "retry requested" })
    yield* storage.clearReplies(requestId.value).pipe(Effect.mapError(clusterFailure("clearing the reply", runId)))
    const sharding = yield* Sharding.Sharding
    yield* sharding.pollStorage
    return true
  }).pipe(Effect.withSpan("Cluster.retry", { attributes: { "polyloop.run_id": runId } }))

/**
 * A client of the cluster that is not a runner (holds no shard): messages and runners in the
 * `SqlClient`'s database, runners reached over TCP. Use the same `shardsPerGroup` as the runners.
 * Migrates the run index.
 */
export const layerClient = (
  options: SocketOptions = {}
): Layer.Layer<Sharding.Sharding | MessageStorage.MessageStorage, ConfigError | StoreError, SqlClient.SqlClient> =>
  Layer.merge(
    NodeClusterSocket.layer({ clientOnly: true, storage: "sql", shardingConfig: shardingConfig(options, Option.none()) }),
    Layer.effectDiscard(RunIndex.migrate)
  )
