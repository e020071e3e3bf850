/**
 * The Chat Completions wire format `OpenAiCompatible` reads: a whole completion
 * (`parseCompletion`) and a streamed one (`streamDeltas`: the chunks of `stream: true`, as
 * Server-Sent Events, turned into `ModelDelta`s that fold into what `parseCompletion` returns
 * for the same content — design 0180).
 *
 * @internal
 */
import type * as Sse from "@effect/experimental/Sse"
import * as Either from "effect/Either"
import * as ParseResult from "effect/ParseResult"
import * as Schema from "effect/Schema"
import * as Stream from "effect/Stream"
import { ModelError } from "@polyloop/core/Errors"
import type * as ModelDelta from "@polyloop/core/ModelDelta"
import * as ModelReply from "@polyloop/core/ModelReply"
import * as Errors from "./errors.js"

const source = "OpenAiCompatible"

/** A tool call as the server returns it. Servers differ: `id` may be missing or empty, `arguments` may be an object. */
const WireToolCall = Schema.Struct({
  id: Schema.optional(Schema.NullOr(Schema.String)),
  function: Schema.Struct({
    name: Schema.String,
    arguments: Schema.optional(Schema.Unknown)
  })
})

const Count = Schema.optional(Schema.NullOr(Schema.NonNegativeInt))

const WireUsage = Schema.Struct({
  prompt_tokens: Schema.optionalWith(Schema.NonNegativeInt, { default: () => 0 }),
  completion_tokens: Schema.optionalWith(Schema.NonNegativeInt, { default: () => 0 }),
  total_tokens: Count,
  prompt_tokens_details: Schema.optional(Schema.NullOr(Schema.Struct({ cached_tokens: Count }))),
  completion_tokens_details: Schema.optional(Schema.NullOr(Schema.Struct({ reasoning_tokens: Count }))),
  /** DeepSeek's name for cached input tokens. */
  prompt_cache_hit_tokens: Count
})

/**
 * `content` is a string, or (Mistral's reasoning models, some gateways) an array of parts:
 * `{type: "text", text}` and `{type: "thinking", thinking: [{type: "text", text}]}`.
 */
const WireContent = Schema.NullOr(Schema.Union(Schema.String, Schema.Array(Schema.Unknown)))

/** What a message (or a chunk's delta) says besides its tool calls. */
const wireMessageFields = {
  content: Schema.optional(WireContent),
  refusal: Schema.optional(Schema.NullOr(Schema.String)),
  reasoning_content: Schema.optional(Schema.NullOr(Schema.String)),
  reasoning: Schema.optional(Schema.NullOr(Schema.String))
}

/** The part of a chat completion polyloop reads. */
const WireCompletion = Schema.Struct({
  choices: Schema.NonEmptyArray(
    Schema.Struct({
      message: Schema.Struct({
        ...wireMessageFields,
        tool_calls: Schema.optional(Schema.NullOr(Schema.Array(WireToolCall)))
      }),
      finish_reason: Schema.optional(Schema.NullOr(Schema.String))
    })
  ),
  usage: Schema.optional(Schema.NullOr(WireUsage))
})

/** An error reported in a 2xx body (OpenRouter does this for upstream failures). */
const WireErrorBody = Schema.Struct({
  error: Schema.Struct({ code: Schema.optional(Schema.Unknown) })
})

const decodeJson = Schema.decodeUnknownEither(Schema.parseJson())
const decodeCompletion = Schema.decodeUnknownEither(WireCompletion)
const decodeErrorBody = Schema.decodeUnknownEither(WireErrorBody)

/** A call's arguments as text: an object is serialised, none is `{}`. */
const argumentsText = (value: unknown): string =>
  typeof value === "string" ? value : value === undefined || value === null ? "{}" : JSON.stringify(value)

/** Paths of the problems in a parse error, without the values found there (they are body content). */
const issuePaths = (error: ParseResult.ParseError): string => {
  const paths = ParseResult.ArrayFormatter.formatErrorSync(error).map((issue) =>
    issue.path.length === 0 ? "(root)" : issue.path.map(String).join(".")
  )
  return [...new Set(paths)].slice(0, 3).join(", ")
}

