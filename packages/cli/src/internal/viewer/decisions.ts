/**
 * Approval decisions from the page (`POST /api/runs/<id>/decisions`, design 0160): the body the
 * page sends, the checks that keep another site from deciding through the user's browser, and
 * the HTTP status of each refusal of `Approval.decide`.
 *
 * A request that changes something must carry a JSON body (`content-type: application/json`: a
 * cross-site form cannot send one, and a cross-site script must ask first with a preflight this
 * server never grants) and, when the browser tells where the request comes from (`Origin`,
 * `Sec-Fetch-Site`), come from the server's own page.
 *
 * @internal
 */
import * as Schema from "effect/Schema"

/** The body of a decision. `by` defaults to the server's decider; `actionHash` is the one the person saw. */
export const DecisionBody = Schema.Struct({
  callId: Schema.String,
  decision: Schema.Literal("Approve", "Reject"),
  reason: Schema.optional(Schema.String),
  by: Schema.optional(Schema.String),
  actionHash: Schema.String
})
/** @internal */
export type DecisionBody = typeof DecisionBody.Type

/** Why a request that changes something is refused before it is read, or undefined. */
export const refusal = (headers: Readonly<Record<string, string | undefined>>): { readonly status: number; readonly message: string } | undefined => {
  const type = (headers["content-type"] ?? "").split(";")[0]!.trim().toLowerCase()
  if (type !== "application/json") return { status: 415, message: "a decision is a JSON body (content-type: application/json)" }
  const site = headers["sec-fetch-site"]
  if (site !== undefined && site !== "same-origin" && site !== "none") {
    return { status: 403, message: `a decision must come from this viewer's own page, not a ${site} request` }
  }
  const origin = headers["origin"]
  if (origin !== undefined && origin !== "null") {
    let host: string
    try {
      host = new URL(origin).host
    } catch {
      return { status: 403, message: `the request's Origin ${JSON.stringify(origin)} is not a URL` }
    }
    if (host !== (headers["host"] ?? "")) {
      return { status: 403, message: `a decision must come from this viewer's own page, not from ${origin}` }
    }
  } else if (origin === "null") {
    return { status: 403, message: "a decision must come from this viewer's own page, not from an opaque origin" }
  }
  return undefined
}

/** The HTTP status of each of `Approval.decide`'s refusals. */
export const statusOf = (tag: string): number => {
  switch (tag) {
    case "InvalidDecision":
      return 400
    case "NotSuspended":
    case "UnknownCall":
      return 404
    case "AlreadyDecided":
    case "ActionMismatch":
    case "ConcurrentWriter":
      return 409
    default:
      return 500
  }
}
