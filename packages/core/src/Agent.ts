/**
 * The loop (SPEC §7–§9): `Agent.run` runs an agent on a task, durably. Idempotent by run id:
 * a fresh id starts, a started and unfinished one resumes where it stopped, a finished one
 * returns its recorded result without calling anything.
 *
 * Each step: stop judgment → model call (retried per `modelRetry` on a retryable `ModelError`)
 * → `ModelReplied` (durable before parsing) → parse → execute → `ActionResulted` +
 * `StepCompleted` (atomic) → events. History is rendered by appending to one message array, so
 * a step costs the same at step 10 and at step 10,000.
 *
 * A `ModelRequest` is a value: its `messages` are a read-only view of that array's first n
 * messages, made in O(1) (`internal/prefixView.ts`, design 0212), so a client that keeps a
 * request sees it unchanged forever and the step cost stays flat.
 *
 * Why over ~400 lines: the loop is read top to bottom as one state machine (start or resume,
 * step, judgment, finish), and issues 14–16 and 18 are changing it at the same time; it is to be
 * split by concern (resume, step execution, judgment) once those have landed, not under them.
 *
 * @since 0.1.0
 */
import * as Clock from "effect/Clock"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Option from "effect/Option"
import * as ParseResult from "effect/ParseResult"
import type * as Schedule from "effect/Schedule"
import * as Schema from "effect/Schema"
import type { Action } from "./Action.js"
import { ActionExecutor } from "./ActionExecutor.js"
import type { ActionOutcome } from "./ActionOutcome.js"
import * as AgentDefinition from "./AgentDefinition.js"
import * as Approval from "./Approval.js"
import { DecisionParser } from "./DecisionParser.js"
import { ExecutorRegistryMismatch, InvalidRunRequest, type ModelError, type RunError, SnapshotMismatch } from "./Errors.js"
import * as EventSink from "./EventSink.js"
import * as Fork from "./Fork.js"
import { type ResultId, RunId, type StepIndex } from "./Ids.js"
import * as Fingerprint from "./internal/fingerprint.js"
import * as History from "./internal/history.js"
import * as PrefixView from "./internal/prefixView.js"
import * as State from "./internal/state.js"
import * as Tracing from "./internal/tracing.js"
import * as Truncation from "./internal/truncation.js"
import * as Wiring from "./internal/wiring.js"
import type { LoopEvent } from "./LoopEvent.js"
import { ModelClient, type ModelRequest, type ToolDefinition } from "./ModelClient.js"
import { type ModelReply, Usage } from "./ModelReply.js"
import type { ParsedReply } from "./ParsedReply.js"
import type * as RunLog from "./RunLog.js"
import { RunLogStore } from "./RunLogStore.js"
import * as Snapshot from "./Snapshot.js"
import { StopReason } from "./StopReason.js"
import * as ToolContext from "./ToolContext.js"
import { type DerivedExecutor, isDerivedExecutor, isDerivedFrom, type ToolRegistry } from "./ToolRegistry.js"

/** What to run: an agent on a task with a registry of tools, under a caller-chosen run id. */
export interface RunRequest {
  readonly runId: RunId
  readonly agent: AgentDefinition.AgentDefinition
  readonly task: string
  /**
   * The tools the model sees (their schemas, replay policies and completion markers are in the
   * snapshot). When the `ActionExecutor` in context is a registry's derived executor, it must
   * have been derived from this registry.
   */
  readonly tools: ToolRegistry<unknown>
}

/** How a run ended; the same value every time `run` is called on a finished run id. */
export const RunResult = Schema.Struct({
  runId: RunId,
  stopReason: StopReason,
  steps: Schema.NonNegativeInt,
  effectiveSteps: Schema.NonNegativeInt,
  usage: Usage,
  /** How many times the run was resumed. */
  resumedCount: Schema.NonNegativeInt,
  /**
   * Events the sink failed to deliver during the attempt that finished the run (an attempt
   * that was interrupted or crashed leaves no count). The `RunFinished` event itself is emitted
   * after its record is durable, so its own delivery is not in the count.
   */
  eventDeliveryFailures: Schema.NonNegativeInt
})
/** @since 0.1.0 */
export interface RunResult extends Schema.Schema.Type<typeof RunResult> {}

