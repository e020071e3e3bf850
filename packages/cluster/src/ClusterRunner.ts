/**
 * A runner process of the cluster (design 0200): `layer` gives the entity `polyloop/Run` its
 * behaviour — decode the payload, `resolve` it to a `RunRequest` and an executor, run it with
 * `Agent.run` (resuming it from its log), retry what a retry can cure, wait while it is
 * suspended — and `layerSocket` makes the process a runner of `@effect/cluster` over TCP
 * (`NodeClusterSocket`), with messages, runners and shard locks in the `SqlClient`'s database.
 *
 * ```ts
 * const runner = ClusterRunner.layer({ payload: Order, resolve: (order, runId) => … }).pipe(
 *   Layer.provideMerge(ClusterRunner.layerSocket({ host: "10.0.0.5", port: 34431 }).pipe(
 *     Layer.provide(SqlRunLogStore.layerPgClient({ url, maxConnections: 6 })) // the cluster's own pool
 *   )),
 *   Layer.provide(services), // RunLogStore, ModelClient, DecisionParser, EventSink
 *   Layer.provideMerge(SqlRunLogStore.layerPgClient({ url }))
 * )
 * NodeRuntime.runMain(Layer.launch(runner)) // SIGTERM: runs in flight stop resumable and move
 * ```
 *
 * @since 0.1.0
 */
import * as Entity from "@effect/cluster/Entity"
import type * as MessageStorage from "@effect/cluster/MessageStorage"
import * as RunnerAddress from "@effect/cluster/RunnerAddress"
import type * as Runners from "@effect/cluster/Runners"
import type * as Sharding from "@effect/cluster/Sharding"
import * as NodeClusterSocket from "@effect/platform-node/NodeClusterSocket"
import type * as SocketServer from "@effect/platform/SocketServer"
import type * as SqlClient from "@effect/sql/SqlClient"
import * as Agent from "@polyloop/core/Agent"
import { ActionExecutor } from "@polyloop/core/ActionExecutor"
import * as Approval from "@polyloop/core/Approval"
import type { RunError, StoreError } from "@polyloop/core/Errors"
import { runId as makeRunId } from "@polyloop/core/Ids"
import { RunLogStore } from "@polyloop/core/RunLogStore"
import type { ConfigError } from "effect/ConfigError"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as ParseResult from "effect/ParseResult"
import * as Queue from "effect/Queue"
import * as Ref from "effect/Ref"
import * as Schedule from "effect/Schedule"
import * as Schema from "effect/Schema"
import { describeError } from "./internal/describe.js"
import * as IndexWriter from "./internal/indexWriter.js"
import { type FailureReason, type LiveStatus, RunEntity, RunFailed } from "./RunEntity.js"
import * as RunIndex from "./RunIndex.js"

/** What `resolve` returns: the request to run and the executor to run its actions with. */
export interface Resolved {
  readonly request: Agent.RunRequest
  /** Usually `yield* request.tools.executor()`; a code-action agent passes its own executor. */
  readonly executor: ActionExecutor.Service
}

/** How the runner treats failures and suspended runs; every field has a default. */
export interface RetryOptions {
  /** How long to wait before trying again a run another owner holds (`RunBusy`); default 500 ms. */
  readonly busyRetryInterval?: Duration.DurationInput
  /** Give a run up (`RunFailed { reason: "Busy" }`) after it was busy this long; default 2 min. */
  readonly busyTimeout?: Duration.DurationInput
  /** First wait after a store or model failure (doubled each time); default 1 s. */
  readonly retryBaseDelay?: Duration.DurationInput
  /** Store or model failures before the run is given up (`"Exhausted"`); default 5. */
  readonly maxFailures?: number
  /** How often a suspended run reads its log for a decision recorded outside the cluster; default 5 s. */
  readonly suspendedPollInterval?: Duration.DurationInput
}

/** Options of `layer`. */
export interface Options<P, I, E, R> extends RetryOptions {
  /** The payload's schema: a submitted payload that does not decode fails the run (`"Payload"`). */
  readonly payload: Schema.Schema<P, I>
  /** Builds the request of a run from its payload; its `runId` must be `runId`. */
  readonly resolve: (payload: P, runId: string) => Effect.Effect<Resolved, E, R>
  /** A failure of `resolve`: `"Retry"` counts as a failure and retries, `"Fail"` fails the run; default `"Fail"`. */
  readonly classifyResolveError?: (error: E) => "Retry" | "Fail"
  /** How many runs this runner runs at once (suspended runs hold no permit); default 16. */
  readonly maxConcurrentRuns?: number
}

/** Why one attempt of a run did not return a result. */
type AttemptError =
  | { readonly _tag: "Busy"; readonly error: string }
  | { readonly _tag: "Transient"; readonly error: string }
  | { readonly _tag: "Suspended" }
  | { readonly _tag: "Fatal"; readonly reason: FailureReason; readonly error: string }

