/**
 * Group commit for SQLite appends (see `docs/design/0002-group-commit.md`). With many runs
 * claimed on one file, every append was its own commit, one `fsync` each, one after another on
 * the file's one connection. Here the appends that reach the store together are written as one
 * statement (all their rows into the append view), so one `fsync` commits many runs' steps.
 *
 * The first append of a group lets the other runs' fibers run once (`Effect.yieldNow`), so that
 * those reaching an append join it, then writes them all. Each append still returns only once
 * its rows are committed. If the group's statement is refused (one run's gap, lost lease or
 * duplicate undoes the whole statement) or fails, each append of the group is written again
 * alone and gets its own outcome, so one run's conflict never fails another run's append. The
 * writer finishes the group even if its own fiber is interrupted meanwhile; an append whose
 * fiber is interrupted while it waits may still be committed, as a write that had not returned
 * may be after a crash.
 *
 * `batcher` is the same mechanism for statements with an answer per entry (claims and releases
 * of leases, design 0350): entries that reach it together are made by one `group` call, which
 * answers each; when it fails, each entry is made `alone` and gets its own outcome.
 *
 * @internal
 */
import type { SqlError } from "@effect/sql/SqlError"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import type { Param } from "./statements.js"

/**
 * Where one waiting entry's outcome goes: set once by the group's maker, awaited by the entry's
 * own fiber. A `Deferred` did this before; each one copies Effect's whole prototype into a new
 * object and keeps a list of joiners, which at a thousand runs' appends a round was a measured
 * share of the store's time and garbage (design 0350, "Outcome cells"). One awaiter, one outcome: a
 * cell and `Effect.async` are enough. An awaiter interrupted while it waits leaves the cell; the
 * outcome set later is dropped, as a `Deferred`'s would be.
 */
interface Outcome<A, E> {
  exit: Exit.Exit<A, E> | undefined
  resume: ((effect: Effect.Effect<A, E>) => void) | undefined
}

const outcome = <A, E>(): Outcome<A, E> => ({ exit: undefined, resume: undefined })

/** Sets the outcome (the first time only) and wakes its awaiter if it is waiting. */
const settle = <A, E>(cell: Outcome<A, E>, exit: Exit.Exit<A, E>): void => {
  if (cell.exit !== undefined) return
  cell.exit = exit
  const resume = cell.resume
  if (resume !== undefined) {
    cell.resume = undefined
    resume(exit)
  }
}

/** The outcome, at once if it is set, else when it is. */
const awaitOutcome = <A, E>(cell: Outcome<A, E>): Effect.Effect<A, E> =>
  Effect.suspend(() =>
    cell.exit !== undefined ? cell.exit : Effect.async<A, E>((resume) => {
      if (cell.exit !== undefined) return resume(cell.exit)
      cell.resume = resume
      return Effect.sync(() => {
        cell.resume = undefined
      })
    })
  )

/** Rows per group statement at most (15 parameters a row; SQLite allows 32,766 per statement). */
export const maxGroupRows = 1_000

/** An append waiting for the next group commit: its rows, and where its outcome goes. */
interface Waiting {
  readonly params: ReadonlyArray<Param>
  readonly rows: number
  readonly done: Outcome<void, SqlError>
}

/**
 * A group committer over `write`, which writes `rows` rows (their parameters one row after
 * another) in one statement. `submit` joins the next group (or starts it) and returns once the
 * append's own outcome is known.
 */
export const make = (
  write: (params: ReadonlyArray<Param>, rows: number) => Effect.Effect<void, SqlError>
): { readonly submit: (params: ReadonlyArray<Param>, rows: number) => Effect.Effect<void, SqlError> } => {
  let waiting: Array<Waiting> = []

  /**
   * Writes waiting appends in one statement, or each alone when that statement is refused. It
   * runs inside the flusher's uninterruptible region, so each exit handed to a waiter is its
   * statement's own (success, `SqlError` or defect, passed on unchanged), never an interruption.
   */
  const writeGroup = (group: ReadonlyArray<Waiting>): Effect.Effect<void> => {
    const alone = (entry: Waiting) => Effect.map(Effect.exit(write(entry.params, entry.rows)), (exit) => settle(entry.done, exit))
    if (group.length === 1) return alone(group[0]!)
    const params: Array<Param> = []
    let rows = 0
    for (const entry of group) {
      for (const param of entry.params) params.push(param)
      rows += entry.rows
    }
    return Effect.flatMap(Effect.exit(write(params, rows)), (exit) =>
      Exit.isSuccess(exit)
        ? Effect.sync(() => {
          for (const entry of group) settle(entry.done, exit)
        })
        // One append's refusal (a gap, a lost lease, a duplicate) or a storage failure undoes
        // the whole statement: each append is written again alone, and gets its own outcome.
        : Effect.forEach(group, alone, { discard: true }))
  }

  /** Takes every waiting append, in groups of at most `maxGroupRows` rows, and writes them. */
  const flush: Effect.Effect<void> = Effect.suspend(() => {
    const taken = waiting
    waiting = []
    const groups: Array<Array<Waiting>> = []
    let current: Array<Waiting> = []
    let rows = 0
    for (const entry of taken) {
      if (current.length > 0 && rows + entry.rows > maxGroupRows) {
        groups.push(current)
        current = []
        rows = 0
      }
      current.push(entry)
      rows += entry.rows
    }
    if (current.length > 0) groups.push(current)
    return Effect.forEach(groups, writeGroup, { discard: true })
  })

  const submit = (params: ReadonlyArray<Param>, rows: number): Effect.Effect<void, SqlError> =>
    Effect.suspend(() => {
      const done = outcome<void, SqlError>()
      waiting.push({ params, rows, done })
      if (waiting.length > 1) return awaitOutcome(done)
      return Effect.zipRight(Effect.uninterruptible(Effect.zipRight(Effect.yieldNow(), flush)), awaitOutcome(done))
    })

  return { submit }
}