const isRecord = (value: unknown): value is Readonly<Record<string, unknown>> =>
  typeof value === "object" && value !== null && !Array.isArray(value)

/** The text and the thinking of a `content` given as parts (unknown parts are skipped). */
const readParts = (parts: ReadonlyArray<unknown>): { readonly text: string; readonly thinking: string } => {
  let text = ""
  let thinking = ""
  for (const part of parts) {
    if (!isRecord(part)) continue
    if (part.type === "text" && typeof part.text === "string") text += part.text
    else if (part.type === "thinking" && Array.isArray(part.thinking)) thinking += readParts(part.thinking).text
    else if (part.type === "thinking" && typeof part.thinking === "string") thinking += part.thinking
  }
  return { text, thinking }
}

const nonEmpty = (text: string | null | undefined): string | undefined => (text === undefined || text === null || text === "" ? undefined : text)

/**
 * The text (of a string or of text parts), the reasoning (`reasoning_content`, `reasoning` or
 * thinking parts, the first that is not empty) and the refusal of a message or a chunk's delta.
 */
const readMessage = (message: Schema.Struct.Type<typeof wireMessageFields>) => {
  const content = message.content
  const parts = Array.isArray(content) ? readParts(content) : undefined
  return {
    text: parts !== undefined ? parts.text : typeof content === "string" ? content : "",
    reasoning: nonEmpty(message.reasoning_content) ?? nonEmpty(message.reasoning) ?? nonEmpty(parts?.thinking),
    refusal: nonEmpty(message.refusal)
  }
}

/**
 * The usage as billed (design 0140, amended by issue 29): the prompt tokens, and the completion
 * tokens plus whatever the server's `total_tokens` counts beyond prompt + completion. That is
 * the reasoning when the server counts it outside the completion: either its reasoning detail
 * says so (total = prompt + completion + reasoning), or, with no reasoning detail that explains
 * the difference (Gemini's OpenAI endpoint: total 109 for prompt 35 + completion 12, its
 * thinking tokens in the total only; mozilla-ai/any-llm#1290), the difference is counted as
 * reasoning output and recorded as `reasoningTokens`. Cached and reasoning counts are kept as
 * details. A total below prompt + completion is ignored (the parts are what was billed).
 */
export const readUsage = (usage: typeof WireUsage.Type | null | undefined): ModelReply.Usage => {
  if (usage === undefined || usage === null) return ModelReply.emptyUsage
  const cached = usage.prompt_tokens_details?.cached_tokens ?? usage.prompt_cache_hit_tokens ?? undefined
  const detail = usage.completion_tokens_details?.reasoning_tokens ?? undefined
  const beyond = usage.total_tokens === undefined || usage.total_tokens === null
    ? 0
    : Math.max(0, usage.total_tokens - usage.prompt_tokens - usage.completion_tokens)
  // The detail explains the difference when it is the difference; otherwise the reasoning is
  // inside the completion (OpenAI) and a difference left over is unexplained reasoning.
  const detailOutside = detail !== undefined && detail > 0 && beyond === detail
  const unexplained = detailOutside || (detail !== undefined && detail > 0) ? 0 : beyond
  const reasoning = unexplained > 0 ? unexplained : detail
  return {
    inputTokens: usage.prompt_tokens,
    outputTokens: usage.completion_tokens + (detailOutside ? detail : 0) + unexplained,
    ...(cached === undefined || cached === null ? {} : { cachedInputTokens: cached }),
    ...(reasoning === undefined ? {} : { reasoningTokens: reasoning })
  }
}

/** The id of a tool call the server sent without one (design 0362): its position in the reply. */
const syntheticId = (index: number): string => `call_${index}`

/**
 * The error an answer reports in its body instead of a completion (OpenRouter does this for
 * upstream failures, also mid-stream), classified by its numeric code; `undefined` when the
 * body is no such error.
 */