const fromRunError = (error: RunError): AttemptError => {
  switch (error._tag) {
    case "RunBusy":
    case "ConcurrentWriter":
      return { _tag: "Busy", error: describeError(error) }
    case "StoreError":
    case "ModelError":
      return { _tag: "Transient", error: describeError(error) }
    case "Suspended":
      return { _tag: "Suspended" }
    case "SnapshotMismatch":
    case "ExecutorRegistryMismatch":
    case "InvalidRunRequest":
    case "MessageIdReused":
    case "ContextWindowExceeded":
      return { _tag: "Fatal", reason: "Request", error: describeError(error) }
  }
}

const encodeResult = Schema.encodeSync(Agent.RunResult)

/**
 * The behaviour of the entity `polyloop/Run` on this runner. Each run is attempted with
 * `Agent.run`; per failure (design 0200): `RunBusy`/`ConcurrentWriter` → again every
 * `busyRetryInterval` up to `busyTimeout`; `StoreError`/`ModelError` → again after an
 * exponential wait, up to `maxFailures`; `Suspended` → wait for a `Decide` (or a decision found
 * in the log) and run again; anything else → `RunFailed`. Each transition is written to the
 * run index (the transitions of many runs in one statement). Interruption (shutdown, a shard moving) stops the run resumable; the persisted
 * `Start` is delivered again to the next owner. Migrates the run index first.
 */
export const layer = <P, I, E, R>(
  options: Options<P, I, E, R>
): Layer.Layer<
  never,
  StoreError,
  Sharding.Sharding | SqlClient.SqlClient | Exclude<Agent.Requirements, ActionExecutor> | R
