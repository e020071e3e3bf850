/**
 * Where an experiment's own records live (design 0320, decision 2): blobs with refs in the run
 * store (design 0330), under the pseudo run `experiment:<name>` — the definition, one outcome per
 * finished run, one record per failed attempt, one score per (scorer, run). So experiments work on
 * every store with blobs (memory, SQLite, PostgreSQL) with no schema of their own. `index` reads
 * every ref name in one `listRefs`: what is finished, attempted and scored, without reading a
 * blob. A ref is written after its blob; a record is written after what it records is durable.
 *
 * @since 0.1.0
 */
import * as Agent from "@polyloop/core/Agent"
import type * as Blobs from "@polyloop/core/Blobs"
import { StoreError } from "@polyloop/core/Errors"
import { RunLogStore } from "@polyloop/core/RunLogStore"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Schema from "effect/Schema"
import { Score } from "./Scorer.js"

/** The recorded definition of an experiment (design 0320, decision 3). */
export const Definition = Schema.Struct({
  name: Schema.String,
  dataset: Schema.Struct({ source: Schema.String, hash: Schema.String, samples: Schema.Number }),
  epochs: Schema.Number,
  configurations: Schema.Array(Schema.Struct({ name: Schema.String, agent: Schema.String, snapshotHash: Schema.String })),
  scorers: Schema.Array(Schema.Struct({ name: Schema.String, version: Schema.String }))
})
/** @since 0.1.0 */
export interface Definition extends Schema.Schema.Type<typeof Definition> {}

/** A finished run of the experiment. */
export const Outcome = Schema.Struct({
  key: Schema.String,
  runId: Schema.String,
  configuration: Schema.String,
  sampleId: Schema.String,
  epoch: Schema.Number,
  /** The sample's target, if it has one (for exports). */
  target: Schema.optional(Schema.String),
  answer: Schema.String,
  result: Agent.RunResult,
  /** Attempts of `Agent.run` that failed before the one that finished. */
  failedAttempts: Schema.Number
})
/** @since 0.1.0 */
export interface Outcome extends Schema.Schema.Type<typeof Outcome> {}

/** A failed attempt of a run. */
export const Attempt = Schema.Struct({
  key: Schema.String,
  attempt: Schema.Number,
  error: Schema.String,
  message: Schema.String,
  at: Schema.Number
})
/** @since 0.1.0 */
export interface Attempt extends Schema.Schema.Type<typeof Attempt> {}

/** A stored score of one run by one scorer. */
export const StoredScore = Schema.Struct({
  key: Schema.String,
  scorer: Schema.String,
  version: Schema.String,
  score: Score
})
/** @since 0.1.0 */
export interface StoredScore extends Schema.Schema.Type<typeof StoredScore> {}

/** Every record's name, without its content: one `listRefs`. */
export interface Index {
  /** Finished runs by key (`<configuration>/<sample>/<epoch>`) → the outcome's blob. */
  readonly outcomes: ReadonlyMap<string, Blobs.BlobHash>
  /** Failed attempts by key → how many. */
  readonly attempts: ReadonlyMap<string, number>
  /** Scores by `<scorer>|<key>` → the score's blob. */
  readonly scores: ReadonlyMap<string, Blobs.BlobHash>
  /** The definition's blob. */
  readonly definition: Option.Option<Blobs.BlobHash>
}

/** The key of a score in `Index.scores`. */
export const scoreKey = (scorer: string, key: string): string => `${scorer}|${key}`

/** The experiment records port. */
export class ExperimentStore extends Context.Tag("@polyloop/eval/ExperimentStore")<ExperimentStore, ExperimentStore.Service>() {}

/** @since 0.1.0 */
export declare namespace ExperimentStore {
  /** @since 0.1.0 */
  export interface Service {
    readonly index: (experiment: string) => Effect.Effect<Index, StoreError>
    readonly definition: (experiment: string) => Effect.Effect<Option.Option<Definition>, StoreError>
    readonly setDefinition: (experiment: string, definition: Definition) => Effect.Effect<void, StoreError>
    readonly outcome: (hash: Blobs.BlobHash) => Effect.Effect<Outcome, StoreError>
    readonly putOutcome: (experiment: string, outcome: Outcome) => Effect.Effect<void, StoreError>
    readonly putAttempt: (experiment: string, attempt: Attempt) => Effect.Effect<void, StoreError>
    readonly score: (hash: Blobs.BlobHash) => Effect.Effect<StoredScore, StoreError>
    readonly putScore: (experiment: string, score: StoredScore) => Effect.Effect<void, StoreError>
    /** Every experiment with a definition in the store. */
    readonly list: Effect.Effect<ReadonlyArray<string>, StoreError>
  }
}

