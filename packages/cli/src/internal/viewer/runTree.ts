/**
 * Sub-agent runs in the viewer (design 0412): a run's tree of child runs for `GET
 * /api/runs/<id>/tree`, a child's parent verified in the parent's log, and the index of parents
 * the runs list marks and filters with.
 *
 * A parent's `ActionResulted` names each child it ran (`child`, design 0392): the tree is read
 * from those records, breadth first, each child's log read for its model (the price of its own
 * tokens) and its own children; bounded by `maxDepth` and `maxNodes` (a node whose children were
 * not read is `truncated`). A child whose log is not in the store is a node of status `missing`
 * (its figures from the parent's record), one that cannot be read `unreadable`: never an error of
 * the tree. A call whose result is not written yet (a child running now) is looked up under its
 * derived id (`SubAgent.childRunId`) and shown when that log exists, `unfinished`.
 *
 * A parent is never inferred from an id alone (a run may be *named* `a/1/x`): the id's shape
 * `<parent>/<step>/<callId>` only says which log to read, and the parent is reported only when
 * one of its `ActionResulted` names the run.
 *
 * @internal
 */
import type { StoreError } from "@polyloop/core/Errors"
import type { RunId } from "@polyloop/core/Ids"
import type * as RunLog from "@polyloop/core/RunLog"
import * as RunLogStore from "@polyloop/core/RunLogStore"
import * as StopReason from "@polyloop/core/StopReason"
import * as SubAgent from "@polyloop/core/SubAgent"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Option from "effect/Option"
import * as Schema from "effect/Schema"
import * as Prices from "./prices.js"

/** The deepest a tree is read (the root at depth 0). */
export const maxDepth = 8

/** The most descendants a tree reads. */
export const maxNodes = 500

/** Where a node's log stands. */
export type NodeStatus = "finished" | "unfinished" | "missing" | "unreadable"

/** Input and output tokens. */
export interface Tokens {
  readonly inputTokens: number
  readonly outputTokens: number
}

/** A run of the tree, as the API sends it. */
export interface Node {
  readonly runId: string
  /** The parent's step and call that ran it (absent for the root). */
  readonly step?: number
  readonly callId?: string
  readonly status: NodeStatus
  /** The model its snapshot names (null: none named, or its log is not there). */
  readonly model: string | null
  readonly stopReason: unknown
  readonly stopReasonLabel: string | null
  readonly steps: number
  readonly effectiveSteps: number
  /** Its own tokens (its children's not included). */
  readonly usage: Tokens
  /** Its own tokens priced by its own model (null: unpriced); only with a price table. */
  readonly cost?: number | null
  /** Why its log could not be read (`unreadable`). */
  readonly problem?: string
  /** Its children were not all read: the tree's bounds. */
  truncated?: true
  readonly children: Array<Node>
}

/** What `GET /api/runs/<id>/tree` answers. */
export interface Document {
  readonly runId: string
  /** The run's parent, verified in the parent's log. */
  readonly parent?: string
  readonly tree: Node
  /** Over every descendant read: runs, steps, tokens and (with a price table) their cost. */
  readonly totals: {
    readonly runs: number
    readonly steps: number
    readonly usage: Tokens
    readonly cost?: { readonly currency: string; readonly amount: number; readonly unpriced: number }
  }
  /** Some node's children were not read (`maxDepth`, `maxNodes`). */
  readonly truncated: boolean
}

const encodeStopReason = Schema.encodeSync(StopReason.StopReason)

/** A child a log names: by its parent's record, or by a call not yet resulted. */
interface Named {
  readonly runId: string
  readonly step: number
  readonly callId: string
  readonly record: RunLog.ChildRun | undefined
}

/**
 * The children a parent's log names, in step and call order: every `ActionResulted` with a
 * `child`, and each tool call of a reply without a result yet under its derived id (it is a
 * child only if that log exists).
 */
export const namedChildren = (runId: string, log: RunLog.RunLog): ReadonlyArray<Named> => {
  const named: Array<Named> = []
  const resulted = new Set<string>()
  for (const result of log.results) {
    resulted.add(`${result.step}:${result.callIndex}`)
    if (result.child === undefined) continue
    const callId = result.action._tag === "ToolCall" ? result.action.id : ""
    named.push({ runId: result.child.runId, step: result.step, callId, record: result.child })
  }
  const lastReply = new Map<number, RunLog.ModelReplied>()
  for (const reply of log.replies) lastReply.set(reply.step, reply)
  for (const [step, reply] of lastReply) {
    reply.reply.toolCalls.forEach((call, index) => {
      if (resulted.has(`${step}:${index}`) || call.id === "") return
      named.push({ runId: SubAgent.childRunId(runId, step, call.id), step, callId: call.id, record: undefined })
    })
  }
  return named.sort((a, b) => a.step - b.step)
}

