/**
 * `unknown` fields that hold JSON values (parsed JSON passed through verbatim: tool-call
 * arguments, the snapshot, JSON Schemas). The schema accepts anything, as before; its
 * arbitrary generates JSON values as `JSON.parse` returns them, so property tests and the
 * contract kit generate what can actually be stored in the JSON run log.
 *
 * @internal
 */
import * as Schema from "effect/Schema"

/** @internal */
export const JsonValue = Schema.Unknown.annotations({
  arbitrary: () => (fc) => fc.jsonValue().map((value): unknown => JSON.parse(JSON.stringify(value)))
})
