/**
 * The run log: the record kinds and the `RunLog` a store reads back (SPEC §7). History is
 * rebuilt from the log, never stored separately. `ApprovalRequested` / `ApprovalDecided`
 * (design 0160) are absent from logs written before approvals existed; such logs read back
 * with `approvals` empty.
 *
 * The records (the log's schema and its version) are in `internal/logRecords.ts`; the log as
 * read back (`fromRecords`, the call order of a step's results, `records`, `size`, …) is in
 * `internal/logView.ts`. This module re-exports both (design 0390).
 *
 * @since 0.1.0
 */
export {
  ActionResulted,
  ApprovalDecided,
  type ApprovalRecord,
  ApprovalRequested,
  ChildRun,
  ChildTotals,
  Decision,
  ForkDifference,
  ForkedFrom,
  HistoryCompacted,
  LogVersion,
  logVersion,
  ModelReplied,
  type RecordKind,
  recordKinds,
  RunCounters,
  RunFinished,
  RunRecord,
  RunResumed,
  RunStarted,
  StepCompleted,
  TurnFinished,
  type TurnRecord,
  UserMessaged
} from "./internal/logRecords.js"
export {
  awaitsMessage,
  empty,
  fromRecords,
  isConversation,
  isEmpty,
  nextSeq,
  records,
  recordsBeforeStep,
  resultsByStep,
  RunLog,
  size
} from "./internal/logView.js"
