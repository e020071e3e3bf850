/**
 * The loop's public face (SPEC §7–§9): `run` runs an agent on a task, durably — idempotent by
 * run id: a fresh id starts, a started and unfinished one resumes where it stopped, a finished
 * one returns its recorded result without calling anything; `send` continues a conversation;
 * `stream` yields a run's events; `decide` records a person's decision; `fork` branches a run;
 * `layer` wires the services.
 *
 * The loop itself lives in `internal/` by concern (design 0391): `attempt.ts` (one attempt: the
 * claim, the log read once, the decision), `start.ts` (start and resume), `loop.ts` (judge, step,
 * finish), `judge.ts` (stop judgment), `modelCall.ts` (the call, its retries and streaming),
 * `window.ts` (the context window: compaction, summaries, the emergency step), `step.ts` (a
 * step's actions and records), `gate.ts` (approvals), `messages.ts`, `turns.ts` and `inbox.ts`
 * (conversations), `request.ts` (the request and result types).
 *
 * Each step: stop judgment → model call (retried per `modelRetry` on a retryable `ModelError`)
 * → `ModelReplied` (durable before parsing) → parse → execute → `ActionResulted` +
 * `StepCompleted` (atomic) → events. History is rendered by appending to one message array, so
 * a step costs the same at step 10 and at step 10,000; a `ModelRequest`'s `messages` are a
 * read-only view of that array's first n messages, made in O(1) (design 0211).
 *
 * @since 0.1.0
 */
import * as Effect from "effect/Effect"
import * as Mailbox from "effect/Mailbox"
import type * as Schedule from "effect/Schedule"
import * as Either from "effect/Either"
import * as Stream from "effect/Stream"
import type * as AgentDefinition from "./AgentDefinition.js"
import * as Approval from "./Approval.js"
import { InvalidRunRequest, type RunError } from "./Errors.js"
import * as EventSink from "./EventSink.js"
import * as Fork from "./Fork.js"
import { messageIssues, type RunId } from "./Ids.js"
import { execute } from "./internal/attempt.js"
import { type RunRequest, type RunResult, type Requirements, withOutput } from "./internal/request.js"
import * as Wiring from "./internal/wiring.js"
import type { LoopEvent } from "./LoopEvent.js"
import type { ToolRegistry } from "./ToolRegistry.js"

export {
  /** What to run: an agent on a task with a registry of tools, under a caller-chosen run id. */
  type RunRequest,
  /** How a run ended; the same value every time `run` is called on a finished run id. */
  RunResult,
  /** The services `run` needs. */
  type Requirements,
  /** The result recorded in a `RunFinished` record. */
  resultOf,
  /** The snapshot a request runs under (the decision parser's `id` is part of it). */
  snapshotOf
} from "./internal/request.js"

/**
 * Forks a recorded run at a step into a new run (`Fork.fork`, design 0170): the new log holds
 * the parent's steps before `atStep` and `forkedFrom`; `run` on the new id continues from there.
 */
export const fork = Fork.fork

/**
 * Runs `request.agent` on `request.task` under `request.runId`, durably. The run is claimed
 * first (for the whole run), then its log is read once and decides:
 *
 * - finished → its recorded `RunResult`; nothing is called (also when another caller holds the
 *   claim of the finished run);
 * - started and unfinished → the configuration is checked against the recorded snapshot
 *   (`SnapshotMismatch`, nothing written), `RunResumed` appended, history and counters rebuilt
 *   from the log, an interrupted step finished (its action re-run only if the executor's replay
 *   policy for it is `"Always"`, else recorded as `NotExecuted` with the `interrupted` text),
 *   and the loop goes on;
 * - fresh → `RunStarted` appended with the snapshot, and the loop runs.
 *
 * Fails with `ExecutorRegistryMismatch` (a derived executor from another registry),
 * `InvalidRunRequest`, `RunBusy` (another owner holds the claim of an unfinished run) and
 * `SnapshotMismatch` — all before anything is written — and with `ModelError` (retries
 * exhausted), `StoreError` or `ConcurrentWriter`, after which the run can be resumed. A defect
 * in the parser or executor is not caught. Interrupting the fiber stops the model call or
 * handler in flight, writes nothing more and releases the claim.
 *
 * Events: `ActionExecuted.replayed` is true for the interrupted step finished on resume (its
 * `executorObservation` is empty when the action was not run again).
 */
