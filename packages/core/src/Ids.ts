/**
 * Identifiers: the caller-chosen run id, step indices and result ids.
 *
 * @since 0.1.0
 */
import * as ParseResult from "effect/ParseResult"
import * as Schema from "effect/Schema"

/** A caller-chosen run identifier: one run of an agent on one task. */
export const RunId = Schema.String.pipe(
  Schema.minLength(1, { message: () => "a run id must not be empty" }),
  Schema.maxLength(200, { message: () => "a run id is at most 200 characters" }),
  Schema.brand("@polyloop/RunId")
)
/** @since 0.1.0 */
export type RunId = typeof RunId.Type

/** Makes a `RunId`, throwing on an empty or over-long string (use `Schema.decode(RunId)` for a typed error). */
export const runId = (value: string): RunId => RunId.make(value)

/**
 * Why a new run cannot take this id, if it cannot: a NUL (PostgreSQL refuses it in text) or a
 * lone surrogate (UTF-8 makes every one U+FFFD, so two such ids would share one stored log). A
 * run id names a log in every store; these do not. `undefined` when the id is portable.
 */
export const unportableRunId = (value: string): string | undefined =>
  value.includes("\u0000")
    ? "a run id must not hold a NUL character (PostgreSQL cannot store it)"
    : loneSurrogate.test(value)
    ? "a run id must be well-formed Unicode: a lone surrogate is stored as U+FFFD, so two such ids would share one log"
    : undefined

/** A UTF-16 surrogate without its pair. @internal */
export const loneSurrogate = /[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/

/**
 * A conversation's message id (design 0360): the caller's idempotency key for one message,
 * checked as a run id is (1–200 characters).
 */
export const MessageId = Schema.String.pipe(
  Schema.minLength(1, { message: () => "a message id must not be empty" }),
  Schema.maxLength(200, { message: () => "a message id is at most 200 characters" })
)

const decodeMessageId = Schema.decodeUnknownEither(MessageId)

/**
 * Why a conversation cannot take a message (design 0360): an id that is not a `MessageId`, or a
 * text with nothing to read (providers refuse empty text); `undefined` when it can.
 */
export const messageIssues = (message: { readonly messageId: string; readonly text: string }): string | undefined => {
  const id = decodeMessageId(message.messageId)
  if (id._tag === "Left") return ParseResult.TreeFormatter.formatErrorSync(id.left)
  if (message.text.trim() === "") return "a message's text must not be empty or only whitespace (providers refuse empty text)"
  return undefined
}

/** The index of a step in a run, counted from 0. */
export const StepIndex = Schema.Int.pipe(Schema.nonNegative(), Schema.brand("@polyloop/StepIndex"))
/** @since 0.1.0 */
export type StepIndex = typeof StepIndex.Type

/** The identifier of an `ActionResulted` record; deterministic: `result_<step>`. */
export const ResultId = Schema.String.pipe(Schema.brand("@polyloop/ResultId"))
/** @since 0.1.0 */
export type ResultId = typeof ResultId.Type

/**
 * The deterministic result id of the action at `callIndex` of a step: `result_<step>` for the
 * first (the id a one-action step has always had), `result_<step>_<callIndex>` after it.
 */
export const resultIdFor = (step: number, callIndex: number = 0): ResultId =>
  ResultId.make(callIndex === 0 ? `result_${step}` : `result_${step}_${callIndex}`)

/** A sequence number of a record within its run, counted from 0 (the `RunStarted` record). */
export const Seq = Schema.Int.pipe(Schema.nonNegative())
