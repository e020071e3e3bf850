/**
 * Workers over a queue of pending runs in SQL (`polyloop_queue`): `enqueue` adds a run id and a
 * serialisable payload; `run` starts N fibers that take runs (`SELECT … FOR UPDATE SKIP LOCKED`
 * on PostgreSQL, one serialised `UPDATE … RETURNING` on SQLite), turn each payload into a
 * `RunRequest` with the caller's `resolve` and run it with `Agent.run`.
 *
 * A request holds code (tool handlers), so the queue stores only the run id and the payload.
 * A taken entry carries the worker's token and a heartbeat; an entry whose worker stopped
 * heart-beating (killed, partitioned) is taken again after `staleAfter`, and the run resumes
 * from its log. Interrupting `run` is the graceful shutdown: runs in flight are interrupted
 * (they stay resumable) and their entries go back to `Pending`. Every update of a taken entry
 * is fenced by its token, so a worker that lost an entry never overwrites its new owner's state.
 *
 * The queue lives in the database of the `SqlClient` in context; share one client with the
 * store:
 *
 * ```ts
 * const services = Layer.mergeAll(SqlRunLogStore.layer(), NativeToolCallParser.layer(), EventSink.layerNoop, model)
 *   .pipe(Layer.provideMerge(SqlRunLogStore.layerPgClient({ url })))
 * // producer
 * yield* Worker.migrate
 * yield* Worker.enqueue(runId("order-42"), { orderId: 42 })
 * // each worker process (interrupt it, e.g. SIGTERM under NodeRuntime.runMain, to stop gracefully)
 * yield* Worker.run({
 *   concurrency: 4,
 *   payload: Order,
 *   resolve: (order, job) =>
 *     Effect.map(tools.executor(), (executor) => ({ request: { runId: job.runId, agent, task: describe(order), tools }, executor }))
 * })
 * ```
 *
 * Why over ~400 lines: the cluster issue (20) is to retire this module in favour of
 * `@effect/cluster` later in this round, so it is kept whole rather than split first.
 *
 * @since 0.1.0
 */
import * as SqlClient from "@effect/sql/SqlClient"
import type { SqlError } from "@effect/sql/SqlError"
import * as Agent from "@polyloop/core/Agent"
import { ActionExecutor } from "@polyloop/core/ActionExecutor"
import { InvalidRunRequest, type RunError, StoreError } from "@polyloop/core/Errors"
import type { RunId } from "@polyloop/core/Ids"
import * as Cause from "effect/Cause"
import * as Clock from "effect/Clock"
import * as Deferred from "effect/Deferred"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Exit from "effect/Exit"
import * as Option from "effect/Option"
import * as ParseResult from "effect/ParseResult"
import * as Random from "effect/Random"
import * as Schedule from "effect/Schedule"
import * as Schema from "effect/Schema"
import * as os from "node:os"
import * as Approvals from "./internal/approvals.js"
import { migrationStorageFailure, storeError } from "./internal/errors.js"
import { serialized } from "./internal/migrationLock.js"
import * as QueueMigrations from "./internal/queueMigrations.js"

/**
 * Where an entry is: waiting, being run, finished, given up on, or `Suspended`: its run waits for
 * a person's decision (design 0160) and is taken again once every waiting call is decided.
 */
export const QueueStatus = Schema.Literal("Pending", "Running", "Done", "Failed", "Suspended")
/** @since 0.1.0 */
export type QueueStatus = typeof QueueStatus.Type

