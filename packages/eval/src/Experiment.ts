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
 * @since 0.1.0
 */
import type * as ActionExecutor from "@polyloop/core/ActionExecutor"
import * as Agent from "@polyloop/core/Agent"
import type * as AgentDefinition from "@polyloop/core/AgentDefinition"
import { DecisionParser } from "@polyloop/core/DecisionParser"
import type { StoreError } from "@polyloop/core/Errors"
import * as EventSink from "@polyloop/core/EventSink"
import { RunId } from "@polyloop/core/Ids"
import type * as ModelClient from "@polyloop/core/ModelClient"
import type { RunLogStore } from "@polyloop/core/RunLogStore"
import type * as ToolRegistry from "@polyloop/core/ToolRegistry"
import * as Clock from "effect/Clock"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Ref from "effect/Ref"
import * as Schema from "effect/Schema"
import * as Dataset from "./Dataset.js"
import * as ExperimentStore from "./ExperimentStore.js"
import type * as Scorer from "./Scorer.js"
import * as ScorerModule from "./Scorer.js"

/** The services a configuration's runs need besides the store and the sink. */
export type ConfigurationServices = ModelClient.ModelClient | DecisionParser | ActionExecutor.ActionExecutor

/** One configuration: an agent, its tools, and its model, parser and executor as a layer. */
export interface Configuration<E = never, R = never> {
  readonly name: string
  readonly agent: AgentDefinition.AgentDefinition
  readonly tools: ToolRegistry.ToolRegistry<unknown>
  /** Built once per start: `Layer.mergeAll(ScriptedModel.layer(…), NativeToolCallParser.layer(), tools.layerExecutor…)`. */
  readonly services: Layer.Layer<ConfigurationServices, E, R>
  /** The task of a sample (default: its `input`). */
  readonly task?: (sample: Dataset.Sample) => string
}

/** An experiment's definition. */
export interface Experiment<E = never, R = never> {
  readonly name: string
  readonly dataset: Dataset.Dataset<R>
  readonly configurations: ReadonlyArray<Configuration<E, R>>
  /** How often each sample runs per configuration (default 1). */
  readonly epochs?: number
  readonly scorers: ReadonlyArray<Scorer.Scorer<R>>
  /** Runs at once (default 4). */
  readonly concurrency?: number
  /** Attempts of a run in all, across every start (default 3). */
  readonly attempts?: number
}

/** Makes an experiment (the definition as given, typed). */
export const make = <E = never, R = never>(experiment: Experiment<E, R>): Experiment<E, R> => experiment

/** One difference between the recorded definition and the current one. */
export const Difference = Schema.Struct({ path: Schema.String, recorded: Schema.Unknown, current: Schema.Unknown })
/** @since 0.1.0 */
export interface Difference extends Schema.Schema.Type<typeof Difference> {}

/** A start under a definition other than the recorded one was refused; nothing ran. */
export class ExperimentChanged extends Schema.TaggedError<ExperimentChanged>()("ExperimentChanged", {
  experiment: Schema.String,
  differences: Schema.Array(Difference)
}) {
  override get message(): string {
    const shown = this.differences.slice(0, 5).map((d) => `${d.path}: ${JSON.stringify(d.recorded)} → ${JSON.stringify(d.current)}`)
    const more = this.differences.length > 5 ? `; and ${this.differences.length - 5} more` : ""
    return `experiment ${this.experiment} was recorded with another definition (${shown.join("; ")}${more}); use a new experiment name`
  }
}

/** A definition that cannot run (a bad name, no configuration, epochs below 1, two scorers of one name). */
export class InvalidExperiment extends Schema.TaggedError<InvalidExperiment>()("InvalidExperiment", {
  experiment: Schema.String,
  issues: Schema.Array(Schema.String)
}) {
  override get message(): string {
    return `experiment ${this.experiment} is not valid: ${this.issues.join("; ")}`
  }
}

/** No experiment of this name in the store. */
export class ExperimentNotFound extends Schema.TaggedError<ExperimentNotFound>()("ExperimentNotFound", {
  experiment: Schema.String
}) {
  override get message(): string {
    return `no experiment ${this.experiment} in this store`
  }
}

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

const validate = <E, R>(experiment: Experiment<E, R>): ReadonlyArray<string> => {
  const issues: Array<string> = []
  const valid = (what: string, name: string) => {
    if (!Dataset.namePattern.test(name)) issues.push(`${what} ${JSON.stringify(name)}: 1 to 64 characters of A-Z a-z 0-9 . _ : -`)
  }
  valid("the experiment name", experiment.name)
  if (experiment.configurations.length === 0) issues.push("no configuration")
  const seen = new Set<string>()
  for (const c of experiment.configurations) {
    valid("the configuration name", c.name)
    if (seen.has(c.name)) issues.push(`two configurations named ${c.name}`)
    seen.add(c.name)
  }
  const scorers = new Set<string>()
  for (const s of experiment.scorers) {
    valid("the scorer name", s.name)
    if (scorers.has(s.name)) issues.push(`two scorers named ${s.name}`)
    scorers.add(s.name)
  }
  const epochs = experiment.epochs ?? 1
  if (!Number.isInteger(epochs) || epochs < 1) issues.push(`epochs must be a whole number of 1 or more, not ${epochs}`)
  const concurrency = experiment.concurrency ?? 4
  if (!Number.isInteger(concurrency) || concurrency < 1) issues.push(`concurrency must be a whole number of 1 or more, not ${concurrency}`)
  const attempts = experiment.attempts ?? 3
  if (!Number.isInteger(attempts) || attempts < 1) issues.push(`attempts must be a whole number of 1 or more, not ${attempts}`)
  return issues
}

