/**
 * The statistics page of `polyloop serve` (`GET /api/stats?agent=&snapshot=&page=&agentPage=`,
 * issues 34 and 45): the groups `polyloop stats --json` prints (the same `Stats.compute` over the
 * same finished runs, encoded the same way) a page at a time, the same runs per agent
 * (`Stats.computeByAgent`, a page of 25), with the plots' numbers computed here: the stop-reasons
 * chart (per agent, or per snapshot of one agent; at most 20 bars, the rest counted), histograms
 * of steps and tokens per run, runs over time (at most 60 periods), and costs by the server's
 * price table (design 0371).
 *
 * A request is one `listRuns` query (design 0343): a finished run's summary from a store that
 * keeps the details (snapshot hash, model, `RunFinished` counters: the memory and SQL stores)
 * becomes a log of two records, its `RunStarted` (the snapshot cut down to the agent's name and
 * model) and its `RunFinished`, with no log read. `Stats.compute` runs over those logs, which is
 * all it reads, so the figures are those of the command. A summary without the details (a store
 * that does not keep them) is read from its log once, into the server's index of finished runs
 * (design 0342, decision 3): a finished run never changes. A conversation awaiting a message
 * (design 0300) counts as in the command: its log is read on each request (it changes).
 *
 * @internal
 */
import type { StoreError } from "@polyloop/core/Errors"
import type { RunId } from "@polyloop/core/Ids"
import { totalTokens } from "@polyloop/core/ModelReply"
import * as RunLog from "@polyloop/core/RunLog"
import * as RunLogStore from "@polyloop/core/RunLogStore"
import * as Stats from "@polyloop/core/Stats"
import * as StopReason from "@polyloop/core/StopReason"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import * as Schema from "effect/Schema"
import * as Prices from "./prices.js"

/** How many configurations (agent and snapshot) one page of `groups` holds by default. */
export const defaultGroupsPageSize = 50

/** How many agents one page of `byAgent` holds. */
export const agentsPageSize = 25

/** The most bars of a chart: the largest, then one bar for the rest (issue 45). */
export const maxBars = 20

/** The most periods of the runs-over-time chart (days become weeks, then months). */
export const maxPeriods = 60

const PageNumber = Schema.optional(Schema.NumberFromString.pipe(Schema.int(), Schema.between(1, 1_000_000)))

/** The search parameters of `GET /api/stats`; an empty value means "no filter". */
export const StatsQuery = Schema.Struct({
  agent: Schema.optional(Schema.String.pipe(Schema.maxLength(400))),
  /** A prefix of the snapshot hash, 8 characters or more (as `polyloop stats --snapshot`). */
  snapshot: Schema.optional(Schema.String.pipe(Schema.maxLength(64), Schema.pattern(/^(?:[0-9a-f]{8,64})?$/))),
  /** The page of `groups` (configurations), from 1. */
  page: PageNumber,
  pageSize: Schema.optional(Schema.NumberFromString.pipe(Schema.int(), Schema.between(1, 200))),
  /** The page of `byAgent`, from 1. */
  agentPage: PageNumber
})
/** @internal */
export type StatsQuery = typeof StatsQuery.Type

const encodeGroups = Schema.encodeSync(Schema.Array(Stats.Group))
const encodeAgentGroups = Schema.encodeSync(Schema.Array(Stats.AgentGroup))

/** A finished run as the index keeps it. */
interface Entry {
  readonly runId: string
  /** A log of the run's `RunStarted` (its snapshot cut down) and `RunFinished`: what `Stats.compute` reads. */
  readonly log: RunLog.RunLog
  readonly agent: string
  readonly snapshotHash: string
  readonly model: string | null
  readonly startedAt: number
  readonly steps: number
  readonly tokens: number
  readonly inputTokens: number
  readonly outputTokens: number
  readonly stopReason: string
}

const entryOf = (log: RunLog.RunLog): Entry | undefined => {
  if (Option.isNone(log.started) || Option.isNone(log.finished)) return undefined
  const started = log.started.value
  const finished = log.finished.value
  const agent = Stats.agentOf(log)
  const model = RunLogStore.modelOf(started.snapshot)
  const small: RunLog.RunStarted = { ...started, snapshot: { agent: { name: agent, modelSettings: model === null ? {} : { model } } } }
  return {
    runId: started.runId,
    log: RunLog.fromRecords([small, finished]),
    agent,
    snapshotHash: started.snapshotHash,
    model,
    startedAt: started.startedAt,
    steps: finished.counters.steps,
    tokens: totalTokens(finished.counters.usage),
    inputTokens: finished.counters.usage.inputTokens,
    outputTokens: finished.counters.usage.outputTokens,
    stopReason: StopReason.format(finished.stopReason)
  }
}

