/**
 * `polyloop serve`: a run viewer in the browser. An HTTP server (`@effect/platform`'s
 * `HttpRouter` on `NodeHttpServer`) over a run store, serving a page (the runs list with
 * filters and pages; one run's transcript, updated live while the run is written by any
 * process) and the JSON API the page uses:
 *
 * - `GET /api/runs?status=&agent=&stopReason=&from=&to=&model=&tag=&scorer=&scoreMin=&scoreMax=&children=&page=&pageSize=`
 *   — runs, newest first, filtered and paged, with the values each filter can take; a run's tags
 *   and scores are its experiment's (design 0395); a sub-agent's child run names its `parent`
 *   (verified in the parent's log), and `children=hide` leaves child runs out (design 0412);
 * - `GET /api/runs/<id>` — one run's transcript (`Transcript.toJson`: the document
 *   `polyloop show --json` prints), with the recorded snapshot and its hash, budgets against
 *   their limits, resumes, synthetic observations and the executor's audit text;
 * - `GET /api/runs/<id>/live` and `GET /api/live` — Server-Sent Events fed by polling the store
 *   (`internal/viewer/live.ts`);
 * - `GET /api/runs/<id>/forks` — the run's forks (its parent is in its transcript);
 * - `GET /api/runs/<id>/tree` — the run's sub-agent runs (design 0412): its children, theirs, …,
 *   read from the parents' records breadth first (8 levels, 500 runs at most), each with its
 *   status (`finished`, `unfinished`, `missing`, `unreadable`: never an error but for the root),
 *   tokens and cost by its own model, the descendants' totals, and the run's verified `parent`;
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
 * docs/design/0370-viewer-session-in-its-origin.md, docs/design/0412-viewer-sub-agents.md.
 *
 * The parts live in `internal/serve/`: `app.ts` (the app and its checks), `router.ts` and
 * `runs.ts`, `session.ts`, `decide.ts` (the routes), `streams.ts` (the stream caps), `paths.ts`
 * (405, 404, public paths), `http.ts` (responses), `listen.ts` (TCP, the socket, the host check),
 * `types.ts` (the options and `ServeError`); the viewer's helpers in `internal/viewer/`.
 *
 * @since 0.1.0
 */
import type * as FileSystem from "@effect/platform/FileSystem"
import type * as RunLogStore from "@polyloop/core/RunLogStore"
import type * as Duration from "effect/Duration"
import type * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import type * as Scope from "effect/Scope"
import * as App from "./internal/serve/app.js"
import * as Listen from "./internal/serve/listen.js"
import type * as Types from "./internal/serve/types.js"
import * as Defaults from "./internal/viewer/defaults.js"
import * as Prices from "./internal/viewer/prices.js"

export {
  /** Why the server could not start. */
  ServeError
} from "./internal/serve/types.js"

/** What the app needs to know. */
export type AppOptions = Types.AppOptions

/** How to serve. */
export type Options = Types.Options

/** Where the server listens. */
export type Bound = Types.Bound

/** The address `serve` binds by default. */
export const defaultHost: string = Defaults.host

/** The port `serve` listens on by default. */
export const defaultPort: number = Defaults.port

/** How often live streams poll the store by default. */
export const defaultInterval: Duration.Duration = Defaults.interval

/** A price table for `prices` (`polyloop serve --prices`): per model, per million input and output tokens. */
export type PriceTable = Prices.PriceTable

/** Reads a price table from JSON text; a string says what is wrong with it. */
export const decodePrices: (text: string) => PriceTable | string = Prices.decode

/** The most live streams open at once by default (more answer 503). */
export const defaultMaxStreams: number = Defaults.maxStreams

/** The most live streams one client holds open at once by default (more answer 503; design 0370). */
export const defaultMaxStreamsPerClient: number = Defaults.maxStreamsPerClient

/**
 * The viewer as an HTTP app over the `RunLogStore` in context: the page's files, the JSON API
 * and the live streams (see the module header), behind the checks of design 0340 (the `Host`
 * allowlist, the token, bounded bodies, capped streams). Its live pollers live as long as the
 * scope. Fails with `ServeError { reason: "Assets" }` when the page's files cannot be read.
 */
export const app: typeof App.app = App.app

/** Refuses a non-loopback host unless `exposed`; tells whether the host is loopback. */
export const checkHost: typeof Listen.checkHost = Listen.checkHost

/**
 * Starts the viewer over the `RunLogStore` in context for the life of the scope and tells where
 * it listens. On close it drops the open connections (live streams never end by themselves) and
 * stops listening.
 */
export const serve = (options: Options = {}): Effect.Effect<Bound, Types.ServeError, RunLogStore.RunLogStore | FileSystem.FileSystem | Scope.Scope> =>
  options.socket === undefined ? Listen.serveTcp(options) : Listen.serveSocket(options, options.socket)

/** The viewer as a layer: serves for the life of the layer. */
export const layer = (options: Options = {}): Layer.Layer<never, Types.ServeError, RunLogStore.RunLogStore | FileSystem.FileSystem> =>
  Layer.scopedDiscard(serve(options))
