/**
 * SQL of the computed statuses: `Suspended` (design 0160), from the run's approval records (more
 * `ApprovalRequested` than `ApprovalDecided` rows — `Agent.decide` records at most one decision
 * per request), and `AwaitingMessage` (design 0300), from its turn records (as many
 * `TurnFinished` rows as messages: its `UserMessaged` rows and the task). Computed when listing,
 * so the append paths and the summary row are unchanged and no migration is needed. Every
 * subquery reads the run's primary-key prefix of `polyloop_records`, and only for a row whose
 * stored status is `Unfinished`; the conversation's counts only for a conversation (its last
 * record, or its `RunStarted`, looked up by key first). The status text is valid on SQLite and
 * PostgreSQL; the conversation columns test `RunStarted`'s JSON in the dialect's way.
 *
 * @internal
 */

/** The number of the run's records of one kind. @internal */
const countOf = (alias: string, kind: string): string =>
  `(SELECT count(*) FROM polyloop_records k WHERE k.run_id = ${alias}.run_id AND k.kind = '${kind}')`

/** True when the run `<alias>.run_id` has a requested call without a decision. @internal */
export const awaitingDecision = (alias: string): string =>
  `(${countOf(alias, "ApprovalRequested")} > ${countOf(alias, "ApprovalDecided")})`

/**
 * True when the run `<alias>.run_id` is a conversation whose every message has had its turn
 * (only a conversation writes `TurnFinished`). @internal
 */
export const awaitingMessage = (alias: string): string =>
  // The last record (a primary-key lookup, by the row's `next_seq`) is a `TurnFinished` first:
  // any other unfinished run pays that one lookup, and no count.
  `(EXISTS (SELECT 1 FROM polyloop_records l WHERE l.run_id = ${alias}.run_id AND l.seq = ${alias}.next_seq - 1 AND l.kind = 'TurnFinished') ` +
  `AND ${countOf(alias, "TurnFinished")} = ${countOf(alias, "UserMessaged")} + 1)`

/** The run's status with `Suspended` and `AwaitingMessage` for the unfinished runs so. @internal */
export const statusColumn = (alias: string): string =>
  `CASE WHEN ${alias}.status <> 'Unfinished' THEN ${alias}.status WHEN ${awaitingDecision(alias)} THEN 'Suspended' ` +
  `WHEN ${awaitingMessage(alias)} THEN 'AwaitingMessage' ELSE 'Unfinished' END`

/** The `WHERE` condition of a status filter. @internal */
export const statusFilter = (alias: string, status: "Unfinished" | "Suspended" | "AwaitingMessage" | "Finished"): string => {
  switch (status) {
    case "Finished":
      return `${alias}.status = 'Finished'`
    case "Suspended":
      return `${alias}.status = 'Unfinished' AND ${awaitingDecision(alias)}`
    case "AwaitingMessage":
      return `${alias}.status = 'Unfinished' AND NOT ${awaitingDecision(alias)} AND ${awaitingMessage(alias)}`
    case "Unfinished":
      return `${alias}.status = 'Unfinished' AND NOT ${awaitingDecision(alias)} AND NOT ${awaitingMessage(alias)}`
  }
}

/**
 * `expr` over a record's payload as `jsonb`, or `otherwise` for a payload holding a `\\u` escape:
 * PostgreSQL's JSON types refuse some that JSON allows (`\\u0000`, lone surrogates), which any text
 * of a record may hold (a task, a message). `CASE` evaluates the cast only for the rows without one.
 */
export const pgJson = (payload: string, expr: (json: string) => string, otherwise: string): string =>
  `(CASE WHEN strpos(${payload}, '\\u') > 0 THEN ${otherwise} ELSE ${expr(`${payload}::jsonb`)} END)`

/**
 * The conversation columns of a listing (design 0300), null for a single-task run and for a
 * finished one (a conversation never finishes): `conv_turns` and `conv_messages` (its
 * `TurnFinished` and `UserMessaged` rows), `conv_last` (the last turn's stop reason, JSON).
 * `isConversation` is the dialect's test of the `RunStarted` payload `s`. @internal
 */
export const conversationColumns = (alias: string, dialect: "pg" | "sqlite"): string => {
  const started = dialect === "pg"
    ? `(SELECT ${pgJson("s.payload", (j) => `(${j} -> 'conversation') IS NOT NULL`, `EXISTS (SELECT 1 FROM polyloop_records c WHERE c.run_id = ${alias}.run_id AND c.kind IN ('TurnFinished', 'UserMessaged'))`)} FROM polyloop_records s WHERE s.run_id = ${alias}.run_id AND s.seq = 0)`
    : `(SELECT json_type(s.payload, '$.conversation') IS NOT NULL FROM polyloop_records s WHERE s.run_id = ${alias}.run_id AND s.seq = 0)`
  const last = dialect === "pg" ? pgJson("t.payload", (j) => `(${j} -> 'stopReason')::text`, "NULL") : "json_extract(t.payload, '$.stopReason')"
  const when = `${alias}.status = 'Unfinished' AND ${started}`
  return [
    `CASE WHEN ${when} THEN ${countOf(alias, "TurnFinished")} ELSE NULL END AS conv_turns`,
    `CASE WHEN ${when} THEN ${countOf(alias, "UserMessaged")} ELSE NULL END AS conv_messages`,
    `CASE WHEN ${when} THEN (SELECT ${last} FROM polyloop_records t WHERE t.run_id = ${alias}.run_id AND t.kind = 'TurnFinished' ORDER BY t.seq DESC LIMIT 1) ELSE NULL END AS conv_last`
  ].join(", ")
}