/** The pseudo run id whose refs hold an experiment's records. */
export const recordsRunId = (experiment: string): string => `experiment:${experiment}`

/** The ref names (a key's epoch is zero-padded in names so they sort by epoch). */
const names = {
  definition: "definition",
  outcome: (key: string) => `run/${key}`,
  attempt: (key: string, n: number) => `attempt/${key}/${String(n).padStart(4, "0")}`,
  score: (scorer: string, key: string) => `score/${scorer}/${key}`
}

/** The experiments catalogue: a ref per experiment under one pseudo run. */
const catalogueRunId = "experiment:*"

const encoder = new TextEncoder()
const decoder = new TextDecoder()

/** The records over a run store's blob capability. */
export const fromBlobs = (blobs: Blobs.Service): ExperimentStore.Service => {
  const put = <A, I>(schema: Schema.Schema<A, I>, runId: string, name: string, value: A) =>
    Effect.flatMap(Schema.encode(Schema.parseJson(schema))(value).pipe(
      Effect.mapError((cause) => new StoreError({ reason: "Encode", message: `experiment record ${name}: ${cause.message}`, cause }))
    ), (text) => Effect.flatMap(blobs.put(encoder.encode(text)), (hash) => blobs.setRef(runId, name, hash)))
  const get = <A, I>(schema: Schema.Schema<A, I>, hash: Blobs.BlobHash) =>
    Effect.flatMap(blobs.get(hash), (found) =>
      Option.match(found, {
        onNone: () => Effect.fail(new StoreError({ reason: "Corrupt", message: `experiment record blob ${hash} is missing` })),
        onSome: (bytes) =>
          Schema.decodeUnknown(Schema.parseJson(schema))(decoder.decode(bytes)).pipe(
            Effect.mapError((cause) => new StoreError({ reason: "Decode", message: `experiment record blob ${hash}: ${cause.message}`, cause }))
          )
      }))
  const index = (experiment: string) =>
    Effect.map(blobs.listRefs(recordsRunId(experiment)), (refs): Index => {
      const outcomes = new Map<string, Blobs.BlobHash>()
      const attempts = new Map<string, number>()
      const scores = new Map<string, Blobs.BlobHash>()
      let definition: Option.Option<Blobs.BlobHash> = Option.none()
      for (const ref of refs) {
        const name = ref.name
        if (name === names.definition) definition = Option.some(ref.hash)
        else if (name.startsWith("run/")) outcomes.set(name.slice(4), ref.hash)
        else if (name.startsWith("attempt/")) {
          const key = name.slice(8, name.lastIndexOf("/"))
          attempts.set(key, (attempts.get(key) ?? 0) + 1)
        } else if (name.startsWith("score/")) {
          const rest = name.slice(6)
          const slash = rest.indexOf("/")
          scores.set(scoreKey(rest.slice(0, slash), rest.slice(slash + 1)), ref.hash)
        }
      }
      return { outcomes, attempts, scores, definition }
    })
  return {
    index,
    definition: (experiment) =>
      Effect.flatMap(blobs.listRefs(recordsRunId(experiment), names.definition), (refs) => {
        const ref = refs.find((r) => r.name === names.definition)
        return ref === undefined ? Effect.succeed(Option.none()) : Effect.map(get(Definition, ref.hash), Option.some)
      }),
    setDefinition: (experiment, definition) =>
      Effect.zipRight(
        put(Definition, recordsRunId(experiment), names.definition, definition),
        put(Schema.String, catalogueRunId, experiment, experiment)
      ),
    outcome: (hash) => get(Outcome, hash),
    putOutcome: (experiment, outcome) => put(Outcome, recordsRunId(experiment), names.outcome(outcome.key), outcome),
    putAttempt: (experiment, attempt) => put(Attempt, recordsRunId(experiment), names.attempt(attempt.key, attempt.attempt), attempt),
    score: (hash) => get(StoredScore, hash),
    putScore: (experiment, score) => put(StoredScore, recordsRunId(experiment), names.score(score.scorer, score.key), score),
    list: Effect.map(blobs.listRefs(catalogueRunId), (refs) => refs.map((ref) => ref.name))
  }
}

/** The records in the `RunLogStore` in context; a store without blobs is refused. */
export const layer: Layer.Layer<ExperimentStore, StoreError, RunLogStore> = Layer.effect(
  ExperimentStore,
  Effect.flatMap(RunLogStore, (store) =>
    store.blobs === undefined
      ? Effect.fail(new StoreError({ reason: "Unknown", message: "this run store has no blobs (design 0330): it cannot hold experiments" }))
      : Effect.succeed(fromBlobs(store.blobs)))
)
