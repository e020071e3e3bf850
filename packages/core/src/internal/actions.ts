/**
 * What an action is called: its name (the tool's, or the code's language) and its call id (the
 * model's, or a deterministic one). Shared by the history (`history.ts`, which re-exports it) and
 * the spans (`tracing.ts`); a module of its own so that tracing, which `ToolRegistry` uses, does
 * not import the history, which imports `ToolRegistry` (design 0390).
 *
 * @internal
 */
import type { Action } from "../Action.js"

/** The name the synthetic templates use for an action: the tool's name or the code's language. @internal */
export const actionName = (action: Action): string => (action._tag === "ToolCall" ? action.name : action.language)

/** The deterministic call id of the action at `index` of a step: `call_<step>`, then `call_<step>_<index>`. @internal */
export const syntheticCallId = (step: number, index: number): string => (index === 0 ? `call_${step}` : `call_${step}_${index}`)

/** The call id of the action at `index` of a step: the model's id, or the deterministic one when it has none. @internal */
export const callIdOf = (action: Action, step: number, index: number = 0): string =>
  action._tag === "ToolCall" && action.id !== "" ? action.id : syntheticCallId(step, index)
