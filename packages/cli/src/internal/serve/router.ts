/**
 * The viewer's routes (see the `Serve` module's header for the API): the page's files, the JSON
 * API and the live streams, each handler's failure answered (`http.ts`).
 *
 * @internal
 */
import * as HttpRouter from "@effect/platform/HttpRouter"
import * as HttpServerRequest from "@effect/platform/HttpServerRequest"
import * as HttpServerResponse from "@effect/platform/HttpServerResponse"
import * as RunLogStore from "@polyloop/core/RunLogStore"
import * as Effect from "effect/Effect"
import * as Schema from "effect/Schema"
import type * as Scope from "effect/Scope"
import type * as Address from "../viewer/address.js"
import type * as Assets from "../viewer/assets.js"
import type * as Auth from "../viewer/auth.js"
import * as Experiments from "../viewer/experiments.js"
import type * as Forks from "../viewer/forks.js"
import type * as Live from "../viewer/live.js"
import type * as Prices from "../viewer/prices.js"
import type * as RunTags from "../viewer/runTags.js"
import type * as RunTree from "../viewer/runTree.js"
import * as Search from "../viewer/search.js"
import * as Stats from "../viewer/stats.js"
import { decide } from "./decide.js"
import { apiError, respondToFailure, runIdParam, sseResponse } from "./http.js"
import * as Runs from "./runs.js"
import { login } from "./session.js"

/** What the routes are made over: one app's state. */
export interface Parts {
  readonly assets: Assets.Assets
  readonly prices: Prices.PriceTable | undefined
  readonly decider: string
  readonly allowed: Address.Allowlist
  readonly secret: Auth.Secret
  readonly forks: Forks.Index
  readonly statsIndex: Stats.Index
  readonly tags: RunTags.Index
  /** The runs list's index of child runs' parents (design 0412). */
  readonly parents: RunTree.Parents
  readonly hub: Live.Hub
  /** A live stream's slot for the client of the request, held for the scope, or a 503 response. */
  readonly requestSlot: Effect.Effect<void, HttpServerResponse.HttpServerResponse, HttpServerRequest.HttpServerRequest | Scope.Scope>
}

/** The viewer's router over one app's parts. */
export const make = (parts: Parts) => {
  const { allowed, assets, decider, forks, hub, parents, prices, requestSlot, secret, statsIndex, tags } = parts
  const asset = (urlPath: string) => {
    const found = assets.get(urlPath)!
    return HttpServerResponse.text(found.body, { contentType: found.contentType })
  }
  return HttpRouter.empty.pipe(
    HttpRouter.get("/", Effect.sync(() => asset("/"))),
    HttpRouter.get("/favicon.ico", Effect.succeed(HttpServerResponse.empty({ status: 204 }))),
    HttpRouter.get("/assets/viewer.css", Effect.sync(() => asset("/assets/viewer.css"))),
    HttpRouter.get("/assets/viewer.js", Effect.sync(() => asset("/assets/viewer.js"))),
    HttpRouter.get("/assets/session.js", Effect.sync(() => asset("/assets/session.js"))),
    HttpRouter.get("/assets/subagents.js", Effect.sync(() => asset("/assets/subagents.js"))),
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
    HttpRouter.get("/api/prices", Effect.sync(() => HttpServerResponse.unsafeJson({ prices: prices ?? null }))),
    HttpRouter.get(
      "/api/stats",
      respondToFailure(Effect.gen(function*() {
        const query = yield* HttpServerRequest.schemaSearchParams(Stats.StatsQuery)
        return HttpServerResponse.unsafeJson(yield* statsIndex.document(query, prices))
      }))
    ),
    HttpRouter.get("/api/runs", Runs.list(prices, tags, parents)),
    HttpRouter.get("/api/runs/:runId", Runs.transcript),
    HttpRouter.get(
      "/api/runs/:runId/live",
      respondToFailure(Effect.gen(function*() {
        const runId = yield* runIdParam
        yield* requestSlot
        return sseResponse(hub.run(runId))
      }))
    ),
    HttpRouter.get("/api/runs/:runId/export", Runs.exported),
    HttpRouter.get("/api/runs/:runId/forks", Runs.forksOf(forks)),
    HttpRouter.get("/api/runs/:runId/tree", Runs.tree(prices)),
    HttpRouter.post("/api/session", login(secret, allowed)),
    HttpRouter.post("/api/runs/:runId/decisions", decide(allowed, decider)),
    HttpRouter.get(
      "/api/live",
      respondToFailure(Effect.gen(function*() {
        yield* requestSlot
        return sseResponse(hub.runs)
      }))
    )
  )
}
