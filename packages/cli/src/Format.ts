/**
 * Text helpers of the `polyloop` command: one-line previews, times, durations, token counts,
 * actions, statuses and aligned tables (widths computed on the visible text, so coloured cells
 * line up).
 *
 * @since 0.1.0
 */
import type { Action } from "@polyloop/core/Action"
import type { ActionStatus } from "@polyloop/core/ActionOutcome"
import type { Budget } from "@polyloop/core/Budget"
import type { ParsedReply } from "@polyloop/core/ParsedReply"
import * as Duration from "effect/Duration"
import type { Style } from "./Style.js"

/** The text on one line, cut to `max` characters with an ellipsis. */
export const preview = (text: string, max = 100): string => {
  const flat = text.replace(/\s+/g, " ").trim()
  return flat.length > max ? `${flat.slice(0, Math.max(0, max - 1))}…` : flat
}

/** Every line of `text` after the first indented by `indent` spaces. */
export const indent = (text: string, indent: number): string => text.split("\n").join(`\n${" ".repeat(indent)}`)

/** Epoch milliseconds as `2025-01-31 12:34:56Z` (UTC, so the output is the same everywhere). */
export const time = (millis: number): string => {
  const date = new Date(millis)
  return Number.isNaN(date.getTime()) ? "?" : `${date.toISOString().slice(0, 19).replace("T", " ")}Z`
}

/** Milliseconds as a short duration: `850 ms`, `2.4 s`, `3 min 5 s`. */
export const duration = (millis: number): string => {
  if (!Number.isFinite(millis) || millis < 0) return "?"
  if (millis < 1000) return `${Math.round(millis)} ms`
  if (millis < 60_000) return `${(millis / 1000).toFixed(1)} s`
  const minutes = Math.floor(millis / 60_000)
  const seconds = Math.round((millis % 60_000) / 1000)
  return minutes < 60 ? `${minutes} min ${seconds} s` : `${Math.floor(minutes / 60)} h ${minutes % 60} min`
}

/** An action on one line: `name {"arg":…}` or `<language> code: first line…`. */
export const action = (value: Action, max = 120): string =>
  value._tag === "ToolCall"
    ? preview(`${value.name} ${JSON.stringify(value.arguments) ?? ""}`, max)
    : preview(`${value.language} code: ${value.code}`, max)

/** A decision on one line. */
export const decision = (value: ParsedReply, max = 120): string => {
  switch (value._tag) {
    case "Act":
      return value.actions.length === 1 ? action(value.actions[0], max) : value.actions.map((a) => action(a, max)).join(" · ")
    case "Finish":
      return `final answer: ${preview(value.answer, max)}`
    case "NoAction":
      return "no action"
    case "InvalidDecision":
      return `invalid decision: ${preview(value.explanation, max)}`
  }
}

/** An action status, coloured: Executed green, NotExecuted yellow, EnvError red. */
export const status = (style: Style, value: ActionStatus): string =>
  value === "Executed" ? style.green(value) : value === "NotExecuted" ? style.yellow(value) : style.red(value)

/** What was used of each budget item: `steps 3/12 · effective 2/10 · tokens 900/20000`. */
export const budgetUsed = (
  used: { readonly steps: number; readonly effectiveSteps: number; readonly tokens: number; readonly elapsed?: number },
  budget: Budget | undefined
): string => {
  const of = (value: number, max: number | undefined) => (max === undefined ? `${value}` : `${value}/${max}`)
  const parts = [
    `steps ${of(used.steps, budget?.maxSteps)}`,
    `effective ${of(used.effectiveSteps, budget?.maxEffectiveSteps)}`,
    `tokens ${of(used.tokens, budget?.maxTokens)}`
  ]
  if (used.elapsed !== undefined) {
    const max = budget?.maxDuration === undefined ? undefined : Duration.toMillis(budget.maxDuration)
    parts.push(`time ${duration(used.elapsed)}${max === undefined ? "" : `/${duration(max)}`}`)
  }
  return parts.join(" · ")
}

const ansiPattern = /\u001b\[[0-9;]*m/g

/** The width of a text as shown (escape codes do not count). */
export const visibleWidth = (text: string): number => [...text.replace(ansiPattern, "")].length

/** Pads a cell to `width` visible characters. */
const pad = (text: string, width: number, align: "left" | "right"): string => {
  const fill = " ".repeat(Math.max(0, width - visibleWidth(text)))
  return align === "left" ? text + fill : fill + text
}

/** A table column. */
export interface Column {
  readonly header: string
  readonly align?: "left" | "right"
}

/** An aligned table: a header row, then the rows; two spaces between columns, no trailing spaces. */
export const table = (style: Style, columns: ReadonlyArray<Column>, rows: ReadonlyArray<ReadonlyArray<string>>): string => {
  const widths = columns.map((column, i) => Math.max(visibleWidth(column.header), ...rows.map((row) => visibleWidth(row[i] ?? ""))))
  const line = (cells: ReadonlyArray<string>) =>
    cells
      .map((cell, i) => pad(cell, widths[i] ?? 0, columns[i]?.align ?? "left"))
      .join("  ")
      .trimEnd()
  return [style.bold(line(columns.map((column) => column.header))), ...rows.map(line)].join("\n")
}