/** One entry of the queue as `entries` and `entry` read it. */
export interface QueueEntry {
  readonly runId: string
  /** The payload as enqueued (decoded JSON). */
  readonly payload: unknown
  readonly status: QueueStatus
  /** Epoch milliseconds. */
  readonly enqueuedAt: number
  /** Not taken before this time (epoch milliseconds): retries wait. */
  readonly availableAt: number
  /** How many times a worker took the entry. */
  readonly attempts: number
  /** How many of those attempts failed (interruptions and lost leases do not count). */
  readonly failures: number
  /** The worker holding (or that last held) the entry. */
  readonly worker: Option.Option<string>
  readonly heartbeatAt: Option.Option<number>
  readonly finishedAt: Option.Option<number>
  /** What the run returned (`Done`), as JSON. */
  readonly outcome: Option.Option<unknown>
  /** Why the last attempt failed. */
  readonly error: Option.Option<string>
}

/** A run taken from the queue, handed to the job handler. */
export interface Job {
  readonly runId: RunId
  /** The payload as enqueued (decoded JSON). */
  readonly payload: unknown
  /** 1 for the first take, 2 after a retry, a takeover or an interrupted attempt, … */
  readonly attempt: number
  readonly workerId: string
}

/** What a failed attempt leads to. */
export type Disposition =
  /** Counted as a failure; retried after `retryDelay` until `maxFailures`, then `Failed`. */
  | "Retry"
  /** Someone else is on the run (busy, another writer): back to `Pending` after `retryDelay`, not counted. */
  | "Requeue"
  /** `Failed` at once: retrying cannot help (bad payload, configuration changed). */
  | "Fail"
  /**
   * `Suspended`: the run waits for a person's decision (`Agent.run` failed with `Suspended`).
   * Not a failure; taken again once its run has no undecided call (design 0160).
   */
  | "Suspend"

/** Tuning of a worker; every duration has a default. */
export interface WorkerOptions {
  /** How many runs this worker runs at once (fibers taking from the queue). */
  readonly concurrency: number
  /** Names the worker in the queue; default `<hostname>:<pid>:<random>`. */
  readonly workerId?: string
  /** How long an idle fiber waits before looking at the queue again; default 250 ms. */
  readonly pollInterval?: Duration.DurationInput
  /** How often held entries are heart-beaten; default 5 s. */
  readonly heartbeatInterval?: Duration.DurationInput
  /**
   * An entry not heart-beaten for this long is taken by another worker; default 30 s. Keep it
   * at least the store's lease duration: a run taken before its claim expired is put back
   * (`RunBusy`) and tried again after `retryDelay`.
   */
  readonly staleAfter?: Duration.DurationInput
  /** Wait before a failed or requeued entry is taken again; default 5 s. */
  readonly retryDelay?: Duration.DurationInput
  /** Failed attempts before an entry is `Failed`; default 3. */
  readonly maxFailures?: number
}

/** The job side of `serve`: what to do with a taken run and how to record its end. */
export interface ServeOptions<A, E, R> extends WorkerOptions {
  readonly handle: (job: Job) => Effect.Effect<A, E, R>
  /** The JSON stored as the entry's `outcome` when `handle` succeeds. */
  readonly outcome?: (value: A) => unknown
  /** What a typed failure of `handle` leads to; default `"Retry"`. */
  readonly classify?: (error: E) => Disposition
  /** The text stored as the entry's `error`; default the error's `message` or JSON. */
  readonly describe?: (error: E) => string
}

const sqlFailure =
  (what: string, runId?: string) =>
  (cause: SqlError): StoreError => {
    const error = storeError(cause, { operation: `worker queue: ${what}`, runId })
    // The queue's table does not exist: say how to create it.
    return error.reason === "SchemaVersion"
      ? new StoreError({ ...error, message: `${error.message} (run Worker.migrate, or Worker.run which migrates, first)` })
      : error
  }

