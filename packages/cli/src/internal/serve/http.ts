/**
 * The viewer's HTTP responses shared by its routes: the security headers every response carries,
 * API errors as `{ "error": { "_tag", "message" } }`, a handler's failure as a response, the run
 * id of a path, Server-Sent Events, and a bounded JSON body.
 *
 * @internal
 */
import * as HttpRouter from "@effect/platform/HttpRouter"
import * as HttpServerRequest from "@effect/platform/HttpServerRequest"
import * as HttpServerResponse from "@effect/platform/HttpServerResponse"
import { RunId } from "@polyloop/core/Ids"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import * as ParseResult from "effect/ParseResult"
import * as Schema from "effect/Schema"
import * as Stream from "effect/Stream"
import * as Decisions from "../viewer/decisions.js"

/** Headers of every response (design 0340). */
export const securityHeaders = {
  "content-security-policy":
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'",
  "x-content-type-options": "nosniff",
  "referrer-policy": "no-referrer",
  "cache-control": "no-store"
}

/** An API error response. */
export const apiError = (status: number, tag: string, message: string) =>
  HttpServerResponse.unsafeJson({ error: { _tag: tag, message } }, { status })

/** 404 for a run the store does not have. */
export const runNotFound = (runId: string) => apiError(404, "RunNotFound", `no run with id ${JSON.stringify(runId)} in the store`)

const decodeRunId = Schema.decodeUnknown(RunId)

/** The run id of the path (`/api/runs/<id>…`), or a 400 response. */
export const runIdParam = Effect.flatMap(HttpRouter.params, (params) =>
  decodeRunId(params["runId"]).pipe(
    Effect.mapError(() =>
      apiError(400, "InvalidRunId", `${JSON.stringify((params["runId"] ?? "").slice(0, 200))} is not a valid run id (1 to 200 characters)`)
    )
  ))

/** A Server-Sent Events response of `events`. */
export const sseResponse = (events: Stream.Stream<string>) =>
  HttpServerResponse.stream(Stream.encodeText(events), {
    contentType: "text/event-stream",
    headers: { "x-accel-buffering": "no" }
  })

/** The response to a handler's failure: a prepared response, 400 for a bad query, 500 for the store. */
const failureResponse = (error: unknown): HttpServerResponse.HttpServerResponse => {
  if (HttpServerResponse.isServerResponse(error)) return error
  if (ParseResult.isParseError(error)) {
    const issues = ParseResult.ArrayFormatter.formatErrorSync(error).map((issue) => `${issue.path.join(".")}: ${issue.message}`)
    return apiError(400, "InvalidQuery", issues.join("; "))
  }
  const tag = typeof error === "object" && error !== null && "_tag" in error ? String(error._tag) : "Error"
  const message = typeof error === "object" && error !== null && "message" in error ? String(error.message) : String(error)
  return apiError(500, tag, message)
}

/** A handler whose failures are answered (`failureResponse`). */
export const respondToFailure = <E, R>(
  handler: Effect.Effect<HttpServerResponse.HttpServerResponse, E, R>
): Effect.Effect<HttpServerResponse.HttpServerResponse, never, R> => Effect.catchAll(handler, (error) => Effect.succeed(failureResponse(error)))

/**
 * The request's body parsed as JSON, at most `Decisions.maxBodyBytes` bytes, or a 400 response
 * (413 with `tooLarge`'s message when given and the body is longer).
 */
export const jsonBody = (
  request: HttpServerRequest.HttpServerRequest,
  tooLarge?: string
): Effect.Effect<unknown, HttpServerResponse.HttpServerResponse> =>
  Effect.flatMap(
    request.text.pipe(
      HttpServerRequest.withMaxBodySize(Option.some(Decisions.maxBodyBytes)),
      Effect.mapError((error) =>
        tooLarge !== undefined && error.cause instanceof Error && error.cause.message === "maxBytes exceeded"
          ? apiError(413, "TooLarge", tooLarge)
          : apiError(400, "InvalidBody", "the body could not be read")
      )
    ),
    (text) =>
      Effect.try({
        try: (): unknown => JSON.parse(text),
        catch: () => apiError(400, "InvalidBody", "the body is not JSON")
      })
  )
