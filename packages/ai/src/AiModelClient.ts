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
 * Why over ~400 lines: the request, response, error and stream mappings are one adapter; the
 * stream's part reading is already in `internal/partDeltas.ts`.
 *
 * @since 0.1.0
 */
import * as AiError from "@effect/ai/AiError"
import * as LanguageModel from "@effect/ai/LanguageModel"
import * as Prompt from "@effect/ai/Prompt"
import * as AiTool from "@effect/ai/Tool"
import type * as Toolkit from "@effect/ai/Toolkit"
import * as Clock from "effect/Clock"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Mailbox from "effect/Mailbox"
import * as Option from "effect/Option"
import * as ParseResult from "effect/ParseResult"
import * as Predicate from "effect/Predicate"
import * as Schema from "effect/Schema"
import * as Stream from "effect/Stream"
import { ModelError } from "@polyloop/core/Errors"
import type * as Message from "@polyloop/core/Message"
import { ModelClient, type ModelRequest, type ToolDefinition } from "@polyloop/core/ModelClient"
import type * as ModelDelta from "@polyloop/core/ModelDelta"
import * as ModelReply from "@polyloop/core/ModelReply"
import type { ModelSettings } from "@polyloop/core/ModelSettings"
import * as Errors from "./internal/errors.js"
import { PartReader } from "./internal/partDeltas.js"
import { billedUsage, metadataOf, textsOf } from "./internal/replyParts.js"

const source = "AiModelClient"

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
// Requests
// -----------------------------------------------------------------------------

const decodeJson = Schema.decodeUnknownOption(Schema.parseJson())

/** A model's arguments text as tool-call params: the JSON value, or the text itself if it is not JSON. */
const paramsOf = (argumentsText: string): unknown => Option.getOrElse(decodeJson(argumentsText), () => argumentsText)

/** A polyloop message as an `@effect/ai` prompt message; a `Tool` message answers its call by id. */
export const toPromptMessage = (message: Message.Message): Prompt.Message => {
  switch (message._tag) {
    case "System":
      return Prompt.systemMessage({ content: message.text })
    case "User":
      return Prompt.userMessage({ content: [Prompt.textPart({ text: message.text })] })
    case "Assistant":
      return Prompt.assistantMessage({
        content: [
          ...(message.text === "" ? [] : [Prompt.textPart({ text: message.text })]),
          ...message.toolCalls.map((call) =>
            Prompt.toolCallPart({ id: call.id, name: call.name, params: paramsOf(call.argumentsText), providerExecuted: false })
          )
        ]
      })
    case "Tool":
      return Prompt.toolMessage({
        content: [
          Prompt.toolResultPart({
            id: message.callId,
            name: message.name,
            result: message.text,
            isFailure: false,
            providerExecuted: false
          })
        ]
      })
  }
}

/** The history as an `@effect/ai` `Prompt`. */
export const toPrompt = (messages: ReadonlyArray<Message.Message>): Prompt.Prompt =>
  Prompt.fromMessages(messages.map(toPromptMessage))

/**
 * The parameters schema of a tool whose JSON Schema is given: the provider is sent the JSON
 * Schema verbatim (a `jsonSchema` annotation with a `type` overrides the derived one), and any
 * JSON object the model returns decodes unchanged (the arguments are checked later, by the
 * tool registry).
 */
const parametersFromJsonSchema = (jsonSchema: unknown) =>
  Schema.Struct({}, Schema.Record({ key: Schema.String, value: Schema.Unknown })).annotations({
    jsonSchema: Predicate.isObject(jsonSchema) && !Array.isArray(jsonSchema) ? jsonSchema : { type: "object" }
  })

/** A tool definition as an `@effect/ai` tool with no handler. */
export const toAiTool = (tool: ToolDefinition): AiTool.Any =>
  AiTool.make(tool.name, { description: tool.description }).setParameters(parametersFromJsonSchema(tool.parameters))

