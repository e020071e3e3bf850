/**
 * Experiments (design 0320): run ids, the recorded definition and drift, resume finishing only
 * what is unfinished, failed attempts kept and bounded, scores computed once, re-scoring
 * without re-running, and bad datasets refused before anything runs.
 */
import { assert, describe, it } from "@effect/vitest"
import { RunId } from "@polyloop/core/Ids"
import * as RunLogStore from "@polyloop/core/RunLogStore"
import * as Dataset from "@polyloop/eval/Dataset"
import * as Experiment from "@polyloop/eval/Experiment"
import * as ExperimentStore from "@polyloop/eval/ExperimentStore"
import * as Inspect from "@polyloop/eval/Inspect"
import * as Results from "@polyloop/eval/Results"
import * as Scorer from "@polyloop/eval/Scorer"
import * as ScriptedModel from "@polyloop/testing/ScriptedModel"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Schema from "effect/Schema"
import * as Stream from "effect/Stream"
import * as Fixture from "./fixture.js"

/** A fresh memory store with its experiment records. */
const stores = () => {
  const store = RunLogStore.inMemory()
  return Layer.merge(store, ExperimentStore.layer.pipe(Layer.provide(store)))
}

/** Model calls recorded in the store's logs (`ModelReplied` records of every run). */
const recordedCalls = Effect.gen(function*() {
  const store = yield* RunLogStore.RunLogStore
  const runs = yield* store.listRuns()
  let n = 0
  for (const run of runs) {
    const log = yield* store.readLog(RunId.make(run.runId))
    n += log.replies.length
  }
  return n
})

