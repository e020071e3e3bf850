/**
 * `polyloop serve`: a run viewer in the browser. An HTTP server (`@effect/platform`'s
 * `HttpRouter` on `NodeHttpServer`) over a run store, serving a page (the runs list with
 * filters and pages; one run's transcript, updated live while the run is written by any
 * process) and the JSON API the page uses:
 *
 * - `GET /api/runs?status=&agent=&stopReason=&page=&pageSize=` — runs, newest first, filtered
 *   and paged, with the values each filter can take;
 * - `GET /api/runs/<id>` — one run's transcript (`Transcript.toJson`: the document
 *   `polyloop show --json` prints), with the recorded snapshot and its hash, budgets against
 *   their limits, resumes, synthetic observations and the executor's audit text;
 * - `GET /api/runs/<id>/live` and `GET /api/live` — Server-Sent Events fed by polling the store
 *   (`internal/viewer/live.ts`);
 * - `GET /api/runs/<id>/forks` — the run's forks (its parent is in its transcript);
 * - `POST /api/runs/<id>/decisions` — a person's decision on a call waiting for approval
 *   (`{ callId, decision: "Approve" | "Reject", reason?, by?, actionHash }`, through
 *   `Approval.decide`; JSON only, from the viewer's own page: `internal/viewer/decisions.ts`);
 * - errors as `{ "error": { "_tag", "message" } }` with status 400 (bad id or query), 403
 *   (foreign `Host` or `Origin`), 404 (unknown run or path), 409 (a decision refused: already
 *   decided, another action), 415 (not JSON) or 500 (the store failed).
 *
 * It binds 127.0.0.1 by default and refuses a non-loopback address unless `exposed` is set
 * (the command sets it only for an explicit `--host`). Design: docs/design/0190-viewer.md.
 *
 * @since 0.1.0
 */
import type * as HttpApp from "@effect/platform/HttpApp"
import * as HttpRouter from "@effect/platform/HttpRouter"
import type * as HttpServer from "@effect/platform/HttpServer"
import * as HttpServerRequest from "@effect/platform/HttpServerRequest"
import * as HttpServerResponse from "@effect/platform/HttpServerResponse"
import type * as FileSystem from "@effect/platform/FileSystem"
import * as NodeHttpServer from "@effect/platform-node/NodeHttpServer"
import * as Approval from "@polyloop/core/Approval"
import { RunId } from "@polyloop/core/Ids"
import * as RunLog from "@polyloop/core/RunLog"
import * as RunLogStore from "@polyloop/core/RunLogStore"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as ParseResult from "effect/ParseResult"
import * as Schema from "effect/Schema"
import type * as Scope from "effect/Scope"
import * as Stream from "effect/Stream"
import * as Http from "node:http"
import * as Transcript from "./Transcript.js"
import * as Address from "./internal/viewer/address.js"
import * as Assets from "./internal/viewer/assets.js"
import * as Decisions from "./internal/viewer/decisions.js"
import * as Defaults from "./internal/viewer/defaults.js"
import * as Forks from "./internal/viewer/forks.js"
import * as Live from "./internal/viewer/live.js"
import * as RunsList from "./internal/viewer/runsList.js"

/** The address `serve` binds by default. */
export const defaultHost: string = Defaults.host

/** The port `serve` listens on by default. */
export const defaultPort: number = Defaults.port

/** How often live streams poll the store by default. */
export const defaultInterval: Duration.Duration = Defaults.interval

/** Why the server could not start. */
export class ServeError extends Schema.TaggedError<ServeError>()("ServeError", {
  reason: Schema.Literal("NonLoopback", "Resolve", "Listen", "Assets"),
  host: Schema.String,
  port: Schema.Number,
  message: Schema.String
}) {}

/** What the app needs to know. */
export interface AppOptions {
  /** How often live streams poll the store (default 500 ms). */
  readonly interval?: Duration.DurationInput
  /**
   * Answer only requests whose `Host` header is loopback (or this name): set while bound to
   * loopback, so a foreign page cannot read the runs through DNS rebinding.
   */
  readonly loopbackOnly?: { readonly boundName: string }
  /** Who an approval decision is recorded as made by when the page names no one (default "polyloop serve"). */
  readonly decider?: string
}

/** How to serve. */
export interface Options extends Omit<AppOptions, "loopbackOnly"> {
  /** The address (or name) to bind; default 127.0.0.1. */
  readonly host?: string
  /** The port; 0 takes any free port; default 7420. */
  readonly port?: number
  /** Allow a non-loopback address (the user asked for it explicitly). Default false. */
  readonly exposed?: boolean
}

/** Where the server listens. */
export interface Bound {
  readonly host: string
  readonly port: number
  /** The page's URL. */
  readonly url: string
  readonly loopback: boolean
}

