/**
 * Approval decisions from the page (`POST /api/runs/<id>/decisions`, designs 0160 and 0340):
 * the body the page sends (bounded: 8 KiB, each field limited, the action's hash 64 hex
 * digits), the checks that keep another site from deciding through the user's browser, the
 * recorded name (the page's name is a claim, recorded next to the server's `--as`), and the
 * HTTP status of each refusal of `Approval.decide`.
 *
 * A request that changes something must carry a JSON body (`content-type: application/json`: a
 * cross-site form cannot send one, and a cross-site script must ask first with a preflight this
 * server never grants) and, when the browser tells where the request comes from (`Origin`,
 * `Sec-Fetch-Site`), come from the server's own page: an `Origin` of an allowed host at the
 * request's own port.
 *
 * @internal
 */
import * as ParseResult from "effect/ParseResult"
import * as Schema from "effect/Schema"
import * as Address from "./address.js"

/** The most bytes a decision's body may have. */
export const maxBodyBytes = 8 * 1024

/** The longest call id, reason and name. */
export const limits = { callId: 200, reason: 1000, by: 100 } as const

const controlCharacters = /[\u0000-\u001f\u007f]/

/** Text of `min` to `max` characters, as one refinement (so its one message is the message). */
const bounded = (max: number, min = 0) => Schema.String.pipe(Schema.filter((s) => s.length >= min && s.length <= max))

/** The body of a decision. `by` is the name typed on the page; `actionHash` is the one the person saw. */
export const DecisionBody = Schema.Struct({
  callId: bounded(limits.callId, 1).annotations({ message: () => `must be a call id (1 to ${limits.callId} characters)` }),
  decision: Schema.Literal("Approve", "Reject").annotations({ message: () => ({ message: `must be "Approve" or "Reject"`, override: true }) }),
  reason: Schema.optionalWith(bounded(limits.reason).annotations({ message: () => `must be text of at most ${limits.reason} characters` }), { exact: true }),
  by: Schema.optionalWith(
    Schema.String.pipe(
      Schema.filter((s) => s.length <= limits.by && !controlCharacters.test(s))
    ).annotations({ message: () => `must be a name of at most ${limits.by} characters, on one line` }),
    { exact: true }
  ),
  actionHash: Schema.String.pipe(Schema.pattern(/^[0-9a-f]{64}$/)).annotations({ message: () => "must be 64 hexadecimal digits (the hash of the action shown)" })
}).annotations({ message: () => "the body must be a JSON object with callId, decision and actionHash (reason and by optional)" })
/** @internal */
export type DecisionBody = typeof DecisionBody.Type

/** The body's problems, one short line each (never the schema). */
export const describeIssues = (error: ParseResult.ParseError): string => {
  const issues = ParseResult.ArrayFormatter.formatErrorSync(error)
  const lines = issues.map((issue) => {
    const path = issue.path.map(String).join(".")
    const message = issue.message.length > 200 ? `${issue.message.slice(0, 200)}…` : issue.message
    if (issue._tag === "Unexpected") return `${path}: is not a field of a decision`
    if (issue._tag === "Missing") return `${path}: is required`
    return path === "" ? message : `${path}: ${message}`
  })
  return [...new Set(lines)].slice(0, 6).join("; ")
}

/**
 * Why a request that changes something is refused before it is read, or undefined: not JSON
 * (415), without a `content-length` (411: a decision is small, and browsers always send one),
 * too large by its `content-length` (413), from another site by `Sec-Fetch-Site` or by
 * an `Origin` that is not an allowed host at this request's port (403).
 */
export const refusal = (
  headers: Readonly<Record<string, string | undefined>>,
  allowed: Address.Allowlist = Address.allowlist("127.0.0.1"),
  what = "a decision"
): { readonly status: number; readonly tag: string; readonly message: string } | undefined => {
  const type = (headers["content-type"] ?? "").split(";")[0]!.trim().toLowerCase()
  if (type !== "application/json") return { status: 415, tag: "Refused", message: `${what} is a JSON body (content-type: application/json)` }
  const length = headers["content-length"]
  if (length === undefined) return { status: 411, tag: "LengthRequired", message: `${what} must say its length (content-length)` }
  if (!(/^\d+$/.test(length.trim()) && Number(length) <= maxBodyBytes)) {
    return { status: 413, tag: "TooLarge", message: `${what}'s body is at most ${maxBodyBytes} bytes` }
  }
  const site = siteRefusal(headers)
  if (site !== undefined) return site
  const origin = headers["origin"]
  if (origin === undefined) return undefined
  if (origin === "null") return { status: 403, tag: "Refused", message: `${what} must come from this viewer's own page, not from an opaque origin` }
  let url: URL
  try {
    url = new URL(origin)
  } catch {
    return { status: 403, tag: "Refused", message: `the request's Origin ${JSON.stringify(origin.slice(0, 200))} is not a URL` }
  }
  const host = Address.parseHostHeader(headers["host"])
  const originHost = Address.normaliseHost(url.hostname)
  const originPort = url.port === "" ? 80 : Number(url.port)
  const ok = url.protocol === "http:" && host !== undefined && originHost !== undefined &&
    originHost === host.host && originPort === (host.port ?? 80) && Address.isAllowedHost(originHost, allowed)
  if (!ok) return { status: 403, tag: "Refused", message: `${what} must come from this viewer's own page, not from ${origin.slice(0, 200)}` }
  return undefined
}

/** Refuses a request the browser says comes from another site (or another port of this one). */
export const siteRefusal = (
  headers: Readonly<Record<string, string | undefined>>
): { readonly status: number; readonly tag: string; readonly message: string } | undefined => {
  const site = headers["sec-fetch-site"]
  if (site !== undefined && site !== "same-origin" && site !== "none") {
    return { status: 403, tag: "Refused", message: `the API answers this viewer's own page only, not a ${site.slice(0, 40)} request` }
  }
  return undefined
}

/**
 * Who a decision is recorded as made by: the server's identity (`--as`), with the page's name
 * as what it is, a claim nobody checked.
 */
export const recordedBy = (claimed: string | undefined, decider: string): string => {
  const name = claimed?.trim() ?? ""
  return name === "" ? decider : `${name} (named on the page; served as ${decider})`
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