> =>
  Layer.unwrapScoped(Effect.gen(function*() {
    yield* RunIndex.migrate
    // The index's writes of many runs share statements (design 0350, decision 5).
    const indexWriter = yield* IndexWriter.make
    const permits = yield* Effect.makeSemaphore(options.maxConcurrentRuns ?? 16)
    const decodePayload = Schema.decodeUnknown(options.payload)
    const classifyResolve = options.classifyResolveError ?? (() => "Fail" as const)
    const busySchedule = Schedule.spaced(options.busyRetryInterval ?? Duration.millis(500)).pipe(
      Schedule.upTo(options.busyTimeout ?? Duration.minutes(2))
    )
    const transientSchedule = Schedule.exponential(options.retryBaseDelay ?? Duration.seconds(1)).pipe(
      Schedule.intersect(Schedule.recurs(Math.max(0, (options.maxFailures ?? 5) - 1)))
    )
    const pollInterval = options.suspendedPollInterval ?? Duration.seconds(5)
    const indexRetry = Schedule.exponential(Duration.millis(200)).pipe(Schedule.upTo(Duration.seconds(30)))

    const build = Effect.gen(function*() {
      const address = yield* Entity.CurrentAddress
      const runnerAddress = yield* Entity.CurrentRunnerAddress
      const runner = `${runnerAddress.host}:${runnerAddress.port}`
      const runId = makeRunId(address.entityId)
      const live = yield* Ref.make<Omit<LiveStatus, "runId" | "runner">>({ state: "Idle", attempts: 0 })
      const wake = yield* Queue.sliding<void>(1)

      /**
       * Index writes are bookkeeping: retried for a while (the database may be restarting), then
       * logged; they never fail the run. A finished run whose row was not updated is still
       * reported finished (`Cluster.status` reads the log).
       */
      const record = (payloadText: string, change: RunIndex.Transition) =>
        indexWriter.write({ runId, payloadText, change: { runner, ...change } }).pipe(
          Effect.retry(indexRetry),
          Effect.catchAll((error) => Effect.logWarning("cluster: could not update the run index", error)),
          Effect.annotateLogs({ runId, runner })
        )

      /** A conversation's message (`Send`): the turn it starts is run with `Agent.send`. */
      type Message = { readonly messageId: string; readonly text: string } | undefined

      const runOnce = (payload: unknown, payloadText: string, message: Message) =>
        Effect.gen(function*() {
          yield* Ref.update(live, (s) => ({ state: "Running" as const, attempts: s.attempts + 1 }))
          yield* record(payloadText, { status: "Running", attempt: true })
          const decoded = yield* decodePayload(payload).pipe(
            Effect.mapError((error): AttemptError => ({
              _tag: "Fatal",
              reason: "Payload",
              error: `the payload does not decode: ${ParseResult.TreeFormatter.formatErrorSync(error)}`
            }))
          )
          const resolved = yield* options.resolve(decoded, runId).pipe(
            Effect.mapError((error): AttemptError =>
              classifyResolve(error) === "Retry"
                ? { _tag: "Transient", error: describeError(error) }
                : { _tag: "Fatal", reason: "Resolve", error: describeError(error) }
            )
          )
          if (resolved.request.runId !== runId) {
            return yield* Effect.fail<AttemptError>({
              _tag: "Fatal",
              reason: "Resolve",
              error: `resolve returned a request for run ${resolved.request.runId}, not for ${runId}`
            })
          }
          const request = resolved.request
          const attempt = message === undefined
            ? Agent.run(request)
            : Agent.send({
              runId,
              messageId: message.messageId,
              text: message.text,
              agent: request.agent,
              tools: request.tools,
              ...(request.streaming === undefined ? {} : { streaming: request.streaming })
            })
          return yield* attempt.pipe(
            Effect.provideService(ActionExecutor, resolved.executor),
            Effect.mapError(fromRunError)
          )
        }).pipe(permits.withPermits(1))

      const retried = (payload: unknown, payloadText: string, message: Message) =>
        runOnce(payload, payloadText, message).pipe(
          Effect.tapError((error) =>
            error._tag === "Busy"
              ? Effect.zipRight(
                Ref.update(live, (s) => ({ ...s, state: "Retrying" as const, lastError: error.error })),
                record(payloadText, { status: "Retrying", error: error.error })
              )
              : Effect.void
          ),
          Effect.retry({ while: (error) => error._tag === "Busy", schedule: busySchedule }),
          Effect.tapError((error) =>
            error._tag === "Transient"
              ? Effect.zipRight(
                Ref.update(live, (s) => ({ ...s, state: "Retrying" as const, lastError: error.error })),
                record(payloadText, { status: "Retrying", failed: true, error: error.error })
              )
              : Effect.void
          ),
          Effect.retry({ while: (error) => error._tag === "Transient", schedule: transientSchedule })
        )

      /** Waits until the run no longer waits for a decision: woken by `Decide`, or by reading the log. */
      const awaitDecision: Effect.Effect<void, AttemptError, RunLogStore> = Effect.gen(function*() {
        const store = yield* RunLogStore
        while (true) {
          yield* Effect.raceFirst(Queue.take(wake), Effect.sleep(pollInterval))
          const log = yield* store.readLog(runId).pipe(
            Effect.mapError((error): AttemptError => ({ _tag: "Transient", error: describeError(error) }))
          )
          if (!Approval.isSuspended(log)) return
        }
      })

      const toEnd = (payload: unknown, payloadText: string, message: Message): Effect.Effect<Agent.RunResult, AttemptError, never> =>
        retried(payload, payloadText, message).pipe(
          Effect.catchIf(
            (error) => error._tag === "Suspended",
            () =>
              Ref.update(live, (s) => ({ ...s, state: "Suspended" as const })).pipe(
                Effect.zipRight(record(payloadText, { status: "Suspended" })),
                Effect.zipRight(awaitDecision),
                Effect.zipRight(Effect.suspend(() => toEnd(payload, payloadText, message)))
              )
          )
        ) as Effect.Effect<Agent.RunResult, AttemptError, never>

      const start = (payload: unknown, message: Message) =>
        Effect.gen(function*() {
          const payloadText = yield* RunIndex.encodePayload(runId, payload).pipe(
            Effect.mapError((error) => new RunFailed({ runId, reason: "Payload", error: describeError(error) }))
          )
          const result = yield* toEnd(payload, payloadText, message).pipe(
            Effect.mapError((error) =>
              new RunFailed({
                runId,
                reason: error._tag === "Fatal"
                  ? error.reason
                  : error._tag === "Busy"
                  ? "Busy"
                  : "Exhausted",
                error: error._tag === "Suspended" ? "suspended" : error.error
              })
            ),
            Effect.tapError((failed) => record(payloadText, { status: "Failed", failed: true, reason: failed.reason, error: failed.error })),
            // A defect is the reply (design 0200): the log stays resumable, `Cluster.retry` runs it again.
            Effect.tapDefect((cause) =>
              record(payloadText, { status: "Failed", failed: true, reason: "Defect", error: describeError(cause) })
            )
          )
          yield* record(payloadText, { status: "Finished", outcome: JSON.stringify(encodeResult(result)) })
          return result
        }).pipe(Effect.ensuring(Ref.update(live, (s) => ({ ...s, state: "Idle" as const }))))

      return RunEntity.of({
        Start: (envelope) => start(envelope.payload.payload, undefined),
        Send: (envelope) => start(envelope.payload.payload, { messageId: envelope.payload.messageId, text: envelope.payload.text }),
        Decide: (envelope) =>
          Agent.decide({
            runId,
            callId: envelope.payload.callId,
            decision: envelope.payload.decision,
            by: envelope.payload.by,
            ...(envelope.payload.actionHash === undefined ? {} : { actionHash: envelope.payload.actionHash })
          }).pipe(Effect.tap(() => Queue.offer(wake, undefined))),
        Status: () => Effect.map(Ref.get(live), (s) => ({ runId, runner, ...s }))
      })
    })

    return RunEntity.toLayer(build, {
      concurrency: "unbounded",
      // A defect in a run (a parser bug) is its reply, not a reason to restart the entity and run
      // it again forever; the log stays resumable.
      disableFatalDefects: true
    })
  }))