/** Creates the queue table if needed (PostgreSQL or SQLite); safe to run from many workers at once. */
export const migrate: Effect.Effect<void, StoreError, SqlClient.SqlClient> = QueueMigrations.run.pipe(
  // On PostgreSQL concurrent migrators wait for each other on an advisory lock instead of racing
  // to create the bookkeeping table.
  serialized(QueueMigrations.migrationsTable),
  // `Migrator` dies when a migration's statement fails: a storage failure (a full disk, a
  // read-only file) is a typed failure here, as everywhere else.
  Effect.catchSomeCause((cause) => Option.map(migrationStorageFailure(cause), Effect.fail)),
  // A process of an older @polyloop/sql creating the bookkeeping table without the lock at the
  // same moment: the loser's statement fails; the next attempt finds the table.
  Effect.retry({ times: 3, schedule: Schedule.spaced(Duration.millis(100)) }),
  Effect.mapError((error) =>
    error._tag === "SqlError"
      ? storeError(error, { operation: "worker queue: migrating the queue table" })
      : new StoreError({ reason: "SchemaVersion", message: `worker queue: migration failed: ${error.message}`, cause: error })
  ),
  Effect.asVoid,
  Effect.withSpan("Worker.migrate")
)

const encodeJson = (value: () => unknown, runId: string): Effect.Effect<string, StoreError> =>
  Effect.try({
    try: () => {
      const text = JSON.stringify(value())
      if (text === undefined) throw new Error("the value has no JSON form")
      return text
    },
    catch: (cause) =>
      new StoreError({
        reason: "Encode",
        runId,
        message: `worker queue: the payload of run ${runId} is not serialisable as JSON: ${cause instanceof Error ? cause.message : String(cause)}`,
        cause
      })
  })

/**
 * Adds a run to the queue with a JSON-serialisable payload (what `resolve` turns into a
 * `RunRequest`). Idempotent by run id: returns `false` and changes nothing when the run is
 * already queued, running or finished.
 */
export const enqueue = (
  runId: RunId,
  payload: unknown,
  options?: { readonly delay?: Duration.DurationInput }
): Effect.Effect<boolean, StoreError, SqlClient.SqlClient> =>
  Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    const text = yield* encodeJson(() => payload, runId)
    const now = yield* Clock.currentTimeMillis
    const availableAt = now + (options?.delay === undefined ? 0 : Duration.toMillis(options.delay))
    const rows = yield* sql<{ run_id: string }>`INSERT INTO polyloop_queue (run_id, payload, status, enqueued_at, available_at)
      VALUES (${runId}, ${text}, 'Pending', ${now}, ${availableAt})
      ON CONFLICT (run_id) DO NOTHING
      RETURNING run_id`.pipe(Effect.mapError(sqlFailure("enqueue", runId)))
    return rows.length > 0
  }).pipe(Effect.withSpan("Worker.enqueue", { attributes: { "polyloop.run_id": runId } }))

/** Puts a `Failed` entry back to `Pending` with its failure count reset; `false` if it is not `Failed`. */
export const requeue = (runId: RunId): Effect.Effect<boolean, StoreError, SqlClient.SqlClient> =>
  Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    const now = yield* Clock.currentTimeMillis
    const rows = yield* sql<{ run_id: string }>`UPDATE polyloop_queue
      SET status = 'Pending', available_at = ${now}, failures = 0, worker = NULL, token = NULL, heartbeat_at = NULL, finished_at = NULL
      WHERE run_id = ${runId} AND status = 'Failed'
      RETURNING run_id`.pipe(Effect.mapError(sqlFailure("requeue", runId)))
    return rows.length > 0
  }).pipe(Effect.withSpan("Worker.requeue", { attributes: { "polyloop.run_id": runId } }))

const Millis = Schema.Union(Schema.Number, Schema.NumberFromString)
const JsonText = Schema.parseJson()

const EntryRow = Schema.Struct({
  run_id: Schema.String,
  payload: JsonText,
  status: QueueStatus,
  enqueued_at: Millis,
  available_at: Millis,
  attempts: Millis,
  failures: Millis,
  worker: Schema.NullOr(Schema.String),
  heartbeat_at: Schema.NullOr(Millis),
  finished_at: Schema.NullOr(Millis),
  outcome: Schema.NullOr(JsonText),
  error: Schema.NullOr(Schema.String)
})

