/**
 * `@effect/ai`'s providers JSON-encode every tool result (`JSON.stringify(result)`), so a
 * polyloop observation — always text — reaches the model as `"\"sunny\""`. These helpers decode
 * such a string once in the outgoing request body (design 0140): the Responses API's
 * `function_call_output.output` and the Messages API's `tool_result.content`. A past assistant
 * text goes to the Responses API as an `EasyInputMessage` (design 0300, decision 7).
 *
 * @internal
 */
import * as HttpClient from "@effect/platform/HttpClient"
import * as HttpClientRequest from "@effect/platform/HttpClientRequest"
import * as Option from "effect/Option"
import * as Schema from "effect/Schema"

const isRecord = (value: unknown): value is Readonly<Record<string, unknown>> =>
  typeof value === "object" && value !== null && !Array.isArray(value)

const decodeJsonString = Schema.decodeUnknownOption(Schema.parseJson(Schema.String))
const decodeJsonBody = Schema.decodeUnknownOption(Schema.parseJson())

/** A JSON-encoded string decoded once; anything else as it is. */
const unwrap = (value: unknown): unknown =>
  typeof value === "string" ? Option.getOrElse(decodeJsonString(value), () => value) : value

/**
 * A past assistant message of text only (`output_text` parts with nothing but their text, as
 * `@effect/ai-openai` sends it): its text, to be sent as an `EasyInputMessage`'s `content`
 * (design 0300, decision 7: the shape `openai`'s request types accept); undefined otherwise.
 */
const assistantText = (item: Readonly<Record<string, unknown>>): string | undefined => {
  if (item.role !== "assistant" || item.type !== undefined || !Array.isArray(item.content)) return undefined
  let text = ""
  for (const part of item.content as ReadonlyArray<unknown>) {
    if (!isRecord(part) || part.type !== "output_text" || typeof part.text !== "string" || Object.keys(part).length !== 2) return undefined
    text += part.text
  }
  return text
}

/**
 * Responses API: each `function_call_output`'s `output`, and each past assistant message of text
 * only as an `EasyInputMessage` (`content` its text). @internal
 */
export const unwrapResponsesBody = (body: unknown): unknown => {
  if (!isRecord(body) || !Array.isArray(body.input)) return body
  return {
    ...body,
    input: body.input.map((item: unknown) => {
      if (!isRecord(item)) return item
      if (item.type === "function_call_output") return { ...item, output: unwrap(item.output) }
      const text = assistantText(item)
      return text === undefined ? item : { ...item, content: text }
    })
  }
}

/** Messages API: each `tool_result` block's `content`. @internal */
export const unwrapMessagesBody = (body: unknown): unknown => {
  if (!isRecord(body) || !Array.isArray(body.messages)) return body
  return {
    ...body,
    messages: body.messages.map((message: unknown) =>
      isRecord(message) && Array.isArray(message.content)
        ? {
          ...message,
          content: message.content.map((block: unknown) =>
            isRecord(block) && block.type === "tool_result" ? { ...block, content: unwrap(block.content) } : block
          )
        }
        : message
    )
  }
}

/** A request with `fix` applied to its JSON body; any other request as it is. @internal */
export const mapJsonBody = (
  request: HttpClientRequest.HttpClientRequest,
  fix: (body: unknown) => unknown
): HttpClientRequest.HttpClientRequest => {
  const body = request.body
  if (body._tag !== "Uint8Array" || !body.contentType.startsWith("application/json")) return request
  return Option.match(decodeJsonBody(new TextDecoder().decode(body.body)), {
    onNone: () => request,
    onSome: (json) => HttpClientRequest.bodyUnsafeJson(request, fix(json))
  })
}

/** An `HttpClient` transform applying `fix` to every JSON request body. @internal */
export const fixingBodies = (fix: (body: unknown) => unknown) => (client: HttpClient.HttpClient): HttpClient.HttpClient =>
  HttpClient.mapRequest(client, (request) => mapJsonBody(request, fix))
