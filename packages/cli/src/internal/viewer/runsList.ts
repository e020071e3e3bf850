/**
 * The runs list of `polyloop serve` (`GET /api/runs`): the query (status, agent, stop reason,
 * start day from/to, model, tag, scorer and score bounds, page) decoded from the URL's search
 * parameters, and the filtering and paging done over the
 * store's `listRuns()` (newest first, as the store returns them). See docs/design/0190-viewer.md
 * for why the filters run here and not in the store.
 *
 * @internal
 */
import * as RunLogStore from "@polyloop/core/RunLogStore"
import { sha256 } from "@polyloop/core/Snapshot"
import * as StopReason from "@polyloop/core/StopReason"
import * as Option from "effect/Option"
import * as Schema from "effect/Schema"
import * as Prices from "./prices.js"
import * as RunTags from "./runTags.js"

/** The most runs one page holds. */
export const maxPageSize = 200

/** The default page size. */
export const defaultPageSize = 25

const OptionalText = Schema.optional(Schema.String.pipe(Schema.maxLength(400)))

/** A decimal number, or empty for "no bound". */
const OptionalNumber = Schema.optional(Schema.String.pipe(Schema.pattern(/^(?:-?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)?$/), Schema.maxLength(40)))

const present = (value: string | undefined): value is string => value !== undefined && value !== ""

/** The search parameters of `GET /api/runs`; an empty value means "no filter". */
export const RunsQuery = Schema.Struct({
  /** A store status (`Finished`, `Unfinished`, …). */
  status: OptionalText,
  agent: OptionalText,
  /** A stop reason's kind (`BudgetExhausted`) or its full label (`BudgetExhausted(Steps)`). */
  stopReason: OptionalText,
  /** Runs started on or after this day (UTC, `YYYY-MM-DD`). */
  from: Schema.optional(Schema.String.pipe(Schema.pattern(/^(?:\d{4}-\d{2}-\d{2})?$/))),
  /** Runs started on or before this day (UTC, `YYYY-MM-DD`). */
  to: Schema.optional(Schema.String.pipe(Schema.pattern(/^(?:\d{4}-\d{2}-\d{2})?$/))),
  /** The model the run's snapshot names (`-` for none). */
  model: OptionalText,
  /** A tag of the run: its experiment, or its experiment and configuration `<experiment>/<configuration>` (design 0395). */
  tag: OptionalText,
  /** Only runs scored by this scorer (design 0395), each listed with its score. */
  scorer: OptionalText,
  /** The least score (by `scorer`), included. */
  scoreMin: OptionalNumber,
  /** The greatest score (by `scorer`), included. */
  scoreMax: OptionalNumber,
  /** `hide`: leave out child runs, those a listed parent's log names (design 0412); empty or `show`: list them. */
  children: Schema.optional(Schema.Literal("", "show", "hide")),
  /** The page, from 1. */
  page: Schema.optional(Schema.NumberFromString.pipe(Schema.int(), Schema.greaterThanOrEqualTo(1))),
  pageSize: Schema.optional(Schema.NumberFromString.pipe(Schema.int(), Schema.between(1, maxPageSize)))
}).pipe(Schema.filter((query) =>
  present(query.scorer) || (!present(query.scoreMin) && !present(query.scoreMax))
    ? true
    : { path: ["scorer"], message: "scoreMin and scoreMax bound a scorer's score: name the scorer (scorer=<name>)" }
))
/** @internal */
export type RunsQuery = typeof RunsQuery.Type

/**
 * The stop reason a run is listed with: its `RunFinished`'s, or a conversation's last finished
 * turn's (design 0300); none for a run that has not ended (a turn).
 */
export const listedStopReason = (summary: RunLogStore.RunSummary): StopReason.StopReason | undefined =>
  Option.getOrUndefined(summary.stopReason) ?? summary.conversation?.lastStopReason ?? undefined

/** The label of a stop reason, as the command prints it: `Completed(Tool)`, `EnvError`, …; a conversation's as `turn 2: Completed(Answer)`. */
export const stopReasonLabel = (summary: RunLogStore.RunSummary): string | null => {
  if (Option.isSome(summary.stopReason)) return StopReason.format(summary.stopReason.value)
  const conversation = summary.conversation
  if (conversation === undefined || conversation.lastStopReason === null) return null
  return `turn ${conversation.turns - 1}: ${StopReason.format(conversation.lastStopReason)}`
}

const noParents: ReadonlyMap<string, string> = new Map()

/**
 * Does the run pass the query's filters (tags and scores from `annotations`, design 0395; a
 * child run's parent from `parents`, design 0412)?
 */
