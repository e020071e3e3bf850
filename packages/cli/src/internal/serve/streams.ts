/**
 * The viewer's cap on live streams (designs 0340, 0370): at most `maxStreams` open in all and
 * `maxPerClient` per client (`Auth.clientKey`); one more answers 503 with `Retry-After`.
 *
 * @internal
 */
import * as HttpServerResponse from "@effect/platform/HttpServerResponse"
import * as Effect from "effect/Effect"
import * as Ref from "effect/Ref"
import type * as Scope from "effect/Scope"
import { apiError } from "./http.js"

/** The live streams open: in all, and by client (`Auth.clientKey`). */
interface StreamCounts {
  readonly total: number
  readonly byClient: ReadonlyMap<string, number>
}

type Slot = "Taken" | "Total" | "Client"

/**
 * The stream slots of one app: `slot(key)` is a slot for one more live stream of `key`'s
 * client, held for the scope, or a 503 response.
 */
export const make = (
  maxStreams: number,
  maxPerClient: number
): Effect.Effect<(key: string) => Effect.Effect<void, HttpServerResponse.HttpServerResponse, Scope.Scope>> =>
  Effect.map(Ref.make<StreamCounts>({ total: 0, byClient: new Map() }), (openStreams) => (key: string) =>
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
    )))