/** Tool names every major provider accepts (OpenAI, Anthropic): 1–64 of `[a-zA-Z0-9_-]`. */
export const toolNamePattern = /^[a-zA-Z0-9_-]{1,64}$/

/**
 * What is wrong with tool definitions a provider cannot take: a name outside
 * `toolNamePattern`, a name given twice, parameters that are not a JSON Schema object.
 * Empty when all are fine. Such a request is refused before any call, as a non-retryable
 * `ModelError`, instead of failing inside the provider with a less precise message.
 */
export const invalidTools = (tools: ReadonlyArray<ToolDefinition>): ReadonlyArray<string> => {
  const problems: Array<string> = []
  const seen = new Set<string>()
  for (const tool of tools) {
    const name = JSON.stringify(tool.name)
    if (!toolNamePattern.test(tool.name)) problems.push(`name ${name} is not 1-64 of [a-zA-Z0-9_-]`)
    else if (seen.has(tool.name)) problems.push(`name ${name} is given twice`)
    seen.add(tool.name)
    if (typeof tool.parameters !== "object" || tool.parameters === null || Array.isArray(tool.parameters)) {
      problems.push(`parameters of ${name} are not a JSON Schema object`)
    }
  }
  return problems
}

/**
 * The tool definitions as an `@effect/ai` toolkit whose handler is never called (tool-call
 * resolution is disabled; calling it is a defect).
 */
export const toToolkit = (tools: ReadonlyArray<ToolDefinition>): Toolkit.WithHandler<Record<string, AiTool.Any>> => ({
  tools: Object.fromEntries(tools.map((tool) => [tool.name, toAiTool(tool)])),
  handle: (name) => Effect.dieMessage(`${source}: tool "${String(name)}" must be executed by polyloop, not @effect/ai`)
})

// -----------------------------------------------------------------------------
// Responses
// -----------------------------------------------------------------------------

/**
 * A response as a `ModelReply`: the text parts, the tool calls the provider did not execute
 * itself (params re-serialized as JSON), the usage as billed (missing counts are 0), the
 * finish reason normalised, a refusal (also the text when there is none) and reasoning text.
 */
export const toModelReply = (response: LanguageModel.GenerateTextResponse<Record<string, AiTool.Any>>): ModelReply.ModelReply => {
  const toolCalls: Array<ModelReply.ModelToolCall> = []
  for (const part of response.content) {
    if (part.type === "tool-call" && !part.providerExecuted) {
      toolCalls.push({
        id: part.id,
        name: part.name,
        argumentsText: typeof part.params === "string" ? part.params : JSON.stringify(part.params)
      })
    }
  }
  const { anthropicUsage, reasoning, refusal } = textsOf(response.content)
  return ModelReply.make({
    text: response.text === "" && refusal !== undefined ? refusal : response.text,
    toolCalls,
    usage: billedUsage(response.usage, anthropicUsage),
    finishReason: response.finishReason,
    refusal,
    reasoning
  })
}

/** The parts of a raw (encoded) response the reply is made of; other parts are skipped. */
const RawPart = Schema.Union(
  Schema.Struct({ type: Schema.Literal("text"), text: Schema.String }),
  Schema.Struct({
    type: Schema.Literal("tool-call"),
    id: Schema.String,
    name: Schema.String,
    params: Schema.Unknown,
    providerExecuted: Schema.optional(Schema.Boolean)
  }),
  Schema.Struct({
    type: Schema.Literal("finish"),
    reason: Schema.String,
    usage: Schema.Struct({
      inputTokens: Schema.optional(Schema.Number),
      outputTokens: Schema.optional(Schema.Number),
      reasoningTokens: Schema.optional(Schema.Number),
      cachedInputTokens: Schema.optional(Schema.Number)
    }),
    metadata: Schema.optional(Schema.Unknown)
  })
)
const decodeRawPart = Schema.decodeUnknownOption(RawPart)

