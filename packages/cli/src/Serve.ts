/**
 * `polyloop serve`: a run viewer in the browser. An HTTP server (`@effect/platform`'s
 * `HttpRouter` on `NodeHttpServer`) over a run store, serving a page (the runs list with
 * filters and pages; one run's transcript, updated live while the run is written by any
 * process) and the JSON API the page uses:
 *
 * - `GET /api/runs?status=&agent=&stopReason=&from=&to=&model=&page=&pageSize=` — runs, newest first, filtered
 *   and paged, with the values each filter can take;
 * - `GET /api/runs/<id>` — one run's transcript (`Transcript.toJson`: the document
 *   `polyloop show --json` prints), with the recorded snapshot and its hash, budgets against
 *   their limits, resumes, synthetic observations and the executor's audit text;
 * - `GET /api/runs/<id>/live` and `GET /api/live` — Server-Sent Events fed by polling the store
 *   (`internal/viewer/live.ts`);
 * - `GET /api/runs/<id>/forks` — the run's forks (its parent is in its transcript);
 * - `GET /api/runs/<id>/export?format=jsonl|json|openai-chat|atif` — the run as `polyloop export`
 *   writes it, as an attachment;
 * - `GET /api/stats?agent=&snapshot=` — what `polyloop stats --json` prints for the same filter
 *   (`groups`), with the plots' histograms and the costs by the price table;
 * - `GET /api/prices` — the price table given to the server (`--prices`), or null;
 * - `GET /api/search?q=&page=` — runs whose task, replies or observations hold a text, by the
 *   store's own query (`RunLogStore.searchRuns`, design 0341), a page at a time (501 for a store
 *   that cannot search);
 * - `POST /api/session` — exchanges the printed URL's one-time login code (`{ login }`) or the
 *   token (`{ token }`) for a session of the page's origin (`{ session }`; design 0370);
 * - `POST /api/runs/<id>/decisions` — a person's decision on a call waiting for approval
 *   (`{ callId, decision: "Approve" | "Reject", reason?, by?, actionHash }`, through
 *   `Approval.decide`; JSON only, from the viewer's own page, recorded under the server's
 *   `decider` with the page's name as a claim: `internal/viewer/decisions.ts`);
 * - errors as `{ "error": { "_tag", "message" } }` with status 400 (bad id, query or body), 401
 *   (no token), 403 (foreign `Host` or `Origin`), 404 (unknown run or path), 405 (another method;
 *   `Allow` says which), 409 (a decision refused: already decided, another action), 413 (a body
 *   over 8 KiB), 415 (not JSON), 500 (the store failed) or 503 (too many live streams).
 *
 * Every request must name an allowed host (loopback, the bound address, `allowedHosts`), and
 * every request for data must carry a credential of the start (design 0370): scripts send
 * `Authorization: Bearer <token>`; the page's URL holds a one-time login code in its fragment,
 * which the page exchanges (`POST /api/session`) for a session bound to its origin, kept in the
 * origin's own storage and sent as `X-Polyloop-Session` (no cookie: cookies reach every port of
 * a host). Live streams share one poller per run, and are capped in all and per client. It binds 127.0.0.1 by
 * default and refuses a non-loopback address unless `exposed` is set (the command sets it only
 * for an explicit `--host`). With `socket` it listens on a Unix socket made 0600 instead, and
 * asks no token (reaching the socket authenticates). The runs list, the statistics and a run's
 * forks are answered from the store's summaries (design 0343). Design: docs/design/0190-viewer.md,
 * docs/design/0340-viewer-security.md, docs/design/0343-summary-columns.md,
 * docs/design/0370-viewer-session-in-its-origin.md.
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
import * as Trajectory from "@polyloop/core/Trajectory"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as ParseResult from "effect/ParseResult"
import * as Ref from "effect/Ref"
import * as Schema from "effect/Schema"
import type * as Scope from "effect/Scope"
import * as Stream from "effect/Stream"
import * as Fs from "node:fs"
import * as Http from "node:http"
import * as Transcript from "./Transcript.js"
import * as Address from "./internal/viewer/address.js"
import * as Auth from "./internal/viewer/auth.js"
import * as Assets from "./internal/viewer/assets.js"
import * as Decisions from "./internal/viewer/decisions.js"
import * as Defaults from "./internal/viewer/defaults.js"
import * as Experiments from "./internal/viewer/experiments.js"
import * as Forks from "./internal/viewer/forks.js"
import * as Live from "./internal/viewer/live.js"
import * as RunsList from "./internal/viewer/runsList.js"
import * as Prices from "./internal/viewer/prices.js"
import * as Search from "./internal/viewer/search.js"
import * as Stats from "./internal/viewer/stats.js"

/** The address `serve` binds by default. */
export const defaultHost: string = Defaults.host

