/**
 * A snapshot's manifest (design 0330, decision 3; design 0331): the workspace's entries, each
 * language's saved variables, what was not saved; and the refs that name a run's snapshots.
 *
 * @internal
 */
import * as Schema from "effect/Schema"
import * as Workspace from "./workspace.js"

/** The ref prefix of a run's snapshots. */
export const refPrefix = "sandbox/"

/** The ref name of the snapshot after step `step`. */
export const refName = (step: number): string => `${refPrefix}${String(step).padStart(8, "0")}`

export const LanguageState = Schema.Struct({
  hash: Schema.String,
  saved: Schema.Array(Schema.String),
  unsaved: Schema.Array(Schema.Struct({ name: Schema.String, reason: Schema.String })),
  pickler: Schema.String
})

/** A snapshot: the workspace's entries, each language's saved variables, what was not saved. */
export const Manifest = Schema.Struct({
  version: Schema.Literal(1),
  runId: Schema.String,
  step: Schema.Number,
  entries: Schema.Array(Workspace.Entry),
  skipped: Schema.Array(Workspace.Skipped),
  states: Schema.Record({ key: Schema.String, value: LanguageState })
})
/** @since 0.1.0 */
export interface Manifest extends Schema.Schema.Type<typeof Manifest> {}

export const decodeManifest = Schema.decodeUnknownEither(Schema.parseJson(Manifest))