const securityHeaders = {
  "content-security-policy":
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'",
  "x-content-type-options": "nosniff",
  "referrer-policy": "no-referrer",
  "cache-control": "no-store"
}

/** An API error response. */
const apiError = (status: number, tag: string, message: string) =>
  HttpServerResponse.unsafeJson({ error: { _tag: tag, message } }, { status })

const decodeRunId = Schema.decodeUnknown(RunId)
const encodeRecord = Schema.encodeSync(RunLog.RunRecord)

/** The run id of the path (`/api/runs/<id>…`), or a 400 response. */
const runIdParam = Effect.flatMap(HttpRouter.params, (params) =>
  decodeRunId(params["runId"]).pipe(
    Effect.mapError(() => apiError(400, "InvalidRunId", `${JSON.stringify(params["runId"] ?? "")} is not a valid run id (1 to 200 characters)`))
  ))

const sseResponse = (events: Stream.Stream<string>) =>
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

const respondToFailure = <E, R>(
  handler: Effect.Effect<HttpServerResponse.HttpServerResponse, E, R>
): Effect.Effect<HttpServerResponse.HttpServerResponse, never, R> => Effect.catchAll(handler, (error) => Effect.succeed(failureResponse(error)))

/**
 * The viewer as an HTTP app over the `RunLogStore` in context: the page's files, the JSON API
 * and the live streams (see the module header). Fails with `ServeError { reason: "Assets" }`
 * when the page's files cannot be read.
 */
export const app = (
  options: AppOptions = {}
): Effect.Effect<HttpApp.Default<never, RunLogStore.RunLogStore>, ServeError, FileSystem.FileSystem> =>
  Effect.gen(function*() {
    const interval = options.interval ?? defaultInterval
    const decider = options.decider ?? "polyloop serve"
    const forks = Forks.make()
    const assets = yield* Assets.load.pipe(
      Effect.mapError((message) => new ServeError({ reason: "Assets", host: "", port: 0, message }))
    )
    const asset = (urlPath: string) => {
      const found = assets.get(urlPath)!
      return HttpServerResponse.text(found.body, { contentType: found.contentType })
    }
    const router = HttpRouter.empty.pipe(
      HttpRouter.get("/", Effect.succeed(asset("/"))),
      HttpRouter.get("/favicon.ico", Effect.succeed(HttpServerResponse.empty({ status: 204 }))),
      HttpRouter.get("/assets/viewer.css", Effect.succeed(asset("/assets/viewer.css"))),
      HttpRouter.get("/assets/viewer.js", Effect.succeed(asset("/assets/viewer.js"))),
      HttpRouter.get(
        "/api/runs",
        respondToFailure(Effect.gen(function*() {
          const query = yield* HttpServerRequest.schemaSearchParams(RunsList.RunsQuery)
          const store = yield* RunLogStore.RunLogStore
          const all = yield* store.listRuns()
          return HttpServerResponse.unsafeJson(RunsList.page(query, all))
        }))
      ),
      HttpRouter.get(
        "/api/runs/:runId",
        respondToFailure(Effect.gen(function*() {
          const runId = yield* runIdParam
          const store = yield* RunLogStore.RunLogStore
          const log = yield* store.readLog(runId, { verify: true })
          return Option.match(Transcript.fromLog(log), {
            onNone: () => apiError(404, "RunNotFound", `no run with id ${JSON.stringify(runId)} in the store`),
            onSome: (transcript) => HttpServerResponse.unsafeJson(Transcript.toJson(transcript))
          })
        }))
      ),
      HttpRouter.get(
        "/api/runs/:runId/live",
        respondToFailure(Effect.gen(function*() {
          const runId = yield* runIdParam
          const context = yield* Effect.context<RunLogStore.RunLogStore>()
          return sseResponse(Stream.provideContext(Live.run(runId, interval), context))
        }))
      ),
      HttpRouter.get(
        "/api/runs/:runId/forks",
        respondToFailure(Effect.gen(function*() {
          const runId = yield* runIdParam
          return HttpServerResponse.unsafeJson({ forks: yield* forks.forksOf(runId) })
        }))
      ),
      HttpRouter.post(
        "/api/runs/:runId/decisions",
        respondToFailure(Effect.gen(function*() {
          const runId = yield* runIdParam
          const request = yield* HttpServerRequest.HttpServerRequest
          const refused = Decisions.refusal(request.headers)
          if (refused !== undefined) return apiError(refused.status, "Refused", refused.message)
          const body = yield* HttpServerRequest.schemaBodyJson(Decisions.DecisionBody).pipe(
            Effect.mapError((error) =>
              ParseResult.isParseError(error) ? error : apiError(400, "InvalidBody", `the body is not JSON: ${error.message}`)
            )
          )
          const by = body.by?.trim() ?? ""
          const record = yield* Approval.decide({
            runId,
            callId: body.callId,
            decision: body.decision === "Approve" ? Approval.approve : Approval.reject(body.reason ?? ""),
            by: by === "" ? decider : by,
            actionHash: body.actionHash
          }).pipe(
            Effect.mapError((error) =>
              apiError(
                error._tag === "NotSuspended" && error.reason === "Finished" ? 409 : Decisions.statusOf(error._tag),
                error._tag,
                error.message
              )
            )
          )
          return HttpServerResponse.unsafeJson({ decided: encodeRecord(record) })
        }))
      ),
      HttpRouter.get(
        "/api/live",
        Effect.map(Effect.context<RunLogStore.RunLogStore>(), (context) => sseResponse(Stream.provideContext(Live.runs(interval), context)))
      )
    )
    // A run id is up to 200 characters, each up to 12 when escaped in the path (find-my-way's
    // default limit of 100 would make long ids unroutable).
    const httpApp = yield* HttpRouter.toHttpApp(router).pipe(HttpRouter.withRouterConfig({ maxParamLength: 4096 }))
    const routed = Effect.catchTag(httpApp, "RouteNotFound", (error) =>
      Effect.succeed(
        error.request.url.startsWith("/api/")
          ? apiError(404, "NotFound", `no API endpoint ${error.request.method} ${error.request.url.split("?")[0]}`)
          : HttpServerResponse.text("Not found", { status: 404 })
      ))
    const loopbackOnly = options.loopbackOnly
    return Effect.gen(function*() {
      const request = yield* HttpServerRequest.HttpServerRequest
      if (loopbackOnly !== undefined && !Address.isLoopbackHostHeader(request.headers["host"], loopbackOnly.boundName)) {
        return HttpServerResponse.setHeaders(
          apiError(403, "ForeignHost", `this viewer only answers requests for a loopback host, not ${JSON.stringify(request.headers["host"] ?? "")}`),
          securityHeaders
        )
      }
      const response = yield* routed
      return HttpServerResponse.setHeaders(response, securityHeaders)
    })
  })

