/**
 * A model reply as it arrives (design 0180): text, reasoning and refusal fragments, tool-call
 * fragments by call index, the usage and the finish reason. `fold` turns deltas into exactly the
 * `ModelReply` a non-streaming call returns; every client, the scripted model and the loop use
 * this one fold.
 *
 * @since 0.1.0
 */
import * as Effect from "effect/Effect"
import * as Schema from "effect/Schema"
import * as Stream from "effect/Stream"
import * as ModelReply from "./ModelReply.js"

/** A fragment of the reply's text. */
export const TextDelta = Schema.TaggedStruct("TextDelta", { text: Schema.String })
/** A fragment of the model's reasoning text. */
export const ReasoningDelta = Schema.TaggedStruct("ReasoningDelta", { text: Schema.String })
/** A fragment of the provider's refusal. */
export const RefusalDelta = Schema.TaggedStruct("RefusalDelta", { text: Schema.String })
/**
 * Fragments of the tool call at `index` (its position in the reply): the id and the name when
 * the provider gives them (usually in the first fragment), and a piece of the arguments text.
 */
export const ToolCallDelta = Schema.TaggedStruct("ToolCallDelta", {
  index: Schema.NonNegativeInt,
  id: Schema.optional(Schema.String),
  name: Schema.optional(Schema.String),
  arguments: Schema.optional(Schema.String)
})
/** The reply's usage as billed; when several come, the last one counts. */
export const UsageDelta = Schema.TaggedStruct("UsageDelta", { usage: ModelReply.Usage })
/** The provider's finish reason, raw (normalised by the fold, as `ModelReply.make` does). */
export const FinishDelta = Schema.TaggedStruct("FinishDelta", { finishReason: Schema.optional(Schema.String) })

/** Any delta. */
export const ModelDelta = Schema.Union(TextDelta, ReasoningDelta, RefusalDelta, ToolCallDelta, UsageDelta, FinishDelta)
/** @since 0.1.0 */
export type ModelDelta = typeof ModelDelta.Type

interface Call {
  id: string
  name: string
  arguments: string
}

/** The fold, one delta at a time: `add` each delta, then `reply()`. Owned by one fiber. */
export class Folder {
  private text = ""
  private reasoning = ""
  private refusal = ""
  private calls: Array<Call | undefined> = []
  private usage: ModelReply.Usage | undefined = undefined
  private finishReason: string | undefined = undefined

  /** Adds one delta. */
  add(delta: ModelDelta): void {
    switch (delta._tag) {
      case "TextDelta":
        this.text += delta.text
        return
      case "ReasoningDelta":
        this.reasoning += delta.text
        return
      case "RefusalDelta":
        this.refusal += delta.text
        return
      case "ToolCallDelta": {
        const call = this.calls[delta.index] ?? (this.calls[delta.index] = { id: "", name: "", arguments: "" })
        if (delta.id !== undefined && delta.id !== "") call.id = delta.id
        if (delta.name !== undefined && delta.name !== "") call.name = delta.name
        if (delta.arguments !== undefined) call.arguments += delta.arguments
        return
      }
      case "UsageDelta":
        this.usage = delta.usage
        return
      case "FinishDelta":
        if (delta.finishReason !== undefined) this.finishReason = delta.finishReason
        return
    }
  }

  /**
   * The reply so far, by the rules of design 0140: the text is the refusal when there is no
   * other text; empty reasoning or refusal is absent; calls in index order, a call without an
   * id keeps the empty id (the loop gives it its deterministic `call_<step>` id before the reply
   * is logged, as for a reply that did not stream: issue 29); the finish reason normalised, the
   * raw word kept; no usage delta, no tokens.
   */
  reply(): ModelReply.ModelReply {
    const refusal = this.refusal === "" ? undefined : this.refusal
    const toolCalls: Array<ModelReply.ModelToolCall> = []
    this.calls.forEach((call) => {
      if (call !== undefined) toolCalls.push({ id: call.id, name: call.name, argumentsText: call.arguments })
    })
    return ModelReply.make({
      text: this.text === "" && refusal !== undefined ? refusal : this.text,
      toolCalls,
      ...(this.usage === undefined ? {} : { usage: this.usage }),
      finishReason: this.finishReason,
      refusal,
      reasoning: this.reasoning === "" ? undefined : this.reasoning
    })
  }
}