const priced = (prices: Prices.PriceTable | undefined, model: string | null, usage: Tokens, known: boolean) =>
  prices === undefined ? {} : { cost: known ? Prices.cost(prices, model ?? undefined, { input: usage.inputTokens, output: usage.outputTokens }) ?? null : null }

/** The node of a run read from its own log (the root, or a child with no record yet). */
const fromLog = (runId: string, log: RunLog.RunLog, summary: RunLogStore.RunSummary, prices: Prices.PriceTable | undefined): Node => {
  const model = RunLogStore.modelOf(Option.getOrNull(Option.map(log.started, (started) => started.snapshot)))
  const usage = { inputTokens: summary.inputTokens ?? 0, outputTokens: summary.outputTokens ?? 0 }
  const reason = Option.getOrUndefined(summary.stopReason)
  return {
    runId,
    status: Option.isSome(log.finished) ? "finished" : "unfinished",
    model,
    stopReason: reason === undefined ? null : encodeStopReason(reason),
    stopReasonLabel: reason === undefined ? null : StopReason.format(reason),
    steps: summary.steps,
    effectiveSteps: summary.effectiveSteps,
    usage,
    ...priced(prices, model, usage, true),
    children: []
  }
}

/** A child's node: its figures from the parent's record when there is one, its model and status from its own log. */
const childNode = (
  named: Named,
  read: Either.Either<RunLog.RunLog, StoreError>,
  prices: Prices.PriceTable | undefined
): Node | undefined => {
  const place = { step: named.step, callId: named.callId }
  const record = named.record
  if (Either.isRight(read) && Option.isSome(read.right.started)) {
    const log = read.right
    const summary = Option.getOrUndefined(RunLogStore.summarize(log))
    if (summary === undefined) return undefined
    const own = fromLog(named.runId, log, summary, prices)
    if (record === undefined) return { ...own, ...place }
    const usage = { inputTokens: record.usage.inputTokens, outputTokens: record.usage.outputTokens }
    return {
      ...own,
      ...place,
      stopReason: encodeStopReason(record.stopReason),
      stopReasonLabel: StopReason.format(record.stopReason),
      steps: record.steps,
      effectiveSteps: record.effectiveSteps,
      usage,
      ...priced(prices, own.model, usage, true)
    }
  }
  // No log to read: only a parent's record makes it a child.
  if (record === undefined) return undefined
  const usage = { inputTokens: record.usage.inputTokens, outputTokens: record.usage.outputTokens }
  return {
    runId: named.runId,
    ...place,
    status: Either.isLeft(read) ? "unreadable" : "missing",
    model: null,
    stopReason: encodeStopReason(record.stopReason),
    stopReasonLabel: StopReason.format(record.stopReason),
    steps: record.steps,
    effectiveSteps: record.effectiveSteps,
    usage,
    ...priced(prices, null, usage, false),
    ...(Either.isLeft(read) ? { problem: read.left.message } : {}),
    children: []
  }
}

/**
 * The ways `runId` may read as `<parent>/<step>/<callId>` (a call id and a parent's id may
 * hold `/`; the step is a number), the longest parent first.
 */
export const parentHints = (runId: string): ReadonlyArray<{ readonly parent: string; readonly step: number }> => {
  const parts = runId.split("/")
  const hints: Array<{ readonly parent: string; readonly step: number }> = []
  for (let at = parts.length - 2; at >= 1; at--) {
    if (!/^\d+$/.test(parts[at]!)) continue
    hints.push({ parent: parts.slice(0, at).join("/"), step: Number(parts[at]) })
  }
  return hints
}

/** Does the parent's log name `runId` as the child of a call at `step`? */
const names = (log: RunLog.RunLog, runId: string, step: number): boolean =>
  log.results.some((result) => result.step === step && result.child?.runId === runId)

/** The run's parent: the first hinted parent whose log names it (a run not in the store is no parent). */
export const parentOf = (runId: string): Effect.Effect<string | undefined, StoreError, RunLogStore.RunLogStore> =>
  Effect.gen(function*() {
    const store = yield* RunLogStore.RunLogStore
    for (const hint of parentHints(runId)) {
      const log = yield* store.readLog(hint.parent as RunId)
      if (names(log, runId, hint.step)) return hint.parent
    }
    return undefined
  })

const addTokens = (a: Tokens, b: Tokens): Tokens => ({ inputTokens: a.inputTokens + b.inputTokens, outputTokens: a.outputTokens + b.outputTokens })

/**
 * The tree of `runId` (none: no such run), read breadth first within the bounds, with the run's
 * verified parent. Only the root's read can fail (as `GET /api/runs/<id>`).
 */
