/**
 * Datasets of an experiment (design 0320): samples `{ id, input, target?, metadata? }` from a
 * JSON-lines file, an Effect `Stream` or an array. A dataset is loaded whole and checked before
 * anything runs: a line that is not JSON or not a sample is refused with its line number, a
 * duplicate id with both line numbers. The dataset's hash (SHA-256 of the samples' canonical JSON,
 * in order) is part of the experiment's recorded definition.
 *
 * @since 0.1.0
 */
import * as FileSystem from "@effect/platform/FileSystem"
import * as Chunk from "effect/Chunk"
import * as Effect from "effect/Effect"
import * as ParseResult from "effect/ParseResult"
import * as Schema from "effect/Schema"
import * as Stream from "effect/Stream"
import { canonicalJson, sha256 } from "./internal/canonical.js"

/** The characters of a sample id (and of experiment and configuration names): they make run ids. */
export const namePattern = /^[A-Za-z0-9._:-]{1,64}$/

/** A name usable in a run id: 1 to 64 of `A-Z a-z 0-9 . _ : -`. */
export const Name = Schema.String.pipe(
  Schema.pattern(namePattern, { message: () => "1 to 64 characters of A-Z a-z 0-9 . _ : -" })
)

/** One sample: the task given to the agent (`input`), what a scorer compares with (`target`), anything else. */
export const Sample = Schema.Struct({
  id: Name,
  input: Schema.String,
  target: Schema.optional(Schema.String),
  metadata: Schema.optional(Schema.Record({ key: Schema.String, value: Schema.Unknown }))
})
/** @since 0.1.0 */
export interface Sample extends Schema.Schema.Type<typeof Sample> {}

/** Why a dataset was refused. */
export const DatasetErrorReason = Schema.Literal("Unreadable", "InvalidJson", "InvalidSample", "DuplicateId", "Empty")

/** A dataset that cannot be used; reported before anything runs. `line` counts from 1 (JSONL); `index` from 0 (streams). */
export class DatasetError extends Schema.TaggedError<DatasetError>()("DatasetError", {
  reason: DatasetErrorReason,
  source: Schema.String,
  line: Schema.optional(Schema.Number),
  index: Schema.optional(Schema.Number),
  sampleId: Schema.optional(Schema.String),
  detail: Schema.String,
  cause: Schema.optional(Schema.Defect)
}) {
  override get message(): string {
    const where = this.line !== undefined ? `${this.source}:${this.line}` : this.index !== undefined ? `${this.source}[${this.index}]` : this.source
    return `dataset ${where}: ${this.detail}`
  }
}

/** A dataset: where its samples come from, loaded and checked by `load`. */
export interface Dataset<R = never> {
  /** Names the source in errors and in the recorded definition (a file path, `stream`). */
  readonly source: string
  /** The samples, checked: every one decoded, ids unique, at least one. */
  readonly load: Effect.Effect<ReadonlyArray<Sample>, DatasetError, R>
}

const decodeSample = Schema.decodeUnknownEither(Sample)

const checkUnique = (source: string, samples: ReadonlyArray<Sample>, position: (i: number) => { readonly line: number } | { readonly index: number }) => {
  const seen = new Map<string, number>()
  for (let i = 0; i < samples.length; i++) {
    const id = samples[i]!.id
    const first = seen.get(id)
    if (first !== undefined) {
      const at = position(first)
      const where = "line" in at ? `line ${at.line}` : `index ${at.index}`
      return Effect.fail(new DatasetError({ reason: "DuplicateId", source, ...position(i), sampleId: id, detail: `duplicate sample id ${JSON.stringify(id)} (first at ${where})` }))
    }
    seen.set(id, i)
  }
  if (samples.length === 0) return Effect.fail(new DatasetError({ reason: "Empty", source, detail: "the dataset has no samples" }))
  return Effect.succeed(samples)
}

/**
 * Parses JSON-lines text: one sample per non-blank line. The first bad line fails with its
 * number (1-based), whether it is not JSON or not a sample; then duplicate ids.
 */
export const parseJsonl = (text: string, source: string = "dataset.jsonl"): Effect.Effect<ReadonlyArray<Sample>, DatasetError> =>
  Effect.suspend(() => {
    const lines = text.split("\n")
    const samples: Array<Sample> = []
    const lineOf: Array<number> = []
    for (let i = 0; i < lines.length; i++) {
      const raw = lines[i]!.trim()
      if (raw === "") continue
      let value: unknown
      try {
        value = JSON.parse(raw)
      } catch (cause) {
        return Effect.fail(new DatasetError({ reason: "InvalidJson", source, line: i + 1, detail: `not valid JSON: ${cause instanceof Error ? cause.message : String(cause)}` }))
      }
      const decoded = decodeSample(value)
      if (decoded._tag === "Left") {
        return Effect.fail(
          new DatasetError({ reason: "InvalidSample", source, line: i + 1, detail: `not a sample: ${ParseResult.TreeFormatter.formatErrorSync(decoded.left)}` })
        )
      }
      samples.push(decoded.right)
      lineOf.push(i + 1)
    }
    return checkUnique(source, samples, (i) => ({ line: lineOf[i]! }))
  })

/** A dataset from a JSON-lines file (read with `FileSystem`). */
export const fromJsonl = (path: string): Dataset<FileSystem.FileSystem> => ({
  source: path,
  load: Effect.gen(function*() {
    const fs = yield* FileSystem.FileSystem
    const text = yield* fs.readFileString(path).pipe(
      Effect.mapError((cause) => new DatasetError({ reason: "Unreadable", source: path, detail: `cannot read the file: ${cause.message}`, cause }))
    )
    return yield* parseJsonl(text, path)
  })
})

/** A dataset from a stream of values, each decoded as a sample (its position counted from 0). */
export const fromStream = <E, R>(stream: Stream.Stream<unknown, E, R>, source: string = "stream"): Dataset<R> => ({
  source,
  load: Effect.gen(function*() {
    const values = yield* Stream.runCollect(stream).pipe(
      Effect.mapError((cause) => new DatasetError({ reason: "Unreadable", source, detail: `the stream failed: ${String(cause)}`, cause }))
    )
    const samples: Array<Sample> = []
    let index = 0
    for (const value of Chunk.toReadonlyArray(values)) {
      const decoded = decodeSample(value)
      if (decoded._tag === "Left") {
        return yield* new DatasetError({ reason: "InvalidSample", source, index, detail: `not a sample: ${ParseResult.TreeFormatter.formatErrorSync(decoded.left)}` })
      }
      samples.push(decoded.right)
      index++
    }
    return yield* checkUnique(source, samples, (i) => ({ index: i }))
  })
})

/** A dataset from samples in memory (decoded all the same). */
export const fromIterable = (samples: Iterable<unknown>, source: string = "samples"): Dataset => fromStream(Stream.fromIterable(samples), source)

/** The dataset's hash: SHA-256 of the canonical JSON of its samples, in order. */
export const hash = (samples: ReadonlyArray<Sample>): string => sha256(canonicalJson(samples))
