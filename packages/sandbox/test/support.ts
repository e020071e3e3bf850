/**
 * Helpers of the sandbox tests: the executor over a store, actions run as the loop runs them
 * (under a `ToolContext` naming the run and step).
 */
import type * as ActionOutcome from "@polyloop/core/ActionOutcome"
import { ActionExecutor } from "@polyloop/core/ActionExecutor"
import * as ToolContext from "@polyloop/core/ToolContext"
import * as Sandbox from "@polyloop/sandbox/Sandbox"
import * as Effect from "effect/Effect"

/** Options the tests run with: short limits, so that a kill costs little. */
export const testOptions: Sandbox.Options = {
  languages: ["python", "javascript"],
  wallTime: "4 seconds",
  cpuTime: "3 seconds",
  memoryBytes: 512 * 1024 * 1024,
  maxProcesses: 32,
  outputLimit: 2_000
}

/** Runs `code` as step `step` of `runId`. */
export const run = (runId: string, step: number, code: string, language: string = "python"): Effect.Effect<ActionOutcome.ActionOutcome, never, ActionExecutor> =>
  Effect.flatMap(ActionExecutor, (executor) =>
    Effect.provideService(
      executor.execute({ _tag: "CodeAction", language, code }),
      ToolContext.ToolContext,
      ToolContext.make({ runId, step, callId: `call_${step}` })
    ))
