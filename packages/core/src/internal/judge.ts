/**
 * The stop judgment (SPEC §9, design 0150): after each step, whether the run stops and why —
 * an environment failure, an answer, a completing tool, then the budgets (per turn, and a
 * conversation's over all its turns, design 0300).
 *
 * @internal
 */
import * as Duration from "effect/Duration"
import * as Either from "effect/Either"
import * as AgentDefinition from "../AgentDefinition.js"
import * as Option from "effect/Option"
import type { BudgetItem, ConversationBudget } from "../Budget.js"
import type { Run } from "./run.js"
import * as State from "./state.js"
import type { StopReason } from "../StopReason.js"

/**
 * The stop judgment of SPEC §9 over the last step's results (design 0150), in order: an
 * `EnvError` in any call; a `Finish`; a completing tool that returned (first in call order),
 * or an environment that reported completion; then the four budgets.
 */
export const judge = (run: Run): StopReason | undefined => {
  const state = run.state
  const last = state.last
  if (last !== undefined) {
    const results = last.results
    for (let i = 0; i < results.length; i++) {
      const result = results[i]!
      if (result.outcome.status === "EnvError") {
        return { _tag: "EnvError", message: result.executorObservation === "" ? result.outcome.observation : result.executorObservation }
      }
    }
    if (last.decision._tag === "Finish") return { _tag: "Completed", by: "Answer", answer: last.decision.answer }
    // An answer that did not decode (design 0400): the model tries again until `outputAttempts`.
    const output = run.request.agent.output
    if (output !== undefined && last.decision._tag === "InvalidDecision" && last.decision.invalidOutput !== undefined) {
      const attempts = run.request.agent.outputAttempts ?? AgentDefinition.defaultOutputAttempts
      if (state.invalidOutputs >= attempts) return { _tag: "InvalidOutput", by: "Answer", attempts: state.invalidOutputs, issues: last.decision.invalidOutput }
    }
    for (let i = 0; i < results.length; i++) {
      const result = results[i]!
      if (result.outcome.status !== "Executed") continue
      const action = result.action
      if (
        !result.handlerFailed &&
        action._tag === "ToolCall" &&
        Option.exists(run.request.tools.get(action.name), (tool) => tool.completesRun)
      ) {
        // A completing tool's answer is the run's answer: under an output schema it must decode,
        // else the run stops (the text is the tool's, not the model's to correct; design 0400).
        if (output !== undefined) {
          const decoded = output.decodeAnswer(result.executorObservation)
          if (Either.isLeft(decoded)) return { _tag: "InvalidOutput", by: "Tool", attempts: state.invalidOutputs, issues: decoded.left }
        }
        return { _tag: "Completed", by: "Tool", answer: result.executorObservation }
      }
      if (result.outcome.envReportedCompletion) return { _tag: "Completed", by: "Environment" }
    }
  }
  // A conversation's budget counts over all its turns (design 0300), checked first: a step that
  // exhausts both is reported as the conversation's, which decides every later message.
  const whole = run.conversation ? run.request.agent.conversationBudget : undefined
  if (whole !== undefined) {
    const exhausted = conversationExhausted(run, whole)
    if (exhausted !== undefined) return { _tag: "BudgetExhausted", budget: exhausted, scope: "Conversation" }
  }
  // A budget is per turn (design 0300): a single-task run is one turn, counted from zero.
  const budget = run.request.agent.budget
  const from = state.turnStart
  if (stepsSpent(state, from) >= budget.maxSteps) return { _tag: "BudgetExhausted", budget: "Steps" }
  if (budget.maxEffectiveSteps !== undefined && state.effectiveSteps - from.effectiveSteps >= budget.maxEffectiveSteps) {
    return { _tag: "BudgetExhausted", budget: "EffectiveSteps" }
  }
  if (budget.maxTokens !== undefined && tokensSpent(state, from) >= budget.maxTokens) {
    return { _tag: "BudgetExhausted", budget: "Tokens" }
  }
  if (run.maxDurationMillis !== undefined && state.elapsed - from.elapsed >= run.maxDurationMillis) {
    return { _tag: "BudgetExhausted", budget: "Duration" }
  }
  return undefined
}

/** The item of a conversation's budget its totals (every turn, from the first step) have reached. */
export const conversationExhausted = (run: Run, budget: ConversationBudget): BudgetItem | undefined => {
  const state = run.state
  if (budget.maxSteps !== undefined && stepsSpent(state) >= budget.maxSteps) return "Steps"
  if (budget.maxEffectiveSteps !== undefined && state.effectiveSteps >= budget.maxEffectiveSteps) return "EffectiveSteps"
  if (budget.maxTokens !== undefined && tokensSpent(state) >= budget.maxTokens) return "Tokens"
  if (budget.maxDuration !== undefined && state.elapsed >= Duration.toMillis(budget.maxDuration)) return "Duration"
  return undefined
}

/** Steps spent since `from` (the run's start when absent): the run's own and its children's (design 0392). */
export const stepsSpent = (state: State.State, from?: State.TurnStart): number =>
  state.steps + state.children.steps - (from === undefined ? 0 : from.steps + from.children.steps)

/** Tokens spent since `from` (the run's start when absent): the run's own and its children's (design 0392). */
export const tokensSpent = (state: State.State, from?: State.TurnStart): number =>
  state.inputTokens + state.outputTokens + State.childTokens(state) -
  (from === undefined ? 0 : from.inputTokens + from.outputTokens + from.children.inputTokens + from.children.outputTokens)
