/**
 * Building `ModelError`s that say what went wrong without leaking secrets: messages carry the
 * endpoint (without credentials or query), the HTTP status and a short reason, never a header,
 * the API key or any part of a request or response body.
 *
 * @internal
 */
import * as Duration from "effect/Duration"
import * as Predicate from "effect/Predicate"
import { ModelError } from "@polyloop/core/Errors"

/** `scheme://host[:port]/path` of a URL: no user info, no query, no fragment. @internal */
export const describeEndpoint = (url: string): string => {
  try {
    const parsed = new URL(url)
    return `${parsed.protocol}//${parsed.host}${parsed.pathname}`
  } catch {
    return "(invalid URL)"
  }
}

const reasons: Readonly<Record<number, string>> = {
  400: "Bad Request",
  401: "Unauthorized (check the API key)",
  402: "Payment Required",
  403: "Forbidden (check the API key's permissions)",
  404: "Not Found (check the base URL and the model name)",
  405: "Method Not Allowed (check the base URL)",
  408: "Request Timeout",
  409: "Conflict",
  413: "Payload Too Large",
  415: "Unsupported Media Type",
  422: "Unprocessable Entity",
  429: "Too Many Requests",
  500: "Internal Server Error",
  501: "Not Implemented",
  502: "Bad Gateway",
  503: "Service Unavailable",
  504: "Gateway Timeout"
}

/** `401 Unauthorized (check the API key)`, `418`, … @internal */
export const describeStatus = (status: number): string => {
  const reason = reasons[status]
  return reason === undefined ? `${status}` : `${status} ${reason}`
}

/** Rate limits (429) and server errors (5xx) may pass; every other status will not. @internal */
export const isRetryableStatus = (status: number): boolean => status === 429 || status >= 500

/** The error for an HTTP status outside 2xx. @internal */
export const statusError = (source: string, endpoint: string, status: number): ModelError =>
  new ModelError({
    retryable: isRetryableStatus(status),
    status,
    message: `${source}: ${endpoint} answered ${describeStatus(status)}`
  })

/**
 * The first error code (`ECONNREFUSED`, `UND_ERR_SOCKET`, …) along an error's `cause` chain:
 * short, and never secret.
 *
 * @internal
 */
export const errorCode = (error: unknown): string | undefined => {
  let current: unknown = error
  for (let depth = 0; depth < 8 && Predicate.isObject(current); depth++) {
    if (Predicate.hasProperty(current, "code") && Predicate.isString(current.code) && /^[A-Z0-9_]{2,40}$/.test(current.code)) {
      return current.code
    }
    current = Predicate.hasProperty(current, "cause") ? current.cause : undefined
  }
  return undefined
}

/**
 * The innermost cause that is a plain `Error` (the socket's error, not the HTTP client's wrapper,
 * which carries the request and its headers). @internal
 */
export const transportCause = (error: unknown): Error | undefined => {
  let current: unknown = error
  let found: Error | undefined
  for (let depth = 0; depth < 8 && Predicate.isObject(current); depth++) {
    if (current instanceof Error && !Predicate.hasProperty(current, "request")) {
      found = current
    }
    current = Predicate.hasProperty(current, "cause") ? current.cause : undefined
  }
  return found
}

/** The error for a request that never got an answer (refused, reset, DNS …). @internal */
export const transportError = (source: string, endpoint: string, cause: unknown): ModelError => {
  const code = errorCode(cause)
  const inner = transportCause(cause)
  return new ModelError({
    retryable: true,
    message: `${source}: cannot reach ${endpoint}${code === undefined ? "" : ` (${code})`}`,
    ...(inner === undefined ? {} : { cause: inner })
  })
}

/** The error for an answer whose body broke off before it was complete. @internal */
export const brokenBodyError = (source: string, endpoint: string, status: number, cause: unknown): ModelError => {
  const code = errorCode(cause)
  const inner = transportCause(cause)
  return new ModelError({
    retryable: true,
    status,
    message: `${source}: the answer of ${endpoint} broke off before its end${code === undefined ? "" : ` (${code})`}`,
    ...(inner === undefined ? {} : { cause: inner })
  })
}

/** The error for a call cut by its timeout. @internal */
export const timeoutError = (source: string, endpoint: string, timeout: Duration.Duration): ModelError =>
  new ModelError({
    retryable: true,
    message: `${source}: no complete answer from ${endpoint} within ${Duration.format(timeout)}`
  })

