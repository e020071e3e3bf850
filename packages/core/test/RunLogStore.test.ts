/**
 * The store front's encoding and reading (`RunLogStore.make`):
 *
 * - `encodeRecord` writes exactly the JSON text Schema's encode wrote before the fast path
 *   (any record from `Arbitrary.make(RunRecord)`, and the same records with their keys in
 *   another order or with excess properties, which take the slow path);
 * - a record whose JSON would not read back as the record (NaN usage, Infinity elapsed, a
 *   bigint, NaN, `undefined` or a `Date` inside tool-call arguments, a cycle) is refused with
 *   `StoreError { reason: "Encode" }` and nothing is written;
 * - `readLog` trusts the rows the store wrote but still refuses what `JSON.parse` and the
 *   shape check see (`Decode` for text that is not a record, `Corrupt` for gaps, duplicates and
 *   a first record that is not `RunStarted`); `readLog(…, { verify: true })` and `verifyLog`
 *   decode every record with its schema and refuse a row whose fields do not decode.
 */
import { assert, describe, it } from "@effect/vitest"
import * as Action from "@polyloop/core/Action"
import type { StoreError } from "@polyloop/core/Errors"
import * as Ids from "@polyloop/core/Ids"
import * as ModelReply from "@polyloop/core/ModelReply"
import * as ParsedReply from "@polyloop/core/ParsedReply"
import * as RunLog from "@polyloop/core/RunLog"
import * as RunLogStore from "@polyloop/core/RunLogStore"
import * as Arbitrary from "effect/Arbitrary"
import * as Effect from "effect/Effect"
import * as FastCheck from "effect/FastCheck"
import * as Option from "effect/Option"
import * as Schema from "effect/Schema"
import * as RecordJson from "../src/internal/recordJson.js"

const schemaJson = (record: RunLog.RunRecord): string => JSON.stringify(Schema.encodeSync(RunLog.RunRecord)(record))

/** The same value with every object's keys in reverse order (a record built in another order). */
const reversedKeys = (value: unknown): unknown => {
  if (Array.isArray(value)) return value.map(reversedKeys)
  if (typeof value !== "object" || value === null) return value
  const out: Record<string, unknown> = {}
  // Defined, not assigned: a `__proto__` key (fast-check makes them) stays an own property.
  for (const key of Object.keys(value).reverse()) {
    Object.defineProperty(out, key, { value: reversedKeys((value as Record<string, unknown>)[key]), enumerable: true, writable: true, configurable: true })
  }
  return out
}

/** The same record with an excess property on the record and on each typed struct inside it. */
const withExcess = (record: RunLog.RunRecord): RunLog.RunRecord => {
  const extra = { extra: "not in the schema", when: 1 }
  switch (record._tag) {
    case "ModelReplied":
      return { ...record, ...extra, reply: { ...record.reply, raw: { provider: "x" }, usage: { ...record.reply.usage, ...extra } } } as RunLog.RunRecord
    case "StepCompleted":
      return { ...record, ...extra, usage: { ...record.usage, cached: 3 } } as RunLog.RunRecord
    case "ActionResulted":
      return { ...record, ...extra, outcome: { ...record.outcome, ...extra } } as RunLog.RunRecord
    default:
      return { ...record, ...extra } as RunLog.RunRecord
  }
}

