/**
 * The viewer as an HTTP app (the `Serve` module's `app`): its state made once (the secret, the
 * live hub, the indexes of forks and statistics, the page's files, the stream slots), the router
 * over it (`router.ts`), and the checks of designs 0340 and 0370 before any route: the `Host`
 * allowlist, the site of API requests, a credential for everything not public.
 *
 * @internal
 */
import type * as FileSystem from "@effect/platform/FileSystem"
import type * as HttpApp from "@effect/platform/HttpApp"
import * as HttpRouter from "@effect/platform/HttpRouter"
import * as HttpServerRequest from "@effect/platform/HttpServerRequest"
import * as HttpServerResponse from "@effect/platform/HttpServerResponse"
import type * as RunLogStore from "@polyloop/core/RunLogStore"
import * as Effect from "effect/Effect"
import type * as Scope from "effect/Scope"
import * as Address from "../viewer/address.js"
import * as Assets from "../viewer/assets.js"
import * as Auth from "../viewer/auth.js"
import * as Decisions from "../viewer/decisions.js"
import * as Defaults from "../viewer/defaults.js"
import * as Forks from "../viewer/forks.js"
import * as Live from "../viewer/live.js"
import * as RunTags from "../viewer/runTags.js"
import * as RunTree from "../viewer/runTree.js"
import * as Stats from "../viewer/stats.js"
import { apiError, securityHeaders } from "./http.js"
import { isLiveStream, isPublic, unrouted } from "./paths.js"
import * as Router from "./router.js"
import * as Streams from "./streams.js"
import { type AppOptions, ServeError } from "./types.js"

/**
 * The viewer as an HTTP app over the `RunLogStore` in context: the page's files, the JSON API
 * and the live streams, behind the checks of design 0340 (the `Host` allowlist, the token,
 * bounded bodies, capped streams). Its live pollers live as long as the scope. Fails with
 * `ServeError { reason: "Assets" }` when the page's files cannot be read.
 */
export const app = (
  options: AppOptions
): Effect.Effect<HttpApp.Default<never, RunLogStore.RunLogStore | Scope.Scope>, ServeError, FileSystem.FileSystem | RunLogStore.RunLogStore | Scope.Scope> =>
  Effect.gen(function*() {
    const interval = options.interval ?? Defaults.interval
    const allowed = Address.allowlist(options.boundHost ?? Defaults.host, options.allowedHosts ?? [])
    const secret = yield* Auth.make(options.token, options.loginCode)
    const statsIndex = yield* Stats.make()
    const hub = yield* Live.makeHub(interval)
    const streamSlot = yield* Streams.make(options.maxStreams ?? Defaults.maxStreams, options.maxStreamsPerClient ?? Defaults.maxStreamsPerClient)
    const assets = yield* Assets.load.pipe(
      Effect.mapError((message) => new ServeError({ reason: "Assets", host: "", port: 0, message }))
    )
    /** The client of a request (its credential was checked before routing). */
    const clientOf = (request: HttpServerRequest.HttpServerRequest): Auth.Client | undefined => {
      if (options.socketOnly === true) return { _tag: "Socket" }
      const url = new URL(request.url, "http://viewer.invalid")
      return secret.identify(request.headers, isLiveStream(url.pathname) ? url.searchParams.get("session") : null)
    }
    /** A live stream's slot for the client of the request. */
    const requestSlot = Effect.flatMap(HttpServerRequest.HttpServerRequest, (request) => {
      const client = clientOf(request)
      return streamSlot(client === undefined ? "anonymous" : Auth.clientKey(client))
    })
    const router = Router.make({
      assets,
      prices: options.prices,
      decider: options.decider ?? "polyloop serve",
      allowed,
      secret,
      forks: Forks.make(),
      statsIndex,
      tags: RunTags.make(),
      parents: RunTree.makeParents(),
      hub,
      requestSlot
    })
    // A run id is up to 200 characters, each up to 12 when escaped in the path (find-my-way's
    // default limit of 100 would make long ids unroutable).
    const httpApp = yield* HttpRouter.toHttpApp(router).pipe(HttpRouter.withRouterConfig({ maxParamLength: 4096 }))
    const routed = Effect.catchTag(httpApp, "RouteNotFound", unrouted)
    const checked = Effect.gen(function*() {
      const request = yield* HttpServerRequest.HttpServerRequest
      const host = request.headers["host"]
      if (!Address.isAllowedHostHeader(host, allowed)) {
        return apiError(
          403,
          "ForeignHost",
          `this viewer answers requests for its own hosts only (loopback, the address it is bound to, --allowed-host), not ${JSON.stringify((host ?? "").slice(0, 200))}`
        )
      }
      const url = new URL(request.url, "http://viewer.invalid")
      if (url.pathname.startsWith("/api/")) {
        // Before the login exchange too: another site's page may not post a guess.
        const site = Decisions.siteRefusal(request.headers)
        if (site !== undefined) return apiError(site.status, site.tag, site.message)
      }
      if (isPublic(url.pathname) || clientOf(request) !== undefined) return yield* routed
      return url.pathname.startsWith("/api/")
        ? apiError(
          401,
          "Unauthorized",
          "this viewer needs a login: open the URL `polyloop serve` printed (the page keeps a session of its own origin), or send Authorization: Bearer <token>"
        )
        : HttpServerResponse.text("Not found", { status: 404 })
    })
    return Effect.map(checked, (response) => HttpServerResponse.setHeaders(response, securityHeaders))
  })