/** The port `serve` listens on by default. */
export const defaultPort: number = Defaults.port

/** How often live streams poll the store by default. */
export const defaultInterval: Duration.Duration = Defaults.interval

/** Why the server could not start. */
export class ServeError extends Schema.TaggedError<ServeError>()("ServeError", {
  reason: Schema.Literal("NonLoopback", "Resolve", "Listen", "Assets", "InvalidOption"),
  host: Schema.String,
  port: Schema.Number,
  message: Schema.String
}) {}

/** A price table for `prices` (`polyloop serve --prices`): per model, per million input and output tokens. */
export type PriceTable = Prices.PriceTable

/** Reads a price table from JSON text; a string says what is wrong with it. */
export const decodePrices: (text: string) => PriceTable | string = Prices.decode

/** The most live streams open at once by default (more answer 503). */
export const defaultMaxStreams: number = Defaults.maxStreams

/** The most live streams one client holds open at once by default (more answer 503; design 0370). */
export const defaultMaxStreamsPerClient: number = Defaults.maxStreamsPerClient

/** What the app needs to know. */
export interface AppOptions {
  /** How often live streams poll the store (default 500 ms). */
  readonly interval?: Duration.DurationInput
  /**
   * The address (or name) the server is bound to: with the loopback names and addresses and
   * `allowedHosts`, the hosts a request's `Host` header may name (design 0340). Default 127.0.0.1.
   */
  readonly boundHost?: string
  /** More hosts a request's `Host` may name (the names an exposed viewer is reached by). */
  readonly allowedHosts?: ReadonlyArray<string>
  /** The secret every request for data must carry (cookie or bearer; design 0340). */
  readonly token: string
  /**
   * Requests come through a Unix socket only its owner can open (`Options.socket`): the socket's
   * permissions authenticate them, and the token is not asked for (design 0340, amended).
   */
  readonly socketOnly?: boolean
  /** Who is serving: the identity approval decisions are recorded under (default "polyloop serve"). */
  readonly decider?: string
  /** The most live streams open at once (default 64); more answer 503. */
  readonly maxStreams?: number
  /** The most live streams one client (a browser session, the bearer holder) holds open at once (default 8; design 0370). */
  readonly maxStreamsPerClient?: number
  /**
   * The one-time login code of the page's URL (design 0370; `serve` makes one per start). Without
   * it the app makes one nobody knows: browsers log in with the token only.
   */
  readonly loginCode?: string
  /** The price table the page prices tokens with (`--prices`); none: no costs are shown. */
  readonly prices?: Prices.PriceTable
}

/** How to serve. */
export interface Options extends Omit<AppOptions, "boundHost" | "token"> {
  /** The address (or name) to bind; default 127.0.0.1. */
  readonly host?: string
  /** The port; 0 takes any free port; default 7420. */
  readonly port?: number
  /** Allow a non-loopback address (the user asked for it explicitly). Default false. */
  readonly exposed?: boolean
  /** The secret (default: 256 random bits, new at each start). */
  readonly token?: string
  /**
   * Listen on this Unix socket path instead of TCP (design 0340, amended): created with mode
   * 0600, so only the user who started the server (and root) can connect; no token is asked for.
   * The path must not exist; the socket file is removed when the server stops. Not with `host`.
   */
  readonly socket?: string
}