const decodeRows = Schema.decodeUnknown(Schema.Array(EntryRow))

const toEntry = (row: typeof EntryRow.Type): QueueEntry => ({
  runId: row.run_id,
  payload: row.payload,
  status: row.status,
  enqueuedAt: row.enqueued_at,
  availableAt: row.available_at,
  attempts: row.attempts,
  failures: row.failures,
  worker: Option.fromNullable(row.worker),
  heartbeatAt: Option.fromNullable(row.heartbeat_at),
  finishedAt: Option.fromNullable(row.finished_at),
  outcome: Option.fromNullable(row.outcome),
  error: Option.fromNullable(row.error)
})

const entryColumns = "run_id, payload, status, enqueued_at, available_at, attempts, failures, worker, heartbeat_at, finished_at, outcome, error"

const readEntries = (rows: ReadonlyArray<unknown>): Effect.Effect<ReadonlyArray<QueueEntry>, StoreError> =>
  decodeRows(rows).pipe(
    Effect.map((decoded) => decoded.map(toEntry)),
    Effect.mapError((error) => new StoreError({ reason: "Decode", message: `worker queue: a row does not decode: ${error.message}`, cause: error }))
  )

/** The queue's entries, oldest first; optionally only those with one status. */
export const entries = (query?: {
  readonly status?: QueueStatus
  readonly limit?: number
}): Effect.Effect<ReadonlyArray<QueueEntry>, StoreError, SqlClient.SqlClient> =>
  Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    const where = query?.status === undefined ? sql`` : sql`WHERE status = ${query.status}`
    const limit = query?.limit === undefined ? sql`` : sql`LIMIT ${query.limit}`
    const rows = yield* sql`SELECT ${sql.literal(entryColumns)} FROM polyloop_queue ${where}
      ORDER BY enqueued_at, run_id ${limit}`.pipe(Effect.mapError(sqlFailure("reading entries")))
    return yield* readEntries(rows)
  })

/** One entry, if the run was ever enqueued. */
export const entry = (runId: RunId): Effect.Effect<Option.Option<QueueEntry>, StoreError, SqlClient.SqlClient> =>
  Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    const rows = yield* sql`SELECT ${sql.literal(entryColumns)} FROM polyloop_queue WHERE run_id = ${runId}`.pipe(
      Effect.mapError(sqlFailure("reading an entry", runId))
    )
    const decoded = yield* readEntries(rows)
    return Option.fromNullable(decoded[0])
  })

interface Taken {
  readonly job: Job
  readonly token: string
  readonly failures: number
  readonly lost: Deferred.Deferred<void>
}

const randomToken = Effect.map(
  Effect.all([Random.nextIntBetween(0, 2 ** 30), Random.nextIntBetween(0, 2 ** 30), Clock.currentTimeMillis]),
  ([a, b, t]) => `${t.toString(36)}${a.toString(36)}${b.toString(36)}`
)

const defaultWorkerId = Effect.map(randomToken, (token) => `${os.hostname()}:${process.pid}:${token.slice(-8)}`)

const describeUnknown = (error: unknown): string => {
  if (typeof error === "object" && error !== null && "message" in error && typeof error.message === "string") {
    const tag = "_tag" in error && typeof error._tag === "string" ? `${error._tag}: ` : ""
    return `${tag}${error.message}`
  }
  try {
    return JSON.stringify(error) ?? String(error)
  } catch {
    return String(error)
  }
}

/**
 * The queue machinery under `run`, for any job: `concurrency` fibers take entries and run
 * `handle`; the end of each attempt is recorded (fenced by the entry's token):
 * success → `Done` with `outcome`; a typed failure → by `classify`; interruption → back to
 * `Pending` at once (the run is resumable); a defect → `Failed` with the cause, and the defect
 * ends `serve` (a bug is not retried). Runs until interrupted; fails with `StoreError` only
 * when the queue stays unreachable for about a minute.
 */
