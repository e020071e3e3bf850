/**
 * An adapter from `@effect/ai`'s `LanguageModel` to polyloop's `ModelClient`, so every
 * `@effect/ai` provider (OpenAI, Anthropic, Google, Amazon Bedrock, OpenRouter, …) can drive a
 * polyloop agent: polyloop messages become a `Prompt`, tool definitions become `@effect/ai`
 * tools whose parameter schema is the definition's JSON Schema verbatim, and the response
 * becomes a `ModelReply` (text, tool calls with their raw arguments, usage, finish reason).
 *
 * `@effect/ai`'s own tool-call resolution is disabled (`disableToolCallResolution: true`, and the
 * toolkit's handler is never called): polyloop executes tools itself, through its executor and
 * run log. Errors (`AiError`) become `ModelError`: transport failures, the timeout, 429 and 5xx
 * are `retryable`; other statuses, malformed output and malformed input are not. Messages carry
 * the status and a short reason, never a header, the API key or any body content.
 *
 * `@effect/ai` decodes a response's tool calls against the declared tools and refuses the whole
 * response when the model calls a tool that was not declared, or gives arguments that are JSON
 * but not an object. Such a call is the model's mistake, which polyloop records and feeds back
 * (SPEC §13: the step is `NotExecuted`, the run goes on), so the adapter takes the reply from the
 * refused response's raw parts instead (`replyFromRefusedOutput`).
 *
 * Limits of `@effect/ai` 0.37 (where `OpenAiCompatible` does better): it has no
 * provider-neutral sampling settings, so a request's `ModelSettings` reach the provider only
 * through `Options.applySettings`; and a provider may refuse arguments that are not JSON at all
 * before any decoding (`@effect/ai-openai` does), which stays a non-retryable `ModelError`.
 *
 * Streaming (design 0180): `stream` goes through `LanguageModel.streamText` and gives
 * `ModelDelta`s that fold into what `generate` returns (`internal/partDeltas.ts`). Its limits:
 * tool-call arguments arrive in one piece per call, once decoded; a stream in which `@effect/ai`
 * refuses a call to an undeclared tool fails (non-retryably) where `generate` recovers the reply
 * from the refused output.
 *
 * The mappings between polyloop's values and `@effect/ai`'s (requests, responses, errors) are in
 * `internal/aiMappings.ts`, re-exported here; the stream's part reading is in
 * `internal/partDeltas.ts`; this module is the client (design 0390).
 *
 * @since 0.1.0
 */
import type * as AiError from "@effect/ai/AiError"
import * as LanguageModel from "@effect/ai/LanguageModel"
import * as Clock from "effect/Clock"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Mailbox from "effect/Mailbox"
import * as Option from "effect/Option"
import * as Stream from "effect/Stream"
import { ModelError } from "@polyloop/core/Errors"
import { ModelClient, type ModelRequest } from "@polyloop/core/ModelClient"
import type * as ModelDelta from "@polyloop/core/ModelDelta"
import type * as ModelReply from "@polyloop/core/ModelReply"
import type { ModelSettings } from "@polyloop/core/ModelSettings"
import {
  invalidTools,
  replyFromRefusedOutput,
  setSettings,
  source,
  toModelError,
  toModelReply,
  toPrompt,
  toToolkit
} from "./internal/aiMappings.js"
import * as Errors from "./internal/errors.js"
import { PartReader } from "./internal/partDeltas.js"

export {
  invalidTools,
  replyFromRefusedOutput,
  toAiTool,
  toModelError,
  toModelReply,
  toolNamePattern,
  toPrompt,
  toPromptMessage,
  toToolkit
} from "./internal/aiMappings.js"

/**
 * Applies a request's `ModelSettings` to the provider for one call, e.g.
 * `(effect, settings) => OpenAiLanguageModel.withConfigOverride(effect, { temperature: settings.temperature })`;
 * fails with a (non-retryable) `ModelError` for a setting the provider cannot honour.
 */
export type ApplySettings = <A, E, R>(
  effect: Effect.Effect<A, E, R>,
  settings: ModelSettings,
  /** The whole request, for settings outside `ModelSettings` (`parallelToolCalls`, design 0150). */
  request?: ModelRequest
) => Effect.Effect<A, E | ModelError, R>

/** Adapter options. */
export interface Options {
  /**
   * Applies the request's settings to the provider. Without it, a request that sets any
   * setting fails with a non-retryable `ModelError` (a setting silently ignored would make a
   * run differ from what its snapshot says).
   */
  readonly applySettings?: ApplySettings | undefined
  /** Cut of one call (none by default); a cut is a retryable `ModelError`. */
  readonly timeout?: Duration.DurationInput | undefined
}

// -----------------------------------------------------------------------------
// Service
// -----------------------------------------------------------------------------

