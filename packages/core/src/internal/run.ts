/**
 * What one attempt of a run works with (`Agent.run` builds it), and the helpers the loop and
 * the step use on it: spans only when a tracer listens, events whose failed delivery is counted.
 *
 * @internal
 */
import type * as Clock from "effect/Clock"
import * as Effect from "effect/Effect"
import type * as Schedule from "effect/Schedule"
import type * as Tracer from "effect/Tracer"
import type { ActionExecutor } from "../ActionExecutor.js"
import type { DecisionParser } from "../DecisionParser.js"
import type { ModelError, RunError } from "../Errors.js"
import type * as EventSink from "../EventSink.js"
import type { RunId, StepIndex } from "../Ids.js"
import type { LoopEvent } from "../LoopEvent.js"
import type { ModelClient, ToolDefinition } from "../ModelClient.js"
import type { RunLogStore } from "../RunLogStore.js"
import type * as RunLog from "../RunLog.js"
import type { DerivedExecutor } from "../ToolRegistry.js"
import type * as Fingerprint from "./fingerprint.js"
import type * as History from "./history.js"
import type * as Rendering from "./rendering.js"
import type { Inbox } from "./inbox.js"
import type { RunRequest, RunResult } from "./request.js"
import type * as State from "./state.js"

/** What the loop can fail with (the suspension of a run waiting for decisions included). @internal */
export type LoopError = RunError

/** What the resumed pending step knows of its approvals (design 0160; `gate.ts` reads them). @internal */
export interface Gate {
  readonly step: number
  /** The requested calls' decisions, by call id. */
  readonly decisions: ReadonlyMap<string, RunLog.Decision>
  /** No attempt ran after the decisions: nothing of the step has started. */
  readonly fresh: boolean
  /** The step has no requests yet though some call needs approval: request now and suspend. */
  readonly requestNow: boolean
}

/** The services a sub-agent's child run runs with (design 0392). @internal */
export interface ChildServices {
  readonly executor: ActionExecutor.Service
  readonly model: ModelClient.Service
  readonly parser: DecisionParser.Service
}

/** Everything one attempt of a run works with. Owned by the run's fiber. @internal */
export interface Run {
  readonly runId: RunId
  readonly request: RunRequest
  readonly store: RunLogStore.Service
  readonly model: ModelClient.Service
  readonly parser: DecisionParser.Service
  readonly executor: ActionExecutor.Service
  readonly derived: DerivedExecutor | undefined
  readonly sink: EventSink.EventSink.Service
  readonly texts: History.Texts
  readonly schedule: Schedule.Schedule<unknown, ModelError>
  readonly modelTools: ReadonlyArray<ToolDefinition>
  /** Fingerprints the requests of this run (`ModelReplied.requestHash`). */
  readonly fingerprint: Fingerprint.Fingerprinter
  /** Renders the requests under a history policy (design 0300); undefined: keep everything. */
  readonly renderer: Rendering.Renderer | undefined
  /** Writes summaries for `summarise` (design 0300): `HistoryPolicy.Summariser` if provided, the run's model otherwise. */
  readonly summariser: ModelClient.Service
  readonly maxDurationMillis: number | undefined
  /** Whether a step runs several actions of one reply (`parallelToolCalls`, resolved). */
  readonly parallel: boolean
  /** How many actions of a step may run at once (`actionConcurrency`, default 1). */
  readonly concurrency: number
  /** Whether a tracer listens (see `span`): per-step spans cost more than the rest of a step. */
  readonly traced: boolean
  /** The sink drops everything (`EventSink.layerNoop`): events are not delivered at all. */
  readonly silent: boolean
  /** Whether the model's replies are streamed and announced as `ModelDelta` events (design 0180). */
  readonly streaming: boolean
  /** The run's `Clock` (read once per step boundary; `TestClock` included). */
  readonly clock: Clock.Clock
  state: State.State
  /** The approvals of the pending step being resumed (design 0160), set by `Agent.run` before it resumes. */
  gate: Gate | undefined
  /** A conversation (design 0300): a turn ends with `TurnFinished`, never `RunFinished`. */
  readonly conversation: boolean
  /** A conversation's queued and held messages (design 0300, decision 8). */
  inbox: Inbox | undefined
  /**
   * Runs a sub-agent's child (design 0392): `Agent.run` on its request, with the parent's store,
   * event sink and context and the given services. Set by the attempt, so the step does not
   * import it.
   */
  readonly runChild: (request: RunRequest, services: ChildServices) => Effect.Effect<RunResult, RunError>
}

/**
 * Step, model call and action spans are made when a tracer other than Effect's built-in one is
 * installed (`@effect/opentelemetry`, DevTools, a test tracer). With the built-in tracer they
 * would be seen by nobody, and they cost more than everything else the loop does in a step.
 * The run span is always made.
 * @internal
 */
export const span = (run: Run, name: string, attributes: () => Record<string, unknown>, kind?: Tracer.SpanKind) =>
<A, E, R>(effect: Effect.Effect<A, E, R>): Effect.Effect<A, E, R> =>
  run.traced
    ? Effect.withSpan(effect, name, kind === undefined ? { attributes: attributes(), captureStackTrace: false } : { attributes: attributes(), kind, captureStackTrace: false })
    : effect

/** @internal */
export const asStep = (step: number): StepIndex => step as StepIndex

/**
 * Emits an event; a failed delivery is counted, never propagated. A sink that returns
 * `Effect.void` for an event (nothing to deliver, so nothing can fail) costs no handler.
 * @internal
 */
export const emit = (run: Run, event: LoopEvent): Effect.Effect<void> => {
  if (run.silent) return Effect.void
  const delivery = run.sink.emit(event)
  return delivery === Effect.void ? Effect.void : Effect.catchAll(delivery, (error) =>
    Effect.zipRight(
      Effect.sync(() => {
        run.state.eventDeliveryFailures += 1
      }),
      Effect.logDebug(`polyloop: event ${event._tag} not delivered: ${error.message}`)
    ))
}

/**
 * `emitted`, then the effect `next` makes. When there is nothing to deliver, `next` is called
 * at once (one effect operation less per event; nothing ran in between that it could observe).
 * @internal
 */
export const andThen = <A, E>(emitted: Effect.Effect<void>, next: () => Effect.Effect<A, E>): Effect.Effect<A, E> =>
  emitted === Effect.void ? next() : Effect.flatMap(emitted, next)
