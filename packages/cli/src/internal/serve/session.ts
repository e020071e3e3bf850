/**
 * `POST /api/session` (design 0370): the printed URL's one-time login code (`{ login }`) or the
 * token (`{ token }`) exchanged for a session of the page's origin (`{ session }`).
 *
 * @internal
 */
import * as HttpServerRequest from "@effect/platform/HttpServerRequest"
import * as HttpServerResponse from "@effect/platform/HttpServerResponse"
import * as Effect from "effect/Effect"
import * as Schema from "effect/Schema"
import type * as Address from "../viewer/address.js"
import type * as Auth from "../viewer/auth.js"
import * as Decisions from "../viewer/decisions.js"
import { apiError, jsonBody, respondToFailure } from "./http.js"

/** The body of `POST /api/session`: the printed URL's one-time code, or the token pasted on the page. */
const LoginBody = Schema.Union(
  Schema.Struct({ login: Schema.String.pipe(Schema.maxLength(200)) }),
  Schema.Struct({ token: Schema.String.pipe(Schema.maxLength(200)) })
)

const loginRefusals: Record<Auth.Refusal, string> = {
  WrongToken: "that is not this start's token",
  WrongCode: "that is not this start's login code (each start of polyloop serve makes a new one)",
  LoginSpent: "this login URL was used already (it logs in once): paste the token polyloop serve printed, or restart it"
}

/** The handler of `POST /api/session` over the start's secret. */
export const login = (secret: Auth.Secret, allowed: Address.Allowlist) =>
  respondToFailure(Effect.gen(function*() {
    const request = yield* HttpServerRequest.HttpServerRequest
    const refused = Decisions.refusal(request.headers, allowed, "a login")
    if (refused !== undefined) return apiError(refused.status, refused.tag, refused.message)
    const json = yield* jsonBody(request)
    const body = yield* Schema.decodeUnknown(LoginBody, { onExcessProperty: "error" })(json).pipe(
      Effect.mapError(() => apiError(400, "InvalidBody", "the body must be { \"login\": <code> } or { \"token\": <token> }"))
    )
    const session = yield* secret.exchange(body, request.headers["host"] ?? "").pipe(
      Effect.mapError((refusal) => apiError(401, refusal, loginRefusals[refusal]))
    )
    return HttpServerResponse.unsafeJson({ session })
  }))
