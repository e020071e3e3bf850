/**
 * An error as one line of text (`<Tag>: <message>`), for the run index and `RunFailed`.
 *
 * @internal
 */
import * as Cause from "effect/Cause"

/** `<Tag>: <message>` for tagged errors, the message for others, JSON or `String` otherwise; a `Cause` pretty-printed. */
export const describeError = (error: unknown): string => {
  if (Cause.isCause(error)) return Cause.pretty(error)
  if (typeof error === "object" && error !== null && "message" in error && typeof error.message === "string") {
    const tag = "_tag" in error && typeof error._tag === "string" ? `${error._tag}: ` : ""
    return `${tag}${error.message}`
  }
  try {
    return JSON.stringify(error) ?? String(error)
  } catch {
    return String(error)
  }
}
