/**
 * An experiment (design 0320): a dataset run through one or more configurations of an agent,
 * `epochs` times, scored. Each (configuration, sample, epoch) is an ordinary polyloop run under
 * the id `<experiment>/<configuration>/<sample>/<epoch>`, so every run is durable and resumable
 * by `Agent.run` itself. `run` records the definition on the first start and refuses a changed
 * one (`ExperimentChanged`, with the differences); every later start finishes only what is
 * unfinished — a run killed mid-step resumes at its step, a finished run is not touched, a
 * failed one is tried again up to `attempts` in all (every attempt recorded) — and computes only
 * the scores that are missing. `rescore` scores finished runs with other scorers without running
 * an agent.
 *
 * The definition and its checks are in `internal/definition.ts`, scoring a finished run in
 * `internal/scoring.ts`; this module runs experiments and re-exports the definition (design 0390).
 *
 * @since 0.1.0
 */
import * as Agent from "@polyloop/core/Agent"
import type { StoreError } from "@polyloop/core/Errors"
import * as EventSink from "@polyloop/core/EventSink"
import { RunId } from "@polyloop/core/Ids"
import type { RunLogStore } from "@polyloop/core/RunLogStore"
import * as Clock from "effect/Clock"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import * as Ref from "effect/Ref"
import type * as Dataset from "./Dataset.js"
import * as ExperimentStore from "./ExperimentStore.js"
import {
  type Built,
  type Experiment,
  type ExperimentChanged,
  ExperimentNotFound,
  type InvalidExperiment,
  prepare
} from "./internal/definition.js"
import { scoreMissing } from "./internal/scoring.js"
import type * as Scorer from "./Scorer.js"

export {
  type Configuration,
  type ConfigurationServices,
  diff,
  Difference,
  type Experiment,
  ExperimentChanged,
  ExperimentNotFound,
  InvalidExperiment,
  placeholderTask
} from "./internal/definition.js"

/** Makes an experiment (the definition as given, typed). */
export const make = <E = never, R = never>(experiment: Experiment<E, R>): Experiment<E, R> => experiment

/** The key of a run within its experiment. */
export const keyOf = (configuration: string, sampleId: string, epoch: number): string => `${configuration}/${sampleId}/${epoch}`

/** The run id of (configuration, sample, epoch), epochs from 1. */
export const runIdOf = (experiment: string, configuration: string, sampleId: string, epoch: number): RunId =>
  RunId.make(`${experiment}/${keyOf(configuration, sampleId, epoch)}`)

/** What a start saw and did. */
export interface Progress {
  readonly total: number
  /** Finished (before this start, or by it). */
  readonly done: number
  readonly running: number
  /** Runs whose attempts are spent. */
  readonly failed: number
  /** Finished before this start. */
  readonly skipped: number
}

/** One run of the experiment as `RunOptions.execute` receives it. */
export interface PlannedRun {
  readonly runId: RunId
  readonly configuration: string
  readonly sampleId: string
  readonly epoch: number
  /** The request a local run passes to `Agent.run`. */
  readonly request: Agent.RunRequest
}

/** A failure of a run's execution, by its tag and message (`Agent.run`'s errors, a cluster's `RunFailed`). */
export interface ExecuteFailure {
  readonly _tag: string
  readonly message: string
}

/** Runs one run to its end elsewhere (`ClusterExperiment.execute`: submitted to `@polyloop/cluster`). */
export type Execute = (run: PlannedRun) => Effect.Effect<Agent.RunResult, ExecuteFailure>

/** Options of `run`. */
export interface RunOptions {
  /**
   * How a run is run: by default `Agent.run` in this process with the configuration's services;
   * `ClusterExperiment.execute` submits it to the cluster and awaits its result. The same run id
   * either way, so an experiment may move between the two.
   */
  readonly execute?: Execute
  /** Called whenever the counts change. */
  readonly onProgress?: (progress: Progress) => Effect.Effect<void>
  /** Try runs whose attempts are spent once more (default false). */
  readonly retryFailed?: boolean
  /** Ask model-graded scorers again even where a score exists (default false). */
  readonly regrade?: boolean
}