export const serve = <A, E, R>(options: ServeOptions<A, E, R>): Effect.Effect<never, StoreError, R | SqlClient.SqlClient> =>
  Effect.gen(function* () {
    if (!Number.isInteger(options.concurrency) || options.concurrency < 1) {
      return yield* Effect.dieMessage(`Worker: concurrency must be a positive integer, got ${options.concurrency}`)
    }
    const sql = yield* SqlClient.SqlClient
    yield* migrate
    const workerId = options.workerId ?? (yield* defaultWorkerId)
    const pollInterval = Duration.decode(options.pollInterval ?? Duration.millis(250))
    const heartbeatInterval = Duration.decode(options.heartbeatInterval ?? Duration.seconds(5))
    const staleAfter = Duration.decode(options.staleAfter ?? Duration.seconds(30))
    const retryDelay = Duration.toMillis(options.retryDelay ?? Duration.seconds(5))
    const maxFailures = options.maxFailures ?? 3
    const classify = options.classify ?? (() => "Retry" as const)
    const describe = options.describe ?? describeUnknown
    const outcome = options.outcome ?? (() => null)
    /** Entries this worker holds: token → signal that the entry was taken over. */
    const held = new Map<string, Taken>()

    const skipLocked = sql.onDialectOrElse({ pg: () => sql.literal("FOR UPDATE SKIP LOCKED"), orElse: () => sql.literal("") })

    /**
     * Suspended entries whose runs no longer wait for a decision go back to `Pending` (design
     * 0160). Looked at only when the queue holds suspended entries: only `Worker.run` settles
     * them, over the store that shares this database, so a queue served without a store never
     * reads the store's tables.
     */
    const wake: Effect.Effect<boolean, StoreError> = Effect.gen(function* () {
      const any = yield* sql`SELECT 1 AS one FROM polyloop_queue WHERE status = 'Suspended' LIMIT 1`.pipe(
        Effect.mapError(sqlFailure("looking for suspended runs"))
      )
      if (any.length === 0) return false
      const now = yield* Clock.currentTimeMillis
      const woken = yield* sql<{ run_id: string }>`UPDATE polyloop_queue SET status = 'Pending', available_at = ${now}
        WHERE status = 'Suspended' AND NOT ${sql.literal(Approvals.awaitingDecision("polyloop_queue"))}
        RETURNING run_id`.pipe(Effect.mapError(sqlFailure("waking decided runs")))
      return woken.length > 0
    })

    const take: Effect.Effect<Option.Option<Taken>, StoreError> = Effect.suspend(() => takeOne).pipe(
      Effect.flatMap((taken) =>
        Option.isSome(taken) ? Effect.succeed(taken) : Effect.flatMap(wake, (woken) => (woken ? takeOne : Effect.succeed(taken)))
      )
    )

    const takeOne: Effect.Effect<Option.Option<Taken>, StoreError> = Effect.gen(function* () {
      const now = yield* Clock.currentTimeMillis
      const token = yield* randomToken
      const staleBefore = now - Duration.toMillis(staleAfter)
      const rows = yield* sql<{ run_id: string; payload: string; attempts: number | string; failures: number | string }>`
        UPDATE polyloop_queue
        SET status = 'Running', worker = ${workerId}, token = ${token}, heartbeat_at = ${now}, attempts = attempts + 1
        WHERE run_id = (
          SELECT run_id FROM polyloop_queue
          WHERE (status = 'Pending' AND available_at <= ${now}) OR (status = 'Running' AND heartbeat_at < ${staleBefore})
          ORDER BY available_at, enqueued_at, run_id
          LIMIT 1 ${skipLocked}
        )
        RETURNING run_id, payload, attempts, failures`.pipe(Effect.mapError(sqlFailure("taking a run")))
      const row = rows[0]
      if (row === undefined) return Option.none()
      let payload: unknown
      try {
        payload = JSON.parse(row.payload)
      } catch (cause) {
        // Only `enqueue` writes payloads; text that is not JSON was written by someone else.
        yield* sql`UPDATE polyloop_queue SET status = 'Failed', token = NULL, heartbeat_at = NULL, finished_at = ${now},
            error = ${`the payload is not JSON: ${describeUnknown(cause)}`}
          WHERE run_id = ${row.run_id} AND token = ${token}`.pipe(Effect.mapError(sqlFailure("failing a bad entry", row.run_id)))
        return Option.none()
      }
      const lost = yield* Deferred.make<void>()
      const taken: Taken = {
        job: { runId: row.run_id as RunId, payload, attempt: Number(row.attempts), workerId },
        token,
        failures: Number(row.failures),
        lost
      }
      held.set(token, taken)
      return Option.some(taken)
    })

    const settleWith = (taken: Taken, fields: {
      readonly status: QueueStatus
      readonly availableAt?: number
      readonly failures?: number
      readonly outcome?: string | null
      readonly error?: string | null
      readonly finished: boolean
    }) =>
      Effect.gen(function* () {
        held.delete(taken.token)
        const now = yield* Clock.currentTimeMillis
        yield* sql`UPDATE polyloop_queue
          SET status = ${fields.status},
              available_at = ${fields.availableAt ?? now},
              failures = ${fields.failures ?? taken.failures},
              token = NULL,
              heartbeat_at = NULL,
              finished_at = ${fields.finished ? now : null},
              outcome = ${fields.outcome ?? null},
              error = ${fields.error ?? null}
          WHERE run_id = ${taken.job.runId} AND token = ${taken.token}`.pipe(
          Effect.mapError(sqlFailure("recording the end of an attempt", taken.job.runId))
        )
      })

    const settle = (taken: Taken, exit: Exit.Exit<Either.Either<A, E> | "Lost">): Effect.Effect<void> => {
      const runId = taken.job.runId
      const recorded: Effect.Effect<void, StoreError> = Exit.match(exit, {
        onSuccess: (result) => {
          if (result === "Lost") {
            held.delete(taken.token)
            return Effect.logWarning("worker queue: the entry was taken over by another worker; the attempt stopped").pipe(
              Effect.annotateLogs({ runId, workerId })
            )
          }
          if (Either.isRight(result)) {
            return encodeJson(() => outcome(result.right), runId).pipe(
              Effect.flatMap((text) => settleWith(taken, { status: "Done", outcome: text, finished: true }))
            )
          }
          const disposition = classify(result.left)
          const error = describe(result.left)
          const later = Effect.map(Clock.currentTimeMillis, (now) => now + retryDelay)
          if (disposition === "Suspend") return settleWith(taken, { status: "Suspended", error, finished: false })
          if (disposition === "Requeue") {
            return Effect.flatMap(later, (availableAt) => settleWith(taken, { status: "Pending", availableAt, error, finished: false }))
          }
          const failures = taken.failures + 1
          if (disposition === "Fail" || failures >= maxFailures) {
            return settleWith(taken, { status: "Failed", failures, error, finished: true })
          }
          return Effect.flatMap(later, (availableAt) => settleWith(taken, { status: "Pending", availableAt, failures, error, finished: false }))
        },
        onFailure: (cause) =>
          Cause.isInterruptedOnly(cause)
            ? // Shutdown or interruption: the run is resumable; give the entry back at once.
              settleWith(taken, { status: "Pending", finished: false })
            : settleWith(taken, { status: "Failed", failures: taken.failures + 1, error: Cause.pretty(cause), finished: true })
      })
      return recorded.pipe(
        // The entry stays Running with our token; once we stop heart-beating it goes stale and
        // another worker takes it, so a failed bookkeeping write loses nothing.
        Effect.catchAll((error) => Effect.logWarning("worker queue: could not record the end of an attempt", error)),
        Effect.annotateLogs({ runId, workerId })
      )
    }

    const attempt = (taken: Taken): Effect.Effect<Either.Either<A, E> | "Lost", never, R> =>
      Effect.raceFirst(
        Effect.either(options.handle(taken.job)),
        Deferred.await(taken.lost).pipe(Effect.as("Lost" as const))
      ).pipe(
        Effect.withSpan("Worker.attempt", { attributes: { "polyloop.run_id": taken.job.runId, "polyloop.attempt": taken.job.attempt } })
      )

    // One iteration: take a run (the acquisition, uninterruptible: a taken entry is always
    // settled), attempt it, settle it. Only `take` can fail; the retries of a failing `take` are
    // around the whole iteration, so their sleeps stay interruptible and a worker whose database
    // is down still stops at once when interrupted.
    const iteration = Effect.acquireUseRelease(
      take,
      Option.match({
        onNone: () =>
          // Jittered so idle fibers of many workers do not poll in lockstep.
          Effect.flatMap(Random.nextRange(0.5, 1.5), (f) => Effect.sleep(Duration.times(pollInterval, f))).pipe(
            Effect.as(Option.none<Either.Either<A, E> | "Lost">())
          ),
        onSome: (taken) => Effect.map(attempt(taken), Option.some)
      }),
      (taken, exit) =>
        Option.match(taken, {
          onNone: () => Effect.void,
          onSome: (t) => settle(t, Exit.map(exit, Option.getOrElse(() => "Lost" as const)))
        })
    )

    const fiberLoop = Effect.forever(
      iteration.pipe(
        Effect.tapError((error) => Effect.logWarning("worker queue: taking a run failed; retrying", error)),
        Effect.retry(
          Schedule.exponential(Duration.millis(100)).pipe(
            Schedule.union(Schedule.spaced(Duration.seconds(5))),
            Schedule.upTo(Duration.minutes(1))
          )
        )
      )
    )

    const heartbeat = Effect.gen(function* () {
      const snapshot = [...held.values()]
      if (snapshot.length === 0) return
      const now = yield* Clock.currentTimeMillis
      const alive = yield* sql<{ token: string }>`UPDATE polyloop_queue SET heartbeat_at = ${now}
        WHERE status = 'Running' AND worker = ${workerId} AND ${sql.in("token", snapshot.map((t) => t.token))}
        RETURNING token`.pipe(Effect.mapError(sqlFailure("heart-beating")))
      const aliveTokens = new Set(alive.map((r) => r.token))
      for (const taken of snapshot) {
        if (!aliveTokens.has(taken.token) && held.has(taken.token)) yield* Deferred.succeed(taken.lost, undefined)
      }
    }).pipe(
      Effect.catchAll((error) => Effect.logWarning("worker queue: heartbeat failed", error)),
      Effect.repeat(Schedule.spaced(heartbeatInterval))
    )

    yield* Effect.forkScoped(heartbeat)
    return yield* Effect.all(Array.from({ length: options.concurrency }, () => fiberLoop), {
      concurrency: "unbounded",
      discard: true
    }).pipe(Effect.zipRight(Effect.never))
  }).pipe(Effect.scoped)

