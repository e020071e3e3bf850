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
