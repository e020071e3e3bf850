/**
 * Settings passed to the model with every request; part of the snapshot.
 *
 * @since 0.1.0
 */
import * as Schema from "effect/Schema"

/** JSON values, for provider-specific settings. */
export const Json: Schema.Schema<Json> = Schema.suspend(() =>
  Schema.Union(
    Schema.Null,
    Schema.Boolean,
    Schema.Finite,
    Schema.String,
    Schema.Array(Json),
    Schema.Record({ key: Schema.String, value: Json })
  )
)
/** @since 0.1.0 */
export type Json = null | boolean | number | string | ReadonlyArray<Json> | { readonly [key: string]: Json }

/** Model settings. `extra` carries provider-specific options verbatim. */
export const ModelSettings = Schema.Struct({
  model: Schema.optional(Schema.String),
  temperature: Schema.optional(Schema.Finite),
  topP: Schema.optional(Schema.Finite),
  maxOutputTokens: Schema.optional(Schema.Int),
  seed: Schema.optional(Schema.Int),
  stop: Schema.optional(Schema.Array(Schema.String)),
  extra: Schema.optional(Schema.Record({ key: Schema.String, value: Json }))
})
/** @since 0.1.0 */
export interface ModelSettings extends Schema.Schema.Type<typeof ModelSettings> {}