describe("Experiment", () => {
  it.effect("runs every (configuration, sample, epoch) under its derived id, scores it, and a second start runs nothing", () =>
    Effect.gen(function*() {
      const careful = yield* ScriptedModel.make(Fixture.script(0))
      const sloppy = yield* ScriptedModel.make(Fixture.script(0.3))
      const experiment = Fixture.experiment({ name: "arith", n: 20, epochs: 2, careful: careful.layer, sloppy: sloppy.layer })
      const first = yield* Experiment.run(experiment)
      assert.deepStrictEqual(first, { total: 80, done: 80, running: 0, failed: 0, skipped: 0, ran: 80, scored: 160 })
      assert.strictEqual(yield* careful.calls, 80)
      const store = yield* RunLogStore.RunLogStore
      const log = yield* store.readLog(Experiment.runIdOf("arith", "sloppy", "s0003", 2))
      assert.isTrue(Option.isSome(log.finished))
      const second = yield* Experiment.run(experiment)
      assert.deepStrictEqual(second, { total: 80, done: 80, running: 0, failed: 0, skipped: 80, ran: 0, scored: 0 })
      assert.strictEqual((yield* careful.calls) + (yield* sloppy.calls), 160)
      assert.strictEqual(yield* recordedCalls, 160)
      const results = yield* Results.compute("arith")
      const [c, s] = results.configurations
      assert.strictEqual(c!.configuration, "careful")
      assert.strictEqual(c!.scores[0]!.scorer, "includes")
      assert.strictEqual(c!.scores[1]!.mean, 1)
      assert.deepStrictEqual(c!.stopReasons, { "Completed(Answer)": 40 })
      assert.strictEqual(c!.steps.total, 80)
      assert.strictEqual(c!.tokens.input, 40 * 30)
      assert.isBelow(s!.scores[1]!.mean, 1)
      assert.isAbove(s!.scores[1]!.mean, 0.3)
      assert.strictEqual(s!.scores[1]!.samples, 20)
      const ci = s!.scores[1]!.ci!
      assert.isTrue(ci.lower <= s!.scores[1]!.mean && s!.scores[1]!.mean <= ci.upper)
      // Byte-identical: computed again from the same records.
      assert.strictEqual(Results.toJson(yield* Results.compute("arith")), Results.toJson(results))
      const comparison = yield* Results.compare("arith", "careful", "sloppy", { scorer: "numeric" })
      assert.strictEqual(comparison.samples, 20)
      assert.closeTo(comparison.difference, s!.scores[1]!.mean - 1, 1e-12)
      const csv = Results.toCsv(results).split("\n")
      assert.strictEqual(csv[0], "experiment,configuration,scorer,runs,samples,mean,stderr,ci_lower,ci_upper,finished,failed,steps_mean,tokens_mean")
      assert.strictEqual(csv.length, 6)
      // The runs of one configuration as an Inspect eval log.
      const inspect = (yield* Inspect.evalLog("arith", "sloppy")) as {
        readonly version: number
        readonly status: string
        readonly eval: { readonly task: string; readonly task_id: string; readonly config: { readonly epochs: number }; readonly dataset: { readonly sample_ids: ReadonlyArray<string> } }
        readonly results: { readonly total_samples: number; readonly scores: ReadonlyArray<{ readonly name: string; readonly metrics: { readonly mean: { readonly value: number }; readonly stderr: { readonly value: number } } }> }
        readonly samples: ReadonlyArray<{ readonly id: string; readonly epoch: number; readonly target: string; readonly messages: ReadonlyArray<{ readonly role: string; readonly content: string; readonly tool_call_id?: string }>; readonly scores: Record<string, { readonly value: number; readonly answer: string; readonly explanation?: string }> }>
      }
      assert.deepStrictEqual([inspect.version, inspect.status, inspect.eval.task, inspect.eval.task_id, inspect.eval.config.epochs], [2, "success", "arith", "arith/sloppy", 2])
      assert.strictEqual(inspect.eval.dataset.sample_ids.length, 20)
      assert.strictEqual(inspect.results.total_samples, 40)
      assert.deepStrictEqual(inspect.results.scores.map((x) => [x.name, x.metrics.mean.value, x.metrics.stderr.value]), s!.scores.map((x) => [x.scorer, x.mean, x.stderr]))
      assert.strictEqual(inspect.samples.length, 40)
      const one = inspect.samples[0]!
      assert.deepStrictEqual([one.id, one.epoch, one.target], ["s0000", 1, "1"])
      assert.deepStrictEqual(one.messages.map((m) => m.role), ["system", "user", "assistant", "tool", "assistant"])
      assert.deepStrictEqual([one.messages[1]!.content, one.messages[3]!.content, one.messages[3]!.tool_call_id], ["0 + 1", "1", "call_s0_0"])
      assert.deepStrictEqual(one.scores["numeric"], { value: 1, answer: "The sum is 1.", explanation: "answer 1, target 1" })
      const wall = yield* Results.wallTimes("arith")
      assert.deepStrictEqual(wall.map((w) => [w.configuration, w.runs]), [["careful", 40], ["sloppy", 40]])
      const runs = (yield* Results.runsCsv("arith")).trim().split("\n")
      assert.strictEqual(runs.length, 81)
      assert.strictEqual(runs[1], "careful,s0000,1,arith/careful/s0000/1,Completed(Answer),2,41,1,1")
    }).pipe(Effect.provide(stores())))

  it.effect("a changed definition is refused with its differences, before anything runs", () =>
    Effect.gen(function*() {
      const model = yield* ScriptedModel.make(Fixture.script(0))
      yield* Experiment.run(Fixture.experiment({ name: "drift", n: 3, epochs: 1, careful: model.layer }))
      const changed = yield* Effect.flip(Experiment.run(Fixture.experiment({ name: "drift", n: 4, epochs: 2, careful: model.layer })))
      assert.strictEqual(changed._tag, "ExperimentChanged")
      if (changed._tag !== "ExperimentChanged") return
      assert.deepStrictEqual(changed.differences.map((d) => d.path), ["dataset.hash", "dataset.samples", "epochs"])
      assert.deepStrictEqual(changed.differences[2], { path: "epochs", recorded: 1, current: 2 })
      const otherAgent = Experiment.make({
        ...Fixture.experiment({ name: "drift", n: 3, epochs: 1, careful: model.layer }),
        configurations: [{ ...Fixture.configuration("careful", model.layer), agent: { ...Fixture.agent, systemPrompt: "Be quick." } }]
      })
      const byAgent = yield* Effect.flip(Experiment.run(otherAgent))
      assert.strictEqual(byAgent._tag, "ExperimentChanged")
      if (byAgent._tag === "ExperimentChanged") assert.deepStrictEqual(byAgent.differences.map((d) => d.path), ["configurations[0].snapshotHash"])
      assert.strictEqual(yield* model.calls, 6)
    }).pipe(Effect.provide(stores())))

  it.effect("a run that fails is retried, every attempt recorded; spent attempts are not retried unless asked", () =>
    Effect.gen(function*() {
      // Step 0 of the first calls fails with a non-retryable model error: the run fails, the
      // experiment records the attempt and tries again (the same run id: Agent.run resumes).
      const model = yield* ScriptedModel.make(Fixture.script(0), { failures: [{ step: 0, times: 4, retryable: false }] })
      const experiment = Fixture.experiment({ name: "flaky", n: 3, epochs: 1, careful: model.layer, attempts: 2, concurrency: 1 })
      const first = yield* Experiment.run(experiment)
      // s0000: two failed attempts (spent); s0001: two failed attempts (spent); s0002 finishes.
      assert.strictEqual(first.failed, 2)
      assert.strictEqual(first.done, 1)
      const records = yield* ExperimentStore.ExperimentStore
      const index = yield* records.index("flaky")
      assert.deepStrictEqual([...index.attempts.entries()], [["careful/s0000/1", 2], ["careful/s0001/1", 2]])
      const again = yield* Experiment.run(experiment)
      assert.strictEqual(again.ran, 0)
      assert.strictEqual(again.failed, 2)
      const retried = yield* Experiment.run(experiment, { retryFailed: true })
      assert.strictEqual(retried.ran, 2)
      assert.strictEqual(retried.done, 3)
      assert.strictEqual(retried.failed, 0)
      const results = yield* Results.compute("flaky")
      assert.strictEqual(results.configurations[0]!.failed, 0)
      assert.strictEqual(results.configurations[0]!.retriedAttempts, 4)
      // The failed attempts' logs are the same runs: each a RunResumed after the failure.
      const store = yield* RunLogStore.RunLogStore
      const log = yield* store.readLog(Experiment.runIdOf("flaky", "careful", "s0000", 1))
      assert.isAbove(log.resumes.length, 0)
    }).pipe(Effect.provide(stores())))

  it.effect("re-scoring with a new scorer runs no agent; a model-graded scorer's verdict is kept and not asked again unless regrade", () =>
    Effect.gen(function*() {
      const model = yield* ScriptedModel.make(Fixture.script(0))
      const experiment = Fixture.experiment({ name: "rescore", n: 4, epochs: 1, careful: model.layer })
      yield* Experiment.run(experiment)
      const grader = yield* ScriptedModel.make(() => "Looks right. GRADE: C", { usage: { inputTokens: 7, outputTokens: 3 } })
      const graded = Scorer.modelGraded({ name: "judge", version: "1", model: grader.client, modelName: "grader-1" })
      const exact = Scorer.exactMatch()
      assert.strictEqual(yield* Experiment.rescore("rescore", experiment.dataset, [graded, exact]), 8)
      assert.strictEqual(yield* model.calls, 8)
      assert.strictEqual(yield* grader.calls, 4)
      assert.strictEqual(yield* Experiment.rescore("rescore", experiment.dataset, [graded, exact]), 0)
      assert.strictEqual(yield* grader.calls, 4)
      assert.strictEqual(yield* Experiment.rescore("rescore", experiment.dataset, [graded, exact], { regrade: true }), 4)
      assert.strictEqual(yield* grader.calls, 8)
      const records = yield* ExperimentStore.ExperimentStore
      const index = yield* records.index("rescore")
      const stored = yield* records.score(index.scores.get(ExperimentStore.scoreKey("judge", "careful/s0001/1"))!)
      assert.strictEqual(stored.score.value, 1)
      assert.strictEqual(stored.score.verdict?.reply, "Looks right. GRADE: C")
      assert.include(stored.score.verdict?.prompt ?? "", "Submitted answer: The sum is 4.")
      const results = yield* Results.compute("rescore")
      assert.deepStrictEqual(results.configurations[0]!.scores.map((s) => [s.scorer, s.mean]), [["exact", 0], ["includes", 1], ["judge", 1], ["numeric", 1]])
    }).pipe(Effect.provide(stores())))

  it.effect("a custom scorer returning what is not a number is a ScorerError naming the scorer and the sample, not a StoreError (issue 44)", () =>
    Effect.gen(function*() {
      const model = yield* ScriptedModel.make(Fixture.script(0))
      const base = Fixture.experiment({ name: "odd-scorer", n: 2, epochs: 1, careful: model.layer })
      for (const [name, returned] of [["texty", "yes"], ["nan", Number.NaN], ["boxed", { value: "1" }]] as const) {
        // A scorer written in JavaScript, or cast: its function returns whatever it returns.
        const odd = Scorer.custom(name, "1", () => returned as unknown as number)
        const error = yield* Effect.flip(Experiment.run({ ...base, name: `odd-${name}`, scorers: [...base.scorers, odd] }))
        assert.strictEqual(error._tag, "ScorerError", String(error))
        if (error._tag === "ScorerError") {
          assert.strictEqual(error.scorer, name)
          assert.match(error.runId, new RegExp(`^odd-${name}/careful/s000\\d/1$`))
          assert.match(error.message, /sample s000\d/)
        }
      }
    }).pipe(Effect.provide(stores())))

  it.effect("compare with an unknown configuration or scorer names the known ones (issue 44)", () =>
    Effect.gen(function*() {
      const model = yield* ScriptedModel.make(Fixture.script(0))
      yield* Experiment.run(Fixture.experiment({ name: "names", n: 2, epochs: 1, careful: model.layer, sloppy: model.layer }))
      const typo = yield* Effect.flip(Results.compare("names", "careful", "slopy"))
      assert.strictEqual(typo._tag, "UnknownName")
      assert.include(typo.message, "slopy")
      assert.include(typo.message, "careful, sloppy")
      const scorer = yield* Effect.flip(Results.compare("names", "careful", "sloppy", { scorer: "nosuch" }))
      assert.strictEqual(scorer._tag, "UnknownName")
      assert.include(scorer.message, "includes, numeric")
      const fine = yield* Results.compare("names", "careful", "sloppy", { scorer: "numeric" })
      assert.strictEqual(fine.samples, 2)
    }).pipe(Effect.provide(stores())))

  it.effect("at most `concurrency` runs at once: three model calls are in flight together, never a fourth", () =>
    Effect.gen(function*() {
      let inFlight = 0
      let most = 0
      const three = yield* Deferred.make<void>()
      const model = yield* ScriptedModel.make(Fixture.script(0), {
        onCall: () =>
          Effect.gen(function*() {
            inFlight++
            most = Math.max(most, inFlight)
            if (inFlight === 3) yield* Deferred.succeed(three, undefined)
            yield* Deferred.await(three)
            inFlight--
          })
      })
      let running = 0
      const summary = yield* Experiment.run(Fixture.experiment({ name: "limit", n: 12, epochs: 1, careful: model.layer, concurrency: 3 }), {
        onProgress: (p) => Effect.sync(() => (running = Math.max(running, p.running)))
      })
      assert.strictEqual(summary.done, 12)
      assert.strictEqual(most, 3)
      assert.strictEqual(running, 3)
    }).pipe(Effect.provide(stores())))

  it.effect("a run store without blobs cannot hold experiments: a StoreError saying so", () =>
    Effect.gen(function*() {
      const { blobs: _, ...backend } = RunLogStore.makeMemoryBackend()
      const error = yield* Effect.flip(Layer.build(ExperimentStore.layer.pipe(Layer.provide(Layer.succeed(RunLogStore.RunLogStore, RunLogStore.make(backend))))))
      assert.strictEqual(error._tag, "StoreError")
      assert.include(error.message, "no blobs")
    }).pipe(Effect.scoped))

  it.effect("an invalid definition is refused before anything runs", () =>
    Effect.gen(function*() {
      const model = yield* ScriptedModel.make(Fixture.script(0))
      const error = yield* Effect.flip(Experiment.run(Experiment.make({
        ...Fixture.experiment({ name: "bad name", n: 2, epochs: 0, careful: model.layer }),
        scorers: [Scorer.includes(), Scorer.includes()]
      })))
      assert.strictEqual(error._tag, "InvalidExperiment")
      assert.include(error.message, "the experiment name \"bad name\"")
      assert.include(error.message, "epochs must be")
      assert.include(error.message, "two scorers named includes")
      assert.strictEqual(yield* model.calls, 0)
    }).pipe(Effect.provide(stores())))
})

