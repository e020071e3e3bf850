/**
 * Reading logs of every schema version (design 0150, decision 7). A log's version is named by
 * its `RunStarted` and by each `RunResumed` (the code that resumed it writes the records after
 * it): absent means version 1. Version-1 records are upgraded by their shape, on read, so every
 * backend and every reader of an export gets the same view:
 *
 * - `RunStarted` / `RunResumed` without `logVersion` stay as they are (absent means 1);
 * - `ActionResulted` without `callIndex` → `callIndex: 0`;
 * - `StepCompleted { resultId }` → `resultIds: [resultId]` (or `[]` for null), `effective` from
 *   the status of that result, and an `Act { action }` decision → `Act { actions: [action] }`.
 *
 * A log that names a version newer than this code's is refused (`SchemaVersion`), never read
 * half-understood. A record whose shape is neither version is left as it is (the verifying
 * reader then reports what does not decode).
 *
 * @internal
 */
import { logVersion } from "../RunLog.js"

/** A parsed record: a JSON object with a known `_tag` and the right `seq`. @internal */
export type RawRecord = Record<string, unknown>

/**
 * The version a `RunStarted` or `RunResumed` names (1 when absent), or `undefined` when the value
 * is not a positive integer (left to the verifying reader).
 * @internal
 */
export const versionOf = (record: RawRecord): number | undefined => {
  const v = record.logVersion
  if (v === undefined) return 1
  return typeof v === "number" && Number.isInteger(v) && v > 0 ? v : undefined
}

/** Is this version newer than what this code reads? @internal */
export const isNewer = (version: number | undefined): boolean => version !== undefined && version > logVersion

const has = (record: RawRecord, key: string): boolean => Object.prototype.hasOwnProperty.call(record, key)

const upgradeDecision = (decision: unknown): unknown => {
  if (typeof decision !== "object" || decision === null) return decision
  const d = decision as RawRecord
  return d._tag === "Act" && has(d, "action") && !has(d, "actions") ? { _tag: "Act", actions: [d.action] } : decision
}

const statusOf = (record: RawRecord): unknown =>
  typeof record.outcome === "object" && record.outcome !== null ? (record.outcome as RawRecord).status : undefined

/**
 * Upgrades the records of a log that may hold version-1 records (its `RunStarted` names no
 * version), in place, in sequence order; the properties of an upgraded record are in the order
 * of the current schema. @internal
 */
export const upgradeV1 = (records: Array<RawRecord>): void => {
  // Version 1 wrote a step's only result just before its StepCompleted.
  const statusById = new Map<unknown, unknown>()
  for (let i = 0; i < records.length; i++) {
    const r = records[i]!
    switch (r._tag) {
      case "ActionResulted":
        statusById.set(r.resultId, statusOf(r))
        if (!has(r, "callIndex")) {
          records[i] = {
            _tag: r._tag,
            seq: r.seq,
            resultId: r.resultId,
            step: r.step,
            callIndex: 0,
            action: r.action,
            outcome: r.outcome,
            executorObservation: r.executorObservation,
            handlerFailed: r.handlerFailed
          }
        }
        break
      case "StepCompleted":
        if (has(r, "resultId") && !has(r, "resultIds")) {
          const id = r.resultId
          records[i] = {
            _tag: r._tag,
            seq: r.seq,
            step: r.step,
            decision: upgradeDecision(r.decision),
            resultIds: id === null ? [] : [id],
            effective: id !== null && statusById.get(id) === "Executed",
            usage: r.usage,
            elapsed: r.elapsed
          }
        }
        break
      default:
        break
    }
  }
}