/** What `resolve` returns: the request to run and the executor to run its actions with. */
export interface Resolved {
  readonly request: Agent.RunRequest
  /**
   * Usually `yield* request.tools.executor()` (the registry's derived executor); a code-action
   * agent passes its own executor, e.g. `yield* ActionExecutor`.
   */
  readonly executor: ActionExecutor.Service
}

/** Options of `run`: the worker's tuning, how to decode payloads and how to build requests. */
export interface RunOptions<P, I, E, R> extends WorkerOptions {
  /** The payload's schema: enqueued JSON is decoded with it (a payload that does not decode fails the entry). */
  readonly payload: Schema.Schema<P, I>
  /** Builds the request of a run from its payload; its `runId` must be the job's. */
  readonly resolve: (payload: P, job: Job) => Effect.Effect<Resolved, E, R>
  /** What a failure of `resolve` leads to; default `"Retry"`. */
  readonly classifyResolveError?: (error: E) => Disposition
}

/** Why a run failed in a worker. */
export type RunFailure<E> = RunError | E | ParseResult.ParseError

const isTagged = (error: unknown): error is { readonly _tag: string } =>
  typeof error === "object" && error !== null && "_tag" in error && typeof error._tag === "string"

/**
 * What each failure of `Agent.run` leads to: another owner on the run (`RunBusy`,
 * `ConcurrentWriter`, which is also what a fenced write after a lost lease fails with) →
 * `"Requeue"`; a run waiting for a person's decision (`Suspended`) → `"Suspend"`; a failing store or model → `"Retry"`; a request that can never run as is
 * (`SnapshotMismatch`, `ExecutorRegistryMismatch`, `InvalidRunRequest`) → `"Fail"`.
 */
