/**
 * `@effect/ai` stream parts as `ModelDelta`s (design 0180), folding into exactly what
 * `AiModelClient.toModelReply` makes of the whole response: text deltas as they come; reasoning
 * deltas, a new reasoning part after an earlier one starting with `\n` (the whole response joins
 * its reasoning parts with it); each
 * tool call the provider did not execute in one delta once `@effect/ai` has decoded it, its
 * arguments as `JSON.stringify(params)` (the raw `tool-params-delta` text may differ from what
 * the whole response logs); the usage as billed and the finish reason from the finish part.
 * `@effect/ai-openai` 0.41 streams no refusal part (its whole response has one): a refused
 * reply streamed through it folds without `refusal`.
 *
 * @internal
 */
import type * as Response from "@effect/ai/Response"
import type * as AiTool from "@effect/ai/Tool"
import type * as ModelDelta from "@polyloop/core/ModelDelta"
import { billedUsage, metadataOf } from "./replyParts.js"

/** Reads the parts of one stream, in order. Owned by the stream's fiber. @internal */
export class PartReader {
  private calls = 0
  private reasoningParts = 0
  private reasoningHasText = new Set<string>()
  /** A finish part was read: the stream is complete. */
  finished = false
  /** An error part was read (the provider reported an error mid-stream). */
  error: unknown = undefined

  /** The deltas of one part. */
  read(part: Response.StreamPart<Record<string, AiTool.Any>>): Array<ModelDelta.ModelDelta> {
    switch (part.type) {
      case "text-delta":
        return part.delta === "" ? [] : [{ _tag: "TextDelta", text: part.delta }]
      case "reasoning-delta": {
        if (part.delta === "") return []
        const first = !this.reasoningHasText.has(part.id)
        this.reasoningHasText.add(part.id)
        const text = first && this.reasoningParts++ > 0 ? `\n${part.delta}` : part.delta
        return [{ _tag: "ReasoningDelta", text }]
      }
      case "tool-call": {
        if (part.providerExecuted) return []
        const params: unknown = part.params
        return [{
          _tag: "ToolCallDelta",
          index: this.calls++,
          id: part.id,
          name: part.name,
          arguments: typeof params === "string" ? params : JSON.stringify(params) ?? ""
        }]
      }
      case "finish":
        this.finished = true
        return [
          { _tag: "UsageDelta", usage: billedUsage(part.usage, metadataOf(part, "anthropic", "usage")) },
          { _tag: "FinishDelta", finishReason: part.reason }
        ]
      case "error":
        this.error = part.error
        return []
      default:
        return []
    }
  }
}