// -----------------------------------------------------------------------------
// What the provider said (design 0140): retry hints, error code/type/param, request id
// -----------------------------------------------------------------------------

/** Response headers, lower-cased names (as `@effect/platform`'s `Headers`). @internal */
export type HeaderRecord = Readonly<Record<string, string | undefined>>

const durationPart = /(\d+(?:\.\d+)?)(ms|h|m|s)/g

/**
 * An OpenAI/Groq rate-limit reset duration (`6m0s`, `20ms`, `1.5s`, `2m59.56s`, `1h2m3s`) or
 * plain seconds (`7`), in milliseconds; `undefined` when it is neither. @internal
 */
export const parseResetDuration = (text: string): number | undefined => {
  const trimmed = text.trim()
  if (/^\d+(\.\d+)?$/.test(trimmed)) return Math.ceil(Number(trimmed) * 1000)
  if (!/^(\d+(\.\d+)?(ms|h|m|s))+$/.test(trimmed)) return undefined
  let millis = 0
  for (const [, amount, unit] of trimmed.matchAll(durationPart)) {
    const n = Number(amount)
    millis += unit === "ms" ? n : unit === "s" ? n * 1000 : unit === "m" ? n * 60_000 : n * 3_600_000
  }
  return Math.ceil(millis)
}

const nonNegative = (n: number): number | undefined => (Number.isFinite(n) && n >= 0 ? Math.ceil(n) : undefined)

/**
 * The provider's "retry after" hint in milliseconds, from (first found) `retry-after-ms`,
 * `retry-after` (seconds, or an HTTP date taken relative to `nowMillis`), or OpenAI's
 * `x-ratelimit-reset-requests` / `-tokens`: the reset of the limit whose remaining count is 0,
 * or the longer of the two when neither says 0. @internal
 */
export const retryAfterMillis = (headers: HeaderRecord, nowMillis: number): number | undefined => {
  const ms = headers["retry-after-ms"]
  if (ms !== undefined && /^\s*\d+(\.\d+)?\s*$/.test(ms)) return nonNegative(Number(ms))
  const after = headers["retry-after"]
  if (after !== undefined) {
    if (/^\s*\d+(\.\d+)?\s*$/.test(after)) return nonNegative(Number(after) * 1000)
    const date = Date.parse(after)
    if (!Number.isNaN(date)) return Math.max(0, date - nowMillis)
  }
  const resets: Array<number> = []
  const exhausted: Array<number> = []
  for (const kind of ["requests", "tokens"]) {
    const reset = headers[`x-ratelimit-reset-${kind}`]
    const millis = reset === undefined ? undefined : parseResetDuration(reset)
    if (millis === undefined) continue
    resets.push(millis)
    if (headers[`x-ratelimit-remaining-${kind}`]?.trim() === "0") exhausted.push(millis)
  }
  const applicable = exhausted.length > 0 ? exhausted : resets
  return applicable.length === 0 ? undefined : Math.max(...applicable)
}

/** Response headers that carry the provider's request id, in order of preference. @internal */
export const requestIdHeaders: ReadonlyArray<string> = [
  "x-request-id",
  "request-id",
  "apim-request-id",
  "x-ms-request-id",
  "mistral-correlation-id",
  "x-amzn-requestid",
  "cf-ray"
]

/** A short, single-line token: codes, types, params and ids are kept only in this form (never free text). */
const token = (value: unknown): string | undefined => {
  const text = typeof value === "number" && Number.isInteger(value) ? String(value) : value
  return typeof text === "string" && /^[\w.\-:/[\]]{1,120}$/.test(text) ? text : undefined
}

/** The provider's request id from the response headers. @internal */
export const requestIdOf = (headers: HeaderRecord): string | undefined => {
  for (const name of requestIdHeaders) {
    const id = token(headers[name])
    if (id !== undefined) return id
  }
  return undefined
}

/** The machine-readable parts of a provider's error body. @internal */
export interface ProviderError {
  readonly code?: string
  readonly type?: string
  readonly param?: string
  readonly requestId?: string
  /** The model's context window a refusal of a request too long states (design 0361). */
  readonly contextWindow?: number
}

const record = (value: unknown): Readonly<Record<string, unknown>> | undefined =>
  Predicate.isObject(value) && !Array.isArray(value) ? (value as Readonly<Record<string, unknown>>) : undefined

