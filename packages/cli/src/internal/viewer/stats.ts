/**
 * The statistics page of `polyloop serve` (`GET /api/stats?agent=&snapshot=`, issue 34): the
 * groups `polyloop stats --json` prints (the same `Stats.compute` over the same selection of
 * finished runs, encoded the same way), and per finished run the numbers the page plots as
 * histograms and over time (steps, effective steps, tokens, start), from the same logs — so a
 * bar on the page and a figure of the command never disagree.
 *
 * @internal
 */
import { totalTokens } from "@polyloop/core/ModelReply"
import type * as RunLogStore from "@polyloop/core/RunLogStore"
import * as Stats from "@polyloop/core/Stats"
import * as StopReason from "@polyloop/core/StopReason"
import type { StoreError } from "@polyloop/core/Errors"
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

/** One finished run as the page plots it. */
export interface RunPoint {
  readonly runId: string
  readonly agent: string
  readonly snapshotHash: string
  readonly stopReason: string
  readonly steps: number
  readonly effectiveSteps: number
  readonly tokens: number
  readonly inputTokens: number
  readonly outputTokens: number
  /** The snapshot's model name (`agent.modelSettings.model`), null when it names none. */
  readonly model: string | null
  /** Its tokens priced by the server's price table; null without a table or a price for the model. */
  readonly cost: number | null
  readonly startedAt: number
}

const modelOf = (snapshot: unknown): string | null => {
  if (typeof snapshot !== "object" || snapshot === null || !("agent" in snapshot)) return null
  const agent = snapshot.agent
  if (typeof agent !== "object" || agent === null || !("modelSettings" in agent)) return null
  const settings = agent.modelSettings
  if (typeof settings !== "object" || settings === null || !("model" in settings)) return null
  return typeof settings.model === "string" ? settings.model : null
}

/** The statistics document: `groups` is what `polyloop stats --json` prints for the same filter. */
export const document = (
  query: StatsQuery,
  prices: Prices.PriceTable | undefined
): Effect.Effect<{ readonly groups: unknown; readonly runs: ReadonlyArray<RunPoint>; readonly currency: string | null }, StoreError, RunLogStore.RunLogStore> =>
  Effect.gen(function*() {
    const agent = query.agent === undefined || query.agent === "" ? undefined : query.agent
    const snapshot = query.snapshot === undefined || query.snapshot === "" ? undefined : query.snapshot
    const selected = yield* Stats.select({ ...(agent === undefined ? {} : { agent }), status: "Finished" })
    const logs = snapshot === undefined ? selected : selected.filter((log) => Option.exists(log.started, (s) => s.snapshotHash.startsWith(snapshot)))
    const runs = logs.flatMap((log): ReadonlyArray<RunPoint> => {
      if (Option.isNone(log.started) || Option.isNone(log.finished)) return []
      const finished = log.finished.value
      const model = modelOf(log.started.value.snapshot)
      const usage = { input: finished.counters.usage.inputTokens, output: finished.counters.usage.outputTokens }
      return [{
        runId: log.started.value.runId,
        agent: Stats.agentOf(log),
        snapshotHash: log.started.value.snapshotHash,
        stopReason: StopReason.format(finished.stopReason),
        steps: finished.counters.steps,
        effectiveSteps: finished.counters.effectiveSteps,
        tokens: totalTokens(finished.counters.usage),
        inputTokens: usage.input,
        outputTokens: usage.output,
        model,
        cost: prices === undefined ? null : (Prices.cost(prices, model ?? undefined, usage) ?? null),
        startedAt: log.started.value.startedAt
      }]
    })
    return { groups: encodeGroups(Stats.compute(logs)), runs, currency: prices?.currency ?? null }
  })