describe("RunLogStore.encodeRecord", () => {
  it.prop(
    "writes exactly the JSON text of Schema's encode, for any record",
    [Arbitrary.make(RunLog.RunRecord)],
    ([record]) => {
      assert.strictEqual(RunLogStore.encodeRecord(record), schemaJson(record))
    },
    { fastCheck: { numRuns: 500 } }
  )

  it.prop(
    "writes Schema's text for records whose keys come in another order or carry excess properties",
    [Arbitrary.make(RunLog.RunRecord)],
    ([record]) => {
      const reordered = reversedKeys(record) as RunLog.RunRecord
      assert.strictEqual(RunLogStore.encodeRecord(reordered), schemaJson(reordered))
      assert.deepStrictEqual(JSON.parse(RunLogStore.encodeRecord(reordered)), JSON.parse(schemaJson(record)), "the same JSON value")
      const excess = withExcess(record)
      assert.strictEqual(RunLogStore.encodeRecord(excess), schemaJson(record), "excess properties are dropped, as Schema drops them")
    },
    { fastCheck: { numRuns: 200 } }
  )

  it.prop(
    "what is written reads back, through the trusted read and through verifyLog, as the record",
    [Arbitrary.make(RunLog.RunRecord)],
    ([record]) => {
      const text = RunLogStore.encodeRecord(record)
      const decoded = Schema.decodeSync(Schema.parseJson(RunLog.RunRecord))(text)
      assert.deepStrictEqual(JSON.parse(text), JSON.parse(schemaJson(decoded)))
    },
    { fastCheck: { numRuns: 200 } }
  )

  it.prop(
    "writes Schema's text for any string: quotes, backslashes, control characters, lone surrogates, astral characters",
    [FastCheck.oneof(FastCheck.string({ unit: "binary" }), FastCheck.string({ unit: "grapheme" }), FastCheck.constantFrom('"', "\\", "\u0000", "\u001f", "\u2028", "\ud800", "\udfff", "a\ud83d\ude00b", "\ude00\ud83d"))],
    ([text]) => {
      const record: RunLog.RunRecord = replied(ModelReply.make({ text, toolCalls: [{ id: text, name: text, argumentsText: text }], finishReason: text }))
      assert.strictEqual(RunLogStore.encodeRecord(record), schemaJson(record))
      const observed = { ...result({ [text]: text }), executorObservation: text }
      assert.strictEqual(RunLogStore.encodeRecord(observed), schemaJson(observed))
    },
    { fastCheck: { numRuns: 300 } }
  )

  it("refuses, as Schema did, records whose fields break a refinement (StoreError Encode)", () => {
    const bad: ReadonlyArray<RunLog.RunRecord> = [
      replied({ ...reply, usage: { inputTokens: -1, outputTokens: 0 } }),
      replied({ ...reply, usage: { inputTokens: 1.5, outputTokens: 0 } }),
      { ...replied(reply), step: 0.5 as Ids.StepIndex },
      { ...completed(), seq: -3 },
      completed({ elapsed: -1 }),
      { ...started, runId: "" as Ids.RunId },
      { ...result({}), outcome: { ...result({}).outcome, observationTruncatedChars: -2 } }
    ]
    for (const record of bad) {
      assert.throws(() => RunLogStore.encodeRecord(record), /cannot be written/, JSON.stringify(record))
      assert.throws(() => Schema.encodeSync(RunLog.RunRecord)(record))
    }
  })

  it("says which field is wrong and how, without printing the record schemas", () => {
    const { resultId: _, ...missing } = result({})
    const cases: ReadonlyArray<readonly [RunLog.RunRecord, string]> = [
      [missing as unknown as RunLog.RunRecord, "resultId: is missing"],
      [replied({ ...reply, usage: { inputTokens: -1, outputTokens: 0 } }), "reply.usage.inputTokens: "],
      [completed({ elapsed: -1 }), "elapsed: "]
    ]
    for (const [record, expected] of cases) {
      let message = ""
      try {
        RunLogStore.encodeRecord(record)
      } catch (error) {
        message = error instanceof Error ? error.message : String(error)
      }
      assert.include(message, `${record._tag} record ${record.seq} cannot be written: ${expected}`)
      assert.notInclude(message, "readonly", "no schema dump")
      assert.isBelow(message.length, 200, message)
    }
  })

  it("writes the loop's records — a reply with or without a finish reason included — without Schema (the fast path)", () => {
    const replies = [
      reply,
      ModelReply.make({ text: "done", finishReason: "stop", usage: { inputTokens: 1, outputTokens: 2, reasoningTokens: 1 } }),
      ModelReply.make({ text: "", toolCalls: [{ id: "c", name: "noop", argumentsText: "{}" }], finishReason: "tool_use", refusal: "no", reasoning: "r" }),
      ModelReply.make({ text: "cut", finishReason: "max_tokens" })
    ]
    for (const r of replies) {
      const record = replied(r)
      assert.isTrue(RecordJson.writesFast(RunLog.RunRecord, record), JSON.stringify(record))
      assert.strictEqual(RunLogStore.encodeRecord(record), schemaJson(record))
      // What is written reads back as the reply (the annotation's promise: decode gives it back).
      assert.deepStrictEqual(Schema.decodeSync(Schema.parseJson(RunLog.RunRecord))(RunLogStore.encodeRecord(record)), record)
    }
    for (const record of [started, result({ n: 1 }), completed()]) assert.isTrue(RecordJson.writesFast(RunLog.RunRecord, record), record._tag)
    // A reply whose finish reason is not the normalised word is not the type: Schema's path refuses it.
    const raw = replied({ ...reply, finishReason: "end_turn" as ModelReply.FinishReason })
    assert.isFalse(RecordJson.writesFast(RunLog.RunRecord, raw))
    assert.throws(() => RunLogStore.encodeRecord(raw), /cannot be written/)
  })

  it("throws StoreError Encode for a record that would not read back", () => {
    const record: RunLog.RunRecord = { _tag: "RunResumed", seq: 1, fromStep: Ids.StepIndex.make(0), at: Number.NaN }
    assert.throws(() => RunLogStore.encodeRecord(record), /RunResumed record 1 cannot be written/)
  })
})