/** The counts after a start. */
export interface Summary extends Progress {
  /** Runs this start called `Agent.run` for. */
  readonly ran: number
  /** Scores this start computed. */
  readonly scored: number
}

/** The failures of `run`. */
export type RunFailure<E> =
  | Dataset.DatasetError
  | InvalidExperiment
  | ExperimentChanged
  | StoreError
  | Scorer.ScorerError
  | E

/** What `run` needs. */
export type RunRequirements<R> = RunLogStore | ExperimentStore.ExperimentStore | R

/** A run this start will attempt. */
interface Planned {
  readonly built: Built
  readonly sample: Dataset.Sample
  readonly epoch: number
  readonly key: string
  readonly runId: RunId
  readonly attemptsBefore: number
}

/** The answer of a run: the text a `Completed` stop reason carries, empty otherwise. */
export const answerOf = (result: Agent.RunResult): string =>
  result.stopReason._tag === "Completed" && result.stopReason.answer !== undefined ? result.stopReason.answer : ""

/** Is a run's failure worth another attempt? A definition problem is not. */
const retryable = (error: { readonly _tag: string }): boolean =>
  error._tag !== "SnapshotMismatch" && error._tag !== "InvalidRunRequest" && error._tag !== "ExecutorRegistryMismatch"

/**
 * Runs the experiment: records or checks its definition, then finishes what is unfinished,
 * `concurrency` runs at a time, and scores every finished run that lacks a score. Fails before any
 * run with `DatasetError`, `InvalidExperiment` or `ExperimentChanged`; a run that fails is
 * recorded as a failed attempt and tried again (up to `attempts`), not a failure of `run`.
 */
