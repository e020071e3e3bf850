/**
 * Run summaries and search from a decoded log, for backends without a query language (the memory
 * store, hand-written ones): the summary of a run, a query over summaries, the searched field of
 * a record and its snippet (designs 0341, 0343).
 *
 * @internal
 */
import * as Option from "effect/Option"
import * as RunLog from "../RunLog.js"
import * as Approvals from "./approvals.js"
import type { ListRunsQuery, RunSummary, SearchField } from "./storeTypes.js"

/** The longest snippet of a search hit. */
export const snippetLength = 240

/** The field of a record that searches look into, if any. */
export const searchedText = (record: RunLog.RunRecord): readonly [SearchField, string] | undefined => {
  switch (record._tag) {
    case "RunStarted":
      return ["task", record.task]
    case "ModelReplied":
      return ["reply", record.reply.text]
    case "ActionResulted":
      return ["observation", record.outcome.observation]
    default:
      return undefined
  }
}

/** At most `snippetLength` characters of `text` around the first case-insensitive match of `query`. */
export const snippetOf = (text: string, query: string): string => {
  if (text.length <= snippetLength) return text
  const at = Math.max(0, text.toLowerCase().indexOf(query.toLowerCase()))
  const start = Math.max(0, Math.min(at - Math.floor((snippetLength - query.length) / 2), text.length - snippetLength))
  return text.slice(start, start + snippetLength)
}

/** The summary of a run from its log (none for the empty log); backends without a query language use it. */
export const summarize = (log: RunLog.RunLog): Option.Option<RunSummary> =>
  Option.map(log.started, (started): RunSummary => {
    const finished = log.finished
    const snapshot = started.snapshot as { readonly agent?: { readonly name?: unknown } } | null
    const agent = typeof snapshot?.agent?.name === "string" ? snapshot.agent.name : "?"
    let inputTokens = 0
    let outputTokens = 0
    for (const reply of log.replies) {
      inputTokens += reply.reply.usage.inputTokens
      outputTokens += reply.reply.usage.outputTokens
    }
    // A summary's model call (design 0300) counts in the run's tokens.
    for (const compaction of log.compactions) {
      if (compaction.usage === undefined) continue
      inputTokens += compaction.usage.inputTokens
      outputTokens += compaction.usage.outputTokens
    }
    const tokens = inputTokens + outputTokens
    let elapsed = 0
    for (const step of log.steps) elapsed += step.elapsed
    let effectiveSteps = 0
    for (const step of log.steps) if (step.effective) effectiveSteps++
    return {
      runId: started.runId,
      agent,
      status: Option.isSome(finished)
        ? "Finished"
        : Approvals.isSuspended(log)
        ? "Suspended"
        : RunLog.awaitsMessage(log)
        ? "AwaitingMessage"
        : "Unfinished",
      stopReason: Option.map(finished, (f) => f.stopReason),
      steps: log.steps.length,
      effectiveSteps,
      tokens,
      startedAt: started.startedAt,
      finishedAt: Option.map(finished, (f) => f.finishedAt),
      elapsed,
      snapshotHash: started.snapshotHash,
      model: modelOf(started.snapshot),
      forkedFrom: started.forkedFrom === undefined
        ? null
        : { runId: started.forkedFrom.runId, step: started.forkedFrom.step, differences: started.forkedFrom.differences.length },
      inputTokens,
      outputTokens,
      ...(started.conversation === undefined ? {} : {
        conversation: {
          turns: log.turns.length,
          messages: log.userMessages.length + 1,
          lastStopReason: log.turns.length === 0 ? null : log.turns[log.turns.length - 1]!.stopReason
        }
      }),
      counters: Option.match(finished, {
        onNone: () => null,
        onSome: ({ counters }) => ({
          steps: counters.steps,
          effectiveSteps: counters.effectiveSteps,
          inputTokens: counters.usage.inputTokens,
          outputTokens: counters.usage.outputTokens,
          resumedCount: counters.resumedCount
        })
      })
    }
  })

/** The model a snapshot names (`agent.modelSettings.model`), null if none (design 0343). */
export const modelOf = (snapshot: unknown): string | null => {
  if (typeof snapshot !== "object" || snapshot === null || !("agent" in snapshot)) return null
  const agent = snapshot.agent
  if (typeof agent !== "object" || agent === null || !("modelSettings" in agent)) return null
  const settings = agent.modelSettings
  if (typeof settings !== "object" || settings === null || !("model" in settings)) return null
  return typeof settings.model === "string" ? settings.model : null
}

/** Applies a query to summaries: status filter, newest first, limit. */
export const applyQuery = (summaries: ReadonlyArray<RunSummary>, query: ListRunsQuery): ReadonlyArray<RunSummary> => {
  const filtered = summaries
    .filter((s) => query.status === undefined || s.status === query.status)
    .sort((a, b) => b.startedAt - a.startedAt || (a.runId < b.runId ? -1 : a.runId > b.runId ? 1 : 0))
  return query.limit === undefined ? filtered : filtered.slice(0, query.limit)
}
