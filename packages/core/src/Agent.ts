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
 * messages, made in O(1) (`internal/prefixView.ts`, design 0211), so a client that keeps a
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
import { identity } from "effect/Function"
import * as Either from "effect/Either"
import * as Mailbox from "effect/Mailbox"
import * as Option from "effect/Option"
import * as ParseResult from "effect/ParseResult"
import type * as Schedule from "effect/Schedule"
import * as Schema from "effect/Schema"
import * as Scope from "effect/Scope"
import * as Stream from "effect/Stream"
import { ActionExecutor } from "./ActionExecutor.js"
import * as AgentDefinition from "./AgentDefinition.js"
import * as Approval from "./Approval.js"
import type { BudgetItem, ConversationBudget } from "./Budget.js"
import { DecisionParser } from "./DecisionParser.js"
import { ContextWindowExceeded, ExecutorRegistryMismatch, InvalidRunRequest, type ModelError, type RunError, SnapshotMismatch } from "./Errors.js"
import * as EventSink from "./EventSink.js"
import * as Fork from "./Fork.js"
import { messageIssues, RunId } from "./Ids.js"
import * as Fingerprint from "./internal/fingerprint.js"
import * as Gate from "./internal/gate.js"
import * as Inbox from "./internal/inbox.js"
import * as HistoryPolicy from "./HistoryPolicy.js"
import * as History from "./internal/history.js"
import * as Rendering from "./internal/rendering.js"
import * as PrefixView from "./internal/prefixView.js"
import { andThen, asStep, emit, type Run, span } from "./internal/run.js"
import * as State from "./internal/state.js"
import * as Step from "./internal/step.js"
import * as Streaming from "./internal/streaming.js"
import * as Tracing from "./internal/tracing.js"
import * as Truncation from "./internal/truncation.js"
import * as Wiring from "./internal/wiring.js"
import { currentCall, ModelClient, type ModelRequest } from "./ModelClient.js"
import { type ModelReply, Usage } from "./ModelReply.js"
import type { LoopEvent } from "./LoopEvent.js"
import type { ParsedReply } from "./ParsedReply.js"
import * as RunLog from "./RunLog.js"
import { RunLogStore } from "./RunLogStore.js"
import * as Snapshot from "./Snapshot.js"
import { StopReason } from "./StopReason.js"
import * as TokenCounter from "./TokenCounter.js"
import { isDerivedExecutor, isDerivedFrom, type ToolRegistry } from "./ToolRegistry.js"

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
  /**
   * Stream the model's replies (design 0180): each reply is announced piece by piece as
   * `ModelDelta` events while it arrives, then logged whole as before. Not in the snapshot (it
   * changes nothing the model sees): a run may resume with or without it. Default false.
   */
  readonly streaming?: boolean | undefined
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
  eventDeliveryFailures: Schema.NonNegativeInt,
  /** A conversation's turn (design 0300): the counters are that turn's. Absent for a single-task run. */
  turn: Schema.optional(Schema.NonNegativeInt)
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

/**
 * The snapshot a request runs under (the decision parser's `id` is part of it).
 * `defaultParallelToolCalls` is the value of an unset `parallelToolCalls` (see `Snapshot.Input`).
 */
export const snapshotOf = (request: RunRequest, parserId: string, defaultParallelToolCalls: boolean = true): Snapshot.Encoded =>
  Snapshot.encodeInput({ agent: request.agent, task: request.task, tools: request.tools, parserId, defaultParallelToolCalls })

const validateAgent = Schema.validateEither(AgentDefinition.AgentDefinition)

/**
 * Definitions already validated, and the retry schedule of each `modelRetry`: an
 * `AgentDefinition` is an immutable value (the snapshot's encoding is cached on it too), so an
 * application that defines its agent once pays for the schema check and the schedule once.
 */
const validated = new WeakSet<AgentDefinition.AgentDefinition>()
const schedules = new WeakMap<AgentDefinition.ModelRetry, ReturnType<typeof AgentDefinition.retrySchedule>>()

const scheduleOf = (retry: AgentDefinition.ModelRetry) => {
  let schedule = schedules.get(retry)
  if (schedule === undefined) schedules.set(retry, schedule = AgentDefinition.retrySchedule(retry))
  return schedule
}

/**
 * The stop judgment of SPEC §9 over the last step's results (design 0150), in order: an
 * `EnvError` in any call; a `Finish`; a completing tool that returned (first in call order),
 * or an environment that reported completion; then the four budgets.
 */
