/**
 * Scorers (design 0320, decision 5): Effects from a finished run's answer to a `Score`. A scorer
 * has a name and a version (recorded in the experiment's definition: raise the version when its
 * logic changes). Built in: `exactMatch`, `includes`, `numeric`, `schema`, `custom` and
 * `modelGraded`, whose grader's reply is kept in the score, so re-scoring never calls the grader
 * again unless asked (`regrade`).
 *
 * @since 0.1.0
 */
import type * as Agent from "@polyloop/core/Agent"
import type { ModelError } from "@polyloop/core/Errors"
import type * as ModelClient from "@polyloop/core/ModelClient"
import * as Effect from "effect/Effect"
import * as ParseResult from "effect/ParseResult"
import * as Schema from "effect/Schema"
import type { Sample } from "./Dataset.js"

/** What a scorer is given: the sample, the run's answer (empty when it gave none) and its result. */
export interface Input {
  readonly sample: Sample
  readonly answer: string
  readonly result: Agent.RunResult
  readonly runId: string
  readonly configuration: string
  readonly epoch: number
}

/** A grader's reply, kept in the score (a model-graded scorer's verdict). */
export const Verdict = Schema.Struct({
  model: Schema.String,
  prompt: Schema.String,
  reply: Schema.String,
  inputTokens: Schema.Number,
  outputTokens: Schema.Number
})
/** @since 0.1.0 */
export interface Verdict extends Schema.Schema.Type<typeof Verdict> {}

/** A score: a number (1 correct, 0 incorrect, or any value a scorer defines), with why. */
export const Score = Schema.Struct({
  value: Schema.Number,
  explanation: Schema.optional(Schema.String),
  verdict: Schema.optional(Verdict)
})
/** @since 0.1.0 */
export interface Score extends Schema.Schema.Type<typeof Score> {}

/** A scorer that could not score (a grader's model failed, a custom scorer's failure). */
export class ScorerError extends Schema.TaggedError<ScorerError>()("ScorerError", {
  scorer: Schema.String,
  runId: Schema.String,
  detail: Schema.String,
  cause: Schema.optional(Schema.Defect)
}) {
  override get message(): string {
    return `scorer ${this.scorer} on ${this.runId}: ${this.detail}`
  }
}

/** A scorer. */
export interface Scorer<R = never> {
  readonly name: string
  /** Recorded with the name; raise it when the scorer's logic changes. */
  readonly version: string
  /** Does it call a model (so that `regrade` applies)? */
  readonly graded: boolean
  readonly score: (input: Input) => Effect.Effect<Score, ScorerError, R>
}

/** A scorer from a function. */
export const make = <R = never>(
  name: string,
  version: string,
  score: (input: Input) => Effect.Effect<Score, ScorerError, R>,
  options?: { readonly graded?: boolean }
): Scorer<R> => ({ name, version, graded: options?.graded ?? false, score })

/** A scorer from a pure function (a custom scorer). */
export const custom = (name: string, version: string, score: (input: Input) => Score | number): Scorer =>
  make(name, version, (input) =>
    Effect.sync(() => {
      const value = score(input)
      return typeof value === "number" ? { value } : value
    }))

const targetOf = (input: Input): string => input.sample.target ?? ""
const normalise = (text: string, caseSensitive: boolean): string => {
  const trimmed = text.trim().replace(/\s+/g, " ")
  return caseSensitive ? trimmed : trimmed.toLowerCase()
}

/** 1 when the answer equals the target (trimmed, whitespace collapsed; case-insensitive unless asked), else 0. */
export const exactMatch = (options?: { readonly caseSensitive?: boolean; readonly name?: string }): Scorer =>
  custom(options?.name ?? "exact", `1${options?.caseSensitive === true ? ":cs" : ""}`, (input) => {
    const cs = options?.caseSensitive === true
    const hit = normalise(input.answer, cs) === normalise(targetOf(input), cs)
    return { value: hit ? 1 : 0 }
  })

