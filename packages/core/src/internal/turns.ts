/**
 * A conversation's turns (design 0300): the held messages answered in order, one turn each
 * through the loop, then the result of the turn the caller's message names.
 *
 * @internal
 */
import * as Effect from "effect/Effect"
import * as Inbox from "./inbox.js"
import { emit, type LoopError, type Run } from "./run.js"
import * as State from "./state.js"
import * as RunLog from "../RunLog.js"
import * as Snapshot from "../Snapshot.js"
import { loop } from "./loop.js"
import { appendMessage, drain, turnOf } from "./messages.js"
import type { SentMessage } from "./inbox.js"
import { type RunResult, turnResultOf } from "./request.js"

export const converse = (
  run: Run,
  log: RunLog.RunLog,
  message: SentMessage | undefined,
  inForce: { readonly snapshot: unknown; readonly snapshotHash: string } | undefined,
  snapshot: Snapshot.Encoded,
  finishedNow: RunResult | undefined
): Effect.Effect<RunResult, LoopError> =>
  Effect.gen(function*() {
    const inbox = run.inbox!
    // The log's held messages (their turns not started), before any queued since this attempt began.
    inbox.held.unshift(...log.userMessages.filter((m) => m.turn > run.state.turn && !inbox.held.some((h) => h.messageId === m.messageId)))
    // The message's turn: the log's, or one this attempt wrote since it read the log.
    let wanted = message === undefined ? undefined : turnOf(log, message.messageId) ?? Inbox.turnOf(inbox, message.messageId)
    if (message !== undefined && wanted === undefined) {
      const record = yield* appendMessage(run, inbox.messages + 1, message, inForce, snapshot)
      inbox.messages += 1
      inbox.held.push(record)
      yield* Inbox.written(inbox, record)
      wanted = record.turn
    }
    const results = new Map<number, RunResult>()
    if (finishedNow !== undefined) results.set(run.state.turn, { ...finishedNow, turn: run.state.turn })
    // Held messages in order — those of the log, this one, and those queued while turns run.
    for (;;) {
      yield* drain(run)
      const next = inbox.held.shift()
      if (next === undefined) break
      State.startTurn(run.state, next)
      yield* emit(run, { _tag: "TurnStarted", runId: run.runId, turn: next.turn, messageId: next.messageId, text: next.text })
      // Whoever else waits for this turn is answered as it ends (`finish`, design 0360).
      results.set(next.turn, { ...(yield* loop(run)), turn: next.turn })
    }
    const turn = wanted ?? run.state.turn
    const found = results.get(turn) ?? results.get(run.state.turn)
    if (found !== undefined) return found
    const ended = log.turns.find((t) => t.turn === turn) ?? log.turns.at(-1)!
    return turnResultOf(run.runId, ended)
  })
