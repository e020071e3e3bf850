/**
 * Pure reading of a log's approval records (design 0160), shared by the loop, `decide`, the
 * stores' summaries and the command line.
 *
 * @internal
 */
import * as Option from "effect/Option"
import type { Action } from "../Action.js"
import type { RunId } from "../Ids.js"
import type * as RunLog from "../RunLog.js"
import { canonicalJson, sha256 } from "../Snapshot.js"
import type { ToolRegistry } from "../ToolRegistry.js"
import { needsApproval } from "../Tool.js"

/**
 * The hash that binds a decision to one action of one step of one run: SHA-256 of the canonical
 * JSON of `{ runId, step, callId, action }`. @internal
 */
export const actionHash = (runId: RunId | string, step: number, callId: string, action: Action): string =>
  sha256(canonicalJson({ runId, step, callId, action }))

/** Does this action need a person's decision before it runs? Calls that do not validate need none. @internal */
export const required = (tools: ToolRegistry<unknown>, action: Action): boolean => {
  if (action._tag !== "ToolCall") return false
  // A tool without an approval rule needs none, whatever its arguments: no decode of them here
  // (the executor decodes them once, when it runs the call).
  const tool = tools.get(action.name)
  if (Option.isNone(tool) || tool.value.approval === undefined) return false
  const validated = tools.validate(action)
  return validated._tag === "Right" && needsApproval(validated.right.tool, validated.right.args)
}

/** The requests of a log, in write order. @internal */
export const requests = (log: RunLog.RunLog): ReadonlyArray<RunLog.ApprovalRequested> =>
  log.approvals.filter((record): record is RunLog.ApprovalRequested => record._tag === "ApprovalRequested")

/** The first decision on a request (the one that stands). @internal */
export const decisionOf = (log: RunLog.RunLog, request: RunLog.ApprovalRequested): Option.Option<RunLog.ApprovalDecided> =>
  Option.fromNullable(
    log.approvals.find((record): record is RunLog.ApprovalDecided =>
      record._tag === "ApprovalDecided" && record.step === request.step && record.callId === request.callId && record.seq > request.seq
    )
  )

/** The requests that have no decision yet, in write order. @internal */
export const undecided = (log: RunLog.RunLog): ReadonlyArray<RunLog.ApprovalRequested> =>
  requests(log).filter((request) => Option.isNone(decisionOf(log, request)))

/** Is the run suspended: unfinished, with a request that has no decision? @internal */
export const isSuspended = (log: RunLog.RunLog): boolean => Option.isNone(log.finished) && undecided(log).length > 0

/** The requests of one step. @internal */
export const requestsOfStep = (log: RunLog.RunLog, step: number): ReadonlyArray<RunLog.ApprovalRequested> =>
  requests(log).filter((request) => request.step === step)
