/**
 * Claims as leases (`polyloop_claims(run_id, owner, expires_at)`), the same in both dialects.
 *
 * A claim is one compare-and-set upsert: a random owner id per process and claim
 * (`<host>:<pid>:<n>:<random>`) takes a lease that is free, expired, or — with
 * `reclaimDeadLocalOwners` — held by a process of this machine that no longer runs (dead-owner
 * detection: `isDeadLocalOwner`); then the holder is read back, and a live other holder is
 * `RunBusy`. The store's one heartbeat fiber renews every lease it holds while their claims'
 * scopes are open (one fiber a store, not one a claim: design 0350), and closing a claim's scope
 * deletes its lease. No transaction: every step is one statement, so on SQLite the store can
 * hold its one connection (see `sqlite.ts`).
 *
 * The dialects fence appends with the lease: atomically with the append, the lease row must
 * still name the writer (`Leases.held` says which runs this store holds and as whom).
 *
 * While the store holds other claims, claims and releases that reach it together are grouped
 * (design 0350): one multi-row upsert takes every lease of the group that is free or expired,
 * one read returns each run's holder, one `DELETE` releases a group's leases; a failed group is
 * made again one at a time.
 *
 * @internal
 */
import type { SqlError } from "@effect/sql/SqlError"
import { RunBusy, type StoreError } from "@polyloop/core/Errors"
import type { RunId } from "@polyloop/core/Ids"
import * as Clock from "effect/Clock"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as Predicate from "effect/Predicate"
import * as Random from "effect/Random"
import * as Scope from "effect/Scope"
import * as os from "node:os"
import * as GroupCommit from "./groupCommit.js"
import { type Param, type Statements, withSpanIfTraced } from "./statements.js"

/** Is a lease owner a process of this machine that no longer runs? */
export const isDeadLocalOwner = (owner: string): boolean => {
  const parts = owner.split(":")
  if (parts.length !== 4 || parts[0] !== os.hostname()) return false
  const pid = Number(parts[1])
  if (!Number.isSafeInteger(pid) || pid <= 0 || pid === process.pid) return false
  try {
    process.kill(pid, 0)
    return false
  } catch (error) {
    return Predicate.hasProperty(error, "code") && error.code === "ESRCH"
  }
}

let claimCounter = 0

/** Claims (or releases) made by one grouped statement at most: 3 parameters a claim, far below either dialect's limit. */
export const maxGroupedClaims = 500

/** The lease settings of a store. */
export interface LeaseOptions {
  readonly leaseDuration?: Duration.DurationInput | undefined
  readonly heartbeatInterval?: Duration.DurationInput | undefined
  readonly reclaimDeadLocalOwners?: boolean | undefined
}

/** A store's leases. */
export interface Leases {
  /** Claims this store instance holds: run id → lease owner. Appends to these runs are fenced by the lease. */
  readonly held: Map<string, string>
  /** The current holder of a run's lease ("" for none). */
  readonly holder: (runId: RunId) => Effect.Effect<string, SqlError>
  /** Takes the run's lease for the scope's life (renewed by a heartbeat, deleted at its end), or `RunBusy`. */
  readonly claim: (runId: RunId) => Effect.Effect<void, RunBusy | StoreError, Scope.Scope>
}