export const reportedError = (json: unknown, endpoint: string): ModelError | undefined => {
  const reported = decodeErrorBody(json)
  if (Either.isLeft(reported)) return undefined
  const code = reported.right.error.code
  const provider = Errors.providerErrorOf(json)
  return typeof code === "number" && Number.isInteger(code) && code >= 400 && code <= 599
    ? Errors.providerStatusError(source, endpoint, code, { headers: {}, body: json, nowMillis: 0 })
    : new ModelError({
      retryable: false,
      message: `${source}: ${endpoint} reported an error in its answer${provider.code === undefined ? "" : ` (${provider.code})`}`,
      ...provider
    })
}

/**
 * Reads a 2xx body into a reply. A body that is not JSON or not a chat completion is a
 * non-retryable `ModelError`; an error object in the body is classified by its numeric code.
 */
export const parseCompletion = (body: string, endpoint: string): Either.Either<ModelReply.ModelReply, ModelError> => {
  const json = decodeJson(body)
  if (Either.isLeft(json)) {
    return Either.left(new ModelError({ retryable: false, message: `${source}: the answer of ${endpoint} is not JSON` }))
  }
  const completion = decodeCompletion(json.right)
  if (Either.isLeft(completion)) {
    const reported = reportedError(json.right, endpoint)
    if (reported !== undefined) return Either.left(reported)
    return Either.left(
      new ModelError({
        retryable: false,
        message: `${source}: the answer of ${endpoint} is not a chat completion (at ${issuePaths(completion.left)})`
      })
    )
  }
  const choice = completion.right.choices[0]
  const message = choice.message
  const { reasoning, refusal, text } = readMessage(message)
  return Either.right(ModelReply.make({
    text: text === "" && refusal !== undefined ? refusal : text,
    // A call whose id is missing or empty (Gemini's OpenAI endpoint sends "") gets
    // `call_<index>`, as the stream's first fragment of it does (design 0362).
    toolCalls: (message.tool_calls ?? []).map((call, index) => ({
      id: nonEmpty(call.id) ?? syntheticId(index),
      name: call.function.name,
      argumentsText: argumentsText(call.function.arguments)
    })),
    usage: readUsage(completion.right.usage),
    refusal,
    reasoning,
    finishReason: choice.finish_reason ?? undefined
  }))
}

// -----------------------------------------------------------------------------
// Streamed completions (`stream: true`)
// -----------------------------------------------------------------------------

/** A tool-call fragment as a chunk carries it: everything may be missing but the first fragment's index. */
const WireToolCallDelta = Schema.Struct({
  index: Schema.optional(Schema.NullOr(Schema.NonNegativeInt)),
  id: Schema.optional(Schema.NullOr(Schema.String)),
  function: Schema.optional(Schema.NullOr(Schema.Struct({
    name: Schema.optional(Schema.NullOr(Schema.String)),
    arguments: Schema.optional(Schema.Unknown)
  })))
})

/** The part of a `chat.completion.chunk` polyloop reads. */
const WireChunk = Schema.Struct({
  choices: Schema.optional(Schema.NullOr(Schema.Array(Schema.Struct({
    delta: Schema.optional(Schema.NullOr(Schema.Struct({
      ...wireMessageFields,
      tool_calls: Schema.optional(Schema.NullOr(Schema.Array(WireToolCallDelta)))
    }))),
    finish_reason: Schema.optional(Schema.NullOr(Schema.String))
  })))),
  usage: Schema.optional(Schema.NullOr(WireUsage))
})
const decodeChunk = Schema.decodeUnknownEither(WireChunk)

/** What has been read of a stream so far. */
interface Reading {
  /** `data: [DONE]` was read: the stream is complete. */
  done: boolean
  /** Calls seen, and whether each has had an arguments fragment. */
  readonly calls: Map<number, boolean>
}