/**
 * The reply in a response `@effect/ai` refused to decode against the declared tools — a call to
 * an undeclared tool, arguments that are JSON but not an object — taken from the raw parts the
 * provider returned (the input of the failed decoding, kept in the `MalformedOutput`'s
 * `ParseError`): text, the calls the provider did not execute (params as JSON text), usage and
 * finish reason, as `toModelReply` makes them. `None` for any other error, or when the raw
 * parts are not there.
 */
export const replyFromRefusedOutput = (error: AiError.AiError): Option.Option<ModelReply.ModelReply> => {
  if (error._tag !== "MalformedOutput" || !ParseResult.isParseError(error.cause)) return Option.none()
  const raw: unknown = error.cause.issue.actual
  if (!Array.isArray(raw)) return Option.none()
  const texts: Array<string> = []
  const toolCalls: Array<ModelReply.ModelToolCall> = []
  let usage: ModelReply.Usage = ModelReply.emptyUsage
  let finishReason: string | undefined
  for (const element of raw) {
    const part = Option.getOrUndefined(decodeRawPart(element))
    if (part === undefined) continue
    switch (part.type) {
      case "text":
        texts.push(part.text)
        break
      case "tool-call":
        if (part.providerExecuted !== true) {
          const argumentsText = typeof part.params === "string" ? part.params : JSON.stringify(part.params)
          toolCalls.push({ id: part.id, name: part.name, argumentsText: argumentsText ?? "" })
        }
        break
      case "finish":
        usage = billedUsage(part.usage, metadataOf(part, "anthropic", "usage"))
        finishReason = part.reason
        break
    }
  }
  const { reasoning, refusal } = textsOf(raw)
  const text = texts.join("")
  return Option.some(ModelReply.make({
    text: text === "" && refusal !== undefined ? refusal : text,
    toolCalls,
    usage,
    finishReason: finishReason ?? "unknown",
    refusal,
    reasoning
  }))
}

const decodeBody = Schema.decodeUnknownOption(Schema.parseJson())

/**
 * An `AiError` as a `ModelError`. Built from the error's fields, never its message (which may
 * quote the response body); the cause kept is at most the socket's own error. A status error
 * carries what the provider said (design 0140): the error body's code, type and param, the
 * request id and the retry hint of its headers (an HTTP-date hint is taken relative to
 * `nowMillis`); a quota error is not retryable.
 */
export const toModelError = (error: AiError.AiError, nowMillis: number): ModelError => {
  const where = `${error.module}.${error.method}`
  switch (error._tag) {
    case "HttpRequestError":
      return error.reason === "Transport"
        ? Errors.transportError(source, `${where} (${Errors.describeEndpoint(error.request.url)})`, error.cause)
        : new ModelError({ retryable: false, message: `${source}: ${where} could not send its request (${error.reason})` })
    case "HttpResponseError":
      return error.reason === "StatusCode"
        ? Errors.providerStatusError(source, `${where} (${Errors.describeEndpoint(error.request.url)})`, error.response.status, {
          headers: Object.fromEntries(Object.entries(error.response.headers).map(([name, value]) => [name.toLowerCase(), value])),
          body: error.body === undefined ? undefined : Option.getOrUndefined(decodeBody(error.body)),
          nowMillis
        })
        : new ModelError({
          retryable: false,
          status: error.response.status,
          message: `${source}: ${where} got a malformed answer (${error.reason === "EmptyBody" ? "empty body" : "body is not valid JSON"})`
        })
    case "MalformedOutput":
      return new ModelError({
        retryable: false,
        message: `${source}: ${where}: the model's output does not match the expected format or the declared tools`
      })
    case "MalformedInput":
      return new ModelError({ retryable: false, message: `${source}: ${where}: the request cannot be expressed for this provider` })
    case "UnknownError":
      return new ModelError({ retryable: false, message: `${source}: ${where} failed` })
  }
}

const setSettings = (settings: ModelSettings): ReadonlyArray<string> =>
  Object.entries(settings).flatMap(([key, value]) => (value === undefined ? [] : [key]))

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
