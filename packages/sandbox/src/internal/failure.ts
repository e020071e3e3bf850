/**
 * Why a session could not serve an action (never leaves the process: the executor turns it
 * into an `EnvError` outcome).
 *
 * @internal
 */
import * as Data from "effect/Data"

/** The sandbox could not serve: it did not start, broke its protocol, its limits could not be set, or its state could not be stored or restored. */
export class SessionFailure extends Data.TaggedError("SessionFailure")<{
  readonly reason: "Start" | "Protocol" | "Snapshot" | "Restore" | "Store" | "Limit"
  readonly message: string
}> {}
