/**
 * Request fingerprints (design 0170): the hex SHA-256 of the canonical JSON of a
 * `ModelRequest`, `Snapshot.canonicalJson` of its encoded form. The canonical text is
 * `{"messages":[m0,m1,…],"settings":S,"tools":T}` (keys sorted), so the loop, which only ever
 * appends messages, keeps one running hash fed each message's text once, and per step hashes a
 * copy of it plus the constant `settings`/`tools` suffix: linear over a run.
 *
 * @internal
 */
import { createHash, type Hash } from "node:crypto"
import * as Schema from "effect/Schema"
import { Message } from "../Message.js"
import { ModelRequest, ToolDefinition } from "../ModelClient.js"
import { ModelSettings } from "../ModelSettings.js"
import * as Snapshot from "../Snapshot.js"

const encodeRequest = Schema.encodeSync(ModelRequest)
const encodeMessage = Schema.encodeSync(Message)
const encodeSettings = Schema.encodeSync(ModelSettings)
const encodeTools = Schema.encodeSync(Schema.Array(ToolDefinition))

/** The canonical JSON value of a request (what its fingerprint hashes). @internal */
/**
 * What a fingerprint covers: messages, tool definitions and settings (design 0170), exactly what
 * the incremental fingerprinter below hashes; `parallelToolCalls` is in the snapshot instead.
 */
const hashed = (request: ModelRequest): ModelRequest => ({ messages: request.messages, tools: request.tools, settings: request.settings })

export const canonicalValue = (request: ModelRequest): unknown => JSON.parse(Snapshot.canonicalJson(encodeRequest(hashed(request))))

/** The fingerprint of a request, computed from scratch. @internal */
export const ofRequest = (request: ModelRequest): string => Snapshot.sha256(Snapshot.canonicalJson(encodeRequest(hashed(request))))

/** An incremental fingerprinter for one run: fixed tools and settings, growing messages. @internal */
export interface Fingerprinter {
  /** The fingerprint of the request with these messages (a prefix-extension of the last call's). */
  readonly hash: (messages: ReadonlyArray<Message>) => string
}

/**
 * The canonical JSON text of a message, `Snapshot.canonicalJson(encodeMessage(message))`,
 * written directly for a message of the schema's shape (the encoded form of a message is the
 * message without any excess property; keys in sorted order: `_tag` first, then by name).
 * Anything else (a field that is not a string) goes through Schema, which refuses it as before.
 * @internal
 */
export const canonicalMessage = (message: Message): string => {
  const q = JSON.stringify
  switch (message._tag) {
    case "System":
    case "User":
      if (typeof message.text === "string") return `{"_tag":"${message._tag}","text":${q(message.text)}}`
      break
    case "Tool":
      if (typeof message.callId === "string" && typeof message.name === "string" && typeof message.text === "string") {
        return `{"_tag":"Tool","callId":${q(message.callId)},"name":${q(message.name)},"text":${q(message.text)}}`
      }
      break
    case "Assistant": {
      const calls = message.toolCalls
      if (typeof message.text !== "string" || !Array.isArray(calls)) break
      let text = `{"_tag":"Assistant","text":${q(message.text)},"toolCalls":[`
      for (let i = 0; i < calls.length; i++) {
        const call = calls[i]!
        if (typeof call !== "object" || call === null) return Snapshot.canonicalJson(encodeMessage(message))
        const { argumentsText, id, name } = call
        if (typeof argumentsText !== "string" || typeof id !== "string" || typeof name !== "string") {
          return Snapshot.canonicalJson(encodeMessage(message))
        }
        text += `${i === 0 ? "" : ","}{"argumentsText":${q(argumentsText)},"id":${q(id)},"name":${q(name)}}`
      }
      return `${text}]}`
    }
  }
  return Snapshot.canonicalJson(encodeMessage(message))
}

/** The constant end of a request's canonical text, by tool list and settings (both fixed for an agent and its registry). */
const suffixes = new WeakMap<ReadonlyArray<ToolDefinition>, WeakMap<ModelSettings, string>>()

const suffixOf = (tools: ReadonlyArray<ToolDefinition>, settings: ModelSettings): string => {
  let bySettings = suffixes.get(tools)
  if (bySettings === undefined) suffixes.set(tools, bySettings = new WeakMap())
  let suffix = bySettings.get(settings)
  if (suffix === undefined) {
    suffix = `],"settings":${Snapshot.canonicalJson(encodeSettings(settings))},"tools":${Snapshot.canonicalJson(encodeTools(tools))}}`
    bySettings.set(settings, suffix)
  }
  return suffix
}

/** @internal */
export const make = (tools: ReadonlyArray<ToolDefinition>, settings: ModelSettings): Fingerprinter => {
  // A registry's model view and an agent's settings are immutable values: their text is made once.
  const suffix = suffixOf(tools, settings)
  const running: Hash = createHash("sha256").update('{"messages":[', "utf8")
  let fed = 0
  return {
    hash: (messages) => {
      // A shorter array than already fed is not an extension (a caller's own array): start over.
      if (messages.length < fed) return ofRequest({ messages, tools, settings })
      // The new messages in one update (a step adds two): one native call, not one a message.
      if (fed < messages.length) {
        let text = ""
        for (; fed < messages.length; fed++) text += fed === 0 ? canonicalMessage(messages[fed]!) : `,${canonicalMessage(messages[fed]!)}`
        running.update(text, "utf8")
      }
      return running.copy().update(suffix, "utf8").digest("hex")
    }
  }
}

/**
 * A fingerprinter for a history whose first `stable` messages never change again while the rest
 * may (design 0300: a masked history's masked part, and the verbatim tail that is masked when
 * the boundary moves). One running hash covers the stable part (it only grows); the tail is fed
 * to a copy of it, and fed again from the new end of the stable part when that moves. @internal
 */
export interface RewindableFingerprinter {
  readonly hash: (messages: ReadonlyArray<Message>, stable: number) => string
}

/** @internal */
export const makeRewindable = (tools: ReadonlyArray<ToolDefinition>, settings: ModelSettings): RewindableFingerprinter => {
  const suffix = suffixOf(tools, settings)
  const base: Hash = createHash("sha256").update('{"messages":[', "utf8")
  let baseFed = 0
  let tail: Hash = base.copy()
  let fed = 0
  const feed = (hash: Hash, index: number, message: Message) => hash.update(index === 0 ? canonicalMessage(message) : `,${canonicalMessage(message)}`, "utf8")
  return {
    hash: (messages, stable) => {
      // Not an extension of what was fed (a caller's own array): from scratch.
      if (stable < baseFed || messages.length < stable || messages.length < fed) return ofRequest({ messages, tools, settings })
      if (stable > baseFed) {
        for (; baseFed < stable; baseFed++) feed(base, baseFed, messages[baseFed]!)
        tail = base.copy()
        fed = baseFed
      }
      for (; fed < messages.length; fed++) feed(tail, fed, messages[fed]!)
      return tail.copy().update(suffix, "utf8").digest("hex")
    }
  }
}