export const read = (
  runId: RunId,
  prices: Prices.PriceTable | undefined
): Effect.Effect<Option.Option<Document>, StoreError, RunLogStore.RunLogStore> =>
  Effect.gen(function*() {
    const store = yield* RunLogStore.RunLogStore
    const rootLog = yield* store.readLog(runId, { verify: true })
    const rootSummary = Option.getOrUndefined(RunLogStore.summarize(rootLog))
    if (rootSummary === undefined) return Option.none()
    const root = fromLog(runId, rootLog, rootSummary, prices)
    const seen = new Set<string>([runId])
    let frontier: ReadonlyArray<{ readonly node: Node; readonly log: RunLog.RunLog; readonly depth: number }> = [{ node: root, log: rootLog, depth: 0 }]
    let count = 0
    let truncated = false
    let totals = { runs: 0, steps: 0, usage: { inputTokens: 0, outputTokens: 0 } as Tokens, amount: 0, unpriced: 0 }
    while (frontier.length > 0) {
      const next: Array<{ readonly node: Node; readonly log: RunLog.RunLog; readonly depth: number }> = []
      for (const { depth, log, node } of frontier) {
        const named = namedChildren(node.runId, log).filter((child) => !seen.has(child.runId))
        if (named.length === 0) continue
        if (depth >= maxDepth || count >= maxNodes) {
          node.truncated = true
          truncated = true
          continue
        }
        const taken = named.slice(0, maxNodes - count)
        const reads = yield* Effect.forEach(taken, (child) => Effect.either(store.readLog(child.runId as RunId)), { concurrency: 4 })
        taken.forEach((child, i) => {
          const read = reads[i]!
          const made = childNode(child, read, prices)
          if (made === undefined) return
          seen.add(child.runId)
          count++
          node.children.push(made)
          totals = {
            runs: totals.runs + 1,
            steps: totals.steps + made.steps,
            usage: addTokens(totals.usage, made.usage),
            amount: totals.amount + (made.cost ?? 0),
            unpriced: totals.unpriced + (made.cost === null ? 1 : 0)
          }
          if (Either.isRight(read) && Option.isSome(read.right.started)) next.push({ node: made, log: read.right, depth: depth + 1 })
        })
        if (taken.length < named.length) {
          node.truncated = true
          truncated = true
        }
      }
      frontier = next
    }
    const parent = yield* parentOf(runId)
    return Option.some({
      runId,
      ...(parent === undefined ? {} : { parent }),
      tree: root,
      totals: {
        runs: totals.runs,
        steps: totals.steps,
        usage: totals.usage,
        ...(prices === undefined ? {} : { cost: { currency: prices.currency, amount: totals.amount, unpriced: totals.unpriced } })
      },
      truncated
    })
  })

/** The parents of listed runs, for the runs list's badge and its `children=hide` filter. */
export interface Parents {
  /** Each listed child run's verified parent, by run id (a parent must be listed too). */
  readonly of: (all: ReadonlyArray<RunLogStore.RunSummary>) => Effect.Effect<ReadonlyMap<string, string>, StoreError, RunLogStore.RunLogStore>
}

/**
 * A new index of parents (one per server): each listed run hinted as a child is checked in its
 * hinted parent's log, each parent's log read once per change of its summary (a parent's named
 * children only grow while it runs).
 */
export const makeParents = (): Parents => {
  const cache = new Map<string, { readonly token: string; readonly children: ReadonlySet<string> }>()
  const tokenOf = (summary: RunLogStore.RunSummary) => `${summary.status}\u0000${summary.steps}\u0000${Option.isSome(summary.finishedAt) ? 1 : 0}`
  return {
    of: (all) =>
      Effect.gen(function*() {
        const store = yield* RunLogStore.RunLogStore
        const listed = new Map(all.map((summary) => [summary.runId, summary]))
        const hinted = all.flatMap((summary) => {
          const hints = parentHints(summary.runId).filter((hint) => listed.has(hint.parent))
          return hints.length === 0 ? [] : [{ runId: summary.runId, hints }]
        })
        const parents = [...new Set(hinted.flatMap((child) => child.hints.map((hint) => hint.parent)))]
        const stale = parents.filter((parent) => cache.get(parent)?.token !== tokenOf(listed.get(parent)!))
        yield* Effect.forEach(stale, (parent) =>
          Effect.map(store.readLog(parent as RunId), (log) => {
            const children = new Set(log.results.flatMap((result) => (result.child === undefined ? [] : [`${result.step}\u0000${result.child.runId}`])))
            cache.set(parent, { token: tokenOf(listed.get(parent)!), children })
          }), { concurrency: 4, discard: true })
        const found = new Map<string, string>()
        for (const child of hinted) {
          const hint = child.hints.find((hint) => cache.get(hint.parent)?.children.has(`${hint.step}\u0000${child.runId}`) === true)
          if (hint !== undefined) found.set(child.runId, hint.parent)
        }
        return found
      })
  }
}
