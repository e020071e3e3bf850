/**
 * The loop suite, several tool calls in one reply (design 0150): call order in the log and in
 * history, each result durable before the next call starts, an `EnvError` in the middle, a
 * completing tool beside other calls, budgets counted per step, `parallelToolCalls: false`,
 * several actions of a text language, bounded concurrency, and an interruption at every call
 * boundary of a batch followed by a resume (the final log equals the uninterrupted one apart
 * from `RunResumed` and the `interrupted` texts; no `"Never"` call runs twice).
 *
 * @internal
 */
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as Schema from "effect/Schema"
import * as ActionOutcome from "@polyloop/core/ActionOutcome"
import { ToolEnvironmentError } from "@polyloop/core/Errors"
import * as Ids from "@polyloop/core/Ids"
import * as JsonActionParser from "@polyloop/core/JsonActionParser"
import type { LoopEvent } from "@polyloop/core/LoopEvent"
import type * as ModelReply from "@polyloop/core/ModelReply"
import * as NativeToolCallParser from "@polyloop/core/NativeToolCallParser"
import * as ParsedReply from "@polyloop/core/ParsedReply"
import * as RunLog from "@polyloop/core/RunLog"
import * as SyntheticObservations from "@polyloop/core/SyntheticObservations"
import * as Tool from "@polyloop/core/Tool"
import * as ToolContext from "@polyloop/core/ToolContext"
import * as ToolRegistry from "@polyloop/core/ToolRegistry"
import * as ScriptedModel from "../../ScriptedModel.js"
import type { Assert } from "../vitest.js"
import { calls, recordingSink, say } from "./fixtures.js"
import { comparable, type Harness, request, type SuiteContext } from "./harness.js"

/** Where a handler stops: the call `index` of `step` (after its side effect), once. */
interface Stop {
  readonly step: number
  readonly index: number
  readonly reached: Deferred.Deferred<void>
}

/** What a batch test observes and steers. */
interface Controls {
  /** Every handler call, as `tool:arg@step`, in order. */
  readonly ran: Array<string>
  /** Side effects of `note`, in order. */
  readonly notes: Array<string>
  /** How many results of the run were in the log when each handler started. */
  readonly durableAtStart: Array<number>
  stop: Stop | undefined
  /** A hook each handler runs before returning (for concurrency tests). */
  hold: ((tool: string, arg: string) => Effect.Effect<void>) | undefined
}

/** Tools for batches: `note` (Never, a side effect), `fetch` (Always), `boom` (EnvError), `submit` (completes the run; dies on "wrong"). */
interface Batch extends Controls {
  readonly tools: ToolRegistry.ToolRegistry<ToolContext.ToolContext>
}

const makeBatch = (h: Harness): Batch => {
  const batch: Controls = { ran: [], notes: [], durableAtStart: [], stop: undefined, hold: undefined }
  const handler = (name: string, effect: (arg: string) => Effect.Effect<string, ToolEnvironmentError>) => (args: { readonly x: string }) =>
    Effect.gen(function*() {
      const ctx = yield* ToolContext.ToolContext
      const log = yield* Effect.orDie(h.store.readLog(Ids.runId(ctx.runId)))
      batch.durableAtStart.push(log.results.length)
      batch.ran.push(`${name}:${args.x}@${ctx.step}`)
      const out = yield* effect(args.x)
      const stop = batch.stop
      // The scripted model's call ids are `call_s<step>_<index>`.
      const index = Number(ctx.callId.split("_").pop())
      if (stop !== undefined && stop.step === ctx.step && stop.index === index) {
        batch.stop = undefined
        yield* Deferred.succeed(stop.reached, undefined)
        yield* Effect.never
      }
      if (batch.hold !== undefined) yield* batch.hold(name, args.x)
      return out
    })
  const X = Schema.Struct({ x: Schema.String })
  const tools = ToolRegistry.make(
    Tool.make({
      name: "note",
      description: "Notes x down (must not run twice).",
      parameters: X,
      replayPolicy: "Never",
      handler: handler("note", (x) => Effect.sync(() => (batch.notes.push(x), `noted ${x}`)))
    }),
    Tool.make({ name: "fetch", description: "Fetches x.", parameters: X, replayPolicy: "Always", handler: handler("fetch", (x) => Effect.succeed(`fetched ${x}`)) }),
    Tool.make({
      name: "boom",
      description: "Its backend is down.",
      parameters: X,
      handler: handler("boom", (x) => Effect.fail(new ToolEnvironmentError({ message: `backend down (${x})` })))
    }),
    Tool.make({
      name: "submit",
      description: "Submits x.",
      parameters: X,
      replayPolicy: "Always",
      completesRun: true,
      handler: handler("submit", (x) => (x === "wrong" ? Effect.fail(new ToolEnvironmentError({ message: "never" })).pipe(Effect.orDie) : Effect.succeed(`submitted ${x}`)))
    })
  )
  return Object.assign(batch, { tools })
}