/** Where the server listens. */
export interface Bound {
  readonly host: string
  readonly port: number
  /**
   * The page's URL, with a one-time login code in its fragment (`/#login=<code>`, design 0370):
   * opening it logs the browser in once (the page keeps a session of its own origin). Not the token.
   */
  readonly url: string
  /** The server's URL without the token (for API clients, which send `Authorization: Bearer <token>`). */
  readonly baseUrl: string
  /** The secret of this start. */
  readonly token: string
  readonly loopback: boolean
  /** The Unix socket the server listens on (`Options.socket`); then `url` and `baseUrl` name `localhost`, reached through it. */
  readonly socket?: string
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
    Effect.mapError(() =>
      apiError(400, "InvalidRunId", `${JSON.stringify((params["runId"] ?? "").slice(0, 200))} is not a valid run id (1 to 200 characters)`)
    )
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

/** The live streams open: in all, and by client (`Auth.clientKey`). */
interface StreamCounts {
  readonly total: number
  readonly byClient: ReadonlyMap<string, number>
}

/** The paths the app answers and the method of each, for 405's `Allow`. */
const routeShapes: ReadonlyArray<readonly [RegExp, string]> = [
  [/^\/$/, "GET"],
  [/^\/favicon\.ico$/, "GET"],
  [/^\/assets\/(?:viewer\.css|viewer\.js|session\.js|chart\.umd\.min\.js|experiments\.js|experiments\.css)$/, "GET"],
  [/^\/api\/session$/, "POST"],
  [/^\/api\/runs$/, "GET"],
  [/^\/experiments$/, "GET"],
  [/^\/api\/experiments(?:\/[^/]+)?$/, "GET"],
  [/^\/api\/live$/, "GET"],
  [/^\/api\/stats$/, "GET"],
  [/^\/api\/prices$/, "GET"],
  [/^\/api\/search$/, "GET"],
  [/^\/api\/runs\/[^/]+$/, "GET"],
  [/^\/api\/runs\/[^/]+\/(?:live|forks|export)$/, "GET"],
  [/^\/api\/runs\/[^/]+\/decisions$/, "POST"]
]

/** The methods a path answers (empty: no such path). */
const allowedMethods = (pathname: string): ReadonlyArray<string> => routeShapes.filter(([shape]) => shape.test(pathname)).map(([, method]) => method)

/**
 * Paths served without a credential: the page's static files and its two HTML pages (they hold
 * no data; the page asks for the login itself) and the login exchange (design 0370).
 */
const isPublic = (pathname: string): boolean =>
  pathname === "/" || pathname === "/experiments" || pathname === "/favicon.ico" || pathname === "/api/session" || pathname.startsWith("/assets/")

/** Paths of live streams, which take the session as `?session=` (an `EventSource` sets no headers). */
const isLiveStream = (pathname: string): boolean => pathname === "/api/live" || /^\/api\/runs\/[^/]+\/live$/.test(pathname)

/** The search parameters of `GET /api/runs/<id>/export`: what `polyloop export --format` writes (default jsonl). */
const ExportQuery = Schema.Struct({
  format: Schema.optionalWith(Schema.Literal("jsonl", "json", "openai-chat", "atif"), { default: () => "jsonl" as const })
})

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

/**
 * The viewer as an HTTP app over the `RunLogStore` in context: the page's files, the JSON API
 * and the live streams (see the module header), behind the checks of design 0340 (the `Host`
 * allowlist, the token, bounded bodies, capped streams). Its live pollers live as long as the
 * scope. Fails with `ServeError { reason: "Assets" }` when the page's files cannot be read.
 */
export const app = (
  options: AppOptions
): Effect.Effect<HttpApp.Default<never, RunLogStore.RunLogStore | Scope.Scope>, ServeError, FileSystem.FileSystem | RunLogStore.RunLogStore | Scope.Scope> =>
  Effect.gen(function*() {
    const interval = options.interval ?? defaultInterval
    const decider = options.decider ?? "polyloop serve"
    const maxStreams = options.maxStreams ?? defaultMaxStreams
    const maxPerClient = options.maxStreamsPerClient ?? defaultMaxStreamsPerClient
    const allowed = Address.allowlist(options.boundHost ?? defaultHost, options.allowedHosts ?? [])
    const secret = yield* Auth.make(options.token, options.loginCode)
    const forks = Forks.make()
    const statsIndex = yield* Stats.make()
    const hub = yield* Live.makeHub(interval)
    const openStreams = yield* Ref.make<StreamCounts>({ total: 0, byClient: new Map() })
    const assets = yield* Assets.load.pipe(
      Effect.mapError((message) => new ServeError({ reason: "Assets", host: "", port: 0, message }))
    )
    const asset = (urlPath: string) => {
      const found = assets.get(urlPath)!
      return HttpServerResponse.text(found.body, { contentType: found.contentType })
    }
    /** The client of a request (its credential was checked before routing). */
    const clientOf = (request: HttpServerRequest.HttpServerRequest): Auth.Client | undefined => {
      if (options.socketOnly === true) return { _tag: "Socket" }
      const url = new URL(request.url, "http://viewer.invalid")
      return secret.identify(request.headers, isLiveStream(url.pathname) ? url.searchParams.get("session") : null)
    }
    type Slot = "Taken" | "Total" | "Client"
    /**
     * A slot for one more live stream of `key`'s client, held for the request's scope, or a 503
     * response: at most `maxStreams` in all and `maxPerClient` per client (design 0370).
     */
    const streamSlot = (key: string) =>
      Effect.acquireRelease(
        Ref.modify(openStreams, (open): readonly [Slot, StreamCounts] => {
          const mine = open.byClient.get(key) ?? 0
          if (open.total >= maxStreams) return ["Total", open]
          if (mine >= maxPerClient) return ["Client", open]
          return ["Taken", { total: open.total + 1, byClient: new Map(open.byClient).set(key, mine + 1) }]
        }),
        (slot) =>
          slot === "Taken"
            ? Ref.update(openStreams, (open): StreamCounts => {
              const byClient = new Map(open.byClient)
              const mine = (byClient.get(key) ?? 1) - 1
              if (mine <= 0) byClient.delete(key)
              else byClient.set(key, mine)
              return { total: open.total - 1, byClient }
            })
            : Effect.void
      ).pipe(Effect.flatMap((slot) =>
        slot === "Taken"
          ? Effect.void
          : Effect.fail(HttpServerResponse.setHeader(
            slot === "Total"
              ? apiError(503, "TooManyStreams", `this viewer holds at most ${maxStreams} live streams open at once; try again later`)
              : apiError(503, "TooManyStreamsForClient", `one client holds at most ${maxPerClient} live streams open at once; close a live page, or try again later`),
            "retry-after",
            "5"
          ))
      ))
    /** A live stream's slot for the client of the request. */
    const requestSlot = Effect.flatMap(HttpServerRequest.HttpServerRequest, (request) => {
      const client = clientOf(request)
      return streamSlot(client === undefined ? "anonymous" : Auth.clientKey(client))
    })
    const router = HttpRouter.empty.pipe(
      HttpRouter.get("/", Effect.sync(() => asset("/"))),
      HttpRouter.get("/favicon.ico", Effect.succeed(HttpServerResponse.empty({ status: 204 }))),
      HttpRouter.get("/assets/viewer.css", Effect.sync(() => asset("/assets/viewer.css"))),
      HttpRouter.get("/assets/viewer.js", Effect.sync(() => asset("/assets/viewer.js"))),
      HttpRouter.get("/assets/session.js", Effect.sync(() => asset("/assets/session.js"))),
      HttpRouter.get("/assets/chart.umd.min.js", Effect.sync(() => asset("/assets/chart.umd.min.js"))),
      // Experiments (design 0320): the page, its script, the list and one experiment.
      HttpRouter.get("/experiments", Effect.sync(() => asset("/experiments"))),
      HttpRouter.get("/assets/experiments.js", Effect.sync(() => asset("/assets/experiments.js"))),
      HttpRouter.get("/assets/experiments.css", Effect.sync(() => asset("/assets/experiments.css")))
    ).pipe(
      HttpRouter.get(
        "/api/experiments",
        respondToFailure(Effect.flatMap(RunLogStore.RunLogStore, (store) =>
          Effect.map(Experiments.list(store), (experiments) => HttpServerResponse.unsafeJson({ experiments }))))
      ),
      HttpRouter.get(
        "/api/experiments/:name",
        respondToFailure(Effect.gen(function*() {
          const { name } = yield* HttpRouter.schemaPathParams(Schema.Struct({ name: Schema.String }))
          const query = yield* HttpServerRequest.schemaSearchParams(Experiments.ExperimentQuery)
          const store = yield* RunLogStore.RunLogStore
          const found = yield* Experiments.document(store, name, query.scorer).pipe(
            Effect.catchTag("ExperimentNotFound", () => Effect.succeed(undefined))
          )
          return found === undefined
            ? apiError(404, "ExperimentNotFound", `no experiment ${JSON.stringify(name)} in the store`)
            : HttpServerResponse.unsafeJson(found)
        }))
      ),
      HttpRouter.get(
        "/api/search",
        respondToFailure(Effect.gen(function*() {
          const query = yield* HttpServerRequest.schemaSearchParams(Search.SearchQuery)
          const store = yield* RunLogStore.RunLogStore
          if (store.searchRuns === undefined) {
            return apiError(501, "SearchUnsupported", "this run store cannot search (it has no searchRuns): see design 0341")
          }
          return HttpServerResponse.unsafeJson(yield* Search.page(store.searchRuns, query))
        }))
      ),
      HttpRouter.get("/api/prices", Effect.sync(() => HttpServerResponse.unsafeJson({ prices: options.prices ?? null }))),
      HttpRouter.get(
        "/api/stats",
        respondToFailure(Effect.gen(function*() {
          const query = yield* HttpServerRequest.schemaSearchParams(Stats.StatsQuery)
          return HttpServerResponse.unsafeJson(yield* statsIndex.document(query, options.prices))
        }))
      ),
      HttpRouter.get(
        "/api/runs",
        respondToFailure(Effect.gen(function*() {
          const query = yield* HttpServerRequest.schemaSearchParams(RunsList.RunsQuery)
          const store = yield* RunLogStore.RunLogStore
          const all = yield* store.listRuns()
          return HttpServerResponse.unsafeJson(RunsList.page(query, all, options.prices))
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
          yield* requestSlot
          return sseResponse(hub.run(runId))
        }))
      ),
      HttpRouter.get(
        "/api/runs/:runId/export",
        respondToFailure(Effect.gen(function*() {
          const runId = yield* runIdParam
          const { format } = yield* HttpServerRequest.schemaSearchParams(ExportQuery)
          const store = yield* RunLogStore.RunLogStore
          const log = yield* store.readLog(runId, { verify: true })
          if (Option.isNone(log.started)) return apiError(404, "RunNotFound", `no run with id ${JSON.stringify(runId)} in the store`)
          const text = yield* Trajectory.render(log, format)
          const file = `${runId.replace(/[^A-Za-z0-9._-]/g, "_")}.${format === "jsonl" ? "jsonl" : "json"}`
          return HttpServerResponse.text(text, {
            contentType: format === "jsonl" ? "application/x-ndjson; charset=utf-8" : "application/json; charset=utf-8",
            headers: { "content-disposition": `attachment; filename="${file}"` }
          })
        }))
      ),
      HttpRouter.get(
        "/api/runs/:runId/forks",
        respondToFailure(Effect.gen(function*() {
          const runId = yield* runIdParam
          return Option.match(yield* forks.forksOf(runId), {
            onNone: () => apiError(404, "RunNotFound", `no run with id ${JSON.stringify(runId)} in the store`),
            onSome: (found) => HttpServerResponse.unsafeJson({ forks: found })
          })
        }))
      ),
      HttpRouter.post(
        "/api/session",
        respondToFailure(Effect.gen(function*() {
          const request = yield* HttpServerRequest.HttpServerRequest
          const refused = Decisions.refusal(request.headers, allowed, "a login")
          if (refused !== undefined) return apiError(refused.status, refused.tag, refused.message)
          const text = yield* request.text.pipe(
            HttpServerRequest.withMaxBodySize(Option.some(Decisions.maxBodyBytes)),
            Effect.mapError(() => apiError(400, "InvalidBody", "the body could not be read"))
          )
          const json = yield* Effect.try({
            try: (): unknown => JSON.parse(text),
            catch: () => apiError(400, "InvalidBody", "the body is not JSON")
          })
          const body = yield* Schema.decodeUnknown(LoginBody, { onExcessProperty: "error" })(json).pipe(
            Effect.mapError(() => apiError(400, "InvalidBody", "the body must be { \"login\": <code> } or { \"token\": <token> }"))
          )
          const session = yield* secret.exchange(body, request.headers["host"] ?? "").pipe(
            Effect.mapError((refusal) => apiError(401, refusal, loginRefusals[refusal]))
          )
          return HttpServerResponse.unsafeJson({ session })
        }))
      ),
      HttpRouter.post(
        "/api/runs/:runId/decisions",
        respondToFailure(Effect.gen(function*() {
          const runId = yield* runIdParam
          const request = yield* HttpServerRequest.HttpServerRequest
          const refused = Decisions.refusal(request.headers, allowed)
          if (refused !== undefined) return apiError(refused.status, refused.tag, refused.message)
          const text = yield* request.text.pipe(
            HttpServerRequest.withMaxBodySize(Option.some(Decisions.maxBodyBytes)),
            Effect.mapError((error) =>
              error.cause instanceof Error && error.cause.message === "maxBytes exceeded"
                ? apiError(413, "TooLarge", `a decision's body is at most ${Decisions.maxBodyBytes} bytes`)
                : apiError(400, "InvalidBody", "the body could not be read")
            )
          )
          const json = yield* Effect.try({
            try: (): unknown => JSON.parse(text),
            catch: () => apiError(400, "InvalidBody", "the body is not JSON")
          })
          const body = yield* Schema.decodeUnknown(Decisions.DecisionBody, { onExcessProperty: "error" })(json).pipe(
            Effect.mapError((error) => apiError(400, "InvalidBody", Decisions.describeIssues(error)))
          )
          const record = yield* Approval.decide({
            runId,
            callId: body.callId,
            decision: body.decision === "Approve" ? Approval.approve : Approval.reject(body.reason ?? ""),
            by: Decisions.recordedBy(body.by, decider),
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
        respondToFailure(Effect.gen(function*() {
          yield* requestSlot
          return sseResponse(hub.runs)
        }))
      )
    )
    // A run id is up to 200 characters, each up to 12 when escaped in the path (find-my-way's
    // default limit of 100 would make long ids unroutable).
    const httpApp = yield* HttpRouter.toHttpApp(router).pipe(HttpRouter.withRouterConfig({ maxParamLength: 4096 }))
    const routed = Effect.catchTag(httpApp, "RouteNotFound", (error) => {
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
    })
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
          message: `refusing to serve on ${host} (${addresses.join(", ")}): it is not a loopback address, so anyone who can reach it could try ` +
            `to read the runs (tasks, replies, tool output), with only the token between them and the runs; pass --host ${host} explicitly to serve there anyway`
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
  options.socket === undefined ? serveTcp(options) : serveSocket(options, options.socket)

const serveTcp = (options: Options): Effect.Effect<Bound, ServeError, RunLogStore.RunLogStore | FileSystem.FileSystem | Scope.Scope> =>
  Effect.gen(function*() {
    const host = options.host ?? defaultHost
    const port = options.port ?? defaultPort
    const loopback = yield* checkHost(host, port, options.exposed ?? false)
    for (const allowedHost of options.allowedHosts ?? []) {
      if (Address.normaliseHost(allowedHost) === undefined) {
        return yield* new ServeError({ reason: "InvalidOption", host, port, message: `--allowed-host ${JSON.stringify(allowedHost)} is not a host name or address` })
      }
    }
    const token = options.token ?? (yield* Auth.generate)
    const loginCode = yield* Auth.generate
    const viewer = yield* app({
      loginCode,
      ...(options.interval === undefined ? {} : { interval: options.interval }),
      ...(options.decider === undefined ? {} : { decider: options.decider }),
      ...(options.allowedHosts === undefined ? {} : { allowedHosts: options.allowedHosts }),
      ...(options.maxStreams === undefined ? {} : { maxStreams: options.maxStreams }),
      ...(options.maxStreamsPerClient === undefined ? {} : { maxStreamsPerClient: options.maxStreamsPerClient }),
      ...(options.prices === undefined ? {} : { prices: options.prices }),
      boundHost: host,
      token
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
    const bare = host.startsWith("[") && host.endsWith("]") ? host.slice(1, -1) : host
    const urlHost = bare.includes(":") ? `[${bare}]` : bare
    const baseUrl = `http://${urlHost}:${boundPort}/`
    return { host, port: boundPort, url: `${baseUrl}#login=${loginCode}`, baseUrl, token, loopback }
  })

/**
 * The viewer on a Unix socket (design 0340, amended): the socket is bound while the process's
 * umask is 0177, so the file is created 0600 (never, even for a moment, open to other users);
 * the umask is restored as soon as the server listens. Requests need no token: reaching the
 * socket is the authentication. The `Host` and `Origin` checks stay (a client names `localhost`).
 */
const serveSocket = (options: Options, socket: string): Effect.Effect<Bound, ServeError, RunLogStore.RunLogStore | FileSystem.FileSystem | Scope.Scope> =>
  Effect.gen(function*() {
    const refuse = (reason: "InvalidOption" | "Listen", message: string) => new ServeError({ reason, host: `unix:${socket}`, port: 0, message })
    if (options.host !== undefined) return yield* refuse("InvalidOption", "--socket and --host exclude each other: a socket has no address")
    if (Fs.existsSync(socket)) return yield* refuse("InvalidOption", `${socket} exists: remove it first (a socket file is never replaced)`)
    const token = options.token ?? (yield* Auth.generate)
    const viewer = yield* app({
      ...(options.interval === undefined ? {} : { interval: options.interval }),
      ...(options.decider === undefined ? {} : { decider: options.decider }),
      ...(options.allowedHosts === undefined ? {} : { allowedHosts: options.allowedHosts }),
      ...(options.maxStreams === undefined ? {} : { maxStreams: options.maxStreams }),
      ...(options.maxStreamsPerClient === undefined ? {} : { maxStreamsPerClient: options.maxStreamsPerClient }),
      ...(options.prices === undefined ? {} : { prices: options.prices }),
      boundHost: "localhost",
      token,
      socketOnly: true
    })
    const nodeServer = Http.createServer()
    // Removed when the server stops (after its own finalizer has closed it).
    yield* Effect.addFinalizer(() => Effect.sync(() => Fs.rmSync(socket, { force: true })))
    const server: HttpServer.HttpServer = yield* Effect.acquireUseRelease(
      Effect.sync(() => process.umask(0o177)),
      () => NodeHttpServer.make(() => nodeServer, { path: socket }),
      (previous) => Effect.sync(() => process.umask(previous))
    ).pipe(
      Effect.mapError((error) =>
        refuse("Listen", `cannot listen on ${socket}: ${error.cause instanceof Error ? error.cause.message : String(error.cause)}`)
      )
    )
    const mode = Fs.statSync(socket).mode & 0o777
    if (mode !== 0o600) return yield* refuse("Listen", `${socket} was created with mode ${mode.toString(8)}, not 600`)
    yield* Effect.addFinalizer(() => Effect.sync(() => nodeServer.closeAllConnections()))
    yield* server.serve(viewer)
    return { host: `unix:${socket}`, port: 0, url: "http://localhost/", baseUrl: "http://localhost/", token, loopback: true, socket }
  })

/** The viewer as a layer: serves for the life of the layer. */
export const layer = (options: Options = {}): Layer.Layer<never, ServeError, RunLogStore.RunLogStore | FileSystem.FileSystem> =>
  Layer.scopedDiscard(serve(options))