const judge = (run: Run): StopReason | undefined => {
  const state = run.state
  const last = state.last
  if (last !== undefined) {
    const results = last.results
    for (let i = 0; i < results.length; i++) {
      const result = results[i]!
      if (result.outcome.status === "EnvError") {
        return { _tag: "EnvError", message: result.executorObservation === "" ? result.outcome.observation : result.executorObservation }
      }
    }
    if (last.decision._tag === "Finish") return { _tag: "Completed", by: "Answer", answer: last.decision.answer }
    for (let i = 0; i < results.length; i++) {
      const result = results[i]!
      if (result.outcome.status !== "Executed") continue
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
  // A conversation's budget counts over all its turns (design 0300), checked first: a step that
  // exhausts both is reported as the conversation's, which decides every later message.
  const whole = run.conversation ? run.request.agent.conversationBudget : undefined
  if (whole !== undefined) {
    const exhausted = conversationExhausted(run, whole)
    if (exhausted !== undefined) return { _tag: "BudgetExhausted", budget: exhausted, scope: "Conversation" }
  }
  // A budget is per turn (design 0300): a single-task run is one turn, counted from zero.
  const budget = run.request.agent.budget
  const from = state.turnStart
  if (state.steps - from.steps >= budget.maxSteps) return { _tag: "BudgetExhausted", budget: "Steps" }
  if (budget.maxEffectiveSteps !== undefined && state.effectiveSteps - from.effectiveSteps >= budget.maxEffectiveSteps) {
    return { _tag: "BudgetExhausted", budget: "EffectiveSteps" }
  }
  if (budget.maxTokens !== undefined && state.inputTokens + state.outputTokens - from.inputTokens - from.outputTokens >= budget.maxTokens) {
    return { _tag: "BudgetExhausted", budget: "Tokens" }
  }
  if (run.maxDurationMillis !== undefined && state.elapsed - from.elapsed >= run.maxDurationMillis) {
    return { _tag: "BudgetExhausted", budget: "Duration" }
  }
  return undefined
}

/** The item of a conversation's budget its totals (every turn, from the first step) have reached. */
const conversationExhausted = (run: Run, budget: ConversationBudget): BudgetItem | undefined => {
  const state = run.state
  if (budget.maxSteps !== undefined && state.steps >= budget.maxSteps) return "Steps"
  if (budget.maxEffectiveSteps !== undefined && state.effectiveSteps >= budget.maxEffectiveSteps) return "EffectiveSteps"
  if (budget.maxTokens !== undefined && state.inputTokens + state.outputTokens >= budget.maxTokens) return "Tokens"
  if (budget.maxDuration !== undefined && state.elapsed >= Duration.toMillis(budget.maxDuration)) return "Duration"
  return undefined
}

const logModelFailure = (step: number, error: ModelError) =>
  Effect.logDebug(`polyloop: model call of step ${step} failed (retryable: ${error.retryable}): ${error.message}`)

/** One attempt of a step's model call (streamed or not), on the request `sent` or the whole history. */
const modelCall = (run: Run, step: number, sent: Rendering.Sent | undefined): Effect.Effect<ModelReply, ModelError> => {
  // A value (design 0211): a read-only view of the history's first n messages, made in O(1);
  // under a masking policy, the masker's view (design 0300), made in O(1) too.
  const messages = sent !== undefined ? sent.messages : PrefixView.prefix(run.state.messages)
  const request: ModelRequest = run.parallel
    ? { messages, tools: run.modelTools, settings: run.request.agent.modelSettings }
    : { messages, tools: run.modelTools, settings: run.request.agent.modelSettings, parallelToolCalls: false }
  return run.streaming ? Streaming.modelCall(run, step, request) : run.model.generate(request)
}

/**
 * What follows a failed first attempt of `call`: retried per `modelRetry` on a retryable
 * `ModelError` only. The happy path pays for one handler and no schedule: `Effect.retry` starts
 * only after a retryable failure, replaying that failure as its first attempt, so the model is
 * called `maxAttempts` times in all. Every failed attempt is logged. A retryable error whose
 * `retryAfter` hint is beyond `modelRetry.maxDelay` is not retried: the step fails at once, the
 * message saying why (design 0140).
 */
const retryAfter = (run: Run, step: number, call: Effect.Effect<ModelReply, ModelError>, first: ModelError): Effect.Effect<ModelReply, ModelError> => {
  const retry = run.request.agent.modelRetry
  const waitable = (error: ModelError) => error.retryable && AgentDefinition.exceedsMaxDelay(retry, error) === undefined
  const explained = (error: ModelError) => AgentDefinition.exceedsMaxDelay(retry, error) ?? error
  if (!waitable(first)) return Effect.zipRight(logModelFailure(step, first), Effect.fail(explained(first)))
  const logged = Effect.tapError(call, (error) => logModelFailure(step, error))
  let replayed = false
  const again = Effect.suspend(() => {
    if (replayed) return logged
    replayed = true
    return Effect.zipRight(logModelFailure(step, first), Effect.fail(first))
  })
  return Effect.mapError(Effect.retry(again, { schedule: run.schedule, while: waitable }), explained)
}

/** The model call of a step, retried per `modelRetry` on a retryable `ModelError` only; in its span when traced. */
const generate = (run: Run, step: number, sent: Rendering.Sent | undefined) => {
  const call = modelCall(run, step, sent)
  return Effect.catchAll(call, (first) => retryAfter(run, step, call, first)).pipe(
    // The GenAI attributes (design 0212): the request's before the call, the reply's after it.
    run.traced ? Effect.tap(Tracing.annotateReply) : identity,
    span(run, "Agent.model", () => Tracing.modelAttributes(run.runId, step, run.request.agent.modelSettings), "client")
  )
}

/** The decision of a reply: the parser's, or `InvalidDecision` for a reply cut off at the output limit (design 0140). */
const decideReply = (run: Run, reply: ModelReply): Effect.Effect<ParsedReply> =>
  Truncation.decide(run.parser, reply, run.texts.synthetic, run.texts.tools)

/** Did the provider refuse the request as longer than its context window? */
const isContextExceeded = (error: ModelError): boolean => error.code === "context_length_exceeded"

/** Appends a `HistoryCompacted` record (design 0300) before the request that uses it. */
const compact = (run: Run, step: number, reason: RunLog.HistoryCompacted["reason"], planned: Rendering.Planned) => {
  const record: RunLog.HistoryCompacted = {
    _tag: "HistoryCompacted",
    seq: run.state.seq,
    step: asStep(step),
    reason,
    toStep: asStep(planned.toStep),
    requestTokens: planned.requestTokens
  }
  return Effect.map(run.store.appendCompaction(run.runId, record), () => {
    run.state.seq += 1
    run.state.compactions.push(record)
  })
}

/** The counted size of a keep-everything request (for `ContextWindowExceeded`): the approximate count. */
const keepAllTokens = (run: Run): number => {
  let n = TokenCounter.approximateCount(JSON.stringify(run.modelTools))
  for (const message of run.state.messages) n += Rendering.messageTokens(TokenCounter.approximateCount, message)
  return n
}

/** The window a `ContextWindowExceeded` names (design 0361): the policy's, else the model's when its refusal stated it. */
const exceeded = (run: Run, step: number, cause: ModelError | undefined, requestTokens?: number) => {
  const window = run.renderer?.window ?? cause?.contextWindow
  return new ContextWindowExceeded({
    runId: run.runId,
    step: asStep(step),
    ...(window === undefined ? {} : { window }),
    requestTokens: requestTokens ?? (run.renderer === undefined ? keepAllTokens(run) : run.renderer.tokens(run.state)),
    ...(cause === undefined ? {} : { cause })
  })
}

/**
 * The request of the current step, after its drops, counted over the policy's budget (design
 * 0361): its size, and it is never sent; `undefined` when it fits or the policy names no window.
 */
const overBudget = (run: Run, renderer: Rendering.Renderer): number | undefined => {
  if (renderer.budget === undefined) return undefined
  const least = renderer.leastTokens(run.state)
  return least > renderer.budget ? least : undefined
}

/**
 * The step's request under the history policy: the compaction its token budget asks for first
 * (recorded), then the rendering. Undefined for keep-everything (today's prefix view).
 */
const prepare = (run: Run, step: number): Effect.Effect<Rendering.Sent | undefined, Gate.LoopError> => {
  const renderer = run.renderer
  if (renderer === undefined) return Effect.succeed(undefined)
  const fitted = Effect.suspend(() => {
    const planned = renderer.plan(run.state)
    const request = Effect.suspend(() => {
      const over = overBudget(run, renderer)
      return over !== undefined ? Effect.fail(exceeded(run, step, undefined, over)) : Effect.sync(() => renderer.request(run.state))
    })
    return planned === undefined ? request : Effect.zipRight(compact(run, step, "Budget", planned), request)
  })
  const wanted = renderer.planSummary(run.state)
  return wanted === undefined ? fitted : Effect.zipRight(summarise(run, step, renderer, wanted), fitted)
}

/**
 * A summary of the steps before `planned.toStep` (design 0300, decision 5): the summariser's
 * call (retried like a step's), then its `HistoryCompacted` record with the summary, the
 * request's fingerprint and the usage, which counts in the run's tokens. A resume reads the
 * record and never asks again.
 */
const summarise = (run: Run, step: number, renderer: Rendering.Renderer, planned: Rendering.Planned) =>
  Effect.suspend(() => {
    const request = renderer.summaryRequest(run.state, planned.toStep)
    const waitable = (error: ModelError) => error.retryable && AgentDefinition.exceedsMaxDelay(run.request.agent.modelRetry, error) === undefined
    const call = Effect.locally(run.summariser.generate(request), currentCall, { runId: run.runId, step, purpose: "Summary" })
    return Effect.flatMap(Effect.retry(call, { schedule: run.schedule, while: waitable }), (reply) => {
      const record: RunLog.HistoryCompacted = {
        _tag: "HistoryCompacted",
        seq: run.state.seq,
        step: asStep(step),
        reason: "Threshold",
        toStep: asStep(planned.toStep),
        requestTokens: planned.requestTokens,
        summary: reply.text,
        requestHash: Fingerprint.ofRequest(request),
        usage: reply.usage
      }
      return Effect.map(run.store.appendCompaction(run.runId, record), () => {
        run.state.seq += 1
        run.state.compactions.push(record)
        run.state.inputTokens += reply.usage.inputTokens
        run.state.outputTokens += reply.usage.outputTokens
      })
    })
  })

/**
 * The model call of a step, then `then` with its reply and the request it answered; with the
 * emergency step (design 0300, decision 4): a request the provider refuses as too long is shrunk
 * by the policy (every step but the last dropped, recorded) and sent again once;
 * `ContextWindowExceeded` when the policy cannot shrink it. Errors of `then` are not handled here.
 *
 * Written as one handler around the call (design 0350, "Flattening execute"): a run parked in its
 * model call holds one continuation frame for all of this — the retries, the emergency step and
 * the rest of the step — rather than one per combinator (catch, retry, map, catch, flatMap).
 */
const generateThen = (
  run: Run,
  step: number,
  sent: Rendering.Sent | undefined,
  then: (reply: ModelReply, sent: Rendering.Sent | undefined) => Effect.Effect<void, Gate.LoopError>
): Effect.Effect<void, Gate.LoopError> => {
  const renderer = run.renderer
  const attempt = (current: Rendering.Sent | undefined, onFailure: (error: ModelError) => Effect.Effect<void, Gate.LoopError>) => {
    const replied = (reply: ModelReply) => then(reply, current)
    // The step is named to the client only when steps may be missing from the request (a
    // policy that drops or summarises, or a compaction already made); otherwise the number of
    // its Assistant messages says it, and the step pays nothing for a fiber reference.
    const named = renderer !== undefined && (renderer.compacts || run.state.compactions.length > 0)
    if (named || run.traced) {
      const generated = generate(run, step, current)
      return Effect.matchEffect(named ? Effect.locally(generated, currentCall, { runId: run.runId, step, purpose: "Step" }) : generated, {
        onFailure,
        onSuccess: replied
      })
    }
    // Untraced and unnamed, `generate` inlined: the retries start in the failure handler.
    const call = modelCall(run, step, current)
    return Effect.matchEffect(call, {
      onFailure: (first) => Effect.matchEffect(retryAfter(run, step, call, first), { onFailure, onSuccess: replied }),
      onSuccess: replied
    })
  }
  return attempt(sent, (error) => {
    if (!isContextExceeded(error)) return Effect.fail(error)
    const planned = renderer?.emergency(run.state)
    if (renderer === undefined || planned === undefined) return Effect.fail(exceeded(run, step, error))
    return Effect.flatMap(compact(run, step, "ContextExceeded", planned), () =>
      overBudget(run, renderer) !== undefined
        ? Effect.fail(exceeded(run, step, error))
        : attempt(renderer.request(run.state), (second) => Effect.fail(isContextExceeded(second) ? exceeded(run, step, second) : second)))
  })
}

/** One live step: model call, durable reply, parse, then `settle`. */
const runStep = (run: Run): Effect.Effect<void, Gate.LoopError> => {
  const step = run.state.steps
  const startedAt = run.clock.unsafeCurrentTimeMillis()
  const afterReply = (generated: ModelReply, sent: Rendering.Sent | undefined) => {
    const modelElapsed = Math.max(0, run.clock.unsafeCurrentTimeMillis() - startedAt)
    run.state.modelElapsed = modelElapsed
    const reply = History.assignReplyCallIds(generated, step)
    const replied: RunLog.ModelReplied = {
      _tag: "ModelReplied",
      seq: run.state.seq,
      step: asStep(step),
      reply,
      requestHash: sent !== undefined ? sent.hash : run.fingerprint.hash(run.state.messages),
      modelElapsed
    }
    return Effect.flatMap(run.store.appendReply(run.runId, replied), () => {
      run.state.seq += 1
      return andThen(emit(run, { _tag: "ModelReplied", runId: run.runId, step, reply }), () =>
        Effect.flatMap(decideReply(run, reply), (decision) => Step.settle(run, step, reply, decision, startedAt, false)))
    })
  }
  const body = andThen(emit(run, { _tag: "StepStarted", runId: run.runId, step }), () =>
    run.renderer === undefined
      ? generateThen(run, step, undefined, afterReply)
      : Effect.flatMap(prepare(run, step), (prepared) => generateThen(run, step, prepared, afterReply)))
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
    if (run.conversation) {
      // A conversation's turn ends; the conversation does not (design 0300, decision 6).
      const from = state.turnStart
      const ended: RunLog.TurnFinished = {
        _tag: "TurnFinished",
        seq: state.seq,
        turn: state.turn,
        stopReason,
        finishedAt,
        atStep: state.steps,
        counters: {
          steps: state.steps - from.steps,
          effectiveSteps: state.effectiveSteps - from.effectiveSteps,
          usage: { inputTokens: state.inputTokens - from.inputTokens, outputTokens: state.outputTokens - from.outputTokens },
          elapsed: state.elapsed - from.elapsed,
          resumedCount: state.resumedCount
        }
      }
      yield* run.store.appendTurn(run.runId, ended)
      state.seq += 1
      state.turnFinished = true
      yield* emit(run, { _tag: "TurnFinished", runId: run.runId, turn: state.turn, stopReason, counters: ended.counters })
      const result = resultOf(run.runId, { ...record, counters: ended.counters })
      // The callers waiting for this turn in this process (a retried send of its message, design 0360).
      if (run.inbox !== undefined) yield* Inbox.turnEnded(run.inbox, state.turn, { ...result, turn: state.turn })
      return result
    }
    yield* run.store.finish(run.runId, record)
    state.seq += 1
    yield* emit(run, { _tag: "RunFinished", runId: run.runId, stopReason, counters: record.counters })
    return resultOf(run.runId, record)
  })

/**
 * Judges, then steps or finishes. Called when the previous step has completed (the state is
 * current): from `loop`, and from the continuation of each step — so a step costs no extra
 * suspension.
 */
const next = (run: Run): Effect.Effect<RunResult, Gate.LoopError> => {
  if (run.inbox !== undefined && run.inbox.queue.length > 0) return Effect.flatMap(drain(run), () => next(run))
  const stop = judge(run)
  return stop !== undefined ? finish(run, stop) : Effect.flatMap(runStep(run), () => next(run))
}

/** Steps until the stop judgment says stop, then finishes the run. */
const loop = (run: Run): Effect.Effect<RunResult, Gate.LoopError> => Effect.suspend(() => next(run))

/**
 * The recorded snapshot against the current one (`Snapshot.matches`: equal, or recorded by an
 * earlier version and the same configuration as it reads today).
 */
const checkSnapshot = (
  runId: RunId,
  started: { readonly snapshot: unknown; readonly snapshotHash: string },
  current: Snapshot.Encoded
): Effect.Effect<void, SnapshotMismatch> => {
  if (Snapshot.matches(started.snapshotHash, current)) return Effect.void
  // Differences against the recorded snapshot as it reads today (a run from before design 0150 took one action per step).
  const recorded = Snapshot.upgrade(started.snapshot)
  const differences = Snapshot.diff(recorded, current.value)
  const tools = Snapshot.changedTools(recorded, current.value)
  return Effect.fail(
    new SnapshotMismatch({
      runId,
      differences: differences.length > 0 ? differences : [["snapshotHash", started.snapshotHash, current.hash]],
      ...(tools.length > 0 ? { tools } : {})
    })
  )
}

/** A fresh run: `RunStarted` with the snapshot. */
const start = (run: Run, snapshot: Snapshot.Encoded, message?: SentMessage) =>
  Effect.gen(function*() {
    const startedAt = yield* Clock.currentTimeMillis
    yield* run.store.start({
      _tag: "RunStarted",
      seq: 0,
      runId: run.runId,
      task: run.request.task,
      snapshot: snapshot.value,
      snapshotHash: snapshot.hash,
      startedAt,
      logVersion: RunLog.logVersion,
      ...(message === undefined ? {} : { conversation: { messageId: message.messageId } })
    })
    yield* emit(run, { _tag: "RunStarted", runId: run.runId, task: run.request.task, snapshotHash: snapshot.hash, at: startedAt })
  })


/** The turn a message id names in a conversation's log: 0 for its task, else its `UserMessaged`'s. */
const turnOf = (log: RunLog.RunLog, messageId: string): number | undefined => {
  const started = Option.getOrUndefined(log.started)
  if (started?.conversation?.messageId === messageId) return 0
  return log.userMessages.find((m) => m.messageId === messageId)?.turn
}

const isKnownMessage = (log: RunLog.RunLog, messageId: string): boolean => turnOf(log, messageId) !== undefined

/** `MessageIdReused` when the log holds `message`'s id with another text (design 0360). */
const reusedIn = (runId: RunId, log: RunLog.RunLog, message: SentMessage): Effect.Effect<void, RunError> => {
  const turn = turnOf(log, message.messageId)
  if (turn === undefined) return Effect.void
  const text = turn === 0 ? Option.getOrThrow(log.started).task : log.userMessages.find((m) => m.messageId === message.messageId)!.text
  const reused = Inbox.conflict(runId, message, { text, turn })
  return reused === undefined ? Effect.void : Effect.fail(reused)
}


/** A turn's result, from its `TurnFinished`. */
const turnResultOf = (runId: RunId, ended: RunLog.TurnFinished): RunResult => ({
  runId,
  stopReason: ended.stopReason,
  steps: ended.counters.steps,
  effectiveSteps: ended.counters.effectiveSteps,
  usage: ended.counters.usage,
  resumedCount: ended.counters.resumedCount,
  eventDeliveryFailures: 0,
  turn: ended.turn
})

/** The result of the turn of a message already sent, once the turn has ended (a retried send). */
const answeredTurn = (log: RunLog.RunLog, messageId: string): RunResult | undefined => {
  const turn = turnOf(log, messageId)
  const ended = turn === undefined ? undefined : log.turns.find((t) => t.turn === turn)
  return ended === undefined ? undefined : turnResultOf(Option.getOrThrow(log.started).runId, ended)
}

const notAConversation = (runId: RunId) =>
  Effect.fail(
    new InvalidRunRequest({ runId, issues: "it is a single-task run (started by Agent.run); Agent.send continues conversations, which Agent.send starts" })
  )

/** Has every message of the conversation had its turn? */
const turnFinishedIn = (log: RunLog.RunLog): boolean => log.turns.length === log.userMessages.length + 1

/** Messages whose turn has not started: the turn before them has not finished. */
const heldMessages = (log: RunLog.RunLog): number => Math.max(0, log.userMessages.length - log.turns.length)

/**
 * The configuration the conversation's current turn runs under: the snapshot recorded by the
 * last started turn's message that recorded one (a redeploy between turns), else the run's.
 */
const snapshotInForce = (started: RunLog.RunStarted, log: RunLog.RunLog): { readonly snapshot: unknown; readonly snapshotHash: string } => {
  const current = log.turns.length // the turn in progress, or the next one
  for (let i = log.userMessages.length - 1; i >= 0; i--) {
    const m = log.userMessages[i]!
    if (m.turn <= current && m.snapshot !== undefined && m.snapshotHash !== undefined) return { snapshot: m.snapshot, snapshotHash: m.snapshotHash }
  }
  return { snapshot: started.snapshot, snapshotHash: started.snapshotHash }
}

/**
 * Appends a message (design 0300, decisions 6 and 9): the next turn's number, and the new
 * configuration with what changed when it differs from the one in force.
 */
const appendMessage = (
  run: Run,
  turn: number,
  message: SentMessage,
  inForce: { readonly snapshot: unknown; readonly snapshotHash: string } | undefined,
  snapshot: Snapshot.Encoded | undefined
) =>
  Effect.gen(function*() {
    const at = yield* Clock.currentTimeMillis
    const drift = inForce !== undefined && snapshot !== undefined && !Snapshot.matches(inForce.snapshotHash, snapshot)
    const record: RunLog.UserMessaged = {
      _tag: "UserMessaged",
      seq: run.state.seq,
      turn,
      messageId: message.messageId,
      text: message.text,
      at,
      ...(drift && snapshot !== undefined && inForce !== undefined
        ? {
          snapshot: snapshot.value,
          snapshotHash: snapshot.hash,
          differences: Snapshot.diff(Snapshot.upgrade(inForce.snapshot), snapshot.value).map(Fork.toDifference)
        }
        : {})
    }
    yield* run.store.appendTurn(run.runId, record)
    run.state.seq += 1
    return record
  })

/** A message written while its conversation waits for a decision: held, its turn after the decision (decision 8). */
const hold = (
  run: Run,
  log: RunLog.RunLog,
  message: SentMessage,
  inForce: { readonly snapshot: unknown; readonly snapshotHash: string } | undefined,
  snapshot: Snapshot.Encoded
) => Effect.asVoid(appendMessage(run, log.userMessages.length + 1, message, inForce, snapshot))

/**
 * Queues a message with the conversation running in this process under the same configuration
 * (the snapshot: agent, tools, parser) (decision 8): resolved once its turn ends — a message id
 * the conversation already holds or has queued waits for that turn (design 0360); `undefined`
 * when there is none to queue with.
 */
const queueWith = (
  store: RunLogStore.Service,
  runId: RunId,
  given: RunRequest,
  message: SentMessage,
  log: RunLog.RunLog,
  parserId: string
): Effect.Effect<RunResult, RunError> | undefined => {
  const inbox = Inbox.of(store).get(runId)
  if (inbox === undefined || !inbox.accepting) return undefined
  const started = Option.getOrUndefined(log.started)
  if (started !== undefined && started.conversation === undefined) return undefined
  const parallel = given.agent.parallelToolCalls ?? (started === undefined ? true : Snapshot.parallelToolCallsOf(started.snapshot))
  if (!Snapshot.matches(inbox.snapshotHash, snapshotOf({ ...given, task: started?.task ?? given.task }, parserId, parallel))) return undefined
  return Inbox.enqueue(inbox, message)
}

/** Writes the queued messages (held: their turns start when the current one ends) and acknowledges each. */
const drain = (run: Run): Effect.Effect<void, Gate.LoopError> =>
  run.inbox === undefined ? Effect.void : Inbox.drain(run.inbox, (message, turn) => appendMessage(run, turn, message, undefined, undefined))

const converse = (
  run: Run,
  log: RunLog.RunLog,
  message: SentMessage | undefined,
  inForce: { readonly snapshot: unknown; readonly snapshotHash: string } | undefined,
  snapshot: Snapshot.Encoded,
  finishedNow: RunResult | undefined
): Effect.Effect<RunResult, Gate.LoopError> =>
  Effect.gen(function*() {
    const inbox = run.inbox!
    // The log's held messages (their turns not started), before any queued since this attempt began.
    inbox.held.unshift(...log.userMessages.filter((m) => m.turn > run.state.turn && !inbox.held.some((h) => h.messageId === m.messageId)))
    // The message's turn: the log's, or one this attempt wrote since it read the log.
    let wanted = message === undefined ? undefined : turnOf(log, message.messageId) ?? Inbox.turnOf(inbox, message.messageId)
    if (message !== undefined && wanted === undefined) {
      const record = yield* appendMessage(run, inbox.messages + 1, message, inForce, snapshot)
      inbox.messages += 1
      inbox.held.push(record)
      yield* Inbox.written(inbox, record)
      wanted = record.turn
    }
    const results = new Map<number, RunResult>()
    if (finishedNow !== undefined) results.set(run.state.turn, { ...finishedNow, turn: run.state.turn })
    // Held messages in order — those of the log, this one, and those queued while turns run.
    for (;;) {
      yield* drain(run)
      const next = inbox.held.shift()
      if (next === undefined) break
      State.startTurn(run.state, next)
      yield* emit(run, { _tag: "TurnStarted", runId: run.runId, turn: next.turn, messageId: next.messageId, text: next.text })
      // Whoever else waits for this turn is answered as it ends (`finish`, design 0360).
      results.set(next.turn, { ...(yield* loop(run)), turn: next.turn })
    }
    const turn = wanted ?? run.state.turn
    const found = results.get(turn) ?? results.get(run.state.turn)
    if (found !== undefined) return found
    const ended = log.turns.find((t) => t.turn === turn) ?? log.turns.at(-1)!
    return turnResultOf(run.runId, ended)
  })

/**
 * A resumed run: `RunResumed`, then the interrupted step (if its reply was logged) is finished;
 * `prior` are its results logged before the interruption.
 */
const resume = (
  run: Run,
  interrupted: Option.Option<{ readonly replied: RunLog.ModelReplied; readonly decision: ParsedReply }>,
  prior: ReadonlyArray<RunLog.ActionResulted>
) =>
  Effect.gen(function*() {
    const at = yield* Clock.currentTimeMillis
    const fromStep = run.state.steps
    yield* run.store.appendResume(run.runId, {
      _tag: "RunResumed",
      seq: run.state.seq,
      fromStep: asStep(fromStep),
      at,
      logVersion: RunLog.logVersion
    })
    run.state.seq += 1
    run.state.resumedCount += 1
    yield* emit(run, { _tag: "RunResumed", runId: run.runId, fromStep, at })
    if (Option.isSome(interrupted)) {
      const reply = interrupted.value.replied.reply
      // The model call's elapsed as recorded with its reply: the step records it as an uninterrupted one does.
      run.state.modelElapsed = interrupted.value.replied.modelElapsed
      yield* Step.settle(run, fromStep, reply, interrupted.value.decision, at, true, prior).pipe(
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
export const run = (request: RunRequest): Effect.Effect<RunResult, RunError, Requirements> => execute(request, undefined)

/**
 * A message to a conversation (design 0300, decisions 6–9): the run id, the caller's id of the
 * message (a retried send appends nothing and returns the same turn's result), its text, and the
 * agent and tools to answer it with. The first message starts the conversation (it is its task).
 */
export interface SendRequest {
  readonly runId: RunId
  readonly messageId: string
  readonly text: string
  readonly agent: AgentDefinition.AgentDefinition
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
export const send = (request: SendRequest): Effect.Effect<RunResult, RunError, Requirements> => {
  const issues = messageIssues(request)
  if (issues !== undefined) return Effect.fail(new InvalidRunRequest({ runId: request.runId, issues }))
  const attempt = execute(
    { runId: request.runId, agent: request.agent, task: request.text, tools: request.tools, ...(request.streaming === undefined ? {} : { streaming: request.streaming }) },
    { messageId: request.messageId, text: request.text }
  )
  const whileBusy = request.whileBusy
  return whileBusy === undefined ? attempt : Effect.retry(attempt, { schedule: whileBusy, while: (error) => error._tag === "RunBusy" })
}

/** A result known without running the loop, as the effect `execute`'s generators return. */
const done = (result: RunResult): Effect.Effect<RunResult> => Effect.succeed(result)

/** A conversation's message: the caller's id for it (a retried send appends nothing) and its text. */
type SentMessage = Inbox.SentMessage

/**
 * One attempt of a run. Flattened for the runs in flight (design 0350, "Flattening execute"):
 * the checks and the claim run in generators that return, as a value, the effect that carries the
 * run on (its loop), so no generator waits on the loop; the claim's scope is the attempt's own
 * (`Effect.scopedWith`, closed when the attempt ends, interruption included) and is given to the
 * claim alone, not provided to the whole attempt. A parked run's fiber then holds the scope's
 * `onExit` and the step's frames, not a generator, a context provide and a scope's per frame.
 */
const execute = (given: RunRequest, message: SentMessage | undefined): Effect.Effect<RunResult, RunError, Requirements> =>
  Effect.flatten(Effect.gen(function*() {
    const request = given
    const runId = request.runId
    const executor = yield* ActionExecutor
    const derived = isDerivedExecutor(executor) ? executor : undefined
    if (derived !== undefined && !isDerivedFrom(derived, request.tools)) {
      return yield* new ExecutorRegistryMismatch({ requestTools: request.tools.names, executorTools: derived.registry.names })
    }
    if (!validated.has(request.agent)) {
      const valid = validateAgent(request.agent)
      if (valid._tag === "Left") {
        return yield* new InvalidRunRequest({ runId, issues: ParseResult.TreeFormatter.formatErrorSync(valid.left) })
      }
      validated.add(request.agent)
    }
    const store = yield* RunLogStore
    const parser = yield* DecisionParser
    const model = yield* ModelClient
    const sink = yield* EventSink.EventSink
    const tracer = yield* Effect.tracer
    const clock = yield* Effect.clock
    const counters = Option.getOrElse(yield* Effect.serviceOption(TokenCounter.TokenCounter), () => TokenCounter.approximateOnly)
    const summariser = yield* Effect.serviceOption(HistoryPolicy.Summariser)
    return Effect.scopedWith((scope) =>
      Effect.flatten(Effect.gen(function*() {
        // Claim first, then read the log once: under the claim nobody else writes, so what is
        // read decides. A busy run that turns out to be finished still returns its result.
        const claimed = yield* Effect.either(Scope.extend(store.claim(runId), scope))
        if (Either.isLeft(claimed)) {
          const error = claimed.left
          if (error._tag !== "RunBusy") return yield* error
          const log = yield* store.readLog(runId)
          if (Option.isSome(log.finished)) return done(resultOf(runId, log.finished.value))
          if (message !== undefined) yield* reusedIn(runId, log, message)
          const answered = message === undefined ? undefined : answeredTurn(log, message.messageId)
          if (answered !== undefined) return done(answered)
          // A turn of this conversation runs in this process: the message waits for it (decision 8).
          const queued = message === undefined ? undefined : queueWith(store, runId, given, message, log, parser.id)
          if (queued !== undefined) return queued
          return yield* error
        }
        const log = yield* store.readLog(runId)
        if (Option.isSome(log.finished)) {
          if (message !== undefined) return yield* notAConversation(runId)
          return done(resultOf(runId, log.finished.value))
        }
        const started = Option.getOrUndefined(log.started)
        const conversation = started !== undefined ? started.conversation !== undefined : message !== undefined
        if (message !== undefined && !conversation) return yield* notAConversation(runId)
        // A message id names one message: sent again with another text, refused (design 0360).
        if (message !== undefined) yield* reusedIn(runId, log, message)
        // A message already sent (a retried send): its turn's result, once it has one.
        const answered = message === undefined ? undefined : answeredTurn(log, message.messageId)
        if (answered !== undefined) return done(answered)
        // A conversation's task is its first message: its snapshot is of that task, whatever is sent later.
        const request: RunRequest = started !== undefined && conversation ? { ...given, task: started.task } : given
        const agent = request.agent
        // Unset, `parallelToolCalls` is what the recorded run ran with (design 0150, decision 5).
        const parallel = agent.parallelToolCalls ??
          Option.match(log.started, { onNone: () => true, onSome: (started) => Snapshot.parallelToolCallsOf(started.snapshot) })
        const snapshot = snapshotOf(request, parser.id, parallel)
        // Within a turn the configuration must be the one it ran with; between two turns of a
        // conversation it may change (a redeploy), and the next message records how (decision 9).
        const inForce = started === undefined ? undefined : snapshotInForce(started, log)
        const pendingTurn = started !== undefined && conversation && !turnFinishedIn(log)
        const drift = inForce !== undefined && !Snapshot.matches(inForce.snapshotHash, snapshot)
        if (inForce !== undefined && drift && (message === undefined || pendingTurn || isKnownMessage(log, message.messageId) || heldMessages(log) > 0)) {
          yield* checkSnapshot(runId, { snapshot: inForce.snapshot, snapshotHash: inForce.snapshotHash }, snapshot)
        }
        const texts = History.makeTexts({
          synthetic: agent.syntheticObservations,
          tools: request.tools,
          observationTemplate: (agent.historyRendering ?? AgentDefinition.defaultHistoryRendering).observationTemplate,
          observationLimit: agent.observationLimit
        })
        const messages = History.initial(agent.systemPrompt, request.task)
        const modelTools = request.tools.modelView()
        const parts = HistoryPolicy.partsOf(agent.history)
        const encoding = parts?.fit?.tokenizer ?? parts?.summary?.tokenizer
        const count = encoding === undefined ? TokenCounter.approximateCount : counters.encoding(encoding)
        if (count === undefined) {
          return yield* new InvalidRunRequest({
            runId,
            issues: `the history policy counts with the encoding "${encoding}", which the TokenCounter in context does not have (it has: ${counters.names.join(", ")}); provide @polyloop/ai's Tokenizers.layer for OpenAI encodings`
          })
        }
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
          schedule: scheduleOf(agent.modelRetry),
          modelTools,
          fingerprint: Fingerprint.make(modelTools, agent.modelSettings),
          renderer: parts === undefined ? undefined : Rendering.make(parts, modelTools, agent.modelSettings, count!),
          summariser: Option.getOrElse(summariser, () => model),
          maxDurationMillis: agent.budget.maxDuration === undefined ? undefined : Duration.toMillis(agent.budget.maxDuration),
          parallel,
          concurrency: agent.actionConcurrency ?? 1,
          traced: Tracing.isTraced(tracer),
          silent: EventSink.isNoop(sink),
          streaming: request.streaming ?? false,
          clock,
          state: State.fresh(messages),
          gate: undefined,
          conversation,
          inbox: undefined
        }
        // What a token budget can never drop — the tools, the system prompt, the task — must fit
        // in it, or the policy cannot keep its promise: refused before anything is written (design 0361).
        const floor = current.renderer?.budget === undefined ? undefined : current.renderer.leastTokens(current.state)
        if (floor !== undefined && parts?.fit !== undefined && floor > current.renderer!.budget!) {
          return yield* new InvalidRunRequest({
            runId,
            issues: `the history policy fitTokens(window ${parts.fit.window}, headroom ${parts.fit.headroom}) leaves ${
              current.renderer!.budget
            } tokens per request, but what it never drops (the tools, the system prompt and the task) counts ${floor} tokens by "${parts.fit.tokenizer}"; give it a larger window or a shorter prompt`
          })
        }
        if (conversation) {
          // Messages sent to this conversation from this process while it runs are queued here.
          const inbox = Inbox.make(runId, snapshot.hash, log, message)
          Inbox.of(store).set(runId, inbox)
          current.inbox = inbox
          yield* Scope.addFinalizer(
            scope,
            Effect.suspend(() => {
              if (Inbox.of(store).get(runId) === inbox) Inbox.of(store).delete(runId)
              // Whoever still waits retries (their message, if written, is held in the log).
              return Inbox.close(inbox)
            })
          )
        }
        if (started === undefined) {
          yield* start(current, snapshot, message)
          return conversation ? Effect.map(loop(current), (result) => ({ ...result, turn: 0 })) : loop(current)
        }
        const rebuilt = yield* State.rebuild(runId, log, messages, texts)
        current.state = rebuilt.state
        if (!current.state.turnFinished || !conversation) {
          // The interrupted step's reply is parsed once, before anything is written: a step
          // whose calls still wait for a decision stops here with `Suspended` (design 0160) — a
          // new message to a conversation waiting so is held: written, answered after the decision.
          const interrupted = yield* Effect.transposeMapOption(rebuilt.interrupted, (replied) =>
            Effect.map(decideReply(current, replied.reply), (decision) => ({ replied, decision })))
          if (Option.isSome(interrupted)) {
            const { decision, replied } = interrupted.value
            current.gate = yield* Gate.inspect(current, log, replied.step, Step.decisionOf(current, decision, replied.step)).pipe(
              Effect.tapErrorTag("Suspended", () =>
                message === undefined || isKnownMessage(log, message.messageId) ? Effect.void : hold(current, log, message, inForce, snapshot))
            )
          }
          // A fork nothing has run on yet continues without a RunResumed: it was not interrupted.
          if (!Fork.isUntouched(log)) yield* resume(current, interrupted, rebuilt.interruptedResults)
          if (!conversation) return loop(current)
          // A conversation: the turns of held messages, in order, then the new message's turn.
          return Effect.flatMap(loop(current), (result) => converse(current, log, message, inForce, snapshot, result))
        }
        return converse(current, log, message, inForce, snapshot, undefined)
      }))
    )
  })).pipe((body) =>
    // The run's span only when a tracer listens (design 0350): the built-in tracer's span is seen
    // by nobody, and making it costs every run a span object and the frames that provide it.
    Effect.tracerWith((tracer) =>
      Tracing.isTraced(tracer)
        ? Effect.withSpan(body, message === undefined ? "Agent.run" : "Agent.send", {
          attributes: Tracing.runAttributes(given.runId, given.agent.name),
          captureStackTrace: false
        })
        : body
    ))

/** The last item of `stream`: the run's result. */
export interface RunCompleted {
  readonly _tag: "RunCompleted"
  readonly result: RunResult
}

/** What `stream` yields: the run's events as they happen, then its result. */
export type StreamItem = LoopEvent | RunCompleted

/**
 * Runs a request as `run` does, streaming (design 0180), and yields every event of the run as
 * it happens — `ModelDelta`s included — then `RunCompleted` with the result; the stream fails
 * with the run's error. The events also reach the `EventSink` in context. Interrupting the
 * stream's consumer interrupts the run (which stays resumable). Events wait for the consumer in
 * an unbounded queue: the run never waits for a slow reader.
 */
export const stream = (request: RunRequest): Stream.Stream<StreamItem, RunError, Requirements> =>
  Stream.unwrapScoped(
    Effect.gen(function*() {
      const mailbox = yield* Mailbox.make<StreamItem, RunError>()
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