const runId = Ids.runId("encode-guard")

const started: RunLog.RunStarted = {
  _tag: "RunStarted",
  seq: 0,
  runId,
  task: "t",
  snapshot: { agent: { name: "a" } },
  snapshotHash: "h",
  startedAt: 1000
}

const call = (args: unknown): Action.ToolCall => ({ _tag: "ToolCall", id: "call_0", name: "noop", arguments: args })

const replied = (reply: ModelReply.ModelReply): RunLog.ModelReplied => ({ _tag: "ModelReplied", seq: 1, step: Ids.StepIndex.make(0), reply })

const reply = ModelReply.make({ toolCalls: [{ id: "call_0", name: "noop", argumentsText: "{}" }], usage: { inputTokens: 3, outputTokens: 4 } })

const result = (args: unknown): RunLog.ActionResulted => ({
  _tag: "ActionResulted",
  seq: 2,
  resultId: Ids.resultIdFor(0),
  step: Ids.StepIndex.make(0),
  callIndex: 0,
  action: call(args),
  outcome: { status: "Executed", observation: "ok", observationIsSynthetic: false, envReportedCompletion: false, observationTruncatedChars: 0 },
  executorObservation: "ok",
  handlerFailed: false
})

const completed = (fields: Partial<RunLog.StepCompleted> = {}): RunLog.StepCompleted => ({
  _tag: "StepCompleted",
  seq: 3,
  step: Ids.StepIndex.make(0),
  decision: ParsedReply.act(call({})),
  resultIds: [Ids.resultIdFor(0)],
  effective: true,
  usage: { inputTokens: 3, outputTokens: 4 },
  elapsed: 5,
  ...fields
})

const cyclic = (): unknown => {
  const value: Record<string, unknown> = { a: 1 }
  value["self"] = value
  return value
}

/** Writes that must be refused after `RunStarted` and the reply are written. */
const poisoned: ReadonlyArray<readonly [string, (store: RunLogStore.RunLogStore.Service) => Effect.Effect<void, unknown>]> = [
  ["NaN usage in a reply", (s) => s.appendReply(runId, replied({ ...reply, usage: { inputTokens: Number.NaN, outputTokens: 1 } }))],
  ["Infinity elapsed in a step", (s) => s.completeStep(runId, [result({})], completed({ elapsed: Number.POSITIVE_INFINITY }))],
  ["a bigint argument", (s) => s.completeStep(runId, [result({ n: 10n })], completed())],
  ["NaN inside the arguments", (s) => s.completeStep(runId, [result({ n: [1, Number.NaN] })], completed())],
  ["-Infinity inside the arguments", (s) => s.completeStep(runId, [result({ deep: { n: Number.NEGATIVE_INFINITY } })], completed())],
  ["undefined inside an array of the arguments", (s) => s.completeStep(runId, [result({ list: [1, undefined, 3] })], completed())],
  ["a Date inside the arguments", (s) => s.completeStep(runId, [result({ at: new Date(0) })], completed())],
  ["a Map as the arguments", (s) => s.completeStep(runId, [result(new Map([["a", 1]]))], completed())],
  ["a function inside the arguments", (s) => s.completeStep(runId, [result({ f: () => 1 })], completed())],
  ["a symbol inside an array of the arguments", (s) => s.completeStep(runId, [result({ list: [Symbol("x")] })], completed())],
  ["a cycle in the arguments", (s) => s.completeStep(runId, [result(cyclic())], completed())],
  ["a value nested deeper than the fast check, holding NaN", (s) => {
    let deep: unknown = Number.NaN
    for (let i = 0; i < 100; i++) deep = [deep]
    return s.completeStep(runId, [result({ deep })], completed())
  }],
  ["NaN in the decision's arguments (the step record alone)", (s) => s.completeStep(runId, [], completed({ decision: ParsedReply.act(call({ n: Number.NaN })), resultIds: [], effective: false }))]
]

