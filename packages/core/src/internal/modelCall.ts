/**
 * A step's model call: the request (the whole history as a prefix view, or the history
 * policy's rendering), streamed or not, retried per `modelRetry` on a retryable `ModelError`
 * (design 0140), in its span when traced; and the decision of its reply.
 *
 * @internal
 */
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import { identity } from "effect/Function"
import * as AgentDefinition from "../AgentDefinition.js"
import { type ModelError } from "../Errors.js"
import * as Rendering from "./rendering.js"
import * as PrefixView from "./prefixView.js"
import { type Run, span } from "./run.js"
import * as Streaming from "./streaming.js"
import * as Tracing from "./tracing.js"
import * as Truncation from "./truncation.js"
import { type ModelRequest } from "../ModelClient.js"
import { type ModelReply } from "../ModelReply.js"
import type { ParsedReply } from "../ParsedReply.js"

export const logModelFailure = (step: number, error: ModelError) =>
  Effect.logDebug(`polyloop: model call of step ${step} failed (retryable: ${error.retryable}): ${error.message}`)

/** One attempt of a step's model call (streamed or not), on the request `sent` or the whole history. */
export const modelCall = (run: Run, step: number, sent: Rendering.Sent | undefined): Effect.Effect<ModelReply, ModelError> => {
  // A value (design 0211): a read-only view of the history's first n messages, made in O(1);
  // under a masking policy, the masker's view (design 0300), made in O(1) too.
  const messages = sent !== undefined ? sent.messages : PrefixView.prefix(run.state.messages)
  const output = run.request.agent.output
  const request: ModelRequest = run.parallel
    ? { messages, tools: run.modelTools, settings: run.request.agent.modelSettings }
    : { messages, tools: run.modelTools, settings: run.request.agent.modelSettings, parallelToolCalls: false }
  // The provider is asked to constrain its text to the answer's schema (design 0400).
  if (output !== undefined && output.constrain) return call(run, step, { ...request, output: { name: output.name, schema: output.jsonSchema, strict: output.strict } })
  return call(run, step, request)
}

const call = (run: Run, step: number, request: ModelRequest): Effect.Effect<ModelReply, ModelError> => {
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
export const retryAfter = (run: Run, step: number, call: Effect.Effect<ModelReply, ModelError>, first: ModelError): Effect.Effect<ModelReply, ModelError> => {
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
export const generate = (run: Run, step: number, sent: Rendering.Sent | undefined) => {
  const call = modelCall(run, step, sent)
  return Effect.catchAll(call, (first) => retryAfter(run, step, call, first)).pipe(
    // The GenAI attributes (design 0212): the request's before the call, the reply's after it.
    run.traced ? Effect.tap(Tracing.annotateReply) : identity,
    span(run, "Agent.model", () => Tracing.modelAttributes(run.runId, step, run.request.agent.modelSettings), "client")
  )
}

/**
 * The decision of a reply: the parser's, or `InvalidDecision` for a reply cut off at the output
 * limit (design 0140); under an output schema (design 0400), a `Finish` whose answer does not
 * decode is `InvalidDecision` with the parse error (`invalidOutput`) — a pure function of the
 * reply and the snapshot, so a resumed step and a replay decide the same.
 */
export const decideReply = (run: Run, reply: ModelReply): Effect.Effect<ParsedReply> => {
  const decided = Truncation.decide(run.parser, reply, run.texts.synthetic, run.texts.tools)
  const output = run.request.agent.output
  return output === undefined ? decided : Effect.map(decided, (decision) => checkAnswer(output, decision))
}

/** A `Finish` whose answer does not decode against the output schema, as an `InvalidDecision` naming the parse error (design 0400). */
export const checkAnswer = (output: AgentDefinition.Output<unknown>, decision: ParsedReply): ParsedReply => {
  if (decision._tag !== "Finish") return decision
  const decoded = output.decodeAnswer(decision.answer)
  if (Either.isRight(decoded)) return decision
  return { _tag: "InvalidDecision", explanation: AgentDefinition.invalidOutputText(output, decoded.left), invalidOutput: decoded.left }
}

/** Did the provider refuse the request as longer than its context window? */
export const isContextExceeded = (error: ModelError): boolean => error.code === "context_length_exceeded"
