/**
 * An agent: everything that decides what the model sees (all in the snapshot) plus the model
 * retry policy (not in the snapshot: it changes nothing the model sees).
 *
 * @since 0.1.0
 */
import * as Duration from "effect/Duration"
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
  modelRetry: ModelRetry
})
/** @since 0.1.0 */
export interface AgentDefinition extends Schema.Schema.Type<typeof AgentDefinition> {}

/** Makes a definition with defaults for the synthetic texts, model settings and retries. */
export const make = (fields: {
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
}): AgentDefinition => ({
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