/** A memory backend whose rows the test can see. */
const observedMemory = () => {
  const backend = RunLogStore.makeMemoryBackend()
  let appended = 0
  const observed: RunLogStore.Backend = {
    ...backend,
    append: (id, records) => Effect.tap(backend.append(id, records), () => Effect.sync(() => (appended += records.length)))
  }
  return { store: RunLogStore.make(observed), appended: () => appended, read: backend.read }
}

describe("RunLogStore.make: what would poison the log is refused", () => {
  for (const [name, write] of poisoned) {
    it.effect(`${name}: StoreError Encode, nothing written`, () =>
      Effect.gen(function*() {
        const { appended, read, store } = observedMemory()
        yield* store.start(started)
        yield* store.appendReply(runId, replied(reply))
        const before = yield* store.readLog(runId)
        const rowsBefore = yield* read(runId)
        const error = yield* Effect.flip(write(store))
        assert.strictEqual((error as StoreError)._tag, "StoreError")
        assert.strictEqual((error as StoreError).reason, "Encode")
        assert.strictEqual((error as StoreError).runId, runId)
        assert.strictEqual(appended(), 2, "the backend saw no write")
        assert.deepStrictEqual(yield* read(runId), rowsBefore)
        assert.deepStrictEqual(yield* store.readLog(runId), before)
        // The run goes on: the well-formed step is accepted afterwards.
        yield* store.completeStep(runId, [result({ n: 1 })], completed())
        assert.strictEqual(RunLog.size(yield* store.readLog(runId, { verify: true })), 4)
      }))
  }

  it.effect("`{ a: undefined }` in the arguments is written as `{}` (the same JSON value), as Schema encoded it", () =>
    Effect.gen(function*() {
      const { store } = observedMemory()
      yield* store.start(started)
      yield* store.appendReply(runId, replied(reply))
      yield* store.completeStep(runId, [result({ a: undefined, b: 1 })], completed())
      const log = yield* store.readLog(runId, { verify: true })
      assert.deepStrictEqual(log.results[0]?.action, call({ b: 1 }))
    }))
})

/** A store over fixed rows. */
const overRows = (rows: ReadonlyArray<string>) => {
  const backend = RunLogStore.makeMemoryBackend()
  return RunLogStore.make({ ...backend, read: () => Effect.succeed(rows) })
}

const row = (record: RunLog.RunRecord): string => RunLogStore.encodeRecord(record)

const readError = (rows: ReadonlyArray<string>, options?: RunLogStore.ReadOptions) =>
  Effect.flip(overRows(rows).readLog(runId, options))

