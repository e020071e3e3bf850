/**
 * Messages of the history a `ModelRequest` carries.
 *
 * @since 0.1.0
 */
import * as Schema from "effect/Schema"
import { ModelToolCall } from "./ModelReply.js"

/** The system prompt. */
export const System = Schema.TaggedStruct("System", { text: Schema.String })
/** The task, and observations of text action languages. */
export const User = Schema.TaggedStruct("User", { text: Schema.String })
/** A model reply as it re-enters history. */
export const Assistant = Schema.TaggedStruct("Assistant", { text: Schema.String, toolCalls: Schema.Array(ModelToolCall) })
/** The observation of a native tool call, answering the call `callId`. */
export const Tool = Schema.TaggedStruct("Tool", { callId: Schema.String, name: Schema.String, text: Schema.String })

/** Any message. */
export const Message = Schema.Union(System, User, Assistant, Tool)
/** @since 0.1.0 */
export type Message = typeof Message.Type
