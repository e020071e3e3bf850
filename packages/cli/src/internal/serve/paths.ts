/**
 * The viewer's paths: which it answers and with which method (405's `Allow`, 404 otherwise),
 * which are public, which are live streams.
 *
 * @internal
 */
import type * as HttpServerError from "@effect/platform/HttpServerError"
import * as HttpServerResponse from "@effect/platform/HttpServerResponse"
import * as Effect from "effect/Effect"
import { apiError } from "./http.js"

/** The paths the app answers and the method of each, for 405's `Allow`. */
const routeShapes: ReadonlyArray<readonly [RegExp, string]> = [
  [/^\/$/, "GET"],
  [/^\/favicon\.ico$/, "GET"],
  [/^\/assets\/(?:viewer\.css|viewer\.js|session\.js|subagents\.js|chart\.umd\.min\.js|experiments\.js|experiments\.css)$/, "GET"],
  [/^\/api\/session$/, "POST"],
  [/^\/api\/runs$/, "GET"],
  [/^\/experiments$/, "GET"],
  [/^\/api\/experiments(?:\/[^/]+)?$/, "GET"],
  [/^\/api\/live$/, "GET"],
  [/^\/api\/stats$/, "GET"],
  [/^\/api\/prices$/, "GET"],
  [/^\/api\/search$/, "GET"],
  [/^\/api\/runs\/[^/]+$/, "GET"],
  [/^\/api\/runs\/[^/]+\/(?:live|forks|export|tree)$/, "GET"],
  [/^\/api\/runs\/[^/]+\/decisions$/, "POST"]
]

/** The methods a path answers (empty: no such path). */
const allowedMethods = (pathname: string): ReadonlyArray<string> => routeShapes.filter(([shape]) => shape.test(pathname)).map(([, method]) => method)

/**
 * Paths served without a credential: the page's static files and its two HTML pages (they hold
 * no data; the page asks for the login itself) and the login exchange (design 0370).
 */
export const isPublic = (pathname: string): boolean =>
  pathname === "/" || pathname === "/experiments" || pathname === "/favicon.ico" || pathname === "/api/session" || pathname.startsWith("/assets/")

/** Paths of live streams, which take the session as `?session=` (an `EventSource` sets no headers). */
export const isLiveStream = (pathname: string): boolean => pathname === "/api/live" || /^\/api\/runs\/[^/]+\/live$/.test(pathname)

/** The answer to a path the router has no route for: 405 with `Allow` when another method has one, else 404. */
export const unrouted = (error: HttpServerError.RouteNotFound): Effect.Effect<HttpServerResponse.HttpServerResponse> => {
  const pathname = error.request.url.split("?")[0]!
  const methods = allowedMethods(pathname)
  if (methods.length > 0) {
    return Effect.succeed(HttpServerResponse.setHeader(
      apiError(405, "MethodNotAllowed", `${pathname.slice(0, 300)} answers ${methods.join(", ")}, not ${error.request.method}`),
      "allow",
      methods.join(", ")
    ))
  }
  return Effect.succeed(
    pathname.startsWith("/api/")
      ? apiError(404, "NotFound", `no API endpoint ${error.request.method} ${pathname.slice(0, 300)}`)
      : HttpServerResponse.text("Not found", { status: 404 })
  )
}
