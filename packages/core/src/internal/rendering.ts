/**
 * The requests of a run under a history policy (design 0300, decisions 2–4). What is sent is
 *
 *   preamble (system prompt, task) · note (steps [0, t) omitted, when a compaction stands) ·
 *   steps [t, b) with their answers masked · steps [max(t, b), n) verbatim
 *
 * where `t` is the `toStep` of the last `HistoryCompacted` record and `b` the masking boundary
 * (0 without masking). The first three parts are one append-only array, the `front`; the verbatim
 * rest is the run's own history array from its step on. A request is a view over both, made in
 * O(1); moving `b` (every `every` steps) appends the masked messages of the steps it passes,
 * once; a new compaction (a new `t`) builds a new front, once — the retained steps' messages,
 * amortised O(1) per step because a drop goes down to `trimTo` of the budget. The fingerprint is
 * kept the same way (`Fingerprint.makeRewindable`, a new one per front).
 *
 * Counting (`Counting`, only for a token budget and the emergency step): each completed step is
 * counted once, verbatim and masked, into prefix sums, so the size of any rendering is O(1).
 *
 * The same code renders a live run, a resumed one (a fresh renderer over the rebuilt state) and a
 * replay's expected request, so they are equal.
 *
 * @internal
 */
import * as HistoryPolicy from "../HistoryPolicy.js"
import type * as Message from "../Message.js"
import type { ModelRequest, ToolDefinition } from "../ModelClient.js"
import type { ModelSettings } from "../ModelSettings.js"
import type * as RunLog from "../RunLog.js"
import type * as TokenCounter from "../TokenCounter.js"
import * as Fingerprint from "./fingerprint.js"
import * as PrefixView from "./prefixView.js"

/** The history a renderer reads: the run's messages, where each completed step's messages start, the compactions. @internal */
export interface Source {
  readonly messages: Array<Message.Message>
  /** `stepStarts[s]`: the index of step s's `Assistant` message. */
  readonly stepStarts: ReadonlyArray<number>
  /** Completed steps: the request is for this step. */
  readonly steps: number
  /** The compactions recorded so far, in order. */
  readonly compactions: ReadonlyArray<RunLog.HistoryCompacted>
  /** The provider's input tokens of the last completed step's reply (0: not reported). */
  readonly lastInputTokens: number
  /** The indices of a conversation's user messages (design 0300): never masked, never dropped. */
  readonly turnMessages: ReadonlyArray<number>
}

/** A request's messages and fingerprint. @internal */
export interface Sent {
  readonly messages: ReadonlyArray<Message.Message>
  readonly hash: string
}

/** A compaction to record: steps `[0, toStep)` replaced, and the counted size of the request that asked for it. @internal */
export interface Planned {
  readonly toStep: number
  readonly requestTokens: number
}