export const run = <A = unknown>(request: RunRequest<A>): Effect.Effect<RunResult<A>, RunError, Requirements> =>
  typed(request.runId, request.agent, execute(request, undefined))

/**
 * A result that crossed a wire (the cluster, the CLI: its `encodedOutput` only) with its typed
 * `output` decoded by the agent's output schema (design 0400); `InvalidRunRequest` when the
 * schema does not decode it. A result without `encodedOutput` is returned as it is.
 */
export const decodeOutput = <A>(agent: AgentDefinition.AgentDefinition<A>, result: RunResult): Effect.Effect<RunResult<A>, InvalidRunRequest> =>
  typed(result.runId, agent, Effect.succeed(result))

/**
 * The result with its typed `output` (design 0400): the recorded encoded output decoded by the
 * request's output schema. A finished run asked again under a schema that no longer decodes its
 * recorded output fails with `InvalidRunRequest` naming the parse error.
 */
const typed = <A, E, R>(runId: RunId, agent: AgentDefinition.AgentDefinition<A>, attempt: Effect.Effect<RunResult, E, R>) =>
  agent.output === undefined
    ? attempt as Effect.Effect<RunResult<A>, E, R>
    : Effect.flatMap(attempt, (result) =>
      Either.match(withOutput(agent, result), {
        onLeft: (issues) => Effect.fail(new InvalidRunRequest({ runId, issues: `the recorded output does not decode with the agent's output schema: ${issues}` })),
        onRight: (value) => Effect.succeed(value)
      }))

/**
 * A message to a conversation (design 0300, decisions 6–9): the run id, the caller's id of the
 * message (a retried send appends nothing and returns the same turn's result), its text, and the
 * agent and tools to answer it with. The first message starts the conversation (it is its task).
 */
export interface SendRequest<A = unknown> {
  readonly runId: RunId
  readonly messageId: string
  readonly text: string
  /** The agent; with an output schema, each turn's answer is decoded and typed (design 0400). */
  readonly agent: AgentDefinition.AgentDefinition<A>
  readonly tools: ToolRegistry<unknown>
  readonly streaming?: boolean | undefined
  /**
   * Waits for another process's turn (design 0300, decision 8): while the send fails `RunBusy`,
   * it is tried again under this schedule (e.g. `Schedule.spaced("200 millis")` with
   * `Schedule.upTo`); `RunBusy` when it ends. Unset: `RunBusy` at once. Not in the snapshot.
   */
  readonly whileBusy?: Schedule.Schedule<unknown, RunError> | undefined
}

/**
 * Sends a person's message to a conversation and runs its turn (design 0300, decisions 6–9):
 *
 * - a new run id → a conversation whose task is this message (turn 0);
 * - a new message → `UserMessaged` appended first (durable before anything acts on it), then the
 *   loop runs the turn — budgets count per turn, the stop judgment is the run's — and the turn's
 *   result is returned (`RunResult` with `turn`, its counters the turn's); the conversation
 *   stays open for the next message;
 * - a message id already sent (a retried request) → that turn's result, nothing appended; if its
 *   turn was interrupted, the turn is finished first;
 * - a turn interrupted earlier (a crash) → finished first (under its own configuration), then
 *   the new message's turn;
 * - a conversation waiting for a person's decision → the message is held (appended) and
 *   `Suspended` returned; once decided, `run` or `send` finishes that turn, then answers the held
 *   messages in order;
 * - a configuration changed since the last turn (a redeploy) → allowed between turns and
 *   recorded on the message (`snapshotHash`, `differences`); within a turn → `SnapshotMismatch`;
 * - a single-task run (`run`) → `InvalidRunRequest`.
 *
 * Another caller running a turn of the same conversation holds its claim: `RunBusy`, nothing
 * appended (retry it; the message id makes the retry safe) — or, with `whileBusy`, the send is
 * tried again under that schedule until the claim is free.
 */