/** Makes the client on the `LanguageModel` in context. */
export const make = (options: Options = {}): Effect.Effect<ModelClient.Service, never, LanguageModel.LanguageModel> =>
  Effect.gen(function*() {
    const model = yield* LanguageModel.LanguageModel
    const timeout = options.timeout === undefined ? undefined : Duration.decode(options.timeout)
    const applySettings = options.applySettings

    /** Why a request cannot be sent to the provider at all, if it cannot. */
    const refusal = (request: ModelRequest): ModelError | undefined => {
      const badTools = invalidTools(request.tools)
      if (badTools.length > 0) {
        return new ModelError({
          retryable: false,
          message: `${source}: tool definitions the provider cannot take: ${badTools.join("; ")}`
        })
      }
      const unsupported = applySettings === undefined ? setSettings(request.settings) : []
      return unsupported.length > 0
        ? new ModelError({
          retryable: false,
          message: `${source}: the request sets ${unsupported.join(", ")} but no applySettings was given to pass them to the provider`
        })
        : undefined
    }

    /** The effect with the request's settings applied for the provider. */
    const configure = <A>(effect: Effect.Effect<A, ModelError>, request: ModelRequest): Effect.Effect<A, ModelError> =>
      applySettings === undefined ? effect : applySettings(effect, request.settings, request)

    const failure = (error: AiError.AiError) => Effect.flatMap(Clock.currentTimeMillis, (now) => Effect.fail(toModelError(error, now)))

    const generate = (request: ModelRequest): Effect.Effect<ModelReply.ModelReply, ModelError> => {
      const refused = refusal(request)
      if (refused !== undefined) return Effect.fail(refused)
      const call = model.generateText({
        prompt: toPrompt(request.messages),
        toolkit: toToolkit(request.tools),
        disableToolCallResolution: true
      }).pipe(
        Effect.map(toModelReply),
        Effect.catchAll((error) =>
          Option.match(replyFromRefusedOutput(error), {
            onNone: () => failure(error),
            onSome: Effect.succeed
          })
        )
      )
      const configured = configure(call, request)
      return (timeout === undefined
        ? configured
        : Effect.timeoutFail(configured, {
          duration: timeout,
          onTimeout: () => Errors.timeoutError(source, "the provider", timeout)
        })).pipe(
          Effect.withSpan("AiModelClient.generate", {
            attributes: { messages: request.messages.length, tools: request.tools.length }
          })
        )
    }

    /**
     * The reply through `streamText` (design 0180). The provider's stream runs in a fiber of its
     * own under the request's settings (`applySettings` configures an effect, and the settings
     * must hold while the stream runs); its deltas reach the consumer through a mailbox, and the
     * consumer's end interrupts that fiber, which aborts the request. A stream with no finish
     * part, or cut while its body was read, is a retryable `ModelError`; the timeout is the
     * longest wait for the next piece.
     */
    const stream = (request: ModelRequest): Stream.Stream<ModelDelta.ModelDelta, ModelError> => {
      const refused = refusal(request)
      if (refused !== undefined) return Stream.fail(refused)
      const produced = Stream.unwrapScoped(Effect.gen(function*() {
        const mailbox = yield* Mailbox.make<ModelDelta.ModelDelta, ModelError>()
        const reader = new PartReader()
        const parts = model.streamText({
          prompt: toPrompt(request.messages),
          toolkit: toToolkit(request.tools),
          disableToolCallResolution: true
        })
        const pump = Stream.runForEach(parts, (part) => {
          const deltas = reader.read(part)
          if (reader.error !== undefined) {
            return Effect.fail(new ModelError({ retryable: true, message: `${source}: the provider reported an error in the middle of its stream` }))
          }
          return deltas.length === 0 ? Effect.void : mailbox.offerAll(deltas)
        }).pipe(
          Effect.catchAll((error) => (error instanceof ModelError ? Effect.fail(error) : streamFailure(error))),
          Effect.flatMap(() =>
            reader.finished
              ? mailbox.end
              : Effect.fail(Errors.brokenBodyError(source, "the provider", 200, undefined))
          )
        )
        yield* configure(pump, request).pipe(
          // Tapped, not caught: the producer ends with its own cause; the consumer gets it.
          Effect.tapErrorCause((cause) => mailbox.failCause(cause)),
          Effect.forkScoped
        )
        return Mailbox.toStream(mailbox)
      }))
      return (timeout === undefined
        ? produced
        : Stream.timeoutFail(produced, () => Errors.timeoutError(source, "the provider", timeout), timeout)).pipe(
          Stream.withSpan("AiModelClient.stream", { attributes: { messages: request.messages.length, tools: request.tools.length } })
        )
    }

    /** A stream's `AiError`: a body cut while it was read is retryable (the call may be made again). */
    const streamFailure = (error: AiError.AiError) =>
      error._tag === "HttpResponseError" && error.reason === "Decode"
        ? Effect.fail(Errors.brokenBodyError(source, `${error.module}.${error.method}`, error.response.status, error.cause))
        : failure(error)

    return ModelClient.of({ generate, stream })
  })

/** The `ModelClient` layer over the `LanguageModel` in context. */
export const layer = (options: Options = {}): Layer.Layer<ModelClient, never, LanguageModel.LanguageModel> =>
  Layer.effect(ModelClient, make(options))
