/**
 * The viewer's run endpoints: `GET /api/runs` (the list, filtered and paged from the store's
 * summaries: `../viewer/runsList.ts`; tags and scores from its experiments: `../viewer/runTags.ts`), `GET /api/runs/<id>` (the transcript), `GET /api/runs/<id>/tree` (its sub-agent runs:
 * `../viewer/runTree.ts`), `GET
 * /api/runs/<id>/forks` (from the summaries, design 0343) and `GET /api/runs/<id>/export` (the run
 * as `polyloop export` writes it, as an attachment).
 *
 * @internal
 */
import * as HttpServerRequest from "@effect/platform/HttpServerRequest"
import * as HttpServerResponse from "@effect/platform/HttpServerResponse"
import * as RunLogStore from "@polyloop/core/RunLogStore"
import * as Trajectory from "@polyloop/core/Trajectory"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import * as Schema from "effect/Schema"
import * as Transcript from "../../Transcript.js"
import type * as Forks from "../viewer/forks.js"
import type * as Prices from "../viewer/prices.js"
import * as RunsList from "../viewer/runsList.js"
import type * as RunTags from "../viewer/runTags.js"
import * as RunTree from "../viewer/runTree.js"
import { respondToFailure, runIdParam, runNotFound } from "./http.js"

/**
 * `GET /api/runs`: a page of the runs list, priced by `prices` when given, with the experiments'
 * tags and scores (design 0395) and each child run's verified parent (design 0412).
 */
export const list = (prices: Prices.PriceTable | undefined, tags: RunTags.Index, parents: RunTree.Parents) =>
  respondToFailure(Effect.gen(function*() {
    const query = yield* HttpServerRequest.schemaSearchParams(RunsList.RunsQuery)
    const store = yield* RunLogStore.RunLogStore
    const all = yield* store.listRuns()
    const annotations = yield* tags.annotations(store, query.scorer === "" ? undefined : query.scorer)
    const parentOf = yield* parents.of(all)
    return HttpServerResponse.unsafeJson(RunsList.page(query, all, prices, annotations, parentOf))
  }))

/** `GET /api/runs/<id>/tree`: the run's sub-agent runs, bounded, and its verified parent (design 0412). */
export const tree = (prices: Prices.PriceTable | undefined) =>
  respondToFailure(Effect.gen(function*() {
    const runId = yield* runIdParam
    return Option.match(yield* RunTree.read(runId, prices), {
      onNone: () => runNotFound(runId),
      onSome: (found) => HttpServerResponse.unsafeJson(found)
    })
  }))

/** `GET /api/runs/<id>`: the run's transcript (`Transcript.toJson`), the log verified. */
export const transcript = respondToFailure(Effect.gen(function*() {
  const runId = yield* runIdParam
  const store = yield* RunLogStore.RunLogStore
  const log = yield* store.readLog(runId, { verify: true })
  return Option.match(Transcript.fromLog(log), {
    onNone: () => runNotFound(runId),
    onSome: (found) => HttpServerResponse.unsafeJson(Transcript.toJson(found))
  })
}))

/** The search parameters of `GET /api/runs/<id>/export`: what `polyloop export --format` writes (default jsonl). */
const ExportQuery = Schema.Struct({
  format: Schema.optionalWith(Schema.Literal("jsonl", "json", "openai-chat", "atif"), { default: () => "jsonl" as const })
})

/** `GET /api/runs/<id>/export?format=`: the run as `polyloop export` writes it, as an attachment. */
export const exported = respondToFailure(Effect.gen(function*() {
  const runId = yield* runIdParam
  const { format } = yield* HttpServerRequest.schemaSearchParams(ExportQuery)
  const store = yield* RunLogStore.RunLogStore
  const log = yield* store.readLog(runId, { verify: true })
  if (Option.isNone(log.started)) return runNotFound(runId)
  const text = yield* Trajectory.render(log, format)
  const file = `${runId.replace(/[^A-Za-z0-9._-]/g, "_")}.${format === "jsonl" ? "jsonl" : "json"}`
  return HttpServerResponse.text(text, {
    contentType: format === "jsonl" ? "application/x-ndjson; charset=utf-8" : "application/json; charset=utf-8",
    headers: { "content-disposition": `attachment; filename="${file}"` }
  })
}))

/** `GET /api/runs/<id>/forks`: the run's forks, from the index of summaries. */
export const forksOf = (forks: Forks.Index) =>
  respondToFailure(Effect.gen(function*() {
    const runId = yield* runIdParam
    return Option.match(yield* forks.forksOf(runId), {
      onNone: () => runNotFound(runId),
      onSome: (found) => HttpServerResponse.unsafeJson({ forks: found })
    })
  }))
