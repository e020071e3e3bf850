/**
 * Records of scripted runs for the store tests, and a scoped temporary directory.
 */
import * as ActionOutcome from "@polyloop/core/ActionOutcome"
import { resultIdFor, type RunId, runId as makeRunId, StepIndex } from "@polyloop/core/Ids"
import * as ModelReply from "@polyloop/core/ModelReply"
import type * as RunLog from "@polyloop/core/RunLog"
import type * as RunLogStore from "@polyloop/core/RunLogStore"
import type { StopReason } from "@polyloop/core/StopReason"
import * as Effect from "effect/Effect"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"

/** A fresh directory under the OS temp dir, removed when the scope closes. */
export const tempDir = (prefix = "polyloop-sql-"): Effect.Effect<string, never, import("effect/Scope").Scope> =>
  Effect.acquireRelease(
    Effect.sync(() => fs.mkdtempSync(path.join(os.tmpdir(), prefix))),
    (dir) => Effect.sync(() => fs.rmSync(dir, { recursive: true, force: true }))
  )

export const rid = (value: string): RunId => makeRunId(value)

export const started = (
  runId: RunId,
  options: { readonly agent?: string; readonly startedAt?: number; readonly task?: string } = {}
): RunLog.RunStarted => ({
  _tag: "RunStarted",
  seq: 0,
  runId,
  task: options.task ?? "do the thing",
  snapshot: { agent: { name: options.agent ?? "tester" }, systemPrompt: "You are a test." },
  snapshotHash: "0".repeat(64),
  startedAt: options.startedAt ?? 1_000
})

export const replied = (seq: number, step: number, tokens = 10, text = `reply ${step}`): RunLog.ModelReplied => ({
  _tag: "ModelReplied",
  seq,
  step: StepIndex.make(step),
  reply: ModelReply.make({
    text,
    toolCalls: [{ id: `call_${step}`, name: "echo", argumentsText: `{"text":"${step}"}` }],
    usage: { inputTokens: tokens, outputTokens: Math.floor(tokens / 2) }
  })
})

export type Status = "Executed" | "NotExecuted" | "EnvError"

export const resulted = (seq: number, step: number, status: Status = "Executed", observation = `observed ${step}`): RunLog.ActionResulted => ({
  _tag: "ActionResulted",
  seq,
  resultId: resultIdFor(step),
  step: StepIndex.make(step),
  callIndex: 0,
  action: { _tag: "ToolCall", id: `call_${step}`, name: "echo", arguments: { text: String(step) } },
  outcome: status === "Executed"
    ? ActionOutcome.executed(observation)
    : status === "NotExecuted"
    ? ActionOutcome.notExecuted(observation)
    : ActionOutcome.envError(observation),
  executorObservation: observation,
  handlerFailed: false
})

/** A step's completion; with a result, `effective` says whether it was `Executed` (default: as `resulted`'s default). */
export const completed = (seq: number, step: number, withResult: boolean, elapsed = 5, tokens = 10, effective = withResult): RunLog.StepCompleted => ({
  _tag: "StepCompleted",
  seq,
  step: StepIndex.make(step),
  decision: withResult
    ? { _tag: "Act", actions: [{ _tag: "ToolCall", id: `call_${step}`, name: "echo", arguments: { text: String(step) } }] }
    : { _tag: "NoAction" },
  resultIds: withResult ? [resultIdFor(step)] : [],
  effective,
  usage: { inputTokens: tokens, outputTokens: Math.floor(tokens / 2) },
  elapsed
})

export const resumed = (seq: number, fromStep: number, at = 2_000): RunLog.RunResumed => ({
  _tag: "RunResumed",
  seq,
  fromStep: StepIndex.make(fromStep),
  at
})

export const finished = (
  seq: number,
  stopReason: StopReason = { _tag: "Completed", by: "Answer", answer: "42" },
  finishedAt = 9_000
): RunLog.RunFinished => ({
  _tag: "RunFinished",
  seq,
  stopReason,
  finishedAt,
  counters: { steps: 0, effectiveSteps: 0, usage: { inputTokens: 0, outputTokens: 0 }, elapsed: 0, resumedCount: 0 },
  eventDeliveryFailures: 0
})

/** One step as the loop writes it: the reply, then the result (if any) and completion at once. */
export interface StepPlan {
  readonly status: Status | null
  readonly tokens: number
  readonly elapsed: number
  readonly observation?: string
}

/** Writes a run's steps through the store; returns the next sequence number. */
export const writeSteps = (
  store: RunLogStore.RunLogStore.Service,
  runId: RunId,
  fromSeq: number,
  fromStep: number,
  steps: ReadonlyArray<StepPlan>
) =>
  Effect.gen(function*() {
    let seq = fromSeq
    let step = fromStep
    for (const plan of steps) {
      yield* store.appendReply(runId, replied(seq++, step, plan.tokens))
      if (plan.status === null) {
        yield* store.completeStep(runId, [], completed(seq++, step, false, plan.elapsed, plan.tokens))
      } else {
        const result = resulted(seq++, step, plan.status, plan.observation)
        yield* store.completeStep(runId, [result], completed(seq++, step, true, plan.elapsed, plan.tokens, plan.status === "Executed"))
      }
      step++
    }
    return seq
  })