export const classifyRunError = (error: RunError): Disposition => {
  switch (error._tag) {
    case "RunBusy":
    case "ConcurrentWriter":
      return "Requeue"
    case "StoreError":
    case "ModelError":
      return "Retry"
    case "SnapshotMismatch":
    case "ExecutorRegistryMismatch":
    case "InvalidRunRequest":
      return "Fail"
    case "Suspended":
      return "Suspend"
  }
}

const runErrorTags: ReadonlySet<string> = new Set([
  "RunBusy",
  "ConcurrentWriter",
  "StoreError",
  "ModelError",
  "SnapshotMismatch",
  "ExecutorRegistryMismatch",
  "InvalidRunRequest",
  "Suspended"
])

const encodeRunResult = Schema.encodeSync(Agent.RunResult)

/**
 * Runs the queued runs: `concurrency` fibers take entries, decode the payload, `resolve` it to a
 * request and an executor, and run it with `Agent.run` (resuming it if it was started before).
 * The entry ends `Done` with the encoded `RunResult` as its outcome, `Suspended` when the run
 * waits for a person's decision (taken again, by any worker, once every waiting call is decided;
 * design 0160), or by `classifyRunError` / `classifyResolveError` on failure. Interrupting the returned effect is the graceful shutdown:
 * runs in flight are interrupted (resumable) and go back to `Pending`. A defect in a run (a
 * parser bug) marks the entry `Failed` and ends the worker. Migrates the queue table first.
 */
