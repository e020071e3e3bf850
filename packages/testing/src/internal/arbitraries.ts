/**
 * Arbitraries shared by the suites, generated from the public Schemas with `Arbitrary.make`.
 * Fields the Schemas type as `unknown` but the library documents as JSON (a snapshot, a tool
 * call's arguments) are generated as JSON values, and text fields as arbitrary UTF-16 strings
 * (unicode, control characters, lone surrogates), so a store is checked on what a model can
 * really write.
 *
 * @internal
 */
import * as Arbitrary from "effect/Arbitrary"
import type * as Arr from "effect/Array"
import * as FastCheck from "effect/FastCheck"
import * as Schema from "effect/Schema"
import * as Action from "@polyloop/core/Action"
import * as Ids from "@polyloop/core/Ids"
import * as LoopEvent from "@polyloop/core/LoopEvent"
import * as ModelReply from "@polyloop/core/ModelReply"
import * as ParsedReply from "@polyloop/core/ParsedReply"
import * as RunLog from "@polyloop/core/RunLog"

/** A JSON value (what `JSON.parse` can return); `-0` is normalised to `0`, as JSON does. */
export const jsonValue: FastCheck.Arbitrary<unknown> = FastCheck.jsonValue({ maxDepth: 3 }).map(
  (value) => JSON.parse(JSON.stringify(value)) as unknown
)

/** Any UTF-16 code unit, lone surrogates included. */
const codeUnit: FastCheck.Arbitrary<string> = FastCheck.integer({ min: 0, max: 0xffff }).map((n) => String.fromCharCode(n))

/** Text a model may write: ASCII, full unicode, raw UTF-16 (lone surrogates, NUL), empty. */
export const text = (options?: { readonly maxLength?: number }): FastCheck.Arbitrary<string> => {
  const maxLength = options?.maxLength ?? 40
  return FastCheck.oneof(
    FastCheck.string({ maxLength }),
    FastCheck.string({ unit: "grapheme", maxLength }),
    FastCheck.string({ unit: "binary", maxLength }),
    FastCheck.string({ unit: codeUnit, maxLength })
  )
}

/** A long text (thousands of characters), for storage limits. */
export const longText: FastCheck.Arbitrary<string> = FastCheck.tuple(
  FastCheck.string({ unit: "binary", minLength: 1, maxLength: 16 }),
  FastCheck.integer({ min: 1_000, max: 20_000 })
).map(([unit, length]) => unit.repeat(Math.ceil(length / unit.length)).slice(0, length))

const annotateArbitrary = <A, I>(schema: Schema.Schema<A, I>, arbitrary: FastCheck.Arbitrary<A>): Schema.Schema<A, I> =>
  schema.annotations({ arbitrary: () => () => arbitrary })

const Json = annotateArbitrary(Schema.Unknown, jsonValue)
const Text = annotateArbitrary(Schema.String, text())

const ToolCall = Schema.Struct({ ...Action.ToolCall.fields, arguments: Json })
const ActionSchema = Schema.Union(ToolCall, Action.CodeAction)
const ModelReplySchema = Schema.Struct({ ...ModelReply.ModelReply.to.fields, text: Text })
const ParsedReplySchema = Schema.Union(
  Schema.Struct({ ...ParsedReply.Act.fields, actions: Schema.NonEmptyArray(ActionSchema) }),
  ParsedReply.Finish,
  ParsedReply.NoAction,
  ParsedReply.InvalidDecision
)

/** An action of either language, its arguments JSON. */
export const action: FastCheck.Arbitrary<Action.Action> = Arbitrary.make(ActionSchema)

/** A model reply (text from `text()`). */
export const modelReply: FastCheck.Arbitrary<ModelReply.ModelReply> = Arbitrary.make(ModelReplySchema)

/** A run id, from the `RunId` Schema. */
export const runId: FastCheck.Arbitrary<Ids.RunId> = Arbitrary.make(Ids.RunId)

/** `count` distinct run ids. */
export const runIds = (count: number): FastCheck.Arbitrary<ReadonlyArray<Ids.RunId>> =>
  FastCheck.uniqueArray(runId, { minLength: count, maxLength: count })

