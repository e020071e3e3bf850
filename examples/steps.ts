/**
 * How the tool-calling examples (`tool-agent.ts`, `mcp-agent.ts`) print a run as it happens: one
 * line per decision, one per outcome (marked when synthetic), the stop reason.
 */
import type { LoopEvent } from "@polyloop/core/LoopEvent"
import type { ParsedReply } from "@polyloop/core/ParsedReply"
import * as StopReason from "@polyloop/core/StopReason"
import * as Console from "effect/Console"
import * as Effect from "effect/Effect"

/** A text on one line, cut to `max` characters. */
export const oneLine = (text: string, max = 100): string => {
  const flat = text.replace(/\s+/g, " ").trim()
  return flat.length > max ? `${flat.slice(0, max - 1)}…` : flat
}

const describe = (decision: ParsedReply): string => {
  switch (decision._tag) {
    case "Act":
      return decision.actions
        .map((action) => action._tag === "ToolCall" ? `${action.name} ${JSON.stringify(action.arguments)}` : `${action.language} code`)
        .join(", ")
    case "Finish":
      return `final answer ${JSON.stringify(decision.answer)}`
    case "NoAction":
      return "no action"
    case "InvalidDecision":
      return `invalid decision: ${oneLine(decision.explanation)}`
  }
}

/** One line per interesting event. */
export const print = (event: LoopEvent): Effect.Effect<void> => {
  switch (event._tag) {
    case "RunResumed":
      return Console.log(`resumed at step ${event.fromStep}`)
    case "DecisionParsed":
      return Console.log(`step ${event.step}: ${describe(event.decision)}`)
    case "ActionExecuted": {
      const outcome = event.outcome
      const synthetic = outcome.observationIsSynthetic ? " (synthetic)" : ""
      return Console.log(`        ${outcome.status}${synthetic}: ${oneLine(outcome.observation)}`)
    }
    case "RunFinished":
      return Console.log(`stop: ${StopReason.format(event.stopReason)}`)
    default:
      return Effect.void
  }
}

