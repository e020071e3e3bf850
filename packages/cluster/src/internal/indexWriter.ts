/**
 * A runner's writer of the run index (design 0350, decision 5): the transitions of many runs
 * that are queued while one statement is in flight are written as the next statement, one
 * multi-row upsert (`RunIndex.transitions`). Each transition returns once the statement carrying
 * it has committed; when a grouped statement fails, each of its transitions is written alone and
 * gets its own outcome. After the writer's scope closes, a transition is written by itself.
 *
 * @internal
 */
import type * as SqlClient from "@effect/sql/SqlClient"
import type { StoreError } from "@polyloop/core/Errors"
import * as Chunk from "effect/Chunk"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Queue from "effect/Queue"
import type * as Scope from "effect/Scope"
import * as RunIndex from "../RunIndex.js"

/** The most rows one statement carries. */
export const maxRows = 200

/** Writes a transition through the writer. */
export interface IndexWriter {
  readonly write: (item: RunIndex.RunTransition) => Effect.Effect<void, StoreError>
}

interface Entry {
  readonly item: RunIndex.RunTransition
  readonly done: Deferred.Deferred<void, StoreError>
}

/**
 * Consecutive groups, in order, in which no run appears twice (PostgreSQL refuses to upsert one
 * row twice in a statement) and none has more than `max` items.
 */
export const split = <A>(items: ReadonlyArray<A>, runOf: (item: A) => string, max = maxRows): Array<Array<A>> => {
  const groups: Array<Array<A>> = []
  let group: Array<A> = []
  let runs = new Set<string>()
  for (const item of items) {
    const run = runOf(item)
    if (group.length >= max || runs.has(run)) {
      groups.push(group)
      group = []
      runs = new Set()
    }
    group.push(item)
    runs.add(run)
  }
  if (group.length > 0) groups.push(group)
  return groups
}

/** The writer, with its fiber in the current scope. */
export const make: Effect.Effect<IndexWriter, never, SqlClient.SqlClient | Scope.Scope> = Effect.gen(function*() {
  const context = yield* Effect.context<SqlClient.SqlClient>()
  const queue = yield* Queue.unbounded<Entry>()
  let open = true

  const alone = (item: RunIndex.RunTransition) => RunIndex.transitions([item]).pipe(Effect.provide(context))

  /** Writes entries (uninterruptibly: a statement is never cut in half) and answers each. */
  const writeEntries = (entries: ReadonlyArray<Entry>): Effect.Effect<void> =>
    Effect.forEach(split(entries, (e) => e.item.runId), (group) =>
      Effect.gen(function*() {
        const exit = yield* Effect.exit(RunIndex.transitions(group.map((e) => e.item)).pipe(Effect.provide(context)))
        if (Exit.isSuccess(exit) || group.length === 1) {
          for (const entry of group) yield* Deferred.done(entry.done, exit)
          return
        }
        // The group failed: each transition alone, with its own outcome.
        for (const entry of group) yield* Deferred.done(entry.done, yield* Effect.exit(alone(entry.item)))
      }), { discard: true }).pipe(Effect.uninterruptible)

  // Entries once taken are written: only the wait for them can be interrupted, so no taken
  // entry is dropped (its writer left waiting) by an interruption between the take and the write.
  yield* Effect.uninterruptibleMask((restore) =>
    Effect.flatMap(restore(Queue.takeBetween(queue, 1, maxRows)), (chunk) => writeEntries(Chunk.toReadonlyArray(chunk)))
  ).pipe(
    Effect.forever,
    // Interruptible while it waits, even when made inside an uninterruptible region (a layer's
    // construction): a forked fiber inherits the flag and could never be stopped.
    Effect.interruptible,
    Effect.forkScoped
  )
  // Runs before the fiber is interrupted (finalizers run in reverse): what is still queued is
  // written here, and later transitions are written alone.
  yield* Effect.addFinalizer(() =>
    Effect.suspend(() => {
      open = false
      return Effect.flatMap(Queue.takeAll(queue), (rest) => writeEntries(Chunk.toReadonlyArray(rest)))
    })
  )

  return {
    write: (item) =>
      Effect.flatMap(Deferred.make<void, StoreError>(), (done) =>
        Effect.suspend(() => {
          // Checked and queued in one synchronous step: the finalizer cannot drain in between.
          if (!open) return alone(item)
          queue.unsafeOffer({ item, done })
          return Deferred.await(done)
        }))
  }
})