/** Renders the requests of one run (owned by the run's fiber). @internal */
export interface Renderer {
  readonly request: (source: Source) => Sent
  /** The compaction the token budget asks for before the request of `source.steps`, if any. */
  readonly plan: (source: Source) => Planned | undefined
  /** The emergency step after a `context_length_exceeded`: drop every step but the last; undefined when nothing is left to drop. */
  readonly emergency: (source: Source) => Planned | undefined
  /** The counted (calibrated) size of the request of `source.steps`. */
  readonly tokens: (source: Source) => number
  /**
   * The smaller of the counted and the calibrated size of the request of `source.steps` (design
   * 0361): what the request counts at least. A calibration can be off (a fork's copied replies
   * report the parent's requests), so a request is refused as over the budget only by this.
   */
  readonly leastTokens: (source: Source) => number
  /** The budget's window, when the policy names one. */
  readonly window: number | undefined
  /** What no request may count more than (`window − headroom`), when the policy names a window (design 0361). */
  readonly budget: number | undefined
  /** Whether the policy drops or summarises steps (not only masks). */
  readonly compacts: boolean
  /** The summary `summarise` asks for before the request of `source.steps`, if any. */
  readonly planSummary: (source: Source) => Planned | undefined
  /** The summariser's request for the steps before `toStep`. */
  readonly summaryRequest: (source: Source, toStep: number) => ModelRequest
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

/** The compaction in force for the request of `step`: the last record written at or before it. */
const recordAt = (compactions: ReadonlyArray<RunLog.HistoryCompacted>, step: number): RunLog.HistoryCompacted | undefined => {
  for (let i = compactions.length - 1; i >= 0; i--) {
    const record = compactions[i]!
    if (record.step <= step) return record
  }
  return undefined
}

const toStepAt = (compactions: ReadonlyArray<RunLog.HistoryCompacted>, step: number): number => recordAt(compactions, step)?.toStep ?? 0

/** The message standing for the replaced steps of a compaction: its summary, or the omitted-steps note. @internal */
export const noteOf = (parts: HistoryPolicy.Parts, record: RunLog.HistoryCompacted): Message.Message => ({
  _tag: "User",
  text: record.summary !== undefined
    ? HistoryPolicy.summaryNoteFor(parts.summary?.note ?? HistoryPolicy.defaultSummaryNote, record.toStep, record.summary)
    : HistoryPolicy.noteFor(parts.fit?.note ?? HistoryPolicy.defaultNote, record.toStep)
})

/** The rendering part: no counting. @internal */
export interface Rendering {
  readonly request: (source: Source) => Sent
}

/** @internal */
export const makeRendering = (parts: HistoryPolicy.Parts, tools: ReadonlyArray<ToolDefinition>, settings: ModelSettings): Rendering => {
  const mask = parts.mask
  let front: Array<Message.Message> = []
  let frontRecord: RunLog.HistoryCompacted | undefined // the compaction the front was built for
  let frontTo = -1 // its toStep (-1: no front built yet)
  let frontB = 0 // steps before this are in the front (masked or dropped)
  let fingerprint = Fingerprint.makeRewindable(tools, settings)
  const preambleEnd = (source: Source) => source.stepStarts[0] ?? source.messages.length
  const appendMasked = (source: Source, from: number, to: number) => {
    const { messages, stepStarts } = source
    const turns = source.turnMessages.length === 0 ? undefined : new Set(source.turnMessages)
    for (let s = from; s < to; s++) {
      const start = stepStarts[s]!
      const end = stepStarts[s + 1] ?? messages.length
      front.push(messages[start]!)
      for (let i = start + 1; i < end; i++) {
        front.push(mask === undefined || turns?.has(i) === true ? messages[i]! : masked(mask, messages[i]!))
      }
    }
  }
  return {
    request: (source) => {
      const { messages, stepStarts, steps } = source
      const record = recordAt(source.compactions, steps)
      const t = Math.min(record?.toStep ?? 0, steps)
      const b = Math.max(t, mask === undefined ? 0 : Math.min(HistoryPolicy.boundary(mask, steps), steps))
      if ((record !== frontRecord || frontTo === -1) && (t > 0 || b > 0)) {
        // A new compaction: a new front (requests already made keep theirs).
        front = []
        fingerprint = Fingerprint.makeRewindable(tools, settings)
        for (let i = 0; i < preambleEnd(source); i++) front.push(messages[i]!)
        if (record !== undefined && t > 0) {
          front.push(noteOf(parts, record))
          // A person's messages in the replaced span stay, in order (a summary never swallows one).
          const end = stepStarts[t] ?? messages.length
          for (const i of source.turnMessages) if (i < end) front.push(messages[i]!)
        }
        frontRecord = record
        frontTo = t
        frontB = t
      }
      if (b > frontB) {
        appendMasked(source, frontB, b)
        frontB = b
      }
      if (frontTo === -1) return { messages: PrefixView.prefix(messages), hash: fingerprint.hash(PrefixView.prefix(messages), 0) }
      const view = PrefixView.concat(front, front.length, messages, stepStarts[frontB] ?? messages.length, messages.length)
      return { messages: view, hash: fingerprint.hash(view, front.length) }
    }
  }
}

/** The tokens of a message: its texts (and a call's name and arguments), plus 4 for the message's framing. @internal */
export const messageTokens = (count: TokenCounter.Count, message: Message.Message): number => {
  switch (message._tag) {
    case "System":
    case "User":
      return 4 + count(message.text)
    case "Tool":
      return 4 + count(message.name) + count(message.text)
    case "Assistant": {
      let n = 4 + count(message.text)
      for (const call of message.toolCalls) n += count(call.name) + count(call.argumentsText)
      return n
    }
  }
}

/** @internal */
export const make = (
  parts: HistoryPolicy.Parts,
  tools: ReadonlyArray<ToolDefinition>,
  settings: ModelSettings,
  count: TokenCounter.Count
): Renderer => {
  const rendering = makeRendering(parts, tools, settings)
  const { fit, mask, summary } = parts
  const noteTemplate = fit?.note ?? HistoryPolicy.defaultNote
  // Prefix sums over completed steps: verbatim[s] / maskedSums[s] = tokens of steps [0, s).
  const verbatim: Array<number> = [0]
  const maskedSums: Array<number> = [0]
  // userSums[s]: tokens of a conversation's user messages in the spans of steps [0, s) (kept when those steps are dropped).
  const userSums: Array<number> = [0]
  let preamble = -1
  const toolTokens = count(JSON.stringify(tools))
  const countUpTo = (source: Source, steps: number) => {
    const { messages, stepStarts } = source
    if (preamble === -1) {
      preamble = 0
      const end = stepStarts[0] ?? messages.length
      for (let i = 0; i < end; i++) preamble += messageTokens(count, messages[i]!)
    }
    // A person's messages (a conversation's) only when there are steps to count: once per step, not per request.
    const turns = verbatim.length - 1 >= steps || source.turnMessages.length === 0 ? undefined : new Set(source.turnMessages)
    for (let s = verbatim.length - 1; s < steps; s++) {
      const start = stepStarts[s]!
      const end = stepStarts[s + 1] ?? messages.length
      let v = 0
      let m = 0
      let u = 0
      for (let i = start; i < end; i++) {
        const message = messages[i]!
        const tokens = messageTokens(count, message)
        const turn = turns?.has(i) === true
        v += tokens
        if (turn) u += tokens
        m += mask === undefined || i === start || turn ? tokens : messageTokens(count, masked(mask, message))
      }
      verbatim.push(verbatim[s]! + v)
      maskedSums.push(maskedSums[s]! + m)
      userSums.push(userSums[s]! + u)
    }
  }
  const noteTokens = new WeakMap<RunLog.HistoryCompacted, number>()
  /** The tokens of the note of the compaction in force at `steps` (its summary, or the omitted-steps note). */
  const recordNote = (source: Source, steps: number): number => {
    const record = recordAt(source.compactions, steps)
    if (record === undefined || record.toStep === 0) return 0
    let n = noteTokens.get(record)
    if (n === undefined) noteTokens.set(record, n = messageTokens(count, noteOf(parts, record)))
    return n
  }
  const omittedNote = (t: number): number => (t > 0 ? messageTokens(count, { _tag: "User", text: HistoryPolicy.noteFor(noteTemplate, t) }) : 0)
  /** Counted tokens of the request of `steps` with steps [0, t) replaced by a note of `note` tokens. */
  const size = (steps: number, t: number, note: number): number => {
    const b = Math.max(t, mask === undefined ? 0 : Math.min(HistoryPolicy.boundary(mask, steps), steps))
    return toolTokens + preamble + note + userSums[t]! + (maskedSums[b]! - maskedSums[t]!) + (verbatim[steps]! - verbatim[b]!)
  }
  /** The provider's count over ours for the last completed step's request (1 when unknown). */
  const ratio = (source: Source): number => {
    const last = source.steps - 1
    if (last < 0 || source.lastInputTokens <= 0) return 1
    const counted = size(last, Math.min(toStepAt(source.compactions, last), last), recordNote(source, last))
    // Clamped: a count four times off is a tokenizer's worst case (CJK text by characters / 4);
    // beyond that the report is not of this request (a proxy, a test double), so it is not trusted further.
    return counted > 0 ? Math.min(4, Math.max(0.25, source.lastInputTokens / counted)) : 1
  }
  const current = (source: Source) => Math.min(toStepAt(source.compactions, source.steps), source.steps)
  /** The calibrated size of the request as it stands (the compaction in force). */
  const currentSize = (source: Source, r: number) => Math.ceil(size(source.steps, current(source), recordNote(source, source.steps)) * r)
  /** The calibrated size with steps [0, t) dropped (the omitted-steps note). */
  const estimate = (source: Source, t: number, r: number) => Math.ceil(size(source.steps, t, omittedNote(t)) * r)
  const tokens = (source: Source) => {
    countUpTo(source, source.steps)
    return currentSize(source, ratio(source))
  }
  const leastTokens = (source: Source) => {
    countUpTo(source, source.steps)
    return currentSize(source, Math.min(1, ratio(source)))
  }
  return {
    request: rendering.request,
    window: fit?.window,
    budget: fit === undefined ? undefined : fit.window - fit.headroom,
    compacts: fit !== undefined || summary !== undefined,
    tokens,
    leastTokens,
    plan: (source) => {
      if (fit === undefined) return undefined
      countUpTo(source, source.steps)
      const r = ratio(source)
      const t = current(source)
      const limit = fit.window - fit.headroom
      const requestTokens = currentSize(source, r)
      if (requestTokens <= limit) return undefined
      // The last completed step is never dropped.
      const last = source.steps - 1
      if (last <= t) return undefined
      const target = fit.trimTo * limit
      let to = t + 1
      while (to < last && estimate(source, to, r) > target) to++
      return { toStep: to, requestTokens }
    },
    emergency: (source) => {
      countUpTo(source, source.steps)
      const t = current(source)
      const last = source.steps - 1
      if (last <= t) return undefined
      return { toStep: last, requestTokens: currentSize(source, ratio(source)) }
    },
    planSummary: (source) => {
      if (summary === undefined) return undefined
      countUpTo(source, source.steps)
      const requestTokens = currentSize(source, ratio(source))
      if (requestTokens <= summary.triggerTokens) return undefined
      const toStep = Math.min(source.steps - summary.keepLast, source.steps - 1)
      return toStep > current(source) ? { toStep, requestTokens } : undefined
    },
    summaryRequest: (source, toStep) => summaryRequest(parts, source, toStep, settings)
  }
}

/** A message of the transcript a summariser reads. */
const transcriptLine = (message: Message.Message): string => {
  switch (message._tag) {
    case "System":
      return `system: ${message.text}`
    case "User":
      return `user: ${message.text}`
    case "Tool":
      return `tool ${message.name} (${message.callId}): ${message.text}`
    case "Assistant":
      return [`assistant: ${message.text}`, ...message.toolCalls.map((call) => `  calls ${call.name}(${call.argumentsText}) as ${call.id}`)].join("\n")
  }
}

/**
 * The summariser's request for steps `[t, toStep)` (t: the compaction in force): its
 * instructions, then one user message with the previous summary, if any, and the steps as a
 * transcript (their answers masked where the masking policy masks them). No tools: a transcript
 * in text is valid for every provider whatever calls it quotes. @internal
 */
export const summaryRequest = (parts: HistoryPolicy.Parts, source: Source, toStep: number, settings: ModelSettings): ModelRequest => {
  const { messages, stepStarts, steps } = source
  const record = recordAt(source.compactions, steps)
  const t = Math.min(record?.toStep ?? 0, steps)
  const b = parts.mask === undefined ? 0 : Math.min(HistoryPolicy.boundary(parts.mask, steps), steps)
  const lines: Array<string> = [`Task: ${messages[(stepStarts[0] ?? messages.length) - 1]?.text ?? ""}`]
  if (record?.summary !== undefined) lines.push(`Summary of steps 0–${record.toStep - 1}:`, record.summary)
  for (let s = t; s < toStep; s++) {
    lines.push(`--- step ${s}`)
    const start = stepStarts[s]!
    const end = stepStarts[s + 1] ?? messages.length
    for (let i = start; i < end; i++) {
      const message = messages[i]!
      lines.push(transcriptLine(parts.mask !== undefined && s < b && i > start ? masked(parts.mask, message) : message))
    }
  }
  return {
    messages: [{ _tag: "System", text: parts.summary?.prompt ?? HistoryPolicy.defaultSummaryPrompt }, { _tag: "User", text: lines.join("\n") }],
    tools: [],
    settings
  }
}