/** The reply the deltas fold into. */
export const fold = (deltas: Iterable<ModelDelta>): ModelReply.ModelReply => {
  const folder = new Folder()
  for (const delta of deltas) folder.add(delta)
  return folder.reply()
}

/**
 * Runs a stream of deltas and folds it; `onDelta` sees each delta as it arrives (before it is
 * folded). Interruption and the stream's failure pass through.
 */
export const collect = <E, R, E2 = never, R2 = never>(
  deltas: Stream.Stream<ModelDelta, E, R>,
  onDelta?: (delta: ModelDelta) => Effect.Effect<void, E2, R2>
): Effect.Effect<ModelReply.ModelReply, E | E2, R | R2> =>
  Effect.suspend(() => {
    const folder = new Folder()
    const run = onDelta === undefined
      ? Stream.runForEachChunk(deltas, (chunk) =>
        Effect.sync(() => {
          for (const delta of chunk) folder.add(delta)
        }))
      : Stream.runForEach(deltas, (delta) => {
        folder.add(delta)
        return onDelta(delta)
      })
    return Effect.map(run, () => folder.reply())
  })

/**
 * The deltas of a whole reply, in the order a provider streams them: reasoning, text, refusal
 * (only when the text is not the refusal itself), tool calls, usage, finish. `fold(fromReply(r))`
 * equals `r`.
 */
export const fromReply = (reply: ModelReply.ModelReply): Array<ModelDelta> => {
  const deltas: Array<ModelDelta> = []
  if (reply.reasoning !== undefined) deltas.push({ _tag: "ReasoningDelta", text: reply.reasoning })
  if (reply.refusal !== undefined) deltas.push({ _tag: "RefusalDelta", text: reply.refusal })
  if (reply.text !== "" && reply.text !== reply.refusal) deltas.push({ _tag: "TextDelta", text: reply.text })
  reply.toolCalls.forEach((call, index) => deltas.push({ _tag: "ToolCallDelta", index, id: call.id, name: call.name, arguments: call.argumentsText }))
  deltas.push({ _tag: "UsageDelta", usage: reply.usage })
  deltas.push({ _tag: "FinishDelta", finishReason: reply.rawFinishReason ?? reply.finishReason })
  return deltas
}

/**
 * The deltas of a whole reply cut into pieces of at most `size` characters (text, reasoning,
 * refusal and each call's arguments), as a provider streams them: for tests and demos.
 */
export const chunked = (reply: ModelReply.ModelReply, size: number): Array<ModelDelta> => {
  const step = Math.max(1, Math.floor(size))
  const pieces = (text: string): Array<string> => {
    const out: Array<string> = []
    for (let i = 0; i < text.length; i += step) out.push(text.slice(i, i + step))
    return out
  }
  const deltas: Array<ModelDelta> = []
  for (const delta of fromReply(reply)) {
    switch (delta._tag) {
      case "TextDelta":
      case "ReasoningDelta":
      case "RefusalDelta":
        for (const text of pieces(delta.text)) deltas.push({ _tag: delta._tag, text })
        break
      case "ToolCallDelta": {
        const args = pieces(delta.arguments ?? "")
        deltas.push({ _tag: "ToolCallDelta", index: delta.index, ...(delta.id === undefined ? {} : { id: delta.id }), ...(delta.name === undefined ? {} : { name: delta.name }), arguments: args[0] ?? "" })
        for (const piece of args.slice(1)) deltas.push({ _tag: "ToolCallDelta", index: delta.index, arguments: piece })
        break
      }
      default:
        deltas.push(delta)
    }
  }
  return deltas
}