/**
 * The entry of a conversation awaiting a message (design 0300), as `Stats` counts it: its log as
 * it is (its turns are what `Stats.compute` reads), its numbers the sums of its turns' counters,
 * its stop reason its last turn's. Read from the log on every request: a conversation changes.
 */
const entryOfConversation = (log: RunLog.RunLog): Entry | undefined => {
  if (Option.isNone(log.started) || !RunLog.awaitsMessage(log)) return undefined
  const started = log.started.value
  let steps = 0
  let inputTokens = 0
  let outputTokens = 0
  for (const turn of log.turns) {
    steps += turn.counters.steps
    inputTokens += turn.counters.usage.inputTokens
    outputTokens += turn.counters.usage.outputTokens
  }
  return {
    runId: started.runId,
    log,
    agent: Stats.agentOf(log),
    snapshotHash: started.snapshotHash,
    model: RunLogStore.modelOf(started.snapshot),
    startedAt: started.startedAt,
    steps,
    tokens: inputTokens + outputTokens,
    inputTokens,
    outputTokens,
    stopReason: StopReason.format(log.turns[log.turns.length - 1]!.stopReason)
  }
}

/** The entry of a finished run from its summary alone, when the store keeps the details (design 0343). */
export const entryOfSummary = (summary: RunLogStore.RunSummary): Entry | undefined => {
  const { counters, model, snapshotHash } = summary
  if (snapshotHash === undefined || model === undefined || counters === undefined || counters === null) return undefined
  if (Option.isNone(summary.stopReason)) return undefined
  const started: RunLog.RunStarted = {
    _tag: "RunStarted",
    seq: 0,
    runId: summary.runId as RunId,
    task: "",
    snapshot: { agent: { name: summary.agent, modelSettings: model === null ? {} : { model } } },
    snapshotHash,
    startedAt: summary.startedAt
  }
  const finished: RunLog.RunFinished = {
    _tag: "RunFinished",
    seq: 1,
    stopReason: summary.stopReason.value,
    finishedAt: Option.getOrElse(summary.finishedAt, () => summary.startedAt),
    counters: {
      steps: counters.steps,
      effectiveSteps: counters.effectiveSteps,
      usage: { inputTokens: counters.inputTokens, outputTokens: counters.outputTokens },
      elapsed: summary.elapsed,
      resumedCount: counters.resumedCount
    },
    eventDeliveryFailures: 0
  }
  return {
    runId: summary.runId,
    log: RunLog.fromRecords([started, finished]),
    agent: summary.agent,
    snapshotHash,
    model,
    startedAt: summary.startedAt,
    steps: counters.steps,
    tokens: counters.inputTokens + counters.outputTokens,
    inputTokens: counters.inputTokens,
    outputTokens: counters.outputTokens,
    stopReason: StopReason.format(summary.stopReason.value)
  }
}

/** A bar of a histogram: the values `from` … `to` and how many runs have one. */
export interface Bin {
  readonly label: string
  readonly count: number
}

/** Bins for a histogram of non-negative integers: one per value below 30, else 20 equal bins. */
export const histogram = (values: ReadonlyArray<number>): ReadonlyArray<Bin> => {
  if (values.length === 0) return []
  let max = 0
  for (const v of values) if (v > max) max = v
  const width = max < 30 ? 1 : Math.ceil((max + 1) / 20)
  const counts = new Array<number>(Math.ceil((max + 1) / width)).fill(0)
  for (const v of values) counts[Math.floor(v / width)]!++
  return counts.map((count, i) => ({ label: width === 1 ? String(i) : `${i * width}–${i * width + width - 1}`, count }))
}

/** The Monday (UTC) of a time's week, as `2025-01-27`. */
const weekOf = (t: number): string => {
  const date = new Date(t)
  const day = (date.getUTCDay() + 6) % 7
  return `week of ${new Date(Date.UTC(date.getUTCFullYear(), date.getUTCMonth(), date.getUTCDate() - day)).toISOString().slice(0, 10)}`
}

/**
 * Runs per hour when they span less than two days, else per day (UTC), oldest first; the first
 * of day, week or month that gives at most `maxPeriods` bars (a store of a year is 12 months, not
 * 365 days). Periods without runs are left out.
 */
