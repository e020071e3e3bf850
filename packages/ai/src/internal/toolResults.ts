/**
 * `@effect/ai`'s providers JSON-encode every tool result (`JSON.stringify(result)`), so a
 * polyloop observation — always text — reaches the model as `"\"sunny\""`. These helpers decode
 * such a string once in the outgoing request body (design 0140): the Responses API's
 * `function_call_output.output` and the Messages API's `tool_result.content`.
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

/** Responses API: each `function_call_output`'s `output`. @internal */
export const unwrapResponsesBody = (body: unknown): unknown => {
  if (!isRecord(body) || !Array.isArray(body.input)) return body
  return {
    ...body,
    input: body.input.map((item: unknown) =>
      isRecord(item) && item.type === "function_call_output" ? { ...item, output: unwrap(item.output) } : item
    )
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

/** An `HttpClient` transform applying `fix` to every JSON request body. @internal */
export const fixingBodies = (fix: (body: unknown) => unknown) => (client: HttpClient.HttpClient): HttpClient.HttpClient =>
  HttpClient.mapRequest(client, (request) => {
    const body = request.body
    if (body._tag !== "Uint8Array" || !body.contentType.startsWith("application/json")) return request
    return Option.match(decodeJsonBody(new TextDecoder().decode(body.body)), {
      onNone: () => request,
      onSome: (json) => HttpClientRequest.bodyUnsafeJson(request, fix(json))
    })
  })