export const run = <E, R>(
  experiment: Experiment<E, R>,
  options: RunOptions = {}
): Effect.Effect<Summary, RunFailure<E>, RunRequirements<R>> =>
  Effect.scoped(
    Effect.gen(function*() {
      const { built, samples } = yield* prepare(experiment)
      const records = yield* ExperimentStore.ExperimentStore
      const index = yield* records.index(experiment.name)
      const epochs = experiment.epochs ?? 1
      const maxAttempts = experiment.attempts ?? 3
      const byId = new Map(samples.map((s) => [s.id, s]))
      const todo: Array<Planned> = []
      const finishedKeys: Array<string> = []
      let failed = 0
      for (const b of built) {
        for (const sample of samples) {
          for (let epoch = 1; epoch <= epochs; epoch++) {
            const key = keyOf(b.configuration.name, sample.id, epoch)
            if (index.outcomes.has(key)) {
              finishedKeys.push(key)
              continue
            }
            const attemptsBefore = index.attempts.get(key) ?? 0
            if (attemptsBefore >= maxAttempts && options.retryFailed !== true) {
              failed++
              continue
            }
            todo.push({ built: b, sample, epoch, key, runId: runIdOf(experiment.name, b.configuration.name, sample.id, epoch), attemptsBefore })
          }
        }
      }
      const total = built.length * samples.length * epochs
      const counts = yield* Ref.make({ total, done: finishedKeys.length, running: 0, failed, skipped: finishedKeys.length })
      const report = (change: (p: Progress) => Progress) =>
        Effect.flatMap(Ref.updateAndGet(counts, change), (p) => options.onProgress === undefined ? Effect.void : options.onProgress(p))
      yield* report((p) => p)
      const scored = yield* Ref.make(0)
      const store = yield* Effect.context<RunLogStore>()
      const sink = Context.make(EventSink.EventSink, EventSink.noop)

      // Scores missing on runs finished before this start (a kill between a run and its scores).
      for (const key of finishedKeys) {
        const missing = experiment.scorers.some((s) => !index.scores.has(ExperimentStore.scoreKey(s.name, key)) || (options.regrade === true && s.graded))
        if (!missing) continue
        const outcome = yield* records.outcome(index.outcomes.get(key)!)
        const n = yield* scoreMissing(experiment.name, byId, experiment.scorers, outcome, index, options.regrade === true)
        yield* Ref.update(scored, (k) => k + n)
      }

      const attemptRun = (planned: Planned, attempt: number): Effect.Effect<void, StoreError | Scorer.ScorerError, R | ExperimentStore.ExperimentStore> => {
        const configuration = planned.built.configuration
        const request: Agent.RunRequest = {
          runId: planned.runId,
          agent: configuration.agent,
          task: configuration.task === undefined ? planned.sample.input : configuration.task(planned.sample),
          tools: configuration.tools
        }
        const execution: Effect.Effect<Agent.RunResult, ExecuteFailure> = options.execute !== undefined
          ? options.execute({ runId: planned.runId, configuration: configuration.name, sampleId: planned.sample.id, epoch: planned.epoch, request })
          : Agent.run(request).pipe(Effect.provide(Context.merge(Context.merge(planned.built.context, store), sink)))
        return execution.pipe(
          Effect.either,
          Effect.flatMap((either) => {
            if (either._tag === "Right") {
              const result = either.right
              const outcome: ExperimentStore.Outcome = {
                key: planned.key,
                runId: planned.runId,
                configuration: configuration.name,
                sampleId: planned.sample.id,
                epoch: planned.epoch,
                ...(planned.sample.target === undefined ? {} : { target: planned.sample.target }),
                answer: answerOf(result),
                result,
                failedAttempts: attempt - 1
              }
              return records.putOutcome(experiment.name, outcome).pipe(
                Effect.zipRight(scoreMissing(experiment.name, byId, experiment.scorers, outcome, index, options.regrade === true)),
                Effect.flatMap((n) => Ref.update(scored, (k) => k + n)),
                Effect.zipRight(report((p) => ({ ...p, done: p.done + 1, running: p.running - 1 })))
              )
            }
            const error = either.left
            return Clock.currentTimeMillis.pipe(
              Effect.flatMap((at) =>
                records.putAttempt(experiment.name, { key: planned.key, attempt, error: error._tag, message: error.message, at })
              ),
              Effect.zipRight(
                Effect.logWarning(`experiment ${experiment.name}: run ${planned.runId} failed (attempt ${attempt} of ${maxAttempts}): ${error.message}`)
              ),
              Effect.zipRight(
                attempt < Math.max(maxAttempts, planned.attemptsBefore + 1) && retryable(error)
                  ? attemptRun(planned, attempt + 1)
                  : report((p) => ({ ...p, failed: p.failed + 1, running: p.running - 1 }))
              )
            )
          })
        )
      }

      yield* Effect.forEach(
        todo,
        (planned) =>
          Effect.zipRight(
            report((p) => ({ ...p, running: p.running + 1 })),
            attemptRun(planned, planned.attemptsBefore + 1)
          ),
        { concurrency: experiment.concurrency ?? 4, discard: true }
      )
      const final = yield* Ref.get(counts)
      return { ...final, ran: todo.length, scored: yield* Ref.get(scored) }
    })
  ).pipe(Effect.withSpan("Experiment.run", { attributes: { "polyloop.experiment": experiment.name } }))

/**
 * Scores the experiment's finished runs with `scorers` (new ones, or the same with `regrade`),
 * without running any agent; only missing scores are computed. The experiment must have been
 * started (its definition recorded); the scorers need not be in it.
 */
export const rescore = <R>(
  name: string,
  dataset: Dataset.Dataset<R>,
  scorers: ReadonlyArray<Scorer.Scorer<R>>,
  options?: { readonly regrade?: boolean }
): Effect.Effect<number, Dataset.DatasetError | ExperimentNotFound | StoreError | Scorer.ScorerError, R | ExperimentStore.ExperimentStore> =>
  Effect.gen(function*() {
    const records = yield* ExperimentStore.ExperimentStore
    const recorded = yield* records.definition(name)
    if (Option.isNone(recorded)) return yield* new ExperimentNotFound({ experiment: name })
    const samples = yield* dataset.load
    const byId = new Map(samples.map((s) => [s.id, s]))
    const index = yield* records.index(name)
    let written = 0
    for (const hash of index.outcomes.values()) {
      const outcome = yield* records.outcome(hash)
      written += yield* scoreMissing(name, byId, scorers, outcome, index, options?.regrade === true)
    }
    return written
  }).pipe(Effect.withSpan("Experiment.rescore", { attributes: { "polyloop.experiment": name } }))
