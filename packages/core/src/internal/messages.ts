/**
 * A conversation's messages in its log (design 0300, decisions 6–9; design 0360): which turn a
 * message id names, a retried send's answer, a reused id refused, the configuration in force,
 * appending a message (held while a turn runs or waits for a decision), and queueing with a
 * conversation that runs in this process (`inbox.ts` holds the queue).
 *
 * @internal
 */
import * as Clock from "effect/Clock"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import { InvalidRunRequest, type RunError } from "../Errors.js"
import * as Fork from "../Fork.js"
import { RunId } from "../Ids.js"
import * as Inbox from "./inbox.js"
import { type LoopError, type Run } from "./run.js"
import * as RunLog from "../RunLog.js"
import { RunLogStore } from "../RunLogStore.js"
import * as Snapshot from "../Snapshot.js"
import type { SentMessage } from "./inbox.js"
import { type RunRequest, type RunResult, snapshotOf, turnResultOf } from "./request.js"

/** The turn a message id names in a conversation's log: 0 for its task, else its `UserMessaged`'s. */
export const turnOf = (log: RunLog.RunLog, messageId: string): number | undefined => {
  const started = Option.getOrUndefined(log.started)
  if (started?.conversation?.messageId === messageId) return 0
  return log.userMessages.find((m) => m.messageId === messageId)?.turn
}

export const isKnownMessage = (log: RunLog.RunLog, messageId: string): boolean => turnOf(log, messageId) !== undefined

/** `MessageIdReused` when the log holds `message`'s id with another text (design 0360). */
export const reusedIn = (runId: RunId, log: RunLog.RunLog, message: SentMessage): Effect.Effect<void, RunError> => {
  const turn = turnOf(log, message.messageId)
  if (turn === undefined) return Effect.void
  const text = turn === 0 ? Option.getOrThrow(log.started).task : log.userMessages.find((m) => m.messageId === message.messageId)!.text
  const reused = Inbox.conflict(runId, message, { text, turn })
  return reused === undefined ? Effect.void : Effect.fail(reused)
}

/** The result of the turn of a message already sent, once the turn has ended (a retried send). */
export const answeredTurn = (log: RunLog.RunLog, messageId: string): RunResult | undefined => {
  const turn = turnOf(log, messageId)
  const ended = turn === undefined ? undefined : log.turns.find((t) => t.turn === turn)
  return ended === undefined ? undefined : turnResultOf(Option.getOrThrow(log.started).runId, ended)
}

export const notAConversation = (runId: RunId) =>
  Effect.fail(
    new InvalidRunRequest({ runId, issues: "it is a single-task run (started by Agent.run); Agent.send continues conversations, which Agent.send starts" })
  )

/** Has every message of the conversation had its turn? */
export const turnFinishedIn = (log: RunLog.RunLog): boolean => log.turns.length === log.userMessages.length + 1

/** Messages whose turn has not started: the turn before them has not finished. */
export const heldMessages = (log: RunLog.RunLog): number => Math.max(0, log.userMessages.length - log.turns.length)

/**
 * The configuration the conversation's current turn runs under: the snapshot recorded by the
 * last started turn's message that recorded one (a redeploy between turns), else the run's.
 */
export const snapshotInForce = (started: RunLog.RunStarted, log: RunLog.RunLog): { readonly snapshot: unknown; readonly snapshotHash: string } => {
  const current = log.turns.length // the turn in progress, or the next one
  for (let i = log.userMessages.length - 1; i >= 0; i--) {
    const m = log.userMessages[i]!
    if (m.turn <= current && m.snapshot !== undefined && m.snapshotHash !== undefined) return { snapshot: m.snapshot, snapshotHash: m.snapshotHash }
  }
  return { snapshot: started.snapshot, snapshotHash: started.snapshotHash }
}

/**
 * Appends a message (design 0300, decisions 6 and 9): the next turn's number, and the new
 * configuration with what changed when it differs from the one in force.
 */
export const appendMessage = (
  run: Run,
  turn: number,
  message: SentMessage,
  inForce: { readonly snapshot: unknown; readonly snapshotHash: string } | undefined,
  snapshot: Snapshot.Encoded | undefined
) =>
  Effect.gen(function*() {
    const at = yield* Clock.currentTimeMillis
    const drift = inForce !== undefined && snapshot !== undefined && !Snapshot.matches(inForce.snapshotHash, snapshot)
    const record: RunLog.UserMessaged = {
      _tag: "UserMessaged",
      seq: run.state.seq,
      turn,
      messageId: message.messageId,
      text: message.text,
      at,
      ...(drift && snapshot !== undefined && inForce !== undefined
        ? {
          snapshot: snapshot.value,
          snapshotHash: snapshot.hash,
          differences: Snapshot.diff(Snapshot.upgrade(inForce.snapshot), snapshot.value).map(Fork.toDifference)
        }
        : {})
    }
    yield* run.store.appendTurn(run.runId, record)
    run.state.seq += 1
    return record
  })

/** A message written while its conversation waits for a decision: held, its turn after the decision (decision 8). */
export const hold = (
  run: Run,
  log: RunLog.RunLog,
  message: SentMessage,
  inForce: { readonly snapshot: unknown; readonly snapshotHash: string } | undefined,
  snapshot: Snapshot.Encoded
) => Effect.asVoid(appendMessage(run, log.userMessages.length + 1, message, inForce, snapshot))

/**
 * Queues a message with the conversation running in this process under the same configuration
 * (the snapshot: agent, tools, parser) (decision 8): resolved once its turn ends — a message id
 * the conversation already holds or has queued waits for that turn (design 0360); `undefined`
 * when there is none to queue with.
 */
export const queueWith = (
  store: RunLogStore.Service,
  runId: RunId,
  given: RunRequest,
  message: SentMessage,
  log: RunLog.RunLog,
  parserId: string
): Effect.Effect<RunResult, RunError> | undefined => {
  const inbox = Inbox.of(store).get(runId)
  if (inbox === undefined || !inbox.accepting) return undefined
  const started = Option.getOrUndefined(log.started)
  if (started !== undefined && started.conversation === undefined) return undefined
  const parallel = given.agent.parallelToolCalls ?? (started === undefined ? true : Snapshot.parallelToolCallsOf(started.snapshot))
  if (!Snapshot.matches(inbox.snapshotHash, snapshotOf({ ...given, task: started?.task ?? given.task }, parserId, parallel))) return undefined
  return Inbox.enqueue(inbox, message)
}

/** Writes the queued messages (held: their turns start when the current one ends) and acknowledges each. */
export const drain = (run: Run): Effect.Effect<void, LoopError> =>
  run.inbox === undefined ? Effect.void : Inbox.drain(run.inbox, (message, turn) => appendMessage(run, turn, message, undefined, undefined))
