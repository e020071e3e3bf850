/**
 * Actions: what a decision asks the environment to do. Two action languages: JSON tool calls
 * and code.
 *
 * @since 0.1.0
 */
import * as Schema from "effect/Schema"
import { JsonValue } from "./internal/jsonValue.js"

/** A tool call: the model asks for the tool `name` with `arguments` (already parsed JSON). */
export const ToolCall = Schema.TaggedStruct("ToolCall", {
  id: Schema.String,
  name: Schema.String,
  arguments: JsonValue
})
/** @since 0.1.0 */
export interface ToolCall extends Schema.Schema.Type<typeof ToolCall> {}

/** A code action: the model wrote `code` in `language` for the executor to run. */
export const CodeAction = Schema.TaggedStruct("CodeAction", {
  language: Schema.String,
  code: Schema.String
})
/** @since 0.1.0 */
export interface CodeAction extends Schema.Schema.Type<typeof CodeAction> {}

/** An action of either language. */
export const Action = Schema.Union(ToolCall, CodeAction)
/** @since 0.1.0 */
export type Action = ToolCall | CodeAction

/** Guard: is this action a tool call? */
export const isToolCall = (action: Action): action is ToolCall => action._tag === "ToolCall"

/** Guard: is this action a code action? */
export const isCodeAction = (action: Action): action is CodeAction => action._tag === "CodeAction"
