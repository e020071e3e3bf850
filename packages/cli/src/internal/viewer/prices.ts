/**
 * The price table of `polyloop serve --prices <file>` (issue 34): what a million input and a
 * million output tokens cost, per model (the snapshot's `agent.modelSettings.model`), with `*`
 * for any model the table does not name. The page prices each run's tokens with it (a run's
 * page, the statistics' groups and totals); without a table no cost is shown. The server only
 * serves the table (`GET /api/prices`); it never guesses a price.
 *
 * ```json
 * { "currency": "USD", "models": { "gpt-4o": { "input": 2.5, "output": 10 }, "*": { "input": 1, "output": 4 } } }
 * ```
 *
 * @internal
 */
import * as Schema from "effect/Schema"

const PerMillion = Schema.Struct({
  /** The price of one million input tokens. */
  input: Schema.NonNegative.pipe(Schema.finite()),
  /** The price of one million output tokens. */
  output: Schema.NonNegative.pipe(Schema.finite())
})

/** A price table. */
export const PriceTable = Schema.Struct({
  /** What the prices are in (shown next to them; default "USD"). */
  currency: Schema.optionalWith(Schema.String.pipe(Schema.minLength(1), Schema.maxLength(12)), { default: () => "USD" }),
  /** Per model name; `*` prices every model not named. */
  models: Schema.Record({ key: Schema.String.pipe(Schema.minLength(1), Schema.maxLength(200)), value: PerMillion })
})
/** @internal */
export type PriceTable = typeof PriceTable.Type

/** Reads a price table from the JSON text of a file; the error says what is wrong, in one line. */
export const decode = (text: string): PriceTable | string => {
  let json: unknown
  try {
    json = JSON.parse(text)
  } catch (error) {
    return `not JSON: ${error instanceof Error ? error.message : String(error)}`
  }
  const decoded = Schema.decodeUnknownEither(PriceTable)(json, { onExcessProperty: "error" })
  return decoded._tag === "Right" ? decoded.right : decoded.left.message.split("\n").slice(0, 3).join(" ").slice(0, 300)
}

/** What `tokens` cost under `table` for `model` (undefined: the table prices neither it nor `*`). */
export const cost = (table: PriceTable, model: string | undefined, tokens: { readonly input: number; readonly output: number }): number | undefined => {
  const price = (model === undefined ? undefined : table.models[model]) ?? table.models["*"]
  return price === undefined ? undefined : (tokens.input * price.input + tokens.output * price.output) / 1_000_000
}
