/**
 * The statistics page of `polyloop serve` (`GET /api/stats?agent=&snapshot=`, issue 34): the
 * groups `polyloop stats --json` prints (the same `Stats.compute` over the same finished runs,
 * encoded the same way), with the plots' numbers computed here: histograms of steps and tokens
 * per run, runs over time, and costs by the server's price table.
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

/** The search parameters of `GET /api/stats`; an empty value means "no filter". */
export const StatsQuery = Schema.Struct({
  agent: Schema.optional(Schema.String.pipe(Schema.maxLength(400))),
  /** A prefix of the snapshot hash, 8 characters or more (as `polyloop stats --snapshot`). */
  snapshot: Schema.optional(Schema.String.pipe(Schema.maxLength(64), Schema.pattern(/^(?:[0-9a-f]{8,64})?$/)))
})
/** @internal */
export type StatsQuery = typeof StatsQuery.Type

const encodeGroups = Schema.encodeSync(Schema.Array(Stats.Group))

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

/** Runs per day (UTC), or per hour when they span less than two days, oldest first. */
export const overTime = (times: ReadonlyArray<number>): ReadonlyArray<Bin> => {
  if (times.length === 0) return []
  let min = Infinity
  let max = -Infinity
  for (const t of times) {
    if (t < min) min = t
    if (t > max) max = t
  }
  const hourly = max - min < 2 * 86_400_000
  const counts = new Map<string, number>()
  for (const t of [...times].sort((a, b) => a - b)) {
    const iso = new Date(t).toISOString()
    const key = hourly ? `${iso.slice(0, 13).replace("T", " ")}:00Z` : iso.slice(0, 10)
    counts.set(key, (counts.get(key) ?? 0) + 1)
  }
  return [...counts.entries()].map(([label, count]) => ({ label, count }))
}

/** The statistics document. */
export interface Document {
  /** What `polyloop stats --json` prints for the same filter. */
  readonly groups: unknown
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
          const groups = Stats.compute(selected.map((e) => e.log))
          const cost = prices === undefined ? null : (() => {
            const byGroup = new Map<string, { amount: number; unpriced: number }>()
            let total = 0
            let unpriced = 0
            for (const e of selected) {
              const key = JSON.stringify([e.agent, e.snapshotHash])
              const group = byGroup.get(key) ?? { amount: 0, unpriced: 0 }
              const amount = Prices.cost(prices, e.model ?? undefined, { input: e.inputTokens, output: e.outputTokens })
              if (amount === undefined) {
                group.unpriced++
                unpriced++
              } else {
                group.amount += amount
                total += amount
              }
              byGroup.set(key, group)
            }
            return {
              currency: prices.currency,
              total,
              unpriced,
              groups: groups.map((g) => byGroup.get(JSON.stringify([g.agent, g.snapshotHash])) ?? { amount: 0, unpriced: 0 })
            }
          })()
          return {
            groups: encodeGroups(groups),
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