const runStarted = Arbitrary.make(Schema.Struct({ ...RunLog.RunStarted.fields, task: Text, snapshot: Json }))
const modelReplied = Arbitrary.make(Schema.Struct({ ...RunLog.ModelReplied.fields, reply: ModelReplySchema }))
const actionResulted = Arbitrary.make(Schema.Struct({ ...RunLog.ActionResulted.fields, action: ActionSchema }))
const stepCompleted = Arbitrary.make(Schema.Struct({ ...RunLog.StepCompleted.fields, decision: ParsedReplySchema }))
const runResumed = Arbitrary.make(RunLog.RunResumed)
const runFinished = Arbitrary.make(RunLog.RunFinished)

/** One store call: the records it writes, in order. */
export type Write =
  | { readonly _tag: "Start"; readonly record: RunLog.RunStarted }
  | { readonly _tag: "Reply"; readonly record: RunLog.ModelReplied }
  | { readonly _tag: "Results"; readonly results: Arr.NonEmptyReadonlyArray<RunLog.ActionResulted> }
  | { readonly _tag: "Complete"; readonly results: ReadonlyArray<RunLog.ActionResulted>; readonly step: RunLog.StepCompleted }
  | { readonly _tag: "Resume"; readonly record: RunLog.RunResumed }
  | { readonly _tag: "Finish"; readonly record: RunLog.RunFinished }

/** The records a write carries. */
export const recordsOf = (write: Write): ReadonlyArray<RunLog.RunRecord> => {
  switch (write._tag) {
    case "Results":
      return write.results
    case "Complete":
      return [...write.results, write.step]
    default:
      return [write.record]
  }
}

/** A generated run: its id and the writes that build its log, in order. */
export interface Run {
  readonly runId: Ids.RunId
  readonly writes: ReadonlyArray<Write>
}

/** All records of a run's first `count` writes. */
export const recordsUpTo = (run: Run, count: number): ReadonlyArray<RunLog.RunRecord> =>
  run.writes.slice(0, count).flatMap(recordsOf)

/** The log a run's first `count` writes must read back as. */
export const logUpTo = (run: Run, count: number): RunLog.RunLog => RunLog.fromRecords(recordsUpTo(run, count))

const step = FastCheck.record({
  reply: modelReplied,
  results: FastCheck.array(actionResulted, { maxLength: 3 }),
  /** How many of the results are written on their own (`appendResults`, one each) before the completion. */
  early: FastCheck.nat({ max: 3 }),
  completion: stepCompleted,
  resumeBefore: FastCheck.option(runResumed, { nil: null }),
  resumeAfter: FastCheck.option(runResumed, { nil: null })
})

/**
 * A valid run shape: `RunStarted`, then steps (a reply, maybe a resume of the interrupted step,
 * none to three results — some written on their own before the completion, the rest with it —
 * and the completion listing them, maybe a resume after it), maybe an unfinished last step
 * (its reply and early results), maybe `RunFinished`. Sequence numbers, step indices, call
 * indices, result ids and `effective` are consistent.
 */