/** The deltas of one chunk (already parsed as JSON), or the error it reports. */
const chunkDeltas = (json: unknown, endpoint: string, reading: Reading): Either.Either<Array<ModelDelta.ModelDelta>, ModelError> => {
  // An error event (OpenRouter reports upstream failures mid-stream) before anything else: its
  // shape would also pass for a chunk without choices.
  const reported = reportedError(json, endpoint)
  if (reported !== undefined) return Either.left(reported)
  const chunk = decodeChunk(json)
  if (Either.isLeft(chunk)) {
    return Either.left(
      new ModelError({ retryable: false, message: `${source}: a chunk of the stream of ${endpoint} is not a chat completion chunk (at ${issuePaths(chunk.left)})` })
    )
  }
  const deltas: Array<ModelDelta.ModelDelta> = []
  const choice = chunk.right.choices?.[0]
  const delta = choice?.delta
  if (delta !== undefined && delta !== null) {
    const { reasoning, refusal, text } = readMessage(delta)
    if (reasoning !== undefined) deltas.push({ _tag: "ReasoningDelta", text: reasoning })
    if (text !== "") deltas.push({ _tag: "TextDelta", text })
    if (refusal !== undefined) deltas.push({ _tag: "RefusalDelta", text: refusal })
    const calls = delta.tool_calls ?? []
    for (let position = 0; position < calls.length; position++) {
      const call = calls[position]!
      const index = call.index ?? position
      const args = call.function?.arguments
      const given = args !== undefined && args !== null
      const first = !reading.calls.has(index)
      reading.calls.set(index, (reading.calls.get(index) ?? false) || given)
      // The call's first fragment names it: its id, or `call_<index>` when it has none (design
      // 0362); a real id in a later fragment replaces that one in the fold.
      const id = nonEmpty(call.id) ?? (first ? syntheticId(index) : undefined)
      const name = nonEmpty(call.function?.name)
      deltas.push({
        _tag: "ToolCallDelta",
        index,
        ...(id === undefined ? {} : { id }),
        ...(name === undefined ? {} : { name }),
        ...(given ? { arguments: argumentsText(args) } : {})
      })
    }
  }
  const finishReason = choice?.finish_reason
  if (finishReason !== undefined && finishReason !== null) deltas.push({ _tag: "FinishDelta", finishReason })
  const usage = chunk.right.usage
  if (usage !== undefined && usage !== null) deltas.push({ _tag: "UsageDelta", usage: readUsage(usage) })
  return Either.right(deltas)
}

/**
 * The deltas of a streamed completion, from its Server-Sent Events. The stream is complete at
 * `data: [DONE]` (events after it are not read); a stream that ends before it was cut (a
 * retryable `ModelError`). A call whose stream gave no arguments gets `{}`, as in a whole
 * completion. An event that is not JSON or not a chunk is a non-retryable `ModelError`; an error
 * object in an event is classified by its code, as in a whole answer.
 */
export const streamDeltas = <R>(
  events: Stream.Stream<Sse.Event, ModelError, R>,
  endpoint: string,
  status: number
): Stream.Stream<ModelDelta.ModelDelta, ModelError, R> =>
  Stream.suspend(() => {
    const reading: Reading = { done: false, calls: new Map() }
    const read = Stream.mapConcatEffect(
      Stream.takeWhile(events, () => !reading.done),
      (event): Either.Either<Array<ModelDelta.ModelDelta>, ModelError> => {
        if (reading.done) return Either.right([])
        const data = event.data.trim()
        if (data === "") return Either.right([])
        if (data === "[DONE]") {
          reading.done = true
          const closing: Array<ModelDelta.ModelDelta> = []
          for (const [index, given] of reading.calls) if (!given) closing.push({ _tag: "ToolCallDelta", index, arguments: "{}" })
          return Either.right(closing)
        }
        const json = decodeJson(data)
        if (Either.isLeft(json)) {
          return Either.left(new ModelError({ retryable: false, message: `${source}: an event of the stream of ${endpoint} is not JSON` }))
        }
        return chunkDeltas(json.right, endpoint, reading)
      }
    )
    return Stream.concat(
      read,
      Stream.suspend(() => (reading.done ? Stream.empty : Stream.fail(Errors.brokenBodyError(source, endpoint, status, undefined))))
    )
  })