export const send = <A = unknown>(request: SendRequest<A>): Effect.Effect<RunResult<A>, RunError, Requirements> => {
  const issues = messageIssues(request)
  if (issues !== undefined) return Effect.fail(new InvalidRunRequest({ runId: request.runId, issues }))
  const attempt = typed(request.runId, request.agent, execute(
    { runId: request.runId, agent: request.agent, task: request.text, tools: request.tools, ...(request.streaming === undefined ? {} : { streaming: request.streaming }) },
    { messageId: request.messageId, text: request.text }
  ))
  const whileBusy = request.whileBusy
  return whileBusy === undefined ? attempt : Effect.retry(attempt, { schedule: whileBusy, while: (error) => error._tag === "RunBusy" })
}

/** The last item of `stream`: the run's result, its `output` typed by the agent's output schema (design 0400). */
export interface RunCompleted<A = unknown> {
  readonly _tag: "RunCompleted"
  readonly result: RunResult<A>
}

/** What `stream` yields: the run's events as they happen, then its result. */
export type StreamItem<A = unknown> = LoopEvent | RunCompleted<A>

/**
 * Runs a request as `run` does, streaming (design 0180), and yields every event of the run as
 * it happens — `ModelDelta`s included — then `RunCompleted` with the result; the stream fails
 * with the run's error. The events also reach the `EventSink` in context. Interrupting the
 * stream's consumer interrupts the run (which stays resumable). Events wait for the consumer in
 * an unbounded queue: the run never waits for a slow reader. With an output schema on the agent,
 * `RunCompleted`'s result has the typed `output`, as `run` gives it (design 0400).
 */
export const stream = <A = unknown>(request: RunRequest<A>): Stream.Stream<StreamItem<A>, RunError, Requirements> =>
  Stream.unwrapScoped(
    Effect.gen(function*() {
      const mailbox = yield* Mailbox.make<StreamItem<A>, RunError>()
      const outer = yield* EventSink.EventSink
      const sink = EventSink.make(
        EventSink.isNoop(outer) ? (event) => Effect.asVoid(mailbox.offer(event)) : (event) => Effect.zipRight(mailbox.offer(event), outer.emit(event))
      )
      yield* run({ ...request, streaming: request.streaming ?? true }).pipe(
        Effect.flatMap((result) => mailbox.offer({ _tag: "RunCompleted", result })),
        Effect.zipRight(mailbox.end),
        // Tapped, not caught: the run's fiber ends with its own cause; the stream carries it.
        Effect.tapErrorCause((cause) => mailbox.failCause(cause)),
        Effect.provideService(EventSink.EventSink, sink),
        Effect.forkScoped
      )
      return Mailbox.toStream(mailbox)
    })
  )

/**
 * Records a person's decision on a call a suspended run waits for (design 0160); the next
 * `Agent.run` resumes the run. See `Approval.decide`.
 */
export const decide = Approval.decide

/** The options of `layer`: a store, a model and a parser; `tools` (or an `executor`); `events`. */
export type LayerOptions = Wiring.Options

/**
 * Every service `run` needs in one layer: `Agent.layer({ store, model, parser, tools })`. The event
 * sink defaults to the no-op sink (`EventSink.noop`), the executor to `tools`' derived executor (pass the same
 * registry to `run`). Its error type is its parts' (a registry of `Tool.Handled` tools adds none).
 */
export const layer: <const O extends LayerOptions>(options: O) => Wiring.AgentLayer<O> = Wiring.layer