export const run = (
  options?: { readonly minSteps?: number; readonly maxSteps?: number; readonly runId?: Ids.RunId }
): FastCheck.Arbitrary<Run> =>
  FastCheck.record({
    runId: options?.runId === undefined ? runId : FastCheck.constant(options.runId),
    started: runStarted,
    steps: FastCheck.array(step, { minLength: options?.minSteps ?? 0, maxLength: options?.maxSteps ?? 5 }),
    finished: runFinished,
    end: FastCheck.constantFrom("Finished", "Unfinished", "Open")
  }).map(({ end, finished, runId, started, steps }): Run => {
    const writes: Array<Write> = []
    let seq = 0
    const next = () => seq++
    writes.push({ _tag: "Start", record: { ...started, runId, seq: next() } })
    steps.forEach((s, i) => {
      const index = Ids.StepIndex.make(i)
      writes.push({ _tag: "Reply", record: { ...s.reply, step: index, seq: next() } })
      const open = end === "Open" && i === steps.length - 1
      if (s.resumeBefore !== null && !open) writes.push({ _tag: "Resume", record: { ...s.resumeBefore, fromStep: index, seq: next() } })
      const early = Math.min(s.early, s.results.length)
      const results = s.results.map((r, k): RunLog.ActionResulted => ({ ...r, step: index, callIndex: k, resultId: Ids.resultIdFor(i, k), seq: 0 }))
      const numbered: Array<RunLog.ActionResulted> = []
      for (let k = 0; k < early; k++) {
        const result = { ...results[k]!, seq: next() }
        numbered.push(result)
        writes.push({ _tag: "Results", results: [result] })
      }
      if (open) return
      const last = results.slice(early).map((r) => ({ ...r, seq: next() }))
      numbered.push(...last)
      const [first, ...rest] = numbered.map((r) => r.action)
      const decision: ParsedReply.ParsedReply =
        first !== undefined ? ParsedReply.actAll([first, ...rest]) : s.completion.decision._tag === "Act" ? ParsedReply.noAction : s.completion.decision
      writes.push({
        _tag: "Complete",
        results: last,
        step: {
          ...s.completion,
          step: index,
          decision,
          resultIds: numbered.map((r) => r.resultId),
          effective: numbered.some((r) => r.outcome.status === "Executed"),
          seq: next()
        }
      })
      if (s.resumeAfter !== null) {
        writes.push({ _tag: "Resume", record: { ...s.resumeAfter, fromStep: Ids.StepIndex.make(i + 1), seq: next() } })
      }
    })
    if (end === "Finished") writes.push({ _tag: "Finish", record: { ...finished, seq: next() } })
    return { runId, writes }
  })

/** A run whose writes include at least one `completeStep` with a result (two records or more). */
export const runWithResult: FastCheck.Arbitrary<Run> = run({ maxSteps: 4 }).filter((r) =>
  r.writes.some((w) => w._tag === "Complete" && w.results.length > 0)
)

/** A run with long, raw-unicode texts and a large JSON snapshot: storage limits and encodings. */
export const extremeRun: FastCheck.Arbitrary<Run> = FastCheck.record({
  run: run({ maxSteps: 3 }),
  task: longText,
  replyText: longText,
  snapshot: FastCheck.array(jsonValue, { minLength: 50, maxLength: 200 })
}).map(({ replyText, run: r, snapshot, task }): Run => ({
  runId: r.runId,
  writes: r.writes.map((w): Write => {
    if (w._tag === "Start") return { _tag: "Start", record: { ...w.record, task, snapshot } }
    if (w._tag === "Reply") return { _tag: "Reply", record: { ...w.record, reply: { ...w.record.reply, text: replyText } } }
    return w
  })
}))

const LoopEventSchema = Schema.Union(
  LoopEvent.RunStarted,
  LoopEvent.RunResumed,
  LoopEvent.StepStarted,
  Schema.Struct({ ...LoopEvent.ModelReplied.fields, reply: ModelReplySchema }),
  Schema.Struct({ ...LoopEvent.DecisionParsed.fields, decision: ParsedReplySchema }),
  Schema.Struct({ ...LoopEvent.ActionExecuted.fields, action: ActionSchema }),
  LoopEvent.StepCompleted,
  LoopEvent.RunFinished
)

/** A loop event whose numbers are finite (what the loop emits: times come from `Clock`). */
export const loopEvent: FastCheck.Arbitrary<LoopEvent.LoopEvent> = Arbitrary.make(LoopEventSchema).filter(jsonSafe)

/** Does the value survive a JSON round trip (finite numbers, no `undefined` in arrays)? */
export function jsonSafe(value: unknown): boolean {
  if (typeof value === "number") return Number.isFinite(value)
  if (typeof value === "bigint" || typeof value === "function" || typeof value === "symbol") return false
  if (typeof value !== "object" || value === null) return true
  if (Array.isArray(value)) return value.every((v) => v !== undefined && jsonSafe(v))
  return Object.values(value).every((v) => v === undefined || jsonSafe(v))
}

/** One record of each kind, for out-of-sequence writes (their sequence numbers are replaced). */
export const templates = FastCheck.record({
  started: runStarted,
  reply: modelReplied,
  result: actionResulted,
  step: stepCompleted,
  resume: runResumed,
  finished: runFinished
})