const native = NativeToolCallParser.make()

/** The batch run the interruption tests use: three calls (Never, Always, Never), then two (Always, Never), then submit. */
const batchScript: ReadonlyArray<ModelReply.ModelReply> = [
  calls(["note", { x: "a" }], ["fetch", { x: "b" }], ["note", { x: "c" }]),
  calls(["fetch", { x: "d" }], ["note", { x: "e" }]),
  calls(["submit", { x: "42" }])
]

/** Every call boundary of `batchScript`: inside each handler (after its effect), and after each non-last call's result is durable. */
const callBoundaries: ReadonlyArray<{ readonly at: "handler" | "durable"; readonly step: number; readonly index: number }> = [
  ...[[0, 0], [0, 1], [0, 2], [1, 0], [1, 1], [2, 0]].map(([step, index]) => ({ at: "handler" as const, step: step!, index: index! })),
  ...[[0, 0], [0, 1], [1, 0]].map(([step, index]) => ({ at: "durable" as const, step: step!, index: index! }))
]

/** Registers this concern's tests. */
export const register = (ctx: SuiteContext): void => {
  const { describe, liveTest, test } = ctx
  const assert: Assert = ctx.assert

  describe("several tool calls in one reply (design 0150)", () => {
    test("the calls run in call order in one step, each with its own result; history answers each call by id, in order", (h) =>
      Effect.gen(function*() {
        const b = makeBatch(h)
        const model = yield* ScriptedModel.make([calls(["note", { x: "a" }], ["fetch", { x: "b" }], ["note", { x: "c" }]), calls(["submit", { x: "ok" }])])
        const result = yield* h.run(request("batch-1", b.tools), { model: model.layer, parser: native })
        assert.deepStrictEqual(result.stopReason, { _tag: "Completed", by: "Tool", answer: "submitted ok" })
        assert.strictEqual(result.steps, 2)
        assert.strictEqual(result.effectiveSteps, 2, "a step is effective once, however many of its calls ran")
        assert.deepStrictEqual(b.ran, ["note:a@0", "fetch:b@0", "note:c@0", "submit:ok@1"])
        const log = yield* h.log(Ids.runId("batch-1"))
        assert.deepStrictEqual(log.steps[0]!.resultIds, [Ids.resultIdFor(0), Ids.resultIdFor(0, 1), Ids.resultIdFor(0, 2)])
        assert.deepStrictEqual(log.results.filter((r) => r.step === 0).map((r) => [r.callIndex, r.outcome.observation]), [
          [0, "noted a"],
          [1, "fetched b"],
          [2, "noted c"]
        ])
        const decision = log.steps[0]!.decision
        assert.strictEqual(decision._tag === "Act" ? decision.actions.length : 0, 3)
        const requests = yield* model.requests
        const history = requests[1]!.request.messages.slice(2)
        assert.deepStrictEqual(history, [
          { _tag: "Assistant", text: "", toolCalls: batchScript[0]!.toolCalls.map((c, i) => ({ ...c, id: `call_s0_${i}` })) },
          { _tag: "Tool", callId: "call_s0_0", name: "note", text: "noted a" },
          { _tag: "Tool", callId: "call_s0_1", name: "fetch", text: "fetched b" },
          { _tag: "Tool", callId: "call_s0_2", name: "note", text: "noted c" }
        ])
      }))

    test("each result is durable before the next call starts; the last is written with the step", (h) =>
      Effect.gen(function*() {
        const b = makeBatch(h)
        const model = yield* ScriptedModel.make([calls(["note", { x: "a" }], ["note", { x: "b" }], ["note", { x: "c" }]), say("done")])
        yield* h.run(request("durable-1", b.tools), { model: model.layer, parser: native })
        assert.deepStrictEqual(b.durableAtStart, [0, 1, 2])
        const log = yield* h.log(Ids.runId("durable-1"))
        // Results 0 and 1 each in their own append; result 2 and StepCompleted together.
        assert.deepStrictEqual(RunLog.records(log).map((r) => r._tag).slice(0, 7), [
          "RunStarted",
          "ModelReplied",
          "ActionResulted",
          "ActionResulted",
          "ActionResulted",
          "StepCompleted",
          "ModelReplied"
        ])
      }))

    test("an EnvError in the middle ends the run once the step is recorded; the calls after it are not started (NotExecuted)", (h) =>
      Effect.gen(function*() {
        const b = makeBatch(h)
        const model = yield* ScriptedModel.make([calls(["note", { x: "a" }], ["boom", { x: "b" }], ["note", { x: "c" }], ["submit", { x: "42" }])])
        const result = yield* h.run(request("env-mid-1", b.tools), { model: model.layer, parser: native })
        assert.deepStrictEqual(result.stopReason, { _tag: "EnvError", message: "backend down (b)" })
        assert.deepStrictEqual(b.ran, ["note:a@0", "boom:b@0"])
        assert.deepStrictEqual(b.notes, ["a"])
        assert.strictEqual(yield* model.calls, 1)
        const log = yield* h.log(Ids.runId("env-mid-1"))
        const results = log.results
        assert.deepStrictEqual(results.map((r) => r.outcome.status), ["Executed", "EnvError", "NotExecuted", "NotExecuted"])
        const notStarted = SyntheticObservations.fill(SyntheticObservations.defaults.notExecuted, {
          tool: "note",
          issues: "it was not started: an earlier call of this step failed in the environment",
          tools: b.tools.names.join(", ")
        })
        assert.strictEqual(results[2]!.outcome.observation, notStarted)
        assert.strictEqual(results[2]!.executorObservation, "")
        assert.strictEqual(log.steps.length, 1)
        assert.isTrue(log.steps[0]!.effective)
        assert.strictEqual(result.effectiveSteps, 1)
      }))

    test("a completing tool beside other calls completes the run when it returned; not beside an EnvError, not when it failed", (h) =>
      Effect.gen(function*() {
        const b = makeBatch(h)
        const beside = yield* ScriptedModel.make([calls(["note", { x: "a" }], ["submit", { x: "42" }], ["fetch", { x: "c" }])])
        const completed = yield* h.run(request("complete-beside-1", b.tools), { model: beside.layer, parser: native })
        assert.deepStrictEqual(completed.stopReason, { _tag: "Completed", by: "Tool", answer: "submitted 42" })
        assert.deepStrictEqual(b.ran, ["note:a@0", "submit:42@0", "fetch:c@0"], "the calls after the completing tool still run")

        const withEnv = yield* ScriptedModel.make([calls(["submit", { x: "42" }], ["boom", { x: "z" }])])
        const broken = yield* h.run(request("complete-beside-2", b.tools), { model: withEnv.layer, parser: native })
        assert.deepStrictEqual(broken.stopReason, { _tag: "EnvError", message: "backend down (z)" })

        const failing = yield* ScriptedModel.make([calls(["submit", { x: "wrong" }], ["note", { x: "n" }]), say("giving up")])
        const goesOn = yield* h.run(request("complete-beside-3", b.tools), { model: failing.layer, parser: native })
        assert.deepStrictEqual(goesOn.stopReason, { _tag: "Completed", by: "Answer", answer: "giving up" })
        assert.strictEqual(goesOn.steps, 2)
      }))

    test("budgets count steps, not calls: a three-call step is one step and one effective step; all calls refused is not effective", (h) =>
      Effect.gen(function*() {
        const b = makeBatch(h)
        const model = yield* ScriptedModel.make([
          calls(["nope", { x: "1" }], ["nada", { x: "2" }]),
          calls(["fetch", { x: "a" }], ["fetch", { x: "b" }], ["fetch", { x: "c" }]),
          calls(["fetch", { x: "d" }])
        ])
        const result = yield* h.run(request("budget-batch-1", b.tools, { budget: { maxSteps: 10, maxEffectiveSteps: 1 } }), {
          model: model.layer,
          parser: native
        })
        assert.deepStrictEqual(result.stopReason, { _tag: "BudgetExhausted", budget: "EffectiveSteps" })
        assert.strictEqual(result.steps, 2)
        assert.strictEqual(result.effectiveSteps, 1)
        const log = yield* h.log(Ids.runId("budget-batch-1"))
        assert.deepStrictEqual(log.steps.map((s) => s.effective), [false, true])
        assert.deepStrictEqual(log.results.map((r) => r.outcome.status), ["NotExecuted", "NotExecuted", "Executed", "Executed", "Executed"])
        const summary = (yield* h.store.listRuns()).find((s) => s.runId === "budget-batch-1")
        assert.strictEqual(summary?.effectiveSteps, 1)
        assert.strictEqual(summary?.steps, 2)
      }))

    test("parallelToolCalls: false — the model is asked for one call per reply, and several calls are the one-action-per-step InvalidDecision", (h) =>
      Effect.gen(function*() {
        const b = makeBatch(h)
        const model = yield* ScriptedModel.make([calls(["note", { x: "a" }], ["fetch", { x: "b" }]), calls(["submit", { x: "1" }])])
        const result = yield* h.run(request("one-per-step-1", b.tools, { parallelToolCalls: false }), { model: model.layer, parser: native })
        assert.deepStrictEqual(result.stopReason, { _tag: "Completed", by: "Tool", answer: "submitted 1" })
        assert.deepStrictEqual(b.ran, ["submit:1@1"])
        const log = yield* h.log(Ids.runId("one-per-step-1"))
        assert.deepStrictEqual(
          log.steps[0]!.decision,
          ParsedReply.oneActionPerStep([
            { _tag: "ToolCall", id: "call_s0_0", name: "note", arguments: { x: "a" } },
            { _tag: "ToolCall", id: "call_s0_1", name: "fetch", arguments: { x: "b" } }
          ])
        )
        for (const seen of yield* model.requests) assert.strictEqual(seen.request.parallelToolCalls, false)
        const parallel = yield* ScriptedModel.make([calls(["submit", { x: "1" }])])
        yield* h.run(request("one-per-step-2", b.tools), { model: parallel.layer, parser: native })
        assert.isUndefined((yield* parallel.requests)[0]!.request.parallelToolCalls, "the provider's default when parallel calls are taken")
      }))

    test("several actions of a text language: ids call_<step>, call_<step>_<i>; one user message with each observation", (h) =>
      Effect.gen(function*() {
        const b = makeBatch(h)
        const model = yield* ScriptedModel.make([
          say("[{\"tool\": \"fetch\", \"x\": \"a\"}, {\"tool\": \"note\", \"x\": \"b\"}]"),
          say("{\"final_answer\": \"ok\"}")
        ])
        const contexts: Array<string> = []
        const sink = recordingSink()
        yield* h.run(request("text-batch-1", b.tools), { model: model.layer, parser: JsonActionParser.make(), sink: sink.layer })
        const log = yield* h.log(Ids.runId("text-batch-1"))
        for (const r of log.results) if (r.action._tag === "ToolCall") contexts.push(r.action.id)
        assert.deepStrictEqual(contexts, ["call_0", "call_0_1"])
        const seen = (yield* model.requests)[1]!.request.messages
        assert.deepStrictEqual(seen[seen.length - 1], { _tag: "User", text: "Observation:\nfetched a\n\nObservation:\nnoted b" })
        const executed = sink.events.filter((e): e is Extract<LoopEvent, { _tag: "ActionExecuted" }> => e._tag === "ActionExecuted")
        assert.deepStrictEqual(executed.map((e) => [e.step, e.callIndex]), [[0, 0], [0, 1]])
      }))

    liveTest("actionConcurrency runs calls at once; results are written as each completes, and read back, listed and rendered in call order", (h) =>
      Effect.gen(function*() {
        const b = makeBatch(h)
        const lastDone = yield* Deferred.make<void>()
        // Call 0 waits until call 2 has finished: only concurrent calls can get past it.
        b.hold = (_tool, arg) =>
          arg === "a"
            ? Deferred.await(lastDone).pipe(Effect.timeoutFail({ duration: "5 seconds", onTimeout: () => new ToolEnvironmentError({ message: "not concurrent" }) }), Effect.orDie)
            : arg === "c"
            ? Deferred.succeed(lastDone, undefined)
            : Effect.void
        const model = yield* ScriptedModel.make([calls(["fetch", { x: "a" }], ["fetch", { x: "b" }], ["fetch", { x: "c" }]), say("done")])
        const sink = recordingSink()
        const result = yield* h.run(request("concurrent-1", b.tools, { actionConcurrency: 3 }), { model: model.layer, parser: native, sink: sink.layer })
        assert.deepStrictEqual(result.stopReason, { _tag: "Completed", by: "Answer", answer: "done" })
        const log = yield* h.log(Ids.runId("concurrent-1"))
        assert.deepStrictEqual(log.results.map((r) => r.callIndex), [0, 1, 2], "read back in call order")
        // Read back with their sequence numbers in call order too (issue 29): the log is the same
        // whatever order the calls finished in.
        assert.deepStrictEqual(log.results.map((r) => r.seq), [2, 3, 4])
        // Written as each completed (call 0 last): `ActionExecuted` follows each durable write.
        const executed = sink.events.flatMap((e) => (e._tag === "ActionExecuted" ? [e.callIndex] : []))
        assert.strictEqual(executed[executed.length - 1], 0, "call 0 was written last")
        assert.deepStrictEqual(log.steps[0]!.resultIds, [0, 1, 2].map((i) => Ids.resultIdFor(0, i)))
        const history = (yield* model.requests)[1]!.request.messages.slice(3)
        assert.deepStrictEqual(history.map((m) => (m._tag === "Tool" ? m.text : m._tag)), ["fetched a", "fetched b", "fetched c"])
      }))

    describe("an interruption at every call boundary of a batch, then a resume", () => {
      for (const boundary of callBoundaries) {
        const where = boundary.at === "handler"
          ? `inside call ${boundary.index} of step ${boundary.step}`
          : `after the result of call ${boundary.index} of step ${boundary.step} is durable`
        test(`${where}: the final log is the uninterrupted one apart from RunResumed and interrupted texts; no Never call runs twice`, (h) =>
          Effect.gen(function*() {
            const tag = `${boundary.at}-${boundary.step}-${boundary.index}`
            const reference = makeBatch(h)
            const refModel = yield* ScriptedModel.make(batchScript)
            yield* h.run(request(`batch-ref-${tag}`, reference.tools), { model: refModel.layer, parser: native })
            const expected = yield* h.log(Ids.runId(`batch-ref-${tag}`))

            const b = makeBatch(h)
            const runId = Ids.runId(`batch-cut-${tag}`)
            const reached = yield* Deferred.make<void>()
            const sink = recordingSink()
            if (boundary.at === "handler") b.stop = { step: boundary.step, index: boundary.index, reached }
            else {
              sink.blockAt({
                matches: (e) => e._tag === "ActionExecuted" && e.step === boundary.step && e.callIndex === boundary.index,
                reached
              })
            }
            const model = yield* ScriptedModel.make(batchScript)
            const fiber = yield* Effect.fork(h.run(request(runId, b.tools), { model: model.layer, parser: native, sink: sink.layer }))
            yield* Deferred.await(reached)
            yield* Fiber.interrupt(fiber)
            const cut = yield* h.log(runId)
            const logged = new Set(cut.results.filter((r) => r.step === boundary.step).map((r) => r.callIndex))

            const again = yield* ScriptedModel.make(batchScript)
            const result = yield* h.run(request(runId, b.tools), { model: again.layer, parser: native })
            assert.strictEqual(result.resumedCount, 1)
            const final = yield* h.log(runId)

            // The uninterrupted log, with each "Never" call of the cut step that had no result
            // turned into the interrupted NotExecuted, and the effective counts that follow.
            const neverCut = (r: RunLog.ActionResulted) =>
              r.step === boundary.step && !logged.has(r.callIndex) && r.action._tag === "ToolCall" && r.action.name === "note"
            const patchedResults = expected.results.map((r) =>
              neverCut(r)
                ? {
                  ...r,
                  outcome: ActionOutcome.notExecuted(
                    SyntheticObservations.fill(SyntheticObservations.defaults.interrupted, {
                      tool: "note",
                      issues: "the run stopped while the action was in flight",
                      tools: b.tools.names.join(", ")
                    })
                  ),
                  executorObservation: "",
                  handlerFailed: false
                }
                : r
            )
            const effective = (step: number) => patchedResults.some((r) => r.step === step && r.outcome.status === "Executed")
            const patched = RunLog.fromRecords(
              RunLog.records({ ...expected, results: patchedResults }).map((record) => {
                if (record._tag === "RunStarted") return { ...record, runId }
                // An interrupted text entered history: the later requests, so their fingerprints, differ.
                if (record._tag === "ModelReplied" && record.step > boundary.step && expected.results.some(neverCut)) {
                  return { ...record, requestHash: final.replies[record.step]!.requestHash }
                }
                if (record._tag === "StepCompleted") return { ...record, effective: effective(record.step) }
                if (record._tag === "RunFinished") {
                  const effectiveSteps = expected.steps.filter((s) => effective(s.step)).length
                  return { ...record, counters: { ...record.counters, effectiveSteps } }
                }
                return record
              })
            )
            assert.deepStrictEqual(comparable(final), comparable(patched))
            // No "Never" call ran twice; every call that finished before the cut kept its result.
            const noted = b.notes.slice().sort()
            assert.deepStrictEqual(noted, [...new Set(noted)], `a note ran twice: ${b.notes.join(", ")}`)
            for (const r of cut.results) {
              assert.deepStrictEqual(final.results.find((f) => f.resultId === r.resultId), r, `result ${r.resultId} kept as written`)
            }
          }))
      }
    })
  })
}
