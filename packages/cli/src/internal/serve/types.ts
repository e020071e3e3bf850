/**
 * The viewer's option and address types and its start error, defined here so that the modules
 * of `internal/serve/` and the public `Serve` module (which re-exports them) share them without
 * importing each other.
 *
 * @internal
 */
import type * as Duration from "effect/Duration"
import * as Schema from "effect/Schema"
import type * as Prices from "../viewer/prices.js"

/** Why the server could not start. */
export class ServeError extends Schema.TaggedError<ServeError>()("ServeError", {
  reason: Schema.Literal("NonLoopback", "Resolve", "Listen", "Assets", "InvalidOption"),
  host: Schema.String,
  port: Schema.Number,
  message: Schema.String
}) {}

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