/** The intervals that bound failover (design 0200, decision 5). */
export interface Timings {
  /** A runner whose heartbeat is older than this is no longer counted (its shards move); default 10 s. */
  readonly shardLockExpiration: Duration.DurationInput
  /** How often a runner refreshes its heartbeat and locks; default 2 s. */
  readonly shardLockRefreshInterval: Duration.DurationInput
  /** How often runners look for runners that came or went; default 2 s. */
  readonly refreshAssignmentsInterval: Duration.DurationInput
  /** How often the health singleton pings the runners; default 5 s. */
  readonly runnerHealthCheckInterval: Duration.DurationInput
  /** How often a runner reads messages nobody notified it of; default 2 s. */
  readonly entityMessagePollInterval: Duration.DurationInput
  /** How long a shutting-down runner waits for its entities to stop; default 10 s. */
  readonly entityTerminationTimeout: Duration.DurationInput
}

/** The timings `layerSocket` uses unless told otherwise (tuned for a LAN). */
export const defaultTimings: Timings = {
  shardLockExpiration: Duration.seconds(10),
  shardLockRefreshInterval: Duration.seconds(2),
  refreshAssignmentsInterval: Duration.seconds(2),
  runnerHealthCheckInterval: Duration.seconds(5),
  entityMessagePollInterval: Duration.seconds(2),
  entityTerminationTimeout: Duration.seconds(10)
}

/** `NodeClusterSocket` opens a peer connection with a 1 s timeout and waits 5.5 s for its replies. */
const pingTimeout = Duration.millis(6500)

/**
 * The longest a dead runner's run waits before another runner resumes it (design 0200):
 * detection (lock expiration, or a failed health check), the next assignment refresh and lock
 * acquisition, the store's lease on the run, one busy retry.
 */
export const failoverBound = (
  timings: Partial<Timings>,
  options: { readonly leaseDuration: Duration.DurationInput; readonly busyRetryInterval?: Duration.DurationInput }
): Duration.Duration => {
  const t = { ...defaultTimings, ...timings }
  const detection = Duration.min(
    Duration.decode(t.shardLockExpiration),
    Duration.sum(t.runnerHealthCheckInterval, pingTimeout)
  )
  return [
    t.refreshAssignmentsInterval,
    t.shardLockRefreshInterval,
    options.leaseDuration,
    options.busyRetryInterval ?? Duration.millis(500)
  ].reduce<Duration.Duration>((sum, d) => Duration.sum(sum, d), detection)
}

/** Options of `layerSocket` and `Cluster.layerClient`. */
export interface SocketOptions {
  readonly timings?: Partial<Timings>
  /** Shards per group; must be the same on every runner and client; default 300. */
  readonly shardsPerGroup?: number
}

/** The sharding configuration of a runner (`runnerAddress` set) or a client (none). @internal */
export const shardingConfig = (options: SocketOptions, runnerAddress: Option.Option<RunnerAddress.RunnerAddress>) => ({
  ...defaultTimings,
  ...options.timings,
  ...(options.shardsPerGroup === undefined ? {} : { shardsPerGroup: options.shardsPerGroup }),
  runnerAddress
})

/**
 * Makes this process a runner listening on `host:port` (what other runners connect to),
 * storing messages and runners with `SqlMessageStorage` / `SqlRunnerStorage` in the `SqlClient`'s
 * database. The runner holds one connection of the pool for its shard locks (PostgreSQL advisory
 * locks): give the pool at least 3 connections.
 *
 * Give it a pool of its own (a second `PgClient` on the same database), not the store's: the
 * cluster bounds its shard-lock operations with timeouts (`shardLockRefreshInterval`), and an
 * operation interrupted while it waits for a busy pool loses that connection for good in
 * `@effect/sql-pg` 0.53 (its `reserve` has no canceler); with the runs' statements on the same
 * pool the runner ends up with none and stops (seen in the failover test: 16 runs on 12
 * connections). `ClusterRunner.layer` and the store share the other pool.
 */
export const layerSocket = (
  options: SocketOptions & { readonly host: string; readonly port: number }
): Layer.Layer<
  Sharding.Sharding | Runners.Runners | MessageStorage.MessageStorage,
  SocketServer.SocketServerError | ConfigError,
  SqlClient.SqlClient
> =>
  NodeClusterSocket.layer({
    storage: "sql",
    shardingConfig: shardingConfig(options, Option.some(RunnerAddress.make(options.host, options.port)))
  })
