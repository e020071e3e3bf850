/**
 * The requests of a run under `maskObservations` (design 0300, decisions 2 and 3): the masked
 * part of the history (system prompt, task, and the steps before the boundary with their
 * answers masked) is one append-only array; the verbatim rest is the run's own history array
 * from the boundary's step on. A request is a view over both, made in O(1); moving the boundary
 * (every `every` steps) appends the masked messages of the steps it passes, once. The request's
 * fingerprint is kept the same way (`Fingerprint.makeRewindable`). Amortised O(1) per step.
 *
 * The same code renders a live run, a resumed one (a fresh masker over the rebuilt state masks
 * the steps before the boundary once) and a replay's expected request, so they are equal.
 *
 * @internal
 */
import * as HistoryPolicy from "../HistoryPolicy.js"
import type * as Message from "../Message.js"
import type { ToolDefinition } from "../ModelClient.js"
import type { ModelSettings } from "../ModelSettings.js"
import * as Fingerprint from "./fingerprint.js"
import * as PrefixView from "./prefixView.js"

/** The history a masker reads: the run's messages and where each completed step's messages start. @internal */
export interface Source {
  readonly messages: Array<Message.Message>
  /** `stepStarts[s]`: the index of step s's `Assistant` message. */
  readonly stepStarts: ReadonlyArray<number>
  /** Completed steps: the request is for this step. */
  readonly steps: number
}

/** A request's messages and fingerprint. @internal */
export interface Sent {
  readonly messages: ReadonlyArray<Message.Message>
  readonly hash: string
}

/** Renders the requests of one run (owned by the run's fiber). @internal */
export interface Masker {
  readonly request: (source: Source) => Sent
}

/** The message with its answer text masked when the placeholder is shorter. */
const masked = (policy: HistoryPolicy.MaskObservations, message: Message.Message): Message.Message => {
  switch (message._tag) {
    case "Tool": {
      const text = HistoryPolicy.placeholderFor(policy, message.name, message.text)
      return text.length < message.text.length ? { ...message, text } : message
    }
    case "User": {
      const text = HistoryPolicy.placeholderFor(policy, "observation", message.text)
      return text.length < message.text.length ? { _tag: "User", text } : message
    }
    default:
      return message
  }
}

/** @internal */
export const make = (policy: HistoryPolicy.MaskObservations, tools: ReadonlyArray<ToolDefinition>, settings: ModelSettings): Masker => {
  const head: Array<Message.Message> = []
  let boundary = 0
  const fingerprint = Fingerprint.makeRewindable(tools, settings)
  return {
    request: (source) => {
      const { messages, stepStarts, steps } = source
      const next = Math.min(HistoryPolicy.boundary(policy, steps), steps)
      if (next > boundary) {
        // The system prompt and the task (everything before step 0) go in verbatim, once.
        if (boundary === 0) for (let i = 0; i < (stepStarts[0] ?? messages.length); i++) head.push(messages[i]!)
        for (let s = boundary; s < next; s++) {
          const start = stepStarts[s]!
          const end = stepStarts[s + 1] ?? messages.length
          head.push(messages[start]!)
          for (let i = start + 1; i < end; i++) head.push(masked(policy, messages[i]!))
        }
        boundary = next
      }
      const view = boundary === 0
        ? PrefixView.prefix(messages)
        : PrefixView.concat(head, head.length, messages, stepStarts[boundary] ?? messages.length, messages.length)
      return { messages: view, hash: fingerprint.hash(view, boundary === 0 ? 0 : head.length) }
    }
  }
}