/** The services `run` needs. */
export type Requirements = ModelClient | DecisionParser | ActionExecutor | RunLogStore | EventSink.EventSink

/** The result recorded in a `RunFinished` record. */
export const resultOf = (runId: RunId, finished: RunLog.RunFinished): RunResult => ({
  runId,
  stopReason: finished.stopReason,
  steps: finished.counters.steps,
  effectiveSteps: finished.counters.effectiveSteps,
  usage: finished.counters.usage,
  resumedCount: finished.counters.resumedCount,
  eventDeliveryFailures: finished.eventDeliveryFailures
})

/** The snapshot a request runs under (the decision parser's `id` is part of it). */
export const snapshotOf = (request: RunRequest, parserId: string): Snapshot.Encoded =>
  Snapshot.encode(Snapshot.make({ agent: request.agent, task: request.task, tools: request.tools, parserId }))

/** Everything one attempt of a run works with. Owned by the run's fiber. */
interface Run {
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
  readonly maxDurationMillis: number | undefined
  /** Whether a tracer listens (see `traced`): per-step spans cost more than the rest of a step. */
  readonly traced: boolean
  /** The sink drops everything (`EventSink.layerNoop`): events are not delivered at all. */
  readonly silent: boolean
  /** The run's `Clock` (read once per step boundary; `TestClock` included). */
  readonly clock: Clock.Clock
  state: State.State
}

/**
 * Step, model call and action spans are made when a tracer other than Effect's built-in one is
 * installed (`@effect/opentelemetry`, DevTools, a test tracer). With the built-in tracer they
 * would be seen by nobody, and they cost more than everything else the loop does in a step.
 * The run span is always made.
 */
const span = (run: Run, name: string, attributes: () => Record<string, unknown>) =>
<A, E, R>(effect: Effect.Effect<A, E, R>): Effect.Effect<A, E, R> =>
  run.traced ? Effect.withSpan(effect, name, { attributes: attributes(), captureStackTrace: false }) : effect

const asStep = (step: number): StepIndex => step as StepIndex
const resultIdOf = (step: number): ResultId => `result_${step}` as ResultId

const validateAgent = Schema.validateEither(AgentDefinition.AgentDefinition)

/**
 * Emits an event; a failed delivery is counted, never propagated. A sink that returns
 * `Effect.void` for an event (nothing to deliver, so nothing can fail) costs no handler.
 */
