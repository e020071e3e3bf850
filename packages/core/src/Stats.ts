/**
 * Statistics of finished runs (design 0170) — the table a paper's "how did runs end" paragraph
 * needs. Runs are grouped by agent name and snapshot hash (one configuration); per group: the
 * number of runs, the stop-reason distribution (`Completed(Tool|Environment|Answer)`, each
 * `BudgetExhausted(<budget>)`, `EnvError`), steps / effective steps / tokens as median, p90
 * (nearest rank) and max, and how many runs were resumed and how often. Numbers come from each
 * run's `RunFinished` counters (what the run itself recorded). A conversation awaiting its next
 * message (design 0300) counts too: its stop reason is its last turn's, its numbers the sum of
 * its turns' `TurnFinished` counters; a group with conversations says how many and their turns.
 *
 * `select` is the run filter shared with `polyloop export --all`.
 *
 * @since 0.1.0
 */
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import * as Schema from "effect/Schema"
import type { StoreError } from "./Errors.js"
import type { RunId } from "./Ids.js"
import { totalTokens } from "./ModelReply.js"
import * as RunLog from "./RunLog.js"
import { RunLogStore, summarize } from "./RunLogStore.js"
import * as StopReason from "./StopReason.js"

/** Median, 90th percentile (nearest rank) and maximum of a quantity over a group's runs. */
export const Distribution = Schema.Struct({ median: Schema.Number, p90: Schema.Number, max: Schema.Number })
/** @since 0.1.0 */
export interface Distribution extends Schema.Schema.Type<typeof Distribution> {}

/** The statistics of one configuration (agent name and snapshot hash). */
export const Group = Schema.Struct({
  agent: Schema.String,
  snapshotHash: Schema.String,
  runs: Schema.NonNegativeInt,
  /** Runs per stop reason, keyed by `StopReason.format` (`Completed(Tool)`, `BudgetExhausted(Steps)`, `EnvError`). */
  stopReasons: Schema.Record({ key: Schema.String, value: Schema.NonNegativeInt }),
  steps: Distribution,
  effectiveSteps: Distribution,
  tokens: Distribution,
  /** Runs resumed at least once. */
  resumedRuns: Schema.NonNegativeInt,
  /** Resumes over all runs. */
  resumes: Schema.NonNegativeInt,
  /**
   * The group's conversations awaiting a message (design 0300), counted in `runs`, and their
   * turns per conversation. Absent when the group has none.
   */
  conversations: Schema.optional(Schema.Struct({ runs: Schema.NonNegativeInt, turns: Distribution }))
})
/** @since 0.1.0 */
export interface Group extends Schema.Schema.Type<typeof Group> {}

/**
 * The statistics of one agent over all its snapshots (issue 45): a group's fields but the
 * snapshot hash, and how many snapshots (configurations) its runs have. What a store of many
 * configurations is read by first; its snapshots' groups are the detail.
 */
export const AgentGroup = Schema.Struct({
  ...Group.omit("snapshotHash").fields,
  snapshots: Schema.NonNegativeInt
})
/** @since 0.1.0 */
export interface AgentGroup extends Schema.Schema.Type<typeof AgentGroup> {}

/** Which runs: every given criterion must hold. */
export interface Filter {
  readonly agent?: string
  readonly snapshotHash?: string
  /**
   * A stop reason as `StopReason.format` writes it (`Completed(Tool)`, `BudgetExhausted(Tokens)`,
   * `EnvError`) or its kind alone (`Completed`, `BudgetExhausted`); implies a finished run.
   */
  readonly stopReason?: string
  /** `Unfinished` is neither finished nor a conversation awaiting a message (`AwaitingMessage`). */
  readonly status?: "Finished" | "Unfinished" | "AwaitingMessage"
}

/** A log's status as the filter reads it. */
const statusOf = (log: RunLog.RunLog): "Finished" | "Unfinished" | "AwaitingMessage" =>
  Option.isSome(log.finished) ? "Finished" : RunLog.awaitsMessage(log) ? "AwaitingMessage" : "Unfinished"

/**
 * How a counted run ended: a finished run's `RunFinished`, or, for a conversation awaiting a
 * message, its last turn's stop reason with the sum of its turns' counters; undefined otherwise.
 */
const endOf = (log: RunLog.RunLog): { readonly stopReason: StopReason.StopReason; readonly counters: RunLog.RunCounters; readonly turns: number | undefined } | undefined => {
  if (Option.isSome(log.finished)) return { stopReason: log.finished.value.stopReason, counters: log.finished.value.counters, turns: undefined }
  if (!RunLog.awaitsMessage(log)) return undefined
  let steps = 0
  let effectiveSteps = 0
  let inputTokens = 0
  let outputTokens = 0
  let elapsed = 0
  for (const turn of log.turns) {
    steps += turn.counters.steps
    effectiveSteps += turn.counters.effectiveSteps
    inputTokens += turn.counters.usage.inputTokens
    outputTokens += turn.counters.usage.outputTokens
    elapsed += turn.counters.elapsed
  }
  return {
    stopReason: log.turns[log.turns.length - 1]!.stopReason,
    counters: { steps, effectiveSteps, usage: { inputTokens, outputTokens }, elapsed, resumedCount: log.resumes.length },
    turns: log.turns.length
  }
}

/** The agent name a log's snapshot records ("?" if none), as the run summaries give it. */
export const agentOf = (log: RunLog.RunLog): string => Option.match(summarize(log), { onNone: () => "?", onSome: (summary) => summary.agent })

const matchesStopReason = (reason: StopReason.StopReason, wanted: string): boolean =>
  StopReason.format(reason) === wanted || reason._tag === wanted

