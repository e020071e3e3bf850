/**
 * The defaults of `polyloop serve`, apart from `Serve.ts` so that the command line can show
 * them without loading the HTTP server (which every other subcommand would then pay for at
 * start-up).
 *
 * @internal
 */
import * as Duration from "effect/Duration"

/** The address `serve` binds by default. */
export const host = "127.0.0.1"

/** The port `serve` listens on by default. */
export const port = 7420

/** How often live streams poll the store by default. */
export const interval: Duration.Duration = Duration.millis(500)

/** The most live streams open at once by default (more answer 503). */
export const maxStreams = 64

/** The most live streams one client holds open at once by default (design 0370). */
export const maxStreamsPerClient = 8
