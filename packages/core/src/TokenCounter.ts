/**
 * Counting tokens (design 0300, decision 4): the port a token-budget history policy counts with.
 * A policy names its encoding (`"approximate"`, `"o200k_base"`, …), so the encoding is in the
 * snapshot; the `TokenCounter` in context provides the encodings it knows. Core's default knows
 * only `"approximate"`: ⌈characters / 4⌉, the usual rule of thumb for English text and code with
 * OpenAI's and Anthropic's tokenizers — an approximation, corrected in the loop by the input
 * tokens the provider reported for the previous request. `@polyloop/ai`'s `Tokenizers.layer` adds
 * real encodings (js-tiktoken).
 *
 * A count must be a pure function of the text (the history, and so every request, is a function
 * of the log).
 *
 * @since 0.2.0
 */
import * as Context from "effect/Context"
import * as Layer from "effect/Layer"

/** Counts the tokens of a text in one encoding. */
export type Count = (text: string) => number

/** The approximate encoding's name. */
export const approximate = "approximate"

/** ⌈characters / 4⌉. */
export const approximateCount: Count = (text) => Math.ceil(text.length / 4)

/** The encodings a run can count with. */
export class TokenCounter extends Context.Tag("@polyloop/core/TokenCounter")<TokenCounter, TokenCounter.Service>() {}

/** @since 0.2.0 */
export declare namespace TokenCounter {
  /** @since 0.2.0 */
  export interface Service {
    /** The counter of an encoding, or `undefined` when this service does not have it. */
    readonly encoding: (name: string) => Count | undefined
    /** The encodings it has, for error messages. */
    readonly names: ReadonlyArray<string>
  }
}

/** A service over named counters; `"approximate"` is always among them. */
export const make = (encodings: Readonly<Record<string, Count>>): TokenCounter.Service => {
  const all: Record<string, Count> = { [approximate]: approximateCount, ...encodings }
  return {
    encoding: (name) => (Object.prototype.hasOwnProperty.call(all, name) ? all[name] : undefined),
    names: Object.keys(all).sort()
  }
}

/** The default: only `"approximate"`. */
export const approximateOnly: TokenCounter.Service = make({})

/** A layer of the default counter. */
export const layerApproximate: Layer.Layer<TokenCounter> = Layer.succeed(TokenCounter, approximateOnly)