/** Does a (started) log pass the filter? */
export const matches = (log: RunLog.RunLog, filter: Filter): boolean => {
  if (Option.isNone(log.started)) return false
  if (filter.agent !== undefined && agentOf(log) !== filter.agent) return false
  if (filter.snapshotHash !== undefined && log.started.value.snapshotHash !== filter.snapshotHash) return false
  if (filter.status !== undefined && filter.status !== statusOf(log)) return false
  if (filter.stopReason !== undefined) {
    // A conversation awaiting a message ended its last turn so.
    const end = endOf(log)
    if (end === undefined || !matchesStopReason(end.stopReason, filter.stopReason)) return false
  }
  return true
}

/** The logs of the store's runs that pass the filter, oldest first. */
export const select = (filter: Filter = {}): Effect.Effect<ReadonlyArray<RunLog.RunLog>, StoreError, RunLogStore> =>
  Effect.gen(function*() {
    const store = yield* RunLogStore
    const summaries = yield* store.listRuns(filter.status === undefined ? {} : { status: filter.status })
    const candidates = summaries
      .filter((summary) => filter.agent === undefined || summary.agent === filter.agent)
      .slice()
      .sort((a, b) => a.startedAt - b.startedAt || (a.runId < b.runId ? -1 : a.runId > b.runId ? 1 : 0))
    const logs: Array<RunLog.RunLog> = []
    for (const summary of candidates) {
      const log = yield* store.readLog(summary.runId as RunId)
      if (matches(log, filter)) logs.push(log)
    }
    return logs
  })

/** Median (mean of the two middle values for an even count), p90 (nearest rank), max; zeros for no values. */
export const distribution = (values: ReadonlyArray<number>): Distribution => {
  if (values.length === 0) return { median: 0, p90: 0, max: 0 }
  const sorted = [...values].sort((a, b) => a - b)
  const n = sorted.length
  const median = n % 2 === 1 ? sorted[(n - 1) / 2]! : (sorted[n / 2 - 1]! + sorted[n / 2]!) / 2
  return { median, p90: sorted[Math.ceil(0.9 * n) - 1]!, max: sorted[n - 1]! }
}

type End = NonNullable<ReturnType<typeof endOf>>

/** The counted logs by `key` (agent, or agent and snapshot), each with its agent and snapshot hashes. */
const gather = (logs: Iterable<RunLog.RunLog>, bySnapshot: boolean) => {
  const groups = new Map<string, { agent: string; snapshotHash: string; snapshots: Set<string>; finished: Array<End> }>()
  for (const log of logs) {
    if (Option.isNone(log.started)) continue
    const end = endOf(log)
    if (end === undefined) continue
    const agent = agentOf(log)
    const snapshotHash = log.started.value.snapshotHash
    const key = bySnapshot ? JSON.stringify([agent, snapshotHash]) : agent
    const group = groups.get(key) ?? { agent, snapshotHash, snapshots: new Set<string>(), finished: [] }
    group.finished.push(end)
    group.snapshots.add(snapshotHash)
    groups.set(key, group)
  }
  return [...groups.values()]
    .sort((a, b) => (a.agent < b.agent ? -1 : a.agent > b.agent ? 1 : a.snapshotHash < b.snapshotHash ? -1 : a.snapshotHash > b.snapshotHash ? 1 : 0))
}

/** The figures of a set of counted runs. */
const figures = (finished: ReadonlyArray<End>): Omit<Group, "agent" | "snapshotHash"> => {
  const stopReasons: Record<string, number> = {}
  for (const f of finished) {
    const key = StopReason.format(f.stopReason)
    stopReasons[key] = (stopReasons[key] ?? 0) + 1
  }
  const turns = finished.flatMap((f) => (f.turns === undefined ? [] : [f.turns]))
  return {
    runs: finished.length,
    stopReasons,
    steps: distribution(finished.map((f) => f.counters.steps)),
    effectiveSteps: distribution(finished.map((f) => f.counters.effectiveSteps)),
    tokens: distribution(finished.map((f) => totalTokens(f.counters.usage))),
    resumedRuns: finished.filter((f) => f.counters.resumedCount > 0).length,
    resumes: finished.reduce((sum, f) => sum + f.counters.resumedCount, 0),
    ...(turns.length === 0 ? {} : { conversations: { runs: turns.length, turns: distribution(turns) } })
  }
}

/**
 * The statistics of the finished runs and the conversations awaiting a message among `logs`
 * (other unfinished ones are left out), grouped and sorted by agent, then snapshot hash.
 */
export const compute = (logs: Iterable<RunLog.RunLog>): ReadonlyArray<Group> =>
  gather(logs, true).map(({ agent, finished, snapshotHash }): Group => ({ agent, snapshotHash, ...figures(finished) }))

/**
 * The statistics of the same runs as `compute`, one group per agent over all its snapshots,
 * sorted by agent (issue 45): the first table of a store of many configurations.
 */
export const computeByAgent = (logs: Iterable<RunLog.RunLog>): ReadonlyArray<AgentGroup> =>
  gather(logs, false).map(({ agent, finished, snapshots }): AgentGroup => {
    const { runs, ...rest } = figures(finished)
    return { agent, runs, snapshots: snapshots.size, ...rest }
  })

/** The statistics of the store's finished runs and conversations awaiting a message that pass the filter. */
export const fromStore = (filter: Filter = {}): Effect.Effect<ReadonlyArray<Group>, StoreError, RunLogStore> =>
  Effect.map(
    filter.status !== undefined
      ? select(filter)
      : Effect.zipWith(select({ ...filter, status: "Finished" }), select({ ...filter, status: "AwaitingMessage" }), (a, b) => [...a, ...b]),
    compute
  ).pipe(Effect.withSpan("Stats.fromStore"))
