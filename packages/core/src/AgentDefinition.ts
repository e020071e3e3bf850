/**
 * An agent: everything that decides what the model sees (all in the snapshot) plus the model
 * retry policy (not in the snapshot: it changes nothing the model sees).
 *
 * @since 0.1.0
 */
import * as Duration from "effect/Duration"
import * as Either from "effect/Either"
import * as JSONSchema from "effect/JSONSchema"
import * as ParseResult from "effect/ParseResult"
import * as Schedule from "effect/Schedule"
import * as HistoryPolicy from "./HistoryPolicy.js"
import * as Schema from "effect/Schema"
import { Budget, ConversationBudget, FiniteDurationFromMillis } from "./Budget.js"
import { ModelError } from "./Errors.js"
import { ModelSettings } from "./ModelSettings.js"
import * as SyntheticObservations from "./SyntheticObservations.js"

/**
 * Retry policy of model calls on a retryable `ModelError`: jittered exponential backoff, and
 * never sooner than the provider's `retryAfter` hint (design 0140). `maxDelay` bounds every
 * wait: a hint beyond it is not waited for, the call fails at once (`exceedsMaxDelay`).
 */
export const ModelRetry = Schema.Struct({
  /** Attempts in all, the first included; 1 means no retry. */
  maxAttempts: Schema.Int.pipe(Schema.positive()),
  baseDelay: FiniteDurationFromMillis,
  /** The longest wait before a retry, the provider's hint included. */
  maxDelay: FiniteDurationFromMillis
})
/** @since 0.1.0 */
export interface ModelRetry extends Schema.Schema.Type<typeof ModelRetry> {}

/** Three attempts, 500 ms doubling up to 10 s. */
export const defaultModelRetry: ModelRetry = {
  maxAttempts: 3,
  baseDelay: Duration.millis(500),
  maxDelay: Duration.seconds(10)
}

/**
 * The `Schedule` a `ModelRetry` stands for, fed the failed call's `ModelError`: jittered
 * exponential backoff capped at `maxDelay`, waiting at least the error's `retryAfter`, for
 * `maxAttempts - 1` retries. (A hint beyond `maxDelay` is refused before, by `exceedsMaxDelay`.)
 */
export const retrySchedule = (retry: ModelRetry): Schedule.Schedule<unknown, ModelError> =>
  Schedule.exponential(retry.baseDelay).pipe(
    Schedule.jittered,
    Schedule.modifyDelay((d) => Duration.min(d, retry.maxDelay)),
    Schedule.intersect(Schedule.recurs(Math.max(0, retry.maxAttempts - 1))),
    Schedule.intersect(Schedule.identity<ModelError>()),
    Schedule.modifyDelay(([, error], delay) =>
      error.retryAfter === undefined ? delay : Duration.max(delay, error.retryAfter)
    )
  )

/**
 * The error to fail with at once when a retryable error asks for a wait beyond `maxDelay`: the
 * same error, its message saying what was asked and what the bound is. `undefined` otherwise.
 */
export const exceedsMaxDelay = (retry: ModelRetry, error: ModelError): ModelError | undefined => {
  const hint = error.retryAfter
  if (!error.retryable || hint === undefined || Duration.lessThanOrEqualTo(hint, retry.maxDelay)) return undefined
  return new ModelError({
    retryable: error.retryable,
    message: `${error.message}; the provider asked to retry after ${Duration.format(hint)}, longer than modelRetry.maxDelay (${
      Duration.format(retry.maxDelay)
    }): not retried`,
    ...(error.status === undefined ? {} : { status: error.status }),
    retryAfter: hint,
    ...(error.code === undefined ? {} : { code: error.code }),
    ...(error.type === undefined ? {} : { type: error.type }),
    ...(error.param === undefined ? {} : { param: error.param }),
    ...(error.requestId === undefined ? {} : { requestId: error.requestId }),
    ...(error.cause === undefined ? {} : { cause: error.cause })
  })
}

/** How text action languages render an observation into history (`{observation}` is replaced). */
export const HistoryRendering = Schema.Struct({
  observationTemplate: Schema.String
})
/** @since 0.1.0 */
export interface HistoryRendering extends Schema.Schema.Type<typeof HistoryRendering> {}

/** Default rendering: `Observation:\n<text>`. */
export const defaultHistoryRendering: HistoryRendering = { observationTemplate: "Observation:\n{observation}" }