/** The leases of a store whose statements run through `statements`. */
export const make = (statements: Statements, options: LeaseOptions): Leases => {
  const { compiled, failWith, query, sql } = statements
  const leaseMillis = Duration.toMillis(Duration.decode(options.leaseDuration ?? Duration.seconds(30)))
  const reclaimDeadLocalOwners = options.reclaimDeadLocalOwners ?? false
  const heartbeat = options.heartbeatInterval === undefined
    ? Duration.millis(Math.max(1, Math.floor(leaseMillis / 3)))
    : Duration.decode(options.heartbeatInterval)
  const held = new Map<string, string>()

  const claimOwnerSql = compiled(sql`SELECT owner FROM polyloop_claims WHERE run_id = ${""}`)
  // A claim is one compare-and-set: insert the lease, or take over one that expired (or whose
  // owner is known dead), atomically; a live lease is left alone.
  const upsertClaimSql = compiled(
    sql`INSERT INTO polyloop_claims (run_id, owner, expires_at) VALUES (${""}, ${""}, ${0}) ON CONFLICT (run_id) DO UPDATE SET owner = excluded.owner, expires_at = excluded.expires_at WHERE polyloop_claims.expires_at <= ${0} OR polyloop_claims.owner = ${""}`
  )
  // PostgreSQL answers the compare-and-set and the holder in one round trip (design 0350): the
  // new owner when it took the lease, else the holder in the statement's snapshot ("" when a
  // claim committed meanwhile took it: RunBusy without a name). SQLite has no DML in a `WITH`.
  const upsertReturningSql = sql.onDialectOrElse({
    pg: () =>
      compiled(
        sql`WITH up AS (INSERT INTO polyloop_claims (run_id, owner, expires_at) VALUES (${""}, ${""}, ${0}) ON CONFLICT (run_id) DO UPDATE SET owner = excluded.owner, expires_at = excluded.expires_at WHERE polyloop_claims.expires_at <= ${0} OR polyloop_claims.owner = ${""} RETURNING owner) SELECT owner FROM up UNION ALL SELECT owner FROM polyloop_claims WHERE run_id = ${""} AND NOT EXISTS (SELECT 1 FROM up)`
      ),
    orElse: () => undefined
  })
  const renewClaimSql = compiled(sql`UPDATE polyloop_claims SET expires_at = ${0} WHERE run_id = ${""} AND owner = ${""}`)
  const releaseClaimSql = compiled(sql`DELETE FROM polyloop_claims WHERE run_id = ${""} AND owner = ${""}`)

  const holder = (runId: RunId) =>
    Effect.map(query(claimOwnerSql, [runId]), (rows) => (rows[0] as { readonly owner?: string } | undefined)?.owner ?? "")

  /**
   * Takes the run's lease for `owner` if it is free, expired, or (with `reclaimDeadLocalOwners`)
   * held by a dead process of this machine — one atomic upsert, no transaction — then reads
   * who holds it: `RunBusy` names a live holder.
   */
  const takeLeaseAlone = (runId: RunId, owner: string) =>
    Effect.gen(function*() {
      const now = yield* Clock.currentTimeMillis
      let dead: string | null = null
      if (reclaimDeadLocalOwners) {
        const previous = yield* holder(runId)
        if (previous !== "" && isDeadLocalOwner(previous)) dead = previous
      }
      if (upsertReturningSql !== undefined) {
        const rows = yield* query(upsertReturningSql, [runId, owner, now + leaseMillis, now, dead, runId])
        return (rows[0] as { readonly owner?: string } | undefined)?.owner ?? ""
      }
      yield* query(upsertClaimSql, [runId, owner, now + leaseMillis, now, dead])
      return yield* holder(runId)
    })

  /** Claims being taken now (a claim waiting in a group counts). */
  let claiming = 0

  /** Alone when the store holds and takes no other claim (no queue, no yield); grouped with the others' otherwise. */
  const takeLease = (runId: RunId, owner: string) =>
    Effect.suspend(() => {
      claiming += 1
      const taken = held.size === 0 && claiming === 1 ? takeLeaseAlone(runId, owner) : takeLeaseGrouped.submit({ runId, owner })
      return Effect.ensuring(taken, Effect.sync(() => {
        claiming -= 1
      }))
    }).pipe(
      Effect.mapError(failWith("claiming the run", runId)),
      Effect.flatMap((current) =>
        current === owner ? Effect.void : Effect.fail(new RunBusy({ runId, ...(current === "" ? {} : { owner: current }) }))
      )
    )

  /** One compiled statement of a `sql` fragment: its text and parameters for the dialect. */
  const compile = (statement: { readonly compile: () => readonly [string, ReadonlyArray<unknown>] }) => {
    const [text, params] = statement.compile()
    return query(text, params as ReadonlyArray<Param>)
  }

  /** The holders of the runs' leases, by run id. */
  const holders = (runIds: ReadonlyArray<string>) =>
    Effect.map(compile(sql`SELECT run_id, owner FROM polyloop_claims WHERE run_id IN ${sql.in(runIds)}`), (rows) => {
      const byRun = new Map<string, string>()
      for (const row of rows as ReadonlyArray<{ readonly run_id: string; readonly owner: string }>) byRun.set(row.run_id, row.owner)
      return byRun
    })

  interface Claiming {
    readonly runId: RunId
    readonly owner: string
  }

  /**
   * Takes many runs' leases at once (design 0350): the dead local holders read first (with
   * `reclaimDeadLocalOwners`), one upsert of every lease, one read of every holder. Each
   * claimant's answer is the holder its run has afterwards, as `takeLease` reads it.
   */
  const takeLeases = (claims: ReadonlyArray<Claiming>) =>
    Effect.gen(function*() {
      const now = yield* Clock.currentTimeMillis
      const runIds = claims.map((c) => c.runId)
      const dead: Array<string> = []
      if (reclaimDeadLocalOwners) {
        for (const previous of (yield* holders(runIds)).values()) if (isDeadLocalOwner(previous)) dead.push(previous)
      }
      const rows = claims.map((c) => ({ run_id: c.runId, owner: c.owner, expires_at: now + leaseMillis }))
      const takeable = dead.length === 0
        ? sql`polyloop_claims.expires_at <= ${now}`
        : sql.or([sql`polyloop_claims.expires_at <= ${now}`, sql`polyloop_claims.owner IN ${sql.in(dead)}`])
      yield* compile(
        sql`INSERT INTO polyloop_claims ${sql.insert(rows)} ON CONFLICT (run_id) DO UPDATE SET owner = excluded.owner, expires_at = excluded.expires_at WHERE ${takeable}`
      )
      const after = yield* holders(runIds)
      return claims.map((c) => after.get(c.runId) ?? "")
    })

  // PostgreSQL: a batch waits while two are in flight, so claims arriving one by one still meet (decision 4).
  const inFlight = sql.onDialectOrElse({ pg: () => GroupCommit.pgBatchesInFlight, orElse: () => undefined })
  const takeLeaseGrouped = GroupCommit.batcher<Claiming, string, SqlError>({
    group: takeLeases,
    alone: (c) => takeLeaseAlone(c.runId, c.owner),
    maxBatch: maxGroupedClaims,
    inFlight
  })

  const releaseGrouped = GroupCommit.batcher<Claiming, void, SqlError>({
    group: (releases) =>
      Effect.as(
        compile(sql`DELETE FROM polyloop_claims WHERE ${sql.or(releases.map((r) => sql.and([sql`run_id = ${r.runId}`, sql`owner = ${r.owner}`])))}`),
        releases.map(() => undefined)
      ),
    alone: (r) => Effect.asVoid(query(releaseClaimSql, [r.runId, r.owner])),
    maxBatch: maxGroupedClaims,
    inFlight
  })

  /** A lost lease is reported once a renewal read its holder, if the store still holds the run as `owner`. */
  const reportLost = (runId: string, owner: string, current: string) =>
    current === owner || held.get(runId) !== owner
      ? Effect.void
      : Effect.logWarning(`run ${runId}: the claim's lease was lost (now held by ${current === "" ? "nobody" : current}); another writer may take over`)

  /** Renews one lease: its `UPDATE`, then a read of its holder (the statements of a store holding one claim). */
  const renewLease = (runId: RunId, owner: string) =>
    Effect.gen(function*() {
      const now = yield* Clock.currentTimeMillis
      yield* query(renewClaimSql, [now + leaseMillis, runId, owner])
      yield* reportLost(runId, owner, yield* holder(runId))
    }).pipe(
      Effect.catchTag("SqlError", (error) =>
        Effect.logWarning(`run ${runId}: renewing the claim failed; retrying`, failWith("renewing the claim", runId)(error)))
    )

  /** Renews many leases: one `UPDATE` of every lease, one read of every holder, per `maxGroupedClaims`. */
  const renewLeases = (leases: ReadonlyArray<readonly [string, string]>) =>
    Effect.forEach(
      Array.from({ length: Math.ceil(leases.length / maxGroupedClaims) }, (_, i) => leases.slice(i * maxGroupedClaims, (i + 1) * maxGroupedClaims)),
      (chunk) =>
        Effect.gen(function*() {
          const now = yield* Clock.currentTimeMillis
          yield* compile(
            sql`UPDATE polyloop_claims SET expires_at = ${now + leaseMillis} WHERE ${sql.or(chunk.map(([runId, owner]) => sql.and([sql`run_id = ${runId}`, sql`owner = ${owner}`])))}`
          )
          const current = yield* holders(chunk.map(([runId]) => runId))
          yield* Effect.forEach(chunk, ([runId, owner]) => reportLost(runId, owner, current.get(runId) ?? ""), { discard: true })
        }).pipe(
          Effect.catchTag("SqlError", (error) =>
            Effect.logWarning(`renewing ${chunk.length} claims failed; retrying`, failWith("renewing the claims")(error)))
        ),
      { discard: true }
    )

  /**
   * The store's heartbeat (design 0350, "One heartbeat per store"): while the store holds claims,
   * one fiber renews every lease it holds each `heartbeat` — with the one-claim statements when it
   * holds one, in grouped statements when more. It is started by the claim that finds none
   * running and stopped when the last claim is released, so a store that holds nothing keeps no
   * timer (a process may exit). A renewal runs uninterruptibly: stopping waits for no statement
   * and cuts none in half.
   */
  let beating = false
  let beat: Fiber.RuntimeFiber<never> | undefined = undefined
  const renewHeld = Effect.suspend(() => {
    const leases = [...held]
    if (leases.length === 0) return Effect.void
    if (leases.length === 1) return renewLease(leases[0]![0] as RunId, leases[0]![1])
    return renewLeases(leases)
  })
  // Interruptible between renewals even though it is forked from a claim's acquisition (an
  // uninterruptible region, whose flags a forked fiber inherits): the last release must stop it.
  const heartbeatLoop = Effect.interruptible(Effect.forever(Effect.zipRight(Effect.sleep(heartbeat), Effect.uninterruptible(renewHeld))))
  const startBeat = Effect.suspend(() => {
    if (beating) return Effect.void
    beating = true
    return Effect.flatMap(Effect.forkDaemon(heartbeatLoop), (fiber) => {
      if (beating && beat === undefined) {
        beat = fiber
        return Effect.void
      }
      // Stopped (the last claim released) or started again before this fork returned: not needed.
      return Fiber.interruptFork(fiber)
    })
  })
  /** Stops the heartbeat when the store holds no claim any more (called where a claim leaves `held`). */
  const stopBeatIfIdle = Effect.suspend(() => {
    if (held.size > 0 || !beating) return Effect.void
    beating = false
    const fiber = beat
    beat = undefined
    return fiber === undefined ? Effect.void : Fiber.interruptFork(fiber)
  })

  const releaseLease = (runId: RunId, owner: string) =>
    Effect.suspend(() => (held.size === 0 ? Effect.asVoid(query(releaseClaimSql, [runId, owner])) : releaseGrouped.submit({ runId, owner }))).pipe(
      Effect.catchTag("SqlError", (error) =>
        Effect.logWarning(
          `run ${runId}: releasing the claim failed; it expires by itself`,
          failWith("releasing the claim", runId)(error)
        ))
    )

  const release = (runId: RunId, owner: string) =>
    Effect.zipRight(
      Effect.zipRight(
        Effect.sync(() => {
          if (held.get(runId) === owner) held.delete(runId)
        }),
        stopBeatIfIdle
      ),
      releaseLease(runId, owner)
    )

  const claim = (runId: RunId) =>
    Effect.gen(function*() {
      const random = yield* Random.nextIntBetween(0, 0x7fffffff)
      const owner = `${os.hostname()}:${process.pid}:${++claimCounter}:${random.toString(36)}`
      // Taken and its release added to the claim's scope in one uninterruptible region, as
      // `acquireRelease` does, but with `Scope.addFinalizer`: `acquireRelease`'s finalizer keeps
      // the claimant's fiber references as they were at the claim (a copy of them, held for the
      // whole run: ~1 kB a run in flight, design 0350); the release needs none of them. It is
      // made when the scope closes (not held as an effect meanwhile) and runs uninterruptibly, as
      // `acquireRelease`'s does, whoever closes the scope.
      const scope = yield* Effect.scope
      yield* Effect.uninterruptible(
        Effect.tap(takeLease(runId, owner), () =>
          Effect.zipRight(
            Effect.zipRight(Effect.sync(() => held.set(runId, owner)), startBeat),
            Scope.addFinalizerExit(scope, () => Effect.uninterruptible(release(runId, owner)))
          ))
      )
      // The claimant lets the other fibers run once before its run goes on. On SQLite every
      // statement is synchronous, so a run that never waits would otherwise go from its claim to
      // its end in one turn while the runs started with it wait for theirs: nothing would be
      // claimed together, and with one claim held no append is grouped (design 0350). The fork of
      // a heartbeat per claim did this by the way; one heartbeat per store does not.
      yield* Effect.yieldNow()
    }).pipe(withSpanIfTraced("SqlRunLogStore.claim", () => ({ runId })))

  return { held, holder, claim }
}
