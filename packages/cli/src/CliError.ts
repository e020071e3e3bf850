/**
 * The command's own failure, and the one-line description of every failure it can meet: a
 * user of the command sees `polyloop: <what went wrong>` and a non-zero exit code, never a stack
 * trace.
 *
 * @since 0.1.0
 */
import * as Data from "effect/Data"
import * as Predicate from "effect/Predicate"
import { ModelError } from "@polyloop/core/Errors"

/** A failure the command explains in one line (missing file, unknown run id, bad option). */
export class CliError extends Data.TaggedError("CliError")<{ readonly message: string }> {}

/**
 * One line, whatever the failure: typed errors by their message, anything else by its text. A
 * `ModelError` also names what the provider said (design 0140): its error code, type and param,
 * the retry hint and the request id to quote to its support.
 */
export const describe = (error: unknown): string => {
  const details = error instanceof ModelError ? error.providerDetails : ""
  const text = Predicate.hasProperty(error, "message") && typeof error.message === "string" && error.message.length > 0
    ? error.message
    : Predicate.hasProperty(error, "_tag") && typeof error._tag === "string"
    ? error._tag
    : String(error)
  const tag = Predicate.hasProperty(error, "_tag") && typeof error._tag === "string" && error._tag !== "CliError" ? error._tag : undefined
  const line = text.replace(/\s*\n\s*/g, " ").trim()
  const described = tag === undefined || line.startsWith(tag) ? line : `${tag}: ${line}`
  return details === "" ? described : `${described} [${details}]`
}