/** An agent definition. */
export const AgentDefinition = Schema.Struct({
  name: Schema.String.pipe(Schema.minLength(1)),
  systemPrompt: Schema.String,
  modelSettings: ModelSettings,
  budget: Budget,
  /**
   * A conversation's budget (design 0300): the same items as `budget`, counted over all of a
   * conversation's turns; exhausted, the turn stops with `BudgetExhausted` of scope
   * `"Conversation"` and every later message's turn ends so at once. A single-task run ignores
   * it. In the snapshot.
   */
  conversationBudget: Schema.optional(ConversationBudget),
  syntheticObservations: SyntheticObservations.SyntheticObservations,
  /** Characters of an observation allowed into history; the rest is cut and counted. */
  observationLimit: Schema.optional(Schema.Int.pipe(Schema.positive())),
  historyRendering: Schema.optional(HistoryRendering),
  /**
   * Whether a reply may call several tools that the step then runs (design 0150). When false,
   * the model clients ask the provider for one call per reply (`parallel_tool_calls: false`
   * where it has it) and a reply with several actions is an `InvalidDecision`. Unset: true for a
   * new run, and, for a run started before the setting existed, what that run ran with (false).
   * In the snapshot.
   */
  parallelToolCalls: Schema.optional(Schema.Boolean),
  /**
   * How many actions of one step may run at once, started in call order (default 1: one after
   * the other). History and the log as read stay in call order. Not in the snapshot.
   */
  actionConcurrency: Schema.optional(Schema.Int.pipe(Schema.positive())),
  /**
   * What the model is sent of the history (design 0300): `HistoryPolicy.keepAll` (the default)
   * or `HistoryPolicy.maskObservations(…)`. The log keeps everything either way. In the snapshot.
   */
  history: Schema.optional(HistoryPolicy.HistoryPolicy),
  /**
   * How many answers that do not decode against `output` a turn allows (design 0400); the one
   * after the last stops the run with `InvalidOutput`. Default 3. In the snapshot (with `output`).
   */
  outputAttempts: Schema.optional(Schema.Int.pipe(Schema.positive())),
  modelRetry: ModelRetry
})

/** The default `outputAttempts`. */
export const defaultOutputAttempts = 3

/** The default text fed back after an answer that does not decode (`{issues}`: the parse error). */
export const defaultInvalidOutput =
  "Your final answer was not used: it must be JSON matching the answer's schema, and it is not:\n{issues}\nReply again with the corrected answer only."

/**
 * An agent's output schema (design 0400), as the loop uses it: the name a provider is told, the
 * JSON Schema, whether the provider is asked to constrain its text (`constrain`) and strictly
 * (`strict`), and the decoders made from the schema. It holds only functions that return `A`,
 * so an `Output<A>` is an `Output<unknown>`.
 */
export interface Output<out A> {
  readonly name: string
  /** `JSONSchema.make` of the schema. */
  readonly jsonSchema: unknown
  readonly strict: boolean
  readonly constrain: boolean
  /** The text fed back after an answer that does not decode (`{issues}` is filled). */
  readonly invalid: string
  /** An answer text read as JSON and decoded: the value and its encoded form (a JSON value), or the parse error as text. */
  readonly decodeAnswer: (text: string) => Either.Either<{ readonly value: A; readonly encoded: unknown }, string>
  /** A recorded encoded output decoded back, or the parse error as text. */
  readonly decodeRecorded: (encoded: unknown) => Either.Either<A, string>
}

/** An agent definition; `A` is the type of its final answer when it has an output schema (design 0400). */
export interface AgentDefinition<out A = unknown> extends Schema.Schema.Type<typeof AgentDefinition> {
  /** The output schema's use (design 0400); absent: the answer is text. In the snapshot. */
  readonly output?: Output<A>
}

/** The JSON Schema an output schema is described by (`JSONSchema.make`). */
export const jsonSchemaOf = <A, I>(schema: Schema.Schema<A, I>): unknown => JSONSchema.make(schema)

/** The deepest nesting of arrays and objects an answer's JSON may have (design 0400). */
export const maxAnswerDepth = 256

/** The longest parse error fed back to the model; the rest is cut and counted. */
export const maxIssuesLength = 4000

/**
 * The nesting depth of a JSON text's arrays and objects, counted in one pass (brackets inside
 * strings skipped). An answer deeper than `maxAnswerDepth` is refused before decoding: formatting
 * the parse error of such a value recurses once per level and would overflow the stack.
 */
const depthOf = (text: string): number => {
  let depth = 0
  let max = 0
  let inString = false
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i)
    if (inString) {
      if (c === 92) i++ // a backslash escapes the next character
      else if (c === 34) inString = false
    } else if (c === 34) inString = true
    else if (c === 91 || c === 123) {
      depth++
      if (depth > max) max = depth
    } else if (c === 93 || c === 125) depth--
  }
  return max
}

const cut = (issues: string): string =>
  issues.length <= maxIssuesLength ? issues : `${issues.slice(0, maxIssuesLength)}… (${issues.length - maxIssuesLength} more characters)`