export const overTime = (times: ReadonlyArray<number>): ReadonlyArray<Bin> => {
  if (times.length === 0) return []
  let min = Infinity
  let max = -Infinity
  for (const t of times) {
    if (t < min) min = t
    if (t > max) max = t
  }
  const sorted = [...times].sort((a, b) => a - b)
  const count = (key: (t: number) => string): ReadonlyArray<Bin> => {
    const counts = new Map<string, number>()
    for (const t of sorted) {
      const k = key(t)
      counts.set(k, (counts.get(k) ?? 0) + 1)
    }
    return [...counts.entries()].map(([label, n]) => ({ label, count: n }))
  }
  if (max - min < 2 * 86_400_000) return count((t) => `${new Date(t).toISOString().slice(0, 13).replace("T", " ")}:00Z`)
  const daily = count((t) => new Date(t).toISOString().slice(0, 10))
  if (daily.length <= maxPeriods) return daily
  const weekly = count(weekOf)
  return weekly.length <= maxPeriods ? weekly : count((t) => new Date(t).toISOString().slice(0, 7))
}

/** A bar of the stop-reasons chart: an agent, or a snapshot of one. */
export interface Bar {
  readonly label: string
  readonly agent: string
  readonly snapshotHash?: string
  readonly runs: number
  readonly stopReasons: Readonly<Record<string, number>>
}

/** A capped chart: its bars, and what was left out (counted: every figure is in the tables). */
export interface CappedBars {
  readonly bars: ReadonlyArray<Bar>
  readonly left: { readonly bars: number; readonly runs: number }
}

/**
 * The bars of a stop-reasons chart: the `maxBars` with the most runs (ties: the first given), in
 * the order given; the rest counted apart. (A bar of "the rest" together would dwarf the others.)
 */
export const capBars = (bars: ReadonlyArray<Bar>): CappedBars => {
  if (bars.length <= maxBars) return { bars, left: { bars: 0, runs: 0 } }
  const ranked = bars.map((bar, i) => ({ bar, i })).sort((a, b) => b.bar.runs - a.bar.runs || a.i - b.i)
  const kept = new Set(ranked.slice(0, maxBars).map((r) => r.i))
  const rest = bars.filter((_, i) => !kept.has(i))
  return { bars: bars.filter((_, i) => kept.has(i)), left: { bars: rest.length, runs: rest.reduce((sum, bar) => sum + bar.runs, 0) } }
}

/** The statistics document. */
export interface Document {
  /**
   * A page of what `polyloop stats --json` prints for the same filter (every group when they fit
   * in a page): configurations, by agent then snapshot.
   */
  readonly groups: unknown
  /** How many configurations the filter selects; the page of `groups` and its size. */
  readonly groupCount: number
  readonly page: number
  readonly pageSize: number
  /** Per agent over all its snapshots (`polyloop stats` prints these first), a page of `agentsPageSize`. */
  readonly byAgent: { readonly rows: unknown; readonly count: number; readonly page: number; readonly pageSize: number }
  /** The stop-reasons chart: per agent, or per snapshot when one agent is selected; at most `maxBars` bars. */
  readonly chart: CappedBars & { readonly by: "agent" | "snapshot" }
  readonly finished: number
  /** The agents of all finished runs (the filter's choices, whatever the filter). */
  readonly agents: ReadonlyArray<string>
  readonly histograms: { readonly steps: ReadonlyArray<Bin>; readonly tokens: ReadonlyArray<Bin>; readonly overTime: ReadonlyArray<Bin> }
  /** By the price table (null without one): per group (as `groups` is ordered) and in total; runs of an unpriced model are counted apart. */
  readonly cost: {
    readonly currency: string
    readonly total: number
    readonly unpriced: number
    readonly groups: ReadonlyArray<{ readonly amount: number; readonly unpriced: number }>
    /** As `byAgent.rows` is ordered. */
    readonly agents: ReadonlyArray<{ readonly amount: number; readonly unpriced: number }>
  } | null
}

/** The index of finished runs (one per server). */
export interface Index {
  readonly document: (query: StatsQuery, prices: Prices.PriceTable | undefined) => Effect.Effect<Document, StoreError, RunLogStore.RunLogStore>
}