/**
 * The code, type and param of an error body in any of the shapes providers use: OpenAI, Azure,
 * Groq, DeepSeek (`{error: {code, type, param}}`), Anthropic (`{type: "error", error: {type},
 * request_id}`), Mistral (`{object: "error", type, code, param}`), Gemini's OpenAI endpoint
 * (`[{error: {code, status}}]`, `status` as the type). Free text (`message`) is never kept —
 * but Anthropic says "too long" only in it (`prompt is too long: 200251 tokens > 200000
 * maximum`, with no code): that message becomes the code OpenAI uses for the same refusal,
 * `context_length_exceeded`, which the loop's emergency step reads (design 0300).
 * @internal
 */
export const providerErrorOf = (body: unknown): ProviderError => {
  const top = record(Array.isArray(body) ? body[0] : body)
  if (top === undefined) return {}
  const inner = record(top.error) ?? top
  const code = token(inner.code) ?? (isPromptTooLong(inner.message) ? "context_length_exceeded" : undefined)
  const type = token(inner.type) ?? token(inner.status)
  const param = token(inner.param)
  const requestId = token(top.request_id)
  const contextWindow = code === "context_length_exceeded" ? statedWindow(inner.message) : undefined
  return {
    ...(code === undefined ? {} : { code }),
    ...(contextWindow === undefined ? {} : { contextWindow }),
    ...(type === undefined ? {} : { type }),
    ...(param === undefined ? {} : { param }),
    ...(requestId === undefined ? {} : { requestId })
  }
}

/**
 * The window a refusal of a request too long states (design 0361): OpenAI's "This model's maximum
 * context length is 4097 tokens. …", Anthropic's "prompt is too long: 200251 tokens > 200000
 * maximum". Only the number is kept, never the text; the first 1,000 characters are read.
 */
const statedWindow = (message: unknown): number | undefined => {
  if (typeof message !== "string") return undefined
  const head = message.slice(0, 1_000)
  const found = /maximum context length is (\d{1,9}) tokens/i.exec(head) ?? /\btokens > (\d{1,9}) maximum\b/i.exec(head)
  return found === null ? undefined : Number(found[1])
}

/** Anthropic's refusal of a request longer than the context window (its only sign: the message's start). */
const isPromptTooLong = (message: unknown): boolean => typeof message === "string" && /^prompt is too long\b/i.test(message)

/** Error codes and types that mean "no money/quota left": never worth a retry, whatever the status. @internal */
const quotaWords = new Set(["insufficient_quota", "billing_hard_limit_reached", "billing_not_active", "quota_exceeded"])

/** Whether the provider's error says the quota or billing is exhausted. @internal */
export const isQuotaError = (error: ProviderError): boolean =>
  (error.code !== undefined && quotaWords.has(error.code)) || (error.type !== undefined && quotaWords.has(error.type))

/**
 * The error for an HTTP status outside 2xx with what the provider said: its error body's code,
 * type and param, its request id, and its retry hint. A quota error is not retryable. The
 * message names the code (a token), never the body's text. @internal
 */
export const providerStatusError = (
  source: string,
  endpoint: string,
  status: number,
  said: { readonly headers: HeaderRecord; readonly body: unknown; readonly nowMillis: number }
): ModelError => {
  const provider = providerErrorOf(said.body)
  const retryAfter = retryAfterMillis(said.headers, said.nowMillis)
  const requestId = requestIdOf(said.headers) ?? provider.requestId
  const quota = isQuotaError(provider)
  const detail = provider.code ?? provider.type
  return new ModelError({
    retryable: isRetryableStatus(status) && !quota,
    status,
    message: `${source}: ${endpoint} answered ${describeStatus(status)}${detail === undefined ? "" : ` (${detail})`}${
      quota ? ": the quota or billing limit is reached, not retried" : ""
    }`,
    ...(retryAfter === undefined ? {} : { retryAfter: Duration.millis(retryAfter) }),
    ...(provider.code === undefined ? {} : { code: provider.code }),
    ...(provider.type === undefined ? {} : { type: provider.type }),
    ...(provider.param === undefined ? {} : { param: provider.param }),
    ...(provider.contextWindow === undefined ? {} : { contextWindow: provider.contextWindow }),
    ...(requestId === undefined ? {} : { requestId })
  })
}