/** Makes the `Output` of a schema. */
export const makeOutput = <A, I>(schema: Schema.Schema<A, I>, options: {
  readonly name?: string | undefined
  readonly strict?: boolean | undefined
  readonly constrain?: boolean | undefined
  readonly invalid?: string | undefined
} = {}): Output<A> => {
  const fromText = Schema.decodeUnknownEither(Schema.parseJson(schema))
  const encode = Schema.encodeEither(schema)
  const decode = Schema.decodeUnknownEither(schema)
  const issues = (error: ParseResult.ParseError): string => cut(ParseResult.TreeFormatter.formatErrorSync(error))
  return {
    name: options.name ?? "answer",
    jsonSchema: jsonSchemaOf(schema),
    strict: options.strict ?? false,
    constrain: options.constrain ?? true,
    invalid: options.invalid ?? defaultInvalidOutput,
    decodeAnswer: (text) =>
      depthOf(text) > maxAnswerDepth
        ? Either.left(`the answer's JSON nests deeper than ${maxAnswerDepth} levels`)
        : Either.flatMap(Either.mapLeft(fromText(text), issues), (value) =>
        Either.match(encode(value), {
          onLeft: (error) => Either.left(issues(error)),
          // The encoded side as JSON holds it (a JSON value, as the log stores it).
          onRight: (encoded) => Either.right({ value, encoded: JSON.parse(JSON.stringify(encoded)) as unknown })
        })),
    decodeRecorded: (encoded) => Either.mapLeft(decode(encoded), issues)
  }
}

/** The text fed back after an answer that does not decode, filled with its parse error. */
export const invalidOutputText = (output: Output<unknown>, issues: string): string => output.invalid.split("{issues}").join(issues)

/** What `make` takes besides an output schema. */
export interface Fields {
  readonly name: string
  readonly systemPrompt: string
  readonly budget: AgentDefinition["budget"]
  readonly conversationBudget?: ConversationBudget
  readonly modelSettings?: ModelSettings
  readonly syntheticObservations?: Partial<SyntheticObservations.SyntheticObservations>
  readonly observationLimit?: number
  readonly historyRendering?: HistoryRendering
  readonly parallelToolCalls?: boolean
  readonly actionConcurrency?: number
  readonly history?: HistoryPolicy.HistoryPolicy
  readonly modelRetry?: ModelRetry
}

/** An output schema and how it is used (design 0400). */
export interface OutputFields<A, I> {
  /** The final answer's schema: the answer is JSON decoded against it, and `RunResult.output` is typed by it. */
  readonly output: Schema.Schema<A, I>
  /** Answers that may fail to decode in a turn (default 3). */
  readonly outputAttempts?: number
  /** The name the provider is told (default `"answer"`). */
  readonly outputName?: string
  /** Ask for the provider's strict mode (OpenAI `strict`; refuses optional members). Default false. */
  readonly strictOutput?: boolean
  /** Ask the provider to constrain its text to the schema (default true; false for text action languages). */
  readonly constrainOutput?: boolean
  /** The text fed back after an answer that does not decode (`{issues}`: the parse error). */
  readonly invalidOutput?: string
}

/**
 * Makes a definition with defaults for the synthetic texts, model settings and retries; with an
 * `output` schema, an `AgentDefinition<A>` whose runs' answers are decoded against it.
 */
export function make<A, I>(fields: Fields & OutputFields<A, I>): AgentDefinition<A>
export function make(fields: Fields): AgentDefinition
export function make<A, I>(fields: Fields & Partial<OutputFields<A, I>>): AgentDefinition<A> {
  const output = fields.output
  return {
    ...base(fields),
    ...(output === undefined ? {} : {
      outputAttempts: fields.outputAttempts ?? defaultOutputAttempts,
      output: makeOutput(output, { name: fields.outputName, strict: fields.strictOutput, constrain: fields.constrainOutput, invalid: fields.invalidOutput })
    })
  }
}

const base = (fields: Fields): Schema.Schema.Type<typeof AgentDefinition> => ({
  name: fields.name,
  systemPrompt: fields.systemPrompt,
  modelSettings: fields.modelSettings ?? {},
  budget: fields.budget,
  ...(fields.conversationBudget === undefined ? {} : { conversationBudget: fields.conversationBudget }),
  syntheticObservations: { ...SyntheticObservations.defaults, ...fields.syntheticObservations },
  ...(fields.observationLimit === undefined ? {} : { observationLimit: fields.observationLimit }),
  ...(fields.historyRendering === undefined ? {} : { historyRendering: fields.historyRendering }),
  ...(fields.parallelToolCalls === undefined ? {} : { parallelToolCalls: fields.parallelToolCalls }),
  ...(fields.actionConcurrency === undefined ? {} : { actionConcurrency: fields.actionConcurrency }),
  ...(fields.history === undefined ? {} : { history: fields.history }),
  modelRetry: fields.modelRetry ?? defaultModelRetry
})
