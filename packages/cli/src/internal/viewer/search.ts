/**
 * The viewer's search (`GET /api/search?q=&page=&pageSize=`, design 0341): a page of the store's
 * own search (`RunLogStore.searchRuns`), asked for one hit more than the page holds to tell
 * whether another page follows. Nothing but the page is read.
 *
 * @internal
 */
import type { StoreError } from "@polyloop/core/Errors"
import type * as RunLogStore from "@polyloop/core/RunLogStore"
import * as Effect from "effect/Effect"
import * as Schema from "effect/Schema"

/** The default and the largest page of hits. */
export const defaultPageSize = 25
export const maxPageSize = 50

/** The search parameters of `GET /api/search`. */
export const SearchQuery = Schema.Struct({
  q: Schema.String.pipe(Schema.minLength(1), Schema.maxLength(200)),
  page: Schema.optional(Schema.NumberFromString.pipe(Schema.int(), Schema.between(1, 10_000))),
  pageSize: Schema.optional(Schema.NumberFromString.pipe(Schema.int(), Schema.between(1, maxPageSize)))
})
/** @internal */
export type SearchQuery = typeof SearchQuery.Type

/** The page of hits the query asks for, and whether there is another. */
export const page = (
  search: NonNullable<RunLogStore.RunLogStore.Service["searchRuns"]>,
  query: SearchQuery
): Effect.Effect<{ readonly q: string; readonly page: number; readonly pageSize: number; readonly hits: ReadonlyArray<RunLogStore.SearchHit>; readonly more: boolean }, StoreError> => {
  const pageSize = query.pageSize ?? defaultPageSize
  const current = query.page ?? 1
  return Effect.map(search({ text: query.q, limit: Math.min(maxPageSize, pageSize + 1), offset: (current - 1) * pageSize }), (found) => ({
    q: query.q,
    page: current,
    pageSize,
    hits: found.slice(0, pageSize),
    more: found.length > pageSize
  }))
}
