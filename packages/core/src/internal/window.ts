/**
 * The context window (design 0300, 0361): the compaction a token budget asks for before a
 * request, the summary a threshold asks for, the emergency step when a provider refuses a
 * request as too long, and `ContextWindowExceeded` when nothing can make it fit. Every
 * compaction is a `HistoryCompacted` record, so a resume renders the same requests.
 *
 * @internal
 */
import * as Effect from "effect/Effect"
import * as AgentDefinition from "../AgentDefinition.js"
import { ContextWindowExceeded, type ModelError } from "../Errors.js"
import * as Fingerprint from "./fingerprint.js"
import * as Rendering from "./rendering.js"
import { asStep, type LoopError, type Run } from "./run.js"
import { currentCall } from "../ModelClient.js"
import { type ModelReply } from "../ModelReply.js"
import * as RunLog from "../RunLog.js"
import * as TokenCounter from "../TokenCounter.js"
import { generate, isContextExceeded, modelCall, retryAfter } from "./modelCall.js"

/** Appends a `HistoryCompacted` record (design 0300) before the request that uses it. */
export const compact = (run: Run, step: number, reason: RunLog.HistoryCompacted["reason"], planned: Rendering.Planned) => {
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
export const keepAllTokens = (run: Run): number => {
  let n = TokenCounter.approximateCount(JSON.stringify(run.modelTools))
  for (const message of run.state.messages) n += Rendering.messageTokens(TokenCounter.approximateCount, message)
  return n
}

/** The window a `ContextWindowExceeded` names (design 0361): the policy's, else the model's when its refusal stated it. */
export const exceeded = (run: Run, step: number, cause: ModelError | undefined, requestTokens?: number) => {
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
export const overBudget = (run: Run, renderer: Rendering.Renderer): number | undefined => {
  if (renderer.budget === undefined) return undefined
  const least = renderer.leastTokens(run.state)
  return least > renderer.budget ? least : undefined
}

/**
 * The step's request under the history policy: the compaction its token budget asks for first
 * (recorded), then the rendering. Undefined for keep-everything (today's prefix view).
 */
export const prepare = (run: Run, step: number): Effect.Effect<Rendering.Sent | undefined, LoopError> => {
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
export const summarise = (run: Run, step: number, renderer: Rendering.Renderer, planned: Rendering.Planned) =>
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
export const generateThen = (
  run: Run,
  step: number,
  sent: Rendering.Sent | undefined,
  then: (reply: ModelReply, sent: Rendering.Sent | undefined) => Effect.Effect<void, LoopError>
): Effect.Effect<void, LoopError> => {
  const renderer = run.renderer
  const attempt = (current: Rendering.Sent | undefined, onFailure: (error: ModelError) => Effect.Effect<void, LoopError>) => {
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
