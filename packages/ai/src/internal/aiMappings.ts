/**
 * `AiModelClient`'s mappings between polyloop's values and `@effect/ai`'s: messages to a
 * `Prompt`, tool definitions to `@effect/ai` tools (and the names a provider can take), a
 * response — or a response `@effect/ai` refused over a call to an undeclared tool — to a
 * `ModelReply`, and an `AiError` to a `ModelError`. Pure functions; the client (`make`, `layer`)
 * is `AiModelClient.ts`, which re-exports the public ones (design 0390).
 *
 * @internal
 */
import * as AiError from "@effect/ai/AiError"
import type * as LanguageModel from "@effect/ai/LanguageModel"
import * as Prompt from "@effect/ai/Prompt"
import * as AiTool from "@effect/ai/Tool"
import type * as Toolkit from "@effect/ai/Toolkit"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import * as ParseResult from "effect/ParseResult"
import * as Predicate from "effect/Predicate"
import * as Schema from "effect/Schema"
import { ModelError } from "@polyloop/core/Errors"
import type * as Message from "@polyloop/core/Message"
import type { ToolDefinition } from "@polyloop/core/ModelClient"
import * as ModelReply from "@polyloop/core/ModelReply"
import type { ModelSettings } from "@polyloop/core/ModelSettings"
import * as Errors from "./errors.js"
import { billedUsage, metadataOf, textsOf } from "./replyParts.js"

/** The name errors start with. */
export const source = "AiModelClient"

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

/** The names of the settings a request sets. */
export const setSettings = (settings: ModelSettings): ReadonlyArray<string> =>
  Object.entries(settings).flatMap(([key, value]) => (value === undefined ? [] : [key]))