export const matches = (
  query: RunsQuery,
  summary: RunLogStore.RunSummary,
  annotations: RunTags.Annotations = RunTags.none,
  parents: ReadonlyMap<string, string> = noParents
): boolean => {
  if (query.children === "hide" && parents.has(summary.runId)) return false
  if (present(query.status) && summary.status !== query.status) return false
  if (present(query.agent) && summary.agent !== query.agent) return false
  if (present(query.from) && summary.startedAt < Date.parse(`${query.from}T00:00:00Z`)) return false
  if (present(query.to) && summary.startedAt >= Date.parse(`${query.to}T00:00:00Z`) + 86_400_000) return false
  if (present(query.model) && (summary.model ?? "-") !== query.model) return false
  if (present(query.stopReason)) {
    const reason = listedStopReason(summary)
    if (reason === undefined) return false
    if (reason._tag !== query.stopReason && StopReason.format(reason) !== query.stopReason) return false
  }
  if (present(query.tag) && !annotations.tagsOf(summary.runId).includes(query.tag)) return false
  if (present(query.scorer)) {
    const score = annotations.scores?.get(summary.runId)
    if (score === undefined) return false
    if (present(query.scoreMin) && score < Number(query.scoreMin)) return false
    if (present(query.scoreMax) && score > Number(query.scoreMax)) return false
  }
  return true
}

const encodeSummary = Schema.encodeSync(RunLogStore.RunSummary)

const sortedDistinct = (values: Iterable<string>): ReadonlyArray<string> => [...new Set(values)].sort()

/**
 * What a run's replies cost under the price table (design 0343: the summary's model and token
 * split); undefined when the table prices neither its model nor `*`, or the store does not say
 * how its tokens split into input and output.
 */
export const costOf = (prices: Prices.PriceTable, summary: RunLogStore.RunSummary): number | undefined =>
  summary.inputTokens === undefined || summary.outputTokens === undefined
    ? undefined
    : Prices.cost(prices, summary.model ?? undefined, { input: summary.inputTokens, output: summary.outputTokens })

/** The totals of the filtered runs: tokens and, with a price table, their cost (unpriced runs counted apart). */
export const totals = (runs: ReadonlyArray<RunLogStore.RunSummary>, prices: Prices.PriceTable | undefined) => {
  let tokens = 0
  let amount = 0
  let unpriced = 0
  for (const summary of runs) {
    tokens += summary.tokens
    if (prices === undefined) continue
    const cost = costOf(prices, summary)
    if (cost === undefined) unpriced++
    else amount += cost
  }
  return { runs: runs.length, tokens, cost: prices === undefined ? null : { currency: prices.currency, amount, unpriced } }
}

/**
 * The page of runs the query asks for, with the total after filtering and the values the
 * filters can take (from all runs, so a filter never hides its own alternatives); with a price
 * table, each run's cost (null: unpriced) and the filtered runs' total; a child run's verified
 * parent as `parent` (design 0412).
 */
export const page = (
  query: RunsQuery,
  all: ReadonlyArray<RunLogStore.RunSummary>,
  prices?: Prices.PriceTable,
  annotations: RunTags.Annotations = RunTags.none,
  parents: ReadonlyMap<string, string> = noParents
) => {
  const pageSize = query.pageSize ?? defaultPageSize
  const filtered = all.filter((summary) => matches(query, summary, annotations, parents))
  const scored = present(query.scorer) ? annotations.scores : undefined
  const pages = Math.max(1, Math.ceil(filtered.length / pageSize))
  const current = Math.min(query.page ?? 1, pages)
  const runs = filtered.slice((current - 1) * pageSize, current * pageSize)
  const reasons = all.flatMap((summary) => { const reason = listedStopReason(summary); return reason === undefined ? [] : [reason] })
  return {
    runs: runs.map((summary) => ({
      ...encodeSummary(summary),
      stopReasonLabel: stopReasonLabel(summary),
      ...(prices === undefined ? {} : { cost: costOf(prices, summary) ?? null }),
      tags: annotations.tagsOf(summary.runId),
      ...(scored === undefined ? {} : { score: scored.get(summary.runId) ?? null }),
      ...(parents.has(summary.runId) ? { parent: parents.get(summary.runId)! } : {})
    })),
    total: filtered.length,
    totals: totals(filtered, prices),
    page: current,
    pages,
    pageSize,
    filters: {
      statuses: sortedDistinct(all.map((summary) => summary.status)),
      agents: sortedDistinct(all.map((summary) => summary.agent)),
      models: sortedDistinct(all.flatMap((summary) => (summary.model === undefined ? [] : [summary.model ?? "-"]))),
      stopReasons: sortedDistinct([...reasons.map((reason) => reason._tag), ...reasons.map(StopReason.format)]),
      tags: annotations.tags,
      scorers: annotations.scorers,
      /** How many listed runs are child runs (design 0412): the page offers `children=hide` when some are. */
      childRuns: parents.size
    }
  }
}

/**
 * A token that changes when any listed run changes (a new run, a step written, a run finished):
 * the list page's live stream sends it, and the page fetches its page again.
 */
export const changeToken = (all: ReadonlyArray<RunLogStore.RunSummary>): string =>
  sha256(all
    .map((summary) => `${summary.runId}\u0000${summary.status}\u0000${summary.steps}\u0000${summary.tokens}\u0000${Option.isSome(summary.finishedAt) ? 1 : 0}\u0000${summary.conversation?.turns ?? ""}`)
    .join("\u0001")).slice(0, 16)
