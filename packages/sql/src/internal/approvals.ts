/**
 * SQL of the `Suspended` status (design 0160): computed when listing, from the run's approval
 * records (more `ApprovalRequested` than `ApprovalDecided` rows — `Agent.decide` records at most
 * one decision per request), so the append paths and the summary row are unchanged and no
 * migration is needed. Both subqueries read the run's primary-key prefix of `polyloop_records`.
 * The same text is valid on SQLite and PostgreSQL.
 *
 * @internal
 */

/** True when the run `<alias>.run_id` has a requested call without a decision. @internal */
export const awaitingDecision = (alias: string): string =>
  `((SELECT count(*) FROM polyloop_records ar WHERE ar.run_id = ${alias}.run_id AND ar.kind = 'ApprovalRequested') > ` +
  `(SELECT count(*) FROM polyloop_records ad WHERE ad.run_id = ${alias}.run_id AND ad.kind = 'ApprovalDecided'))`

/** The run's status with `Suspended` for an unfinished run awaiting a decision. @internal */
export const statusColumn = (alias: string): string =>
  `CASE WHEN ${alias}.status = 'Unfinished' AND ${awaitingDecision(alias)} THEN 'Suspended' ELSE ${alias}.status END`

/** The `WHERE` condition of a status filter. @internal */
export const statusFilter = (alias: string, status: "Unfinished" | "Suspended" | "Finished"): string =>
  status === "Finished"
    ? `${alias}.status = 'Finished'`
    : `${alias}.status = 'Unfinished' AND ${status === "Suspended" ? "" : "NOT "}${awaitingDecision(alias)}`
