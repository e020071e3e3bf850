/**
 * A conversation's in-process inbox (design 0300 decision 8, design 0360): the messages sent to
 * it from this process while one of its turns runs here, and every message id it knows, so a
 * second send of an id — in the log, held, queued, or the turn now running — waits for that
 * turn instead of being queued again.
 *
 * @internal
 */
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import type { RunResult } from "./request.js"
import { MessageIdReused, RunBusy, type RunError } from "../Errors.js"
import type { RunId } from "../Ids.js"
import type * as RunLog from "../RunLog.js"

/** A conversation's message: the caller's id for it and its text. @internal */
export interface SentMessage {
  readonly messageId: string
  readonly text: string
}

/**
 * A message queued with the running loop, which writes it at its next step boundary (`written`:
 * durable, held for the next turn) and answers it when its turn ends (`answered`). @internal
 */
export interface Queued {
  readonly message: SentMessage
  readonly written: Deferred.Deferred<void, RunError>
  readonly answered: Deferred.Deferred<RunResult, RunError>
}

/**
 * A message id the inbox knows: its text, and its turn once written. Not yet written: a queued
 * one (`queued`), or the attempt's own message, written once the turn before it has ended. @internal
 */
export interface Known {
  readonly text: string
  readonly turn: number | undefined
  readonly queued: Queued | undefined
}

/** The messages queued with a conversation running in this process, and its held messages (written, their turns to come). @internal */
export interface Inbox {
  readonly runId: RunId
  /** The configuration the running turns answer under: a message is queued only under the same one. */
  readonly snapshotHash: string
  readonly queue: Array<Queued>
  readonly held: Array<RunLog.UserMessaged>
  /** Every message id of the conversation: the log's, and those written or queued since. */
  readonly ids: Map<string, Known>
  /** The callers waiting for a turn's result, by turn. */
  readonly waiting: Map<number, Array<Deferred.Deferred<RunResult, RunError>>>
  /** The callers waiting for the attempt's own message, not written yet (its turn unknown), by id. */
  readonly early: Map<string, Array<Deferred.Deferred<RunResult, RunError>>>
  /** The results of the turns ended by this attempt, by turn. */
  readonly ended: Map<number, RunResult>
  /** Messages the log holds (the next one's turn is this + 1). */
  messages: number
  accepting: boolean
}

/**
 * An inbox for the conversation whose log is `log`, knowing `message` (being sent by this
 * attempt): at turn 0 when the log is empty, else as not written yet when the log does not hold
 * it (the attempt writes it once any turn it finishes first has ended). @internal
 */
export const make = (runId: RunId, snapshotHash: string, log: RunLog.RunLog, message: SentMessage | undefined): Inbox => {
  const ids = new Map<string, Known>()
  const started = log.started._tag === "Some" ? log.started.value : undefined
  if (started?.conversation !== undefined) ids.set(started.conversation.messageId, { text: started.task, turn: 0, queued: undefined })
  for (const m of log.userMessages) ids.set(m.messageId, { text: m.text, turn: m.turn, queued: undefined })
  if (message !== undefined && !ids.has(message.messageId)) {
    ids.set(message.messageId, { text: message.text, turn: started === undefined ? 0 : undefined, queued: undefined })
  }
  return {
    runId,
    snapshotHash,
    queue: [],
    held: [],
    ids,
    waiting: new Map(),
    early: new Map(),
    ended: new Map(),
    messages: log.userMessages.length,
    accepting: true
  }
}

/** Records a message just written (its turn to come); whoever waited for it before it was written now waits for its turn. @internal */
export const written = (inbox: Inbox, record: RunLog.UserMessaged): Effect.Effect<void> => {
  inbox.ids.set(record.messageId, { text: record.text, turn: record.turn, queued: undefined })
  const early = inbox.early.get(record.messageId)
  if (early === undefined) return Effect.void
  inbox.early.delete(record.messageId)
  return Effect.forEach(early, (answered) => awaitTurn(inbox, record.turn, answered), { discard: true })
}

/** The turn of a message id this attempt has written or found, if any. @internal */
export const turnOf = (inbox: Inbox, messageId: string): number | undefined => inbox.ids.get(messageId)?.turn

/** `MessageIdReused` when `message`'s id is known with another text. @internal */
export const conflict = (runId: RunId, message: SentMessage, known: { readonly text: string; readonly turn: number | undefined } | undefined): MessageIdReused | undefined =>
  known === undefined || known.text === message.text ? undefined : new MessageIdReused({ runId, messageId: message.messageId, ...(known.turn === undefined ? {} : { turn: known.turn }) })