/** Refuses a non-loopback host unless `exposed`; tells whether the host is loopback. */
export const checkHost = (host: string, port: number, exposed: boolean): Effect.Effect<boolean, ServeError> =>
  Address.resolve(host).pipe(
    Effect.mapError((message) => new ServeError({ reason: "Resolve", host, port, message: `cannot resolve ${host}: ${message}` })),
    Effect.flatMap((addresses) => {
      const loopback = addresses.length > 0 && addresses.every(Address.isLoopbackIp)
      if (loopback || exposed) return Effect.succeed(loopback)
      return Effect.fail(
        new ServeError({
          reason: "NonLoopback",
          host,
          port,
          message: `refusing to serve on ${host} (${addresses.join(", ")}): it is not a loopback address, so anyone who can reach it could read ` +
            `the runs (tasks, replies, tool output) with no authentication; pass --host ${host} explicitly to serve there anyway`
        })
      )
    })
  )

/**
 * Starts the viewer over the `RunLogStore` in context for the life of the scope and tells where
 * it listens. On close it drops the open connections (live streams never end by themselves) and
 * stops listening.
 */
export const serve = (options: Options = {}): Effect.Effect<Bound, ServeError, RunLogStore.RunLogStore | FileSystem.FileSystem | Scope.Scope> =>
  Effect.gen(function*() {
    const host = options.host ?? defaultHost
    const port = options.port ?? defaultPort
    const loopback = yield* checkHost(host, port, options.exposed ?? false)
    const viewer = yield* app({
      ...(options.interval === undefined ? {} : { interval: options.interval }),
      ...(options.decider === undefined ? {} : { decider: options.decider }),
      ...(loopback ? { loopbackOnly: { boundName: host } } : {})
    })
    const nodeServer = Http.createServer()
    const server: HttpServer.HttpServer = yield* NodeHttpServer.make(() => nodeServer, { host, port }).pipe(
      Effect.mapError((error) =>
        new ServeError({
          reason: "Listen",
          host,
          port,
          message: `cannot listen on ${host}:${port}: ${error.cause instanceof Error ? error.cause.message : String(error.cause)}`
        })
      )
    )
    // Runs before the server's own finalizer (which waits for every connection to end).
    yield* Effect.addFinalizer(() => Effect.sync(() => nodeServer.closeAllConnections()))
    yield* server.serve(viewer)
    const address = server.address
    const boundPort = address._tag === "TcpAddress" ? address.port : port
    const urlHost = host.includes(":") && !host.startsWith("[") ? `[${host}]` : host
    return { host, port: boundPort, url: `http://${urlHost}:${boundPort}/`, loopback }
  })

/** The viewer as a layer: serves for the life of the layer. */
export const layer = (options: Options = {}): Layer.Layer<never, ServeError, RunLogStore.RunLogStore | FileSystem.FileSystem> =>
  Layer.scopedDiscard(serve(options))
