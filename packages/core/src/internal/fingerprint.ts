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

/** @internal */
export const make = (tools: ReadonlyArray<ToolDefinition>, settings: ModelSettings): Fingerprinter => {
  const suffix = `],"settings":${Snapshot.canonicalJson(encodeSettings(settings))},"tools":${Snapshot.canonicalJson(encodeTools(tools))}}`
  const running: Hash = createHash("sha256").update('{"messages":[', "utf8")
  let fed = 0
  return {
    hash: (messages) => {
      // A shorter array than already fed is not an extension (a caller's own array): start over.
      if (messages.length < fed) return ofRequest({ messages, tools, settings })
      for (; fed < messages.length; fed++) {
        const text = Snapshot.canonicalJson(encodeMessage(messages[fed]!))
        running.update(fed === 0 ? text : `,${text}`, "utf8")
      }
      return running.copy().update(suffix, "utf8").digest("hex")
    }
  }
}