/** A new, empty index. */
export const make = (): Effect.Effect<Index> =>
  Effect.map(Effect.makeSemaphore(1), (lock) => {
    /** Finished runs read from their logs: those whose summaries lack the details. */
    const read = new Map<string, Entry>()
    /** Every finished run's entry: one summary query; a log read only for a summary without the details, once. */
    const current = lock.withPermits(1)(Effect.gen(function*() {
      const store = yield* RunLogStore.RunLogStore
      const finished = yield* store.listRuns({ status: "Finished" })
      const entries: Array<Entry> = []
      for (const summary of finished) {
        const entry = entryOfSummary(summary) ?? read.get(summary.runId) ?? entryOf(yield* store.readLog(summary.runId as RunId))
        if (entry === undefined) continue
        if (summary.snapshotHash === undefined) read.set(entry.runId, entry)
        entries.push(entry)
      }
      // Conversations awaiting a message count as `polyloop stats` counts them (design 0300).
      for (const summary of yield* store.listRuns({ status: "AwaitingMessage" })) {
        const entry = entryOfConversation(yield* store.readLog(summary.runId as RunId))
        if (entry !== undefined) entries.push(entry)
      }
      return entries
    }))
    return {
      document: (query, prices) =>
        Effect.gen(function*() {
          const entries = yield* current
          const agent = query.agent === undefined || query.agent === "" ? undefined : query.agent
          const snapshot = query.snapshot === undefined || query.snapshot === "" ? undefined : query.snapshot
          const selected = entries.filter((e) =>
            (agent === undefined || e.agent === agent) && (snapshot === undefined || e.snapshotHash.startsWith(snapshot))
          )
          const logs = selected.map((e) => e.log)
          const allGroups = Stats.compute(logs)
          const allAgents = Stats.computeByAgent(logs)
          const pageSize = query.pageSize ?? defaultGroupsPageSize
          const page = Math.min(query.page ?? 1, Math.max(1, Math.ceil(allGroups.length / pageSize)))
          const groups = allGroups.slice((page - 1) * pageSize, page * pageSize)
          const agentPage = Math.min(query.agentPage ?? 1, Math.max(1, Math.ceil(allAgents.length / agentsPageSize)))
          const agentRows = allAgents.slice((agentPage - 1) * agentsPageSize, agentPage * agentsPageSize)
          const chart = agent === undefined
            ? { by: "agent" as const, ...capBars(allAgents.map((g) => ({ label: g.agent, agent: g.agent, runs: g.runs, stopReasons: g.stopReasons }))) }
            : {
              by: "snapshot" as const,
              ...capBars(
                allGroups.map((g) => ({ label: `${g.agent} · ${g.snapshotHash.slice(0, 8)}`, agent: g.agent, snapshotHash: g.snapshotHash, runs: g.runs, stopReasons: g.stopReasons }))
              )
            }
          const cost = prices === undefined ? null : (() => {
            const byGroup = new Map<string, { amount: number; unpriced: number }>()
            const byAgent = new Map<string, { amount: number; unpriced: number }>()
            let total = 0
            let unpriced = 0
            for (const e of selected) {
              const key = JSON.stringify([e.agent, e.snapshotHash])
              const group = byGroup.get(key) ?? { amount: 0, unpriced: 0 }
              const ofAgent = byAgent.get(e.agent) ?? { amount: 0, unpriced: 0 }
              const amount = Prices.cost(prices, e.model ?? undefined, { input: e.inputTokens, output: e.outputTokens })
              if (amount === undefined) {
                group.unpriced++
                ofAgent.unpriced++
                unpriced++
              } else {
                group.amount += amount
                ofAgent.amount += amount
                total += amount
              }
              byGroup.set(key, group)
              byAgent.set(e.agent, ofAgent)
            }
            return {
              currency: prices.currency,
              total,
              unpriced,
              groups: groups.map((g) => byGroup.get(JSON.stringify([g.agent, g.snapshotHash])) ?? { amount: 0, unpriced: 0 }),
              agents: agentRows.map((g) => byAgent.get(g.agent) ?? { amount: 0, unpriced: 0 })
            }
          })()
          return {
            groups: encodeGroups(groups),
            groupCount: allGroups.length,
            page,
            pageSize,
            byAgent: { rows: encodeAgentGroups(agentRows), count: allAgents.length, page: agentPage, pageSize: agentsPageSize },
            chart,
            finished: selected.length,
            agents: [...new Set(entries.map((e) => e.agent))].sort(),
            histograms: {
              steps: histogram(selected.map((e) => e.steps)),
              tokens: histogram(selected.map((e) => e.tokens)),
              overTime: overTime(selected.map((e) => e.startedAt))
            },
            cost
          }
        })
    }
  })