const emit = (run: Run, event: LoopEvent): Effect.Effect<void> => {
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
 */
const andThen = <A, E>(emitted: Effect.Effect<void>, next: () => Effect.Effect<A, E>): Effect.Effect<A, E> =>
  emitted === Effect.void ? next() : Effect.flatMap(emitted, next)

/** Emits two events in order (the second one's `emit` is called after the first was delivered). */
const emitBoth = (run: Run, first: LoopEvent, second: LoopEvent): Effect.Effect<void> =>
  run.silent ? Effect.void : andThen(emit(run, first), () => emit(run, second))

/** The stop judgment of SPEC §9, in order: environment error, completion, then the four budgets. */
const judge = (run: Run): StopReason | undefined => {
  const state = run.state
  const last = state.last
  if (last !== undefined) {
    const result = last.result
    if (result !== null && result.outcome.status === "EnvError") {
      return { _tag: "EnvError", message: result.executorObservation === "" ? result.outcome.observation : result.executorObservation }
    }
    if (last.decision._tag === "Finish") return { _tag: "Completed", by: "Answer", answer: last.decision.answer }
    if (result !== null && result.outcome.status === "Executed") {
      const action = result.action
      if (
        !result.handlerFailed &&
        action._tag === "ToolCall" &&
        Option.exists(run.request.tools.get(action.name), (tool) => tool.completesRun)
      ) {
        return { _tag: "Completed", by: "Tool", answer: result.executorObservation }
      }
      if (result.outcome.envReportedCompletion) return { _tag: "Completed", by: "Environment" }
    }
  }
  const budget = run.request.agent.budget
  if (state.steps >= budget.maxSteps) return { _tag: "BudgetExhausted", budget: "Steps" }
  if (budget.maxEffectiveSteps !== undefined && state.effectiveSteps >= budget.maxEffectiveSteps) {
    return { _tag: "BudgetExhausted", budget: "EffectiveSteps" }
  }
  if (budget.maxTokens !== undefined && state.inputTokens + state.outputTokens >= budget.maxTokens) {
    return { _tag: "BudgetExhausted", budget: "Tokens" }
  }
  if (run.maxDurationMillis !== undefined && state.elapsed >= run.maxDurationMillis) {
    return { _tag: "BudgetExhausted", budget: "Duration" }
  }
  return undefined
}

/** The outcome as it enters history (SPEC §5.2): synthetic texts for NotExecuted / EnvError, the limit for Executed. */
const intoHistory = (run: Run, action: Action, outcome: ActionOutcome): ActionOutcome => {
  const texts = run.texts
  switch (outcome.status) {
    case "Executed": {
      const [observation, cut] = History.truncate(outcome.observation, texts.observationLimit)
      return {
        status: "Executed",
        observation,
        observationIsSynthetic: false,
        envReportedCompletion: outcome.envReportedCompletion,
        observationTruncatedChars: outcome.observationTruncatedChars + cut
      }
    }
    case "NotExecuted":
      return {
        status: "NotExecuted",
        observation: History.fillFor(texts.synthetic.notExecuted, action, History.notExecutedIssues(action, run.request.tools), texts),
        observationIsSynthetic: true,
        envReportedCompletion: false,
        observationTruncatedChars: 0
      }
    case "EnvError":
      return {
        status: "EnvError",
        observation: History.fillFor(texts.synthetic.envError, action, "the environment reported a failure", texts),
        observationIsSynthetic: true,
        envReportedCompletion: false,
        observationTruncatedChars: 0
      }
  }
}

/** Runs an action under its `ToolContext`; the derived executor also reports whether the handler failed. */
const execute = (run: Run, step: number, action: Action): Effect.Effect<{ readonly outcome: ActionOutcome; readonly handlerFailed: boolean }> => {
  const callId = History.callIdOf(action, step)
  const toolContext = ToolContext.make({ runId: run.runId, step, callId })
  // The derived executor provides the ToolContext to the handler itself, together with the
  // services it captured (one provide per call, and none for a refused action).
  const effect =
    run.derived !== undefined
      ? run.derived.executeReport(action, toolContext)
      : Effect.provideService(
        Effect.map(run.executor.execute(action), (outcome) => ({ outcome, handlerFailed: false })),
        ToolContext.ToolContext,
        toolContext
      )
  return effect.pipe(
    span(run, "Agent.action", () => ({
      "polyloop.run_id": run.runId,
      "polyloop.step": step,
      "polyloop.action": History.actionName(action),
      "polyloop.call_id": callId
    }))
  )
}

/** The outcome recorded for an action interrupted in flight whose replay policy is `"Never"`. */
const interruptedOutcome = (run: Run, action: Action): ActionOutcome => ({
  status: "NotExecuted",
  observation: History.fillFor(run.texts.synthetic.interrupted, action, "the run stopped while the action was in flight", run.texts),
  observationIsSynthetic: true,
  envReportedCompletion: false,
  observationTruncatedChars: 0
})

const resultRecord = (
  run: Run,
  step: number,
  action: Action,
  outcome: ActionOutcome,
  executorObservation: string,
  handlerFailed: boolean
): RunLog.ActionResulted => ({
  _tag: "ActionResulted",
  seq: run.state.seq,
  resultId: resultIdOf(step),
  step: asStep(step),
  action,
  outcome,
  executorObservation,
  handlerFailed
})

/**
 * The result of a step's action: executed (its outcome as it enters history), or, on resume of
 * an action whose replay policy is `"Never"`, recorded as interrupted without running it.
 */
const actionResult = (run: Run, step: number, action: Action, resumed: boolean): Effect.Effect<RunLog.ActionResulted> =>
  resumed && run.executor.replayPolicy(action) === "Never"
    ? Effect.succeed(resultRecord(run, step, action, interruptedOutcome(run, action), "", false))
    : Effect.map(execute(run, step, action), (report) =>
      resultRecord(run, step, action, intoHistory(run, action, report.outcome), report.outcome.observation, report.handlerFailed))

/** Writes the step's result and completion atomically, then renders the step into history and emits its events. */
const completeStep = (
  run: Run,
  step: number,
  reply: ModelReply,
  decision: ParsedReply,
  result: RunLog.ActionResulted | null,
  startedAt: number,
  resumed: boolean
): Effect.Effect<void, RunError> => {
  const elapsed = Math.max(0, run.clock.unsafeCurrentTimeMillis() - startedAt)
  const completed: RunLog.StepCompleted = {
    _tag: "StepCompleted",
    seq: result === null ? run.state.seq : run.state.seq + 1,
    step: asStep(step),
    decision,
    resultId: result === null ? null : result.resultId,
    usage: reply.usage,
    elapsed
  }
  return Effect.flatMap(run.store.completeStep(run.runId, result, completed), () => {
    run.state.seq = completed.seq + 1
    State.applyStep(run.state, reply, completed, result, run.texts)
    const stepCompleted: LoopEvent = { _tag: "StepCompleted", runId: run.runId, step, decision: decision._tag, usage: reply.usage, elapsed }
    if (result === null) return emit(run, stepCompleted)
    return emitBoth(
      run,
      {
        _tag: "ActionExecuted",
        runId: run.runId,
        step,
        action: result.action,
        outcome: result.outcome,
        executorObservation: result.executorObservation,
        replayed: resumed
      },
      stepCompleted
    )
  })
}

/**
 * Completes a step whose reply is logged: executes its action (or, on resume of an action whose
 * replay policy is `"Never"`, records it as interrupted), writes the result and the step
 * atomically, renders the step into history and emits its events. Written as a chain of
 * `flatMap`s rather than `Effect.gen`: it runs once per step and the generator costs more than
 * the work.
 */
const settle = (
  run: Run,
  step: number,
  reply: ModelReply,
  parsed: ParsedReply,
  startedAt: number,
  resumed: boolean
): Effect.Effect<void, RunError> => {
  const decision = History.assignCallId(parsed, step)
  return andThen(emit(run, { _tag: "DecisionParsed", runId: run.runId, step, decision }), () =>
    decision._tag === "Act"
      ? Effect.flatMap(actionResult(run, step, decision.action, resumed), (result) =>
        completeStep(run, step, reply, decision, result, startedAt, resumed))
      : completeStep(run, step, reply, decision, null, startedAt, resumed))
}

const logModelFailure = (step: number, error: ModelError) =>
  Effect.logDebug(`polyloop: model call of step ${step} failed (retryable: ${error.retryable}): ${error.message}`)

/** The model call of a step, retried per `modelRetry` on a retryable `ModelError` only. */
const generate = (run: Run, step: number) => {
  const request: ModelRequest = {
    messages: PrefixView.prefix(run.state.messages),
    tools: run.modelTools,
    settings: run.request.agent.modelSettings
  }
  const call = run.model.generate(request)
  // The happy path pays for one handler and no schedule: `Effect.retry` starts only after a
  // retryable failure, replaying that failure as its first attempt, so the model is called
  // `maxAttempts` times in all. Every failed attempt is logged.
  // A retryable error whose `retryAfter` hint is beyond `modelRetry.maxDelay` is not retried:
  // the step fails at once, the message saying why (design 0140).
  const retry = run.request.agent.modelRetry
  const waitable = (error: ModelError) => error.retryable && AgentDefinition.exceedsMaxDelay(retry, error) === undefined
  const explained = (error: ModelError) => AgentDefinition.exceedsMaxDelay(retry, error) ?? error
  return call.pipe(
    Effect.catchAll((first) => {
      if (!waitable(first)) return Effect.zipRight(logModelFailure(step, first), Effect.fail(explained(first)))
      const logged = Effect.tapError(call, (error) => logModelFailure(step, error))
      let replayed = false
      const again = Effect.suspend(() => {
        if (replayed) return logged
        replayed = true
        return Effect.zipRight(logModelFailure(step, first), Effect.fail(first))
      })
      return Effect.mapError(Effect.retry(again, { schedule: run.schedule, while: waitable }), explained)
    }),
    span(run, "Agent.model", () => ({ "polyloop.run_id": run.runId, "polyloop.step": step }))
  )
}

/** The decision of a reply: the parser's, or `InvalidDecision` for a reply cut off at the output limit (design 0140). */
const decideReply = (run: Run, reply: ModelReply): Effect.Effect<ParsedReply> =>
  Truncation.decide(run.parser, reply, run.texts.synthetic, run.texts.tools)

/** One live step: model call, durable reply, parse, then `settle`. */
const runStep = (run: Run): Effect.Effect<void, RunError> => {
  const step = run.state.steps
  const startedAt = run.clock.unsafeCurrentTimeMillis()
  const body = andThen(emit(run, { _tag: "StepStarted", runId: run.runId, step }), () =>
    Effect.flatMap(generate(run, step), (reply) => {
      const replied: RunLog.ModelReplied = {
        _tag: "ModelReplied",
        seq: run.state.seq,
        step: asStep(step),
        reply,
        requestHash: run.fingerprint.hash(run.state.messages)
      }
      return Effect.flatMap(run.store.appendReply(run.runId, replied), () => {
        run.state.seq += 1
        return andThen(emit(run, { _tag: "ModelReplied", runId: run.runId, step, reply }), () =>
          Effect.flatMap(decideReply(run, reply), (decision) => settle(run, step, reply, decision, startedAt, false)))
      })
    }))
  return span(run, "Agent.step", () => ({ "polyloop.run_id": run.runId, "polyloop.step": step }))(body)
}

/** Appends `RunFinished` and emits its event. */
const finish = (run: Run, stopReason: StopReason) =>
  Effect.gen(function*() {
    const state = run.state
    const finishedAt = yield* Clock.currentTimeMillis
    const record: RunLog.RunFinished = {
      _tag: "RunFinished",
      seq: state.seq,
      stopReason,
      finishedAt,
      counters: {
        steps: state.steps,
        effectiveSteps: state.effectiveSteps,
        usage: { inputTokens: state.inputTokens, outputTokens: state.outputTokens },
        elapsed: state.elapsed,
        resumedCount: state.resumedCount
      },
      eventDeliveryFailures: state.eventDeliveryFailures
    }
    yield* run.store.finish(run.runId, record)
    state.seq += 1
    yield* emit(run, { _tag: "RunFinished", runId: run.runId, stopReason, counters: record.counters })
    return resultOf(run.runId, record)
  })

/** Steps until the stop judgment says stop, then finishes the run. */
const loop = (run: Run): Effect.Effect<RunResult, RunError> =>
  Effect.suspend(() => {
    const stop = judge(run)
    return stop !== undefined ? finish(run, stop) : Effect.flatMap(runStep(run), () => loop(run))
  })

const checkSnapshot = (runId: RunId, started: RunLog.RunStarted, current: Snapshot.Encoded): Effect.Effect<void, SnapshotMismatch> => {
  if (Snapshot.matches(started.snapshotHash, current)) return Effect.void
  const differences = Snapshot.diff(started.snapshot, current.value)
  const tools = Snapshot.changedTools(started.snapshot, current.value)
  return Effect.fail(
    new SnapshotMismatch({
      runId,
      differences: differences.length > 0 ? differences : [["snapshotHash", started.snapshotHash, current.hash]],
      ...(tools.length > 0 ? { tools } : {})
    })
  )
}

/** A fresh run: `RunStarted` with the snapshot. */
const start = (run: Run, snapshot: Snapshot.Encoded) =>
  Effect.gen(function*() {
    const startedAt = yield* Clock.currentTimeMillis
    yield* run.store.start({
      _tag: "RunStarted",
      seq: 0,
      runId: run.runId,
      task: run.request.task,
      snapshot: snapshot.value,
      snapshotHash: snapshot.hash,
      startedAt
    })
    yield* emit(run, { _tag: "RunStarted", runId: run.runId, task: run.request.task, snapshotHash: snapshot.hash, at: startedAt })
  })

/** A resumed run: `RunResumed`, then the interrupted step (if its reply was logged) is finished. */
const resume = (run: Run, interrupted: Option.Option<RunLog.ModelReplied>) =>
  Effect.gen(function*() {
    const at = yield* Clock.currentTimeMillis
    const fromStep = run.state.steps
    yield* run.store.appendResume(run.runId, { _tag: "RunResumed", seq: run.state.seq, fromStep: asStep(fromStep), at })
    run.state.seq += 1
    run.state.resumedCount += 1
    yield* emit(run, { _tag: "RunResumed", runId: run.runId, fromStep, at })
    if (Option.isSome(interrupted)) {
      const reply = interrupted.value.reply
      yield* Effect.gen(function*() {
        const decision = yield* decideReply(run, reply)
        yield* settle(run, fromStep, reply, decision, at, true)
      }).pipe(
        span(run, "Agent.step", () => ({ "polyloop.run_id": run.runId, "polyloop.step": fromStep, "polyloop.resumed": true }))
      )
    }
  })

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
export const run = (request: RunRequest): Effect.Effect<RunResult, RunError, Requirements> =>
  Effect.gen(function*() {
    const runId = request.runId
    const executor = yield* ActionExecutor
    const derived = isDerivedExecutor(executor) ? executor : undefined
    if (derived !== undefined && !isDerivedFrom(derived, request.tools)) {
      return yield* new ExecutorRegistryMismatch({ requestTools: request.tools.names, executorTools: derived.registry.names })
    }
    const valid = validateAgent(request.agent)
    if (valid._tag === "Left") {
      return yield* new InvalidRunRequest({ runId, issues: ParseResult.TreeFormatter.formatErrorSync(valid.left) })
    }
    const store = yield* RunLogStore
    const parser = yield* DecisionParser
    const model = yield* ModelClient
    const sink = yield* EventSink.EventSink
    const tracer = yield* Effect.tracer
    const clock = yield* Effect.clock
    return yield* Effect.scoped(
      Effect.gen(function*() {
        // Claim first, then read the log once: under the claim nobody else writes, so what is
        // read decides. A busy run that turns out to be finished still returns its result.
        const claimed = yield* Effect.either(store.claim(runId))
        if (Either.isLeft(claimed)) {
          const error = claimed.left
          if (error._tag !== "RunBusy") return yield* error
          const log = yield* store.readLog(runId)
          if (Option.isSome(log.finished)) return resultOf(runId, log.finished.value)
          return yield* error
        }
        const log = yield* store.readLog(runId)
        if (Option.isSome(log.finished)) return resultOf(runId, log.finished.value)
        const snapshot = snapshotOf(request, parser.id)
        if (Option.isSome(log.started)) yield* checkSnapshot(runId, log.started.value, snapshot)
        const agent = request.agent
        const texts = History.makeTexts({
          synthetic: agent.syntheticObservations,
          tools: request.tools,
          observationTemplate: (agent.historyRendering ?? AgentDefinition.defaultHistoryRendering).observationTemplate,
          observationLimit: agent.observationLimit
        })
        const messages = History.initial(agent.systemPrompt, request.task)
        const modelTools = request.tools.modelView()
        const current: Run = {
          runId,
          request,
          store,
          model,
          parser,
          executor,
          derived,
          sink,
          texts,
          schedule: AgentDefinition.retrySchedule(agent.modelRetry),
          modelTools,
          fingerprint: Fingerprint.make(modelTools, agent.modelSettings),
          maxDurationMillis: agent.budget.maxDuration === undefined ? undefined : Duration.toMillis(agent.budget.maxDuration),
          traced: Tracing.isTraced(tracer),
          silent: EventSink.isNoop(sink),
          clock,
          state: State.fresh(messages)
        }
        if (Option.isSome(log.started)) {
          const rebuilt = yield* State.rebuild(runId, log, messages, texts)
          current.state = rebuilt.state
          // A fork nothing has run on yet continues without a RunResumed: it was not interrupted.
          if (!Fork.isUntouched(log)) yield* resume(current, rebuilt.interrupted)
        } else {
          yield* start(current, snapshot)
        }
        return yield* loop(current)
      })
    )
  }).pipe(Effect.withSpan("Agent.run", { attributes: { "polyloop.run_id": request.runId, "polyloop.agent": request.agent.name } }))

/**
 * Records a person's decision on a call a suspended run waits for (design 0160); the next
 * `Agent.run` resumes the run. See `Approval.decide`.
 */
export const decide = Approval.decide

/** The options of `layer`: a store, a model and a parser; `tools` (or an `executor`); `events`. */
export type LayerOptions = Wiring.Options

/**
 * Every service `run` needs in one layer: `Agent.layer({ store, model, parser, tools })`. The event
 * sink defaults to `EventSink.layerNoop`, the executor to `tools`' derived executor (pass the same
 * registry to `run`). Its error type is its parts' (a registry of `Tool.Handled` tools adds none).
 */
export const layer: <const O extends LayerOptions>(options: O) => Wiring.AgentLayer<O> = Wiring.layer