/** The differences of two definitions, path by path. */
export const diff = (recorded: unknown, current: unknown, path: string = ""): ReadonlyArray<Difference> => {
  if (recorded === current) return []
  const isObject = (v: unknown): v is Record<string, unknown> => v !== null && typeof v === "object"
  if (isObject(recorded) && isObject(current) && Array.isArray(recorded) === Array.isArray(current)) {
    const keys = [...new Set([...Object.keys(recorded), ...Object.keys(current)])].sort()
    return keys.flatMap((key) => diff(recorded[key], current[key], Array.isArray(current) ? `${path}[${key}]` : path === "" ? key : `${path}.${key}`))
  }
  return [{ path: path === "" ? "(root)" : path, recorded: recorded ?? null, current: current ?? null }]
}

/** The placeholder task a configuration's snapshot hash is computed with. */
export const placeholderTask = "{sample.input}"

interface Built {
  readonly configuration: Configuration<unknown, unknown>
  readonly context: Context.Context<ConfigurationServices>
  readonly snapshotHash: string
}

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
 * Loads, checks and records the definition; returns the samples and the built configurations.
 * Everything that can be refused is refused here, before any run.
 */
const prepare = <E, R>(experiment: Experiment<E, R>) =>
  Effect.gen(function*() {
    const issues = validate(experiment)
    if (issues.length > 0) return yield* new InvalidExperiment({ experiment: experiment.name, issues })
    const samples = yield* experiment.dataset.load
    const built: Array<Built> = []
    for (const configuration of experiment.configurations) {
      const context = yield* Layer.build(configuration.services)
      const parser = Context.get(context, DecisionParser)
      const snapshot = Agent.snapshotOf({ runId: RunId.make("experiment"), agent: configuration.agent, task: placeholderTask, tools: configuration.tools }, parser.id)
      built.push({ configuration: configuration as Configuration<unknown, unknown>, context, snapshotHash: snapshot.hash })
    }
    const definition: ExperimentStore.Definition = {
      name: experiment.name,
      dataset: { source: experiment.dataset.source, hash: Dataset.hash(samples), samples: samples.length },
      epochs: experiment.epochs ?? 1,
      configurations: built.map((b) => ({ name: b.configuration.name, agent: b.configuration.agent.name, snapshotHash: b.snapshotHash })),
      scorers: experiment.scorers.map((s) => ({ name: s.name, version: s.version }))
    }
    const records = yield* ExperimentStore.ExperimentStore
    const recorded = yield* records.definition(experiment.name)
    if (Option.isSome(recorded)) {
      // The dataset's source may move (another path to the same file): its hash decides.
      const differences = diff(
        { ...recorded.value, dataset: { ...recorded.value.dataset, source: "" } },
        { ...definition, dataset: { ...definition.dataset, source: "" } }
      )
      if (differences.length > 0) return yield* new ExperimentChanged({ experiment: experiment.name, differences })
    } else {
      yield* records.setDefinition(experiment.name, definition)
    }
    return { samples, built, definition }
  })

/**
 * Scores the runs of `outcomes` that lack a score of any of `scorers` (or, with `regrade`, every
 * model-graded score again); returns how many it wrote.
 */
const scoreMissing = <R>(
  experiment: string,
  samples: ReadonlyMap<string, Dataset.Sample>,
  scorers: ReadonlyArray<Scorer.Scorer<R>>,
  outcome: ExperimentStore.Outcome,
  index: ExperimentStore.Index,
  regrade: boolean
) =>
  Effect.gen(function*() {
    const records = yield* ExperimentStore.ExperimentStore
    const sample = samples.get(outcome.sampleId)
    if (sample === undefined) return 0
    let written = 0
    for (const scorer of scorers) {
      const present = index.scores.has(ExperimentStore.scoreKey(scorer.name, outcome.key))
      if (present && !(regrade && scorer.graded)) continue
      const score = yield* Effect.flatMap(
        scorer.score({
          sample,
          answer: outcome.answer,
          result: outcome.result,
          runId: outcome.runId,
          configuration: outcome.configuration,
          epoch: outcome.epoch
        }),
        (returned) => checkedScore(scorer.name, outcome, returned)
      )
      yield* records.putScore(experiment, { key: outcome.key, scorer: scorer.name, version: scorer.version, score })
      written++
    }
    return written
  })

const decodeScore = Schema.decodeUnknownEither(ScorerModule.Score)

/**
 * What a scorer returned, as a score (issue 44): a `Score` whose value is a finite number; else
 * `ScorerError` naming the scorer, the run and its sample — a scorer written in JavaScript (or
 * cast) can return anything, and it must not reach the store as a record that cannot be written.
 */
const checkedScore = (scorer: string, outcome: ExperimentStore.Outcome, returned: unknown): Effect.Effect<Scorer.Score, Scorer.ScorerError> => {
  const decoded = decodeScore(returned)
  if (decoded._tag === "Right" && Number.isFinite(decoded.right.value)) return Effect.succeed(decoded.right)
  const shown = typeof returned === "number" ? String(returned) : JSON.stringify(returned) ?? String(returned)
  return Effect.fail(
    new ScorerModule.ScorerError({
      scorer,
      runId: outcome.runId,
      detail: `returned ${shown.length > 80 ? `${shown.slice(0, 80)}…` : shown} for sample ${outcome.sampleId}, not a score (a finite number, or { value: <finite number> })`
    })
  )
}

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