/** Batches a PostgreSQL store makes at once per batcher (design 0350, decision 4). */
export const pgBatchesInFlight = 2

/** An entry waiting for the next batch: its input, and where its outcome goes. */
interface Pending<I, A, E> {
  readonly input: I
  readonly done: Outcome<A, E>
}

/**
 * A batcher (design 0350): `submit` joins the next batch (or starts it, letting the other fibers
 * run once) and returns its own outcome. A batch of more than one entry is made by `group` (at
 * most `maxBatch` entries a call), which answers every entry in order; if it fails, every entry
 * of it is made `alone`. A batch of one is made `alone`. The maker runs uninterruptibly, so each
 * outcome handed to a waiter is its statement's own, never an interruption.
 *
 * With `inFlight` (decision 4), at most that many batches are being made at once: a batch's
 * first entry waits for a slot, and every entry submitted meanwhile joins its batch. Without it,
 * batches never wait for each other.
 *
 * With `weight` and `maxWeight` (design 0396: a statement's parameters), a batch also closes
 * before its entries' weights would pass `maxWeight`; an entry heavier than that alone is a
 * batch of its own.
 */
export const batcher = <I, A, E>(options: {
  readonly group: (inputs: ReadonlyArray<I>) => Effect.Effect<ReadonlyArray<A>, E>
  readonly alone: (input: I) => Effect.Effect<A, E>
  readonly maxBatch: number
  readonly inFlight?: number | undefined
  readonly weight?: ((input: I) => number) | undefined
  readonly maxWeight?: number | undefined
}): { readonly submit: (input: I) => Effect.Effect<A, E> } => {
  let waiting: Array<Pending<I, A, E>> = []
  const slots = options.inFlight === undefined ? undefined : Effect.unsafeMakeSemaphore(options.inFlight)
  const alone = (entry: Pending<I, A, E>) => Effect.map(Effect.exit(options.alone(entry.input)), (exit) => settle(entry.done, exit))
  const makeBatch = (batch: ReadonlyArray<Pending<I, A, E>>): Effect.Effect<void> => {
    if (batch.length === 1) return alone(batch[0]!)
    return Effect.flatMap(Effect.exit(options.group(batch.map((entry) => entry.input))), (exit) => {
      if (Exit.isFailure(exit) || exit.value.length !== batch.length) return Effect.forEach(batch, alone, { discard: true })
      const answers = exit.value
      return Effect.sync(() => {
        for (let i = 0; i < batch.length; i++) settle(batch[i]!.done, Exit.succeed(answers[i]!))
      })
    })
  }
  const flush: Effect.Effect<void> = Effect.suspend(() => {
    const taken = waiting
    waiting = []
    const batches: Array<ReadonlyArray<Pending<I, A, E>>> = []
    const weigh = options.weight
    const maxWeight = options.maxWeight ?? Infinity
    let current: Array<Pending<I, A, E>> = []
    let weight = 0
    for (const entry of taken) {
      const w = weigh === undefined ? 0 : weigh(entry.input)
      if (current.length > 0 && (current.length >= options.maxBatch || weight + w > maxWeight)) {
        batches.push(current)
        current = []
        weight = 0
      }
      current.push(entry)
      weight += w
    }
    if (current.length > 0) batches.push(current)
    return Effect.forEach(batches, makeBatch, { discard: true })
  })
  const submit = (input: I): Effect.Effect<A, E> =>
    Effect.suspend(() => {
      const done = outcome<A, E>()
      waiting.push({ input, done })
      if (waiting.length > 1) return awaitOutcome(done)
      const lead = Effect.zipRight(Effect.yieldNow(), flush)
      return Effect.zipRight(Effect.uninterruptible(slots === undefined ? lead : slots.withPermits(1)(lead)), awaitOutcome(done))
    })
  return { submit }
}