/** 1 when the answer contains the target (case-insensitive unless asked), else 0. */
export const includes = (options?: { readonly caseSensitive?: boolean; readonly name?: string }): Scorer =>
  custom(options?.name ?? "includes", `1${options?.caseSensitive === true ? ":cs" : ""}`, (input) => {
    const cs = options?.caseSensitive === true
    return { value: normalise(input.answer, cs).includes(normalise(targetOf(input), cs)) ? 1 : 0 }
  })

/** The last number written in a text, if any. */
export const lastNumber = (text: string): number | undefined => {
  const found = text.replace(/,(?=\d{3})/g, "").match(/-?\d+(?:\.\d+)?(?:e[+-]?\d+)?/gi)
  return found === null ? undefined : Number(found[found.length - 1])
}

/** 1 when the last number of the answer is within `tolerance` (absolute, default 0) of the target's number, else 0. */
export const numeric = (options?: { readonly tolerance?: number; readonly relative?: boolean; readonly name?: string }): Scorer => {
  const tolerance = options?.tolerance ?? 0
  const relative = options?.relative === true
  return custom(options?.name ?? "numeric", `1:${tolerance}${relative ? ":rel" : ""}`, (input) => {
    const got = lastNumber(input.answer)
    const want = Number(targetOf(input).trim())
    if (got === undefined) return { value: 0, explanation: "no number in the answer" }
    if (!Number.isFinite(want)) return { value: 0, explanation: "the target is not a number" }
    const bound = relative ? tolerance * Math.abs(want) : tolerance
    return { value: Math.abs(got - want) <= bound ? 1 : 0, explanation: `answer ${got}, target ${want}` }
  })
}

/** 1 when the answer is JSON that decodes with the schema, else 0 with the issues. */
export const schema = <A, I>(name: string, version: string, check: Schema.Schema<A, I>): Scorer => {
  const decode = Schema.decodeUnknownEither(Schema.parseJson(check))
  return custom(name, version, (input) => {
    const decoded = decode(input.answer)
    return decoded._tag === "Right" ? { value: 1 } : { value: 0, explanation: ParseResult.TreeFormatter.formatErrorSync(decoded.left) }
  })
}

/** The default grading prompt: `{input}`, `{target}` and `{answer}` are filled in. */
export const defaultTemplate = "You are grading an answer.\n\nQuestion: {input}\nReference answer: {target}\nSubmitted answer: {answer}\n\n" +
  "Is the submitted answer correct? Reply GRADE: C if it is, GRADE: I if it is not."

/** Reads `GRADE: C` (1) or `GRADE: I` (0) out of a grader's reply; undefined when neither. */
export const readGrade = (reply: string): number | undefined => {
  const found = reply.match(/GRADE:\s*([CI])/i)
  return found === null ? undefined : found[1]!.toUpperCase() === "C" ? 1 : 0
}

/**
 * A model-graded scorer: asks `model` (a `ModelClient` service) with the template filled in, and
 * reads the grade with `grade` (default `readGrade`). The grader's reply is kept in the score.
 */
export const modelGraded = (options: {
  readonly name: string
  readonly version: string
  readonly model: ModelClient.ModelClient.Service
  readonly modelName: string
  readonly template?: string
  readonly grade?: (reply: string) => number | undefined
}): Scorer =>
  make(options.name, options.version, (input) => {
    const prompt = (options.template ?? defaultTemplate)
      .replaceAll("{input}", input.sample.input)
      .replaceAll("{target}", targetOf(input))
      .replaceAll("{answer}", input.answer)
    return options.model.generate({ messages: [{ _tag: "User", text: prompt }], tools: [], settings: { model: options.modelName } }).pipe(
      Effect.mapError((error: ModelError) => new ScorerError({ scorer: options.name, runId: input.runId, detail: `the grader failed: ${error.message}`, cause: error })),
      Effect.flatMap((reply) => {
        const value = (options.grade ?? readGrade)(reply.text)
        if (value === undefined) {
          return Effect.fail(new ScorerError({ scorer: options.name, runId: input.runId, detail: `the grader's reply has no grade: ${reply.text.slice(0, 200)}` }))
        }
        return Effect.succeed<Score>({
          value,
          verdict: { model: options.modelName, prompt, reply: reply.text, inputTokens: reply.usage.inputTokens, outputTokens: reply.usage.outputTokens }
        })
      })
    )
  }, { graded: true })