/** Waits for turn `turn`'s result: at once if this attempt ended it, else when it ends. @internal */
const awaitTurn = (inbox: Inbox, turn: number, answered: Deferred.Deferred<RunResult, RunError>): Effect.Effect<void> => {
  const result = inbox.ended.get(turn)
  if (result !== undefined) return Effect.asVoid(Deferred.succeed(answered, result))
  const list = inbox.waiting.get(turn)
  if (list === undefined) inbox.waiting.set(turn, [answered])
  else list.push(answered)
  return Effect.void
}

/**
 * A send of `message` to the conversation running here: a known id waits for its turn (or its
 * queued twin's), a new one is queued. Checked when it runs: an inbox closed by then answers
 * `RunBusy` (the caller retries; the log decides). @internal
 */
export const enqueue = (inbox: Inbox, message: SentMessage): Effect.Effect<RunResult, RunError> =>
  Effect.suspend(() => {
    if (!inbox.accepting) return Effect.fail(new RunBusy({ runId: inbox.runId }))
    const known = inbox.ids.get(message.messageId)
    const reused = conflict(inbox.runId, message, known)
    if (reused !== undefined) return Effect.fail(reused)
    if (known?.queued !== undefined) return Deferred.await(known.queued.answered)
    return Effect.flatMap(Deferred.make<RunResult, RunError>(), (answered) => {
      if (known?.turn !== undefined) return Effect.zipRight(awaitTurn(inbox, known.turn, answered), Deferred.await(answered))
      if (known !== undefined) {
        // The attempt's own message, not written yet: its turn is known once it is.
        const list = inbox.early.get(message.messageId)
        if (list === undefined) inbox.early.set(message.messageId, [answered])
        else list.push(answered)
        return Deferred.await(answered)
      }
      return Effect.flatMap(Deferred.make<void, RunError>(), (written) => {
        const queued: Queued = { message, written, answered }
        inbox.queue.push(queued)
        inbox.ids.set(message.messageId, { text: message.text, turn: undefined, queued })
        return Deferred.await(answered)
      })
    })
  })

/**
 * Writes the queued messages with `append` (held: their turns start when the current one ends)
 * and acknowledges each; a queued message whose id was written meanwhile (a send that read the
 * log before its first caller wrote it) waits for that turn instead. @internal
 */
export const drain = <E>(
  inbox: Inbox,
  append: (message: SentMessage, turn: number) => Effect.Effect<RunLog.UserMessaged, E>
): Effect.Effect<void, E> => {
  if (inbox.queue.length === 0) return Effect.void
  const queued = inbox.queue.splice(0)
  return Effect.forEach(queued, (q) => {
    const known = inbox.ids.get(q.message.messageId)
    if (known?.turn !== undefined) {
      const reused = conflict(inbox.runId, q.message, known)
      if (reused !== undefined) return Effect.zipRight(Deferred.fail(q.written, reused), Deferred.fail(q.answered, reused))
      return Effect.zipRight(Deferred.succeed(q.written, undefined), awaitTurn(inbox, known.turn, q.answered))
    }
    return Effect.flatMap(append(q.message, inbox.messages + 1), (record) => {
      inbox.messages += 1
      inbox.held.push(record)
      return Effect.zipRight(
        Effect.zipRight(written(inbox, record), awaitTurn(inbox, record.turn, q.answered)),
        Deferred.succeed(q.written, undefined)
      )
    })
  }, { discard: true })
}

/** Turn `turn` ended with `result`: every caller waiting for it is answered. @internal */
export const turnEnded = (inbox: Inbox, turn: number, result: RunResult): Effect.Effect<void> => {
  inbox.ended.set(turn, result)
  const list = inbox.waiting.get(turn)
  if (list === undefined) return Effect.void
  inbox.waiting.delete(turn)
  return Effect.forEach(list, (answered) => Deferred.succeed(answered, result), { discard: true })
}

/** The attempt ended: nothing more is queued; whoever still waits fails `RunBusy` and retries (a written message is found by its id). @internal */
export const close = (inbox: Inbox): Effect.Effect<void> =>
  Effect.suspend(() => {
    inbox.accepting = false
    const busy = new RunBusy({ runId: inbox.runId })
    const queued = inbox.queue.splice(0)
    const waiting = [...inbox.waiting.values(), ...inbox.early.values()].flat()
    inbox.waiting.clear()
    inbox.early.clear()
    return Effect.zipRight(
      Effect.forEach(queued, (q) => Effect.zipRight(Deferred.fail(q.written, busy), Deferred.fail(q.answered, busy)), { discard: true }),
      Effect.forEach(waiting, (answered) => Deferred.fail(answered, busy), { discard: true })
    )
  })

/** The conversations whose turns run in this process, by store and run id (two stores may hold one id). */
const inboxes = new WeakMap<object, Map<string, Inbox>>()

/** The inboxes of the conversations of `store` running here. @internal */
export const of = (store: object): Map<string, Inbox> => {
  let byRun = inboxes.get(store)
  if (byRun === undefined) inboxes.set(store, byRun = new Map())
  return byRun
}