describe("Dataset", () => {
  it.effect("a line that is not JSON, or not a sample, is reported with its line number; duplicates with both", () =>
    Effect.gen(function*() {
      const notJson = yield* Effect.flip(Dataset.parseJsonl("{\"id\":\"a\",\"input\":\"x\"}\n\n{oops\n", "d.jsonl"))
      assert.strictEqual(notJson.reason, "InvalidJson")
      assert.strictEqual(notJson.line, 3)
      assert.match(notJson.message, /^dataset d\.jsonl:3: not valid JSON/)
      const noId = yield* Effect.flip(Dataset.parseJsonl("{\"id\":\"a\",\"input\":\"x\"}\n{\"input\":\"y\"}\n", "d.jsonl"))
      assert.strictEqual(noId.reason, "InvalidSample")
      assert.strictEqual(noId.line, 2)
      assert.include(noId.message, "id")
      const duplicate = yield* Effect.flip(Dataset.parseJsonl("{\"id\":\"a\",\"input\":\"x\"}\n{\"id\":\"b\",\"input\":\"y\"}\n{\"id\":\"a\",\"input\":\"z\"}\n"))
      assert.strictEqual(duplicate.reason, "DuplicateId")
      assert.strictEqual(duplicate.line, 3)
      assert.include(duplicate.message, "first at line 1")
      const empty = yield* Effect.flip(Dataset.parseJsonl("\n"))
      assert.strictEqual(empty.reason, "Empty")
    }))

  it.effect("a stream's samples are decoded with their position; an experiment with a bad dataset calls nothing", () =>
    Effect.gen(function*() {
      const ok = yield* Dataset.fromStream(Stream.make({ id: "a", input: "1 + 2", target: "3" }, { id: "b", input: "2 + 2", metadata: { k: 1 } })).load
      assert.deepStrictEqual(ok.map((s) => s.id), ["a", "b"])
      const bad = yield* Effect.flip(Dataset.fromStream(Stream.make({ id: "a", input: "x" }, { id: "a/b", input: "y" })).load)
      assert.strictEqual(bad.index, 1)
      const model = yield* ScriptedModel.make(Fixture.script(0))
      const error = yield* Effect.flip(Experiment.run(Experiment.make({
        ...Fixture.experiment({ name: "baddata", n: 1, epochs: 1, careful: model.layer }),
        dataset: Dataset.fromStream(Stream.make({ id: "a", input: "1 + 1" }, { id: "a", input: "2 + 2" }))
      })))
      assert.strictEqual(error._tag, "DatasetError")
      assert.strictEqual(yield* model.calls, 0)
      const records = yield* ExperimentStore.ExperimentStore
      assert.isTrue(Option.isNone(yield* records.definition("baddata")))
      assert.strictEqual(Dataset.hash(ok), Dataset.hash([...ok]))
      assert.notStrictEqual(Dataset.hash(ok), Dataset.hash([ok[1]!, ok[0]!]))
    }).pipe(Effect.provide(stores())))
})

