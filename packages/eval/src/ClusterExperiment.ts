/**
 * An experiment on `@polyloop/cluster` (design 0320, decision 8): each run submitted as a cluster
 * run under its experiment run id, with a small payload (experiment, configuration, sample,
 * epoch); runner processes resolve the payload back to the run's request from the same
 * experiment definition. The client side is `execute` (pass it to `Experiment.run`); the
 * runner side is `resolver(experiment)` (give it to `ClusterRunner.layer`). On the cluster a
 * run uses the runner's `ModelClient` and `DecisionParser` (the cluster's runners serve one model)
 * and the `ActionExecutor` of its configuration's `services`; the configuration's own model and
 * parser are built by the client only (for the definition's snapshot hash), so the runners' must
 * be the same ones for the results to mean the same. Not in `index.ts`: it needs `@polyloop/cluster` (an optional
 * peer dependency).
 *
 * @since 0.1.0
 */
import type * as MessageStorage from "@effect/cluster/MessageStorage"
import type * as Sharding from "@effect/cluster/Sharding"
import type * as SqlClient from "@effect/sql/SqlClient"
import * as Cluster from "@polyloop/cluster/Cluster"
import type * as ClusterRunner from "@polyloop/cluster/ClusterRunner"
import * as ActionExecutor from "@polyloop/core/ActionExecutor"
import { RunId } from "@polyloop/core/Ids"
import type { RunLogStore } from "@polyloop/core/RunLogStore"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import type * as Scope from "effect/Scope"
import * as Schema from "effect/Schema"
import type * as Dataset from "./Dataset.js"
import * as Experiment from "./Experiment.js"

/** What a submitted run carries. */
export const Payload = Schema.Struct({
  experiment: Schema.String,
  configuration: Schema.String,
  sampleId: Schema.String,
  epoch: Schema.Int
})
/** @since 0.1.0 */
export interface Payload extends Schema.Schema.Type<typeof Payload> {}

/** A payload the runner's experiment does not have (another experiment, configuration or sample). */
export class UnknownRun extends Schema.TaggedError<UnknownRun>()("UnknownRun", {
  runId: Schema.String,
  detail: Schema.String
}) {
  override get message(): string {
    return `run ${this.runId}: ${this.detail}`
  }
}

/**
 * Runs each run on the cluster: submits it (idempotent by run id; a run the cluster had given up
 * is retried with `Cluster.retry`, as a new attempt) and awaits its result.
 */
export const execute: Effect.Effect<
  Experiment.Execute,
  never,
  SqlClient.SqlClient | Sharding.Sharding | MessageStorage.MessageStorage | RunLogStore
> = Effect.map(
  Effect.context<SqlClient.SqlClient | Sharding.Sharding | MessageStorage.MessageStorage | RunLogStore>(),
  (context) => (run) => {
    const payload: Payload = {
      experiment: run.runId.slice(0, run.runId.length - Experiment.keyOf(run.configuration, run.sampleId, run.epoch).length - 1),
      configuration: run.configuration,
      sampleId: run.sampleId,
      epoch: run.epoch
    }
    return Effect.gen(function*() {
      const fresh = yield* Cluster.submit(run.runId, payload)
      if (!fresh) {
        const status = yield* Cluster.status(run.runId)
        if (status._tag === "Failed") yield* Cluster.retry(run.runId)
      }
      return yield* Cluster.await(run.runId)
    }).pipe(Effect.provide(context))
  }
)

/**
 * The runner's `resolve` for `ClusterRunner.layer({ payload: Payload, resolve })`: the dataset is
 * loaded once; each payload becomes the run's request (the configuration's agent and tools, the
 * sample's task) and the executor of the configuration's `services` (built once, in the scope).
 */
export const resolver = <E, R>(
  experiment: Experiment.Experiment<E, R>
): Effect.Effect<
  (payload: Payload, runId: string) => Effect.Effect<ClusterRunner.Resolved, UnknownRun>,
  Dataset.DatasetError | E,
  R | Scope.Scope
> =>
  Effect.gen(function*() {
    const samples = yield* experiment.dataset.load
    const byId = new Map(samples.map((s) => [s.id, s]))
    const executors = new Map<string, ActionExecutor.ActionExecutor.Service>()
    for (const configuration of experiment.configurations) {
      const context = yield* Layer.build(configuration.services)
      executors.set(configuration.name, Context.get(context, ActionExecutor.ActionExecutor))
    }
    return (payload: Payload, runId: string) =>
      Effect.gen(function*() {
        const configuration = experiment.configurations.find((c) => c.name === payload.configuration)
        const sample = byId.get(payload.sampleId)
        if (payload.experiment !== experiment.name || configuration === undefined || sample === undefined) {
          return yield* new UnknownRun({ runId, detail: `this runner's experiment ${experiment.name} has no ${payload.experiment}/${payload.configuration}/${payload.sampleId}` })
        }
        if (runId !== Experiment.runIdOf(experiment.name, configuration.name, sample.id, payload.epoch)) {
          return yield* new UnknownRun({ runId, detail: "the run id is not the payload's" })
        }
        const executor = executors.get(configuration.name)!
        const request = {
          runId: RunId.make(runId),
          agent: configuration.agent,
          task: configuration.task === undefined ? sample.input : configuration.task(sample),
          tools: configuration.tools
        }
        return { request, executor }
      })
  })
