/**
 * Real token counts for the history policies' token budgets (design 0300, decision 4): OpenAI's
 * encodings from js-tiktoken (the kept pure-JavaScript port of tiktoken; `js-tiktoken/lite` with
 * the ranks shipped in the package — no WASM, nothing downloaded at run time). `layer` provides
 * a `TokenCounter` with `o200k_base` (GPT-4o, GPT-4.1, GPT-5, o-series) and `cl100k_base`
 * (GPT-4, GPT-3.5) beside core's `approximate`; an encoding's ranks are loaded the first time a
 * run counts with it.
 *
 * Counting is linear in the text: tiktoken's merge is quadratic in the length of one piece, so a
 * run of more than 128 characters without whitespace (a base64 blob, a line of `=`) is counted
 * in 32-character slices — a count that may differ from the exact one by a token per slice, the
 * same every time. Special-token text (`<|endoftext|>`) in a message is counted as text.
 *
 * @since 0.2.0
 */
import * as Layer from "effect/Layer"
import * as TokenCounter from "@polyloop/core/TokenCounter"
import { Tiktoken, type TiktokenBPE } from "js-tiktoken/lite"
import cl100k from "js-tiktoken/ranks/cl100k_base"
import o200k from "js-tiktoken/ranks/o200k_base"

/** The encodings this module provides. */
export const encodings = ["o200k_base", "cl100k_base"] as const

/** A long run without whitespace (see the module header). */
const longRun = /\S{129,}/g
const slice = 32

/** The counter of one encoding's ranks (linear in the text). */
export const counter = (ranks: TiktokenBPE): TokenCounter.Count => {
  let encoder: Tiktoken | undefined
  const encode = (text: string): number => {
    if (text.length === 0) return 0
    encoder ??= new Tiktoken(ranks)
    return encoder.encode(text, [], []).length
  }
  return (text) => {
    let total = 0
    let from = 0
    longRun.lastIndex = 0
    for (let match = longRun.exec(text); match !== null; match = longRun.exec(text)) {
      total += encode(text.slice(from, match.index))
      const run = match[0]
      for (let i = 0; i < run.length; i += slice) total += encode(run.slice(i, i + slice))
      from = match.index + run.length
    }
    return total + encode(text.slice(from))
  }
}

/** A `TokenCounter` with `o200k_base`, `cl100k_base` and `approximate`. */
export const make = (): TokenCounter.TokenCounter.Service =>
  TokenCounter.make({ o200k_base: counter(o200k), cl100k_base: counter(cl100k) })

/** `make` as a layer. */
export const layer: Layer.Layer<TokenCounter.TokenCounter> = Layer.sync(TokenCounter.TokenCounter, make)