export const run = <P, I, E, R>(
  options: RunOptions<P, I, E, R>
): Effect.Effect<
  never,
  StoreError,
  Exclude<Agent.Requirements, ActionExecutor> | R | SqlClient.SqlClient
> => {
  const decodePayload = Schema.decodeUnknown(options.payload)
  const classifyResolve = options.classifyResolveError ?? (() => "Retry" as const)
  const handle = (job: Job): Effect.Effect<Agent.RunResult, RunFailure<E>, Exclude<Agent.Requirements, ActionExecutor> | R> =>
    Effect.gen(function* () {
      const payload = yield* decodePayload(job.payload)
      const resolved = yield* options.resolve(payload, job)
      if (resolved.request.runId !== job.runId) {
        return yield* new InvalidRunRequest({
          runId: job.runId,
          issues: `resolve returned a request for run ${resolved.request.runId}, not for the queued run ${job.runId}`
        })
      }
      return yield* Effect.provideService(Agent.run(resolved.request), ActionExecutor, resolved.executor)
    })
  return serve({
    ...options,
    handle,
    outcome: encodeRunResult,
    classify: (error) => {
      if (ParseResult.isParseError(error)) return "Fail"
      if (isTagged(error) && runErrorTags.has(error._tag)) return classifyRunError(error as RunError)
      return classifyResolve(error as E)
    },
    describe: (error) =>
      ParseResult.isParseError(error)
        ? `the payload does not decode: ${ParseResult.TreeFormatter.formatErrorSync(error)}`
        : describeUnknown(error)
  })
}
