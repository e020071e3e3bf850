/**
 * One attempt of a run or a send (design 0350, "Flattening execute"): checks of the request,
 * the claim, one read of the log, and the decision it makes — a recorded result, a start, a
 * resume (the interrupted step's approvals inspected first), or a conversation's turns.
 *
 * Why over ~200 lines: the decision is one ordered reading of the log under the claim (finished,
 * busy, reused message id, drift, policy floor, gate), and splitting it would scatter the order
 * that makes it correct.
 *
 * @internal
 */
import * as Context from "effect/Context"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Option from "effect/Option"
import * as ParseResult from "effect/ParseResult"
import * as Schema from "effect/Schema"
import * as Scope from "effect/Scope"
import { ActionExecutor } from "../ActionExecutor.js"
import * as AgentDefinition from "../AgentDefinition.js"
import { DecisionParser } from "../DecisionParser.js"
import * as Ids from "../Ids.js"
import { ExecutorRegistryMismatch, InvalidRunRequest, type RunError } from "../Errors.js"
import * as EventSink from "../EventSink.js"
import * as Fork from "../Fork.js"
import * as Fingerprint from "./fingerprint.js"
import * as Gate from "./gate.js"
import * as Inbox from "./inbox.js"
import * as HistoryPolicy from "../HistoryPolicy.js"
import * as History from "./history.js"
import * as Rendering from "./rendering.js"
import { type Run } from "./run.js"
import * as State from "./state.js"
import * as Step from "./step.js"
import * as Tracing from "./tracing.js"
import { ModelClient } from "../ModelClient.js"
import { RunLogStore } from "../RunLogStore.js"
import * as Snapshot from "../Snapshot.js"
import * as TokenCounter from "../TokenCounter.js"
import { isDerivedExecutor, isDerivedFrom } from "../ToolRegistry.js"
import { decideReply } from "./modelCall.js"
import { loop } from "./loop.js"
import { checkSnapshot, resume, start } from "./start.js"
import { answeredTurn, heldMessages, hold, isKnownMessage, notAConversation, queueWith, reusedIn, snapshotInForce, turnFinishedIn } from "./messages.js"
import type { SentMessage } from "./inbox.js"
import { converse } from "./turns.js"
import { type RunRequest, type RunResult, type Requirements, resultOf, snapshotOf } from "./request.js"

export const validateAgent = Schema.validateEither(AgentDefinition.AgentDefinition)

/**
 * Definitions already validated, and the retry schedule of each `modelRetry`: an
 * `AgentDefinition` is an immutable value (the snapshot's encoding is cached on it too), so an
 * application that defines its agent once pays for the schema check and the schedule once.
 */
export const validated = new WeakSet<AgentDefinition.AgentDefinition>()

export const schedules = new WeakMap<AgentDefinition.ModelRetry, ReturnType<typeof AgentDefinition.retrySchedule>>()

export const scheduleOf = (retry: AgentDefinition.ModelRetry) => {
  let schedule = schedules.get(retry)
  if (schedule === undefined) schedules.set(retry, schedule = AgentDefinition.retrySchedule(retry))
  return schedule
}

/** A result known without running the loop, as the effect `execute`'s generators return. */
export const done = (result: RunResult): Effect.Effect<RunResult> => Effect.succeed(result)

/**
 * One attempt of a run. Flattened for the runs in flight (design 0350, "Flattening execute"):
 * the checks and the claim run in generators that return, as a value, the effect that carries the
 * run on (its loop), so no generator waits on the loop; the claim's scope is the attempt's own
 * (`Effect.scopedWith`, closed when the attempt ends, interruption included) and is given to the
 * claim alone, not provided to the whole attempt. A parked run's fiber then holds the scope's
 * `onExit` and the step's frames, not a generator, a context provide and a scope's per frame.
 */
export const execute = (given: RunRequest, message: SentMessage | undefined): Effect.Effect<RunResult, RunError, Requirements> =>
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
    // An id no store can keep as it is: refused for a new run, typed, before anything is
    // claimed or written. A log a store holds under it already (SQLite can) runs on.
    const unportable = Ids.unportableRunId(runId)
    if (unportable !== undefined) {
      const existing = yield* Effect.either(store.readLog(runId))
      if (Either.isLeft(existing) || Option.isNone(existing.right.started)) return yield* new InvalidRunRequest({ runId, issues: unportable })
    }
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
          inbox: undefined,
          runChild: (child, services) =>
            Effect.provide(
              execute(child, undefined),
              Context.make(RunLogStore, store).pipe(
                Context.add(EventSink.EventSink, sink),
                Context.add(ModelClient, services.model),
                Context.add(DecisionParser, services.parser),
                Context.add(ActionExecutor, services.executor)
              )
            )
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