describe("Scorer", () => {
  const input = (answer: string, target?: string): Scorer.Input => ({
    sample: { id: "x", input: "q", ...(target === undefined ? {} : { target }) },
    answer,
    result: { runId: RunId.make("r"), stopReason: { _tag: "Completed", by: "Answer", answer }, steps: 1, effectiveSteps: 1, usage: { inputTokens: 0, outputTokens: 0 }, resumedCount: 0, eventDeliveryFailures: 0 },
    runId: "r",
    configuration: "c",
    epoch: 1
  })
  const value = (scorer: Scorer.Scorer, answer: string, target?: string) => Effect.map(scorer.score(input(answer, target)), (s) => s.value)

  it.effect("exact match, includes, numeric tolerance, schema, custom", () =>
    Effect.gen(function*() {
      assert.strictEqual(yield* value(Scorer.exactMatch(), "  Paris ", "paris"), 1)
      assert.strictEqual(yield* value(Scorer.exactMatch({ caseSensitive: true }), "Paris", "paris"), 0)
      assert.strictEqual(yield* value(Scorer.includes(), "It is Paris, France", "paris"), 1)
      assert.strictEqual(yield* value(Scorer.includes(), "Lyon", "paris"), 0)
      assert.strictEqual(yield* value(Scorer.numeric(), "so 1,234 in all", "1234"), 1)
      assert.strictEqual(yield* value(Scorer.numeric({ tolerance: 0.05 }), "about 3.14", "3.1"), 1)
      assert.strictEqual(yield* value(Scorer.numeric({ tolerance: 0.01 }), "about 3.14", "3.1"), 0)
      assert.strictEqual(yield* value(Scorer.numeric({ tolerance: 0.1, relative: true }), "105", "100"), 1)
      assert.strictEqual(yield* value(Scorer.numeric(), "no idea", "3"), 0)
      const json = Scorer.schema("shape", "1", Schema.Struct({ city: Schema.String, population: Schema.Number }))
      assert.strictEqual(yield* value(json, "{\"city\":\"Oslo\",\"population\":700000}"), 1)
      const wrong = yield* json.score(input("{\"city\":\"Oslo\"}"))
      assert.strictEqual(wrong.value, 0)
      assert.include(wrong.explanation ?? "", "population")
      assert.strictEqual(yield* value(Scorer.custom("len", "1", (i) => i.answer.length / 10), "abcde"), 0.5)
    }))

  it.effect("model-graded: the grade read from the reply; a reply without one is a ScorerError", () =>
    Effect.gen(function*() {
      const grader = yield* ScriptedModel.make((_, call) => (call.call === 0 ? "GRADE: I" : "I am not sure"))
      const graded = Scorer.modelGraded({ name: "judge", version: "1", model: grader.client, modelName: "g" })
      assert.strictEqual(yield* value(graded, "Lyon", "Paris"), 0)
      const error = yield* Effect.flip(graded.score(input("Lyon", "Paris")))
      assert.strictEqual(error._tag, "ScorerError")
      assert.include(error.message, "no grade")
    }))
})