describe("RunLogStore.make: readLog trusts the rows it wrote, and checks what holds them together", () => {
  const good = [row(started), row(replied(reply)), row(result({ n: 1 })), row(completed())]

  it.effect("reads what was written, with and without verification", () =>
    Effect.gen(function*() {
      const trusted = yield* overRows(good).readLog(runId)
      const verified = yield* overRows(good).readLog(runId, { verify: true })
      assert.deepStrictEqual(trusted, verified)
      assert.deepStrictEqual(RunLog.records(trusted), [started, replied(reply), result({ n: 1 }), completed()])
      assert.deepStrictEqual(yield* RunLogStore.verifyLog(runId, good), verified)
    }))

  for (const verify of [false, true]) {
    const mode = verify ? "verified" : "trusted"
    it.effect(`${mode}: a row that is not JSON, not an object, or not a record kind is Decode`, () =>
      Effect.gen(function*() {
        for (const bad of ["{not json", "[1,2]", "42", "null", JSON.stringify({ _tag: "Nope", seq: 1 }), JSON.stringify({ seq: 1 })]) {
          const error = yield* readError([good[0]!, bad], { verify })
          assert.strictEqual(error.reason, "Decode", bad)
          assert.match(error.message, /record 1 does not decode/)
          assert.strictEqual(error.runId, runId)
        }
      }))

    it.effect(`${mode}: a gap, a duplicate, or a first record that is not RunStarted is Corrupt`, () =>
      Effect.gen(function*() {
        const gap = yield* readError([good[0]!, good[2]!], { verify })
        assert.strictEqual(gap.reason, "Corrupt")
        assert.match(gap.message, /record 1 carries sequence number 2/)
        const duplicate = yield* readError([good[0]!, good[1]!, good[1]!], { verify })
        assert.strictEqual(duplicate.reason, "Corrupt")
        assert.match(duplicate.message, /record 2 carries sequence number 1/)
        const first = yield* readError([row({ _tag: "RunResumed", seq: 0, fromStep: Ids.StepIndex.make(0), at: 1 })], { verify })
        assert.strictEqual(first.reason, "Corrupt")
        assert.match(first.message, /first record is not RunStarted/)
      }))
  }

  it.effect("a row whose fields do not decode is returned by the trusted read, refused (Decode) by verification", () =>
    Effect.gen(function*() {
      const edited = JSON.stringify({ ...JSON.parse(good[3]!), usage: { inputTokens: "three", outputTokens: 4 } })
      const rows = [...good.slice(0, 3), edited]
      const trusted = yield* overRows(rows).readLog(runId)
      assert.deepStrictEqual(trusted.steps[0]?.usage, { inputTokens: "three", outputTokens: 4 } as unknown as ModelReply.Usage)
      const verified = yield* readError(rows, { verify: true })
      assert.strictEqual(verified.reason, "Decode")
      assert.match(verified.message, /record 3 does not decode/)
      const direct = yield* Effect.flip(RunLogStore.verifyLog(runId, rows))
      assert.strictEqual(direct.reason, "Decode")
    }))

  it.effect("an unknown run is the empty log in both modes", () =>
    Effect.gen(function*() {
      assert.isTrue(RunLog.isEmpty(yield* overRows([]).readLog(runId)))
      assert.isTrue(RunLog.isEmpty(yield* overRows([]).readLog(runId, { verify: true })))
      assert.isTrue(Option.isNone((yield* overRows([]).readLog(runId)).started))
    }))
})

describe("RunLogStore.encodeRecord on generated arguments", () => {
  it.prop(
    "any JSON value as tool-call arguments is written and read back as itself",
    [FastCheck.jsonValue().map((v) => JSON.parse(JSON.stringify(v)) as unknown)],
    ([args]) => {
      const text = RunLogStore.encodeRecord(result(args))
      assert.deepStrictEqual((JSON.parse(text) as { readonly action: Action.ToolCall }).action.arguments, args)
      assert.strictEqual(text, schemaJson(result(args)))
    },
    { fastCheck: { numRuns: 300 } }
  )
})

describe("RunLogStore: the memory store's search (design 0341)", () => {
  it.effect("finds a task and a reply case-insensitively, newest run first, paged, with a snippet around the match", () =>
    Effect.gen(function*() {
      const store = yield* RunLogStore.makeMemory
      assert.isDefined(store.searchRuns)
      const long = `${"x".repeat(500)}The Needle${"y".repeat(500)}`
      for (const [id, at] of [["older", 1], ["newer", 2]] as const) {
        yield* store.start({ ...started, runId: Ids.runId(id), task: `find the needle (${id})`, startedAt: at })
        yield* store.appendReply(Ids.runId(id), replied(ModelReply.make({ text: long })))
      }
      const hits = yield* store.searchRuns!({ text: "NEEDLE", limit: 10, offset: 0 })
      assert.deepStrictEqual(hits.map((h) => [h.runId, h.field, h.step]), [["newer", "task", null], ["newer", "reply", 0], ["older", "task", null], ["older", "reply", 0]])
      assert.strictEqual(hits[1]!.snippet.length, RunLogStore.snippetLength)
      assert.include(hits[1]!.snippet, "The Needle")
      const second = yield* store.searchRuns!({ text: "needle", limit: 1, offset: 1 })
      assert.deepStrictEqual(second.map((h) => [h.runId, h.field]), [["newer", "reply"]])
      assert.deepStrictEqual(yield* store.searchRuns!({ text: "haystack", limit: 10, offset: 0 }), [])
    }))
})
