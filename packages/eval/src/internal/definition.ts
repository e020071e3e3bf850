/**
 * What an experiment is and how a start checks it (design 0320): the definition's types, the
 * errors that refuse a start, the validation of names and counts, the path-by-path difference of
 * two definitions, and `prepare` — load the dataset, build each configuration, record the
 * definition on the first start or refuse a changed one. Re-exported by `Experiment.ts`
 * (design 0390).
 *
 * @internal
 */
import type * as ActionExecutor from "@polyloop/core/ActionExecutor"
import * as Agent from "@polyloop/core/Agent"
import type * as AgentDefinition from "@polyloop/core/AgentDefinition"
import { DecisionParser } from "@polyloop/core/DecisionParser"
import { RunId } from "@polyloop/core/Ids"
import type * as ModelClient from "@polyloop/core/ModelClient"
import type * as ToolRegistry from "@polyloop/core/ToolRegistry"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Schema from "effect/Schema"
import * as Dataset from "../Dataset.js"
import * as ExperimentStore from "../ExperimentStore.js"
import type * as Scorer from "../Scorer.js"

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

/** The problems of a definition that cannot run (empty: none). */
export const validate = <E, R>(experiment: Experiment<E, R>): ReadonlyArray<string> => {
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

/** A configuration with its services built and its snapshot hash. */
export interface Built {
  readonly configuration: Configuration<unknown, unknown>
  readonly context: Context.Context<ConfigurationServices>
  readonly snapshotHash: string
}

/**
 * Loads, checks and records the definition; returns the samples and the built configurations.
 * Everything that can be refused is refused here, before any run.
 */
export const prepare = <E, R>(experiment: Experiment<E, R>) =>
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
