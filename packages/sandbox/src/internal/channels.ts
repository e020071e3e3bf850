/**
 * The two streams of an interpreter as the host reads them: the code's output (`Output`: the first
 * `limit` characters kept, the rest counted, ended by the action's boundary token) and the driver's
 * reply channel (`LineSplitter`: bounded lines, design 0331 decision 5).
 *
 * @internal
 */
import * as Deferred from "effect/Deferred"
import * as Exit from "effect/Exit"
import { StringDecoder } from "node:string_decoder"

/**
 * The output of the current action: the first `limit` characters kept, the rest counted; ends at
 * the boundary token. Between actions, output is dropped.
 */
export class Output {
  private kept = ""
  private truncated = 0
  private decoder = new StringDecoder("utf8")
  private boundary: Buffer | undefined
  private carry: Buffer = Buffer.alloc(0)
  private done: Deferred.Deferred<void> | undefined
  /** Bytes fed since the process started: whether output is still arriving. */
  private fed = 0

  constructor(private readonly limit: number) {}

  /** Bytes of output read so far, over every action. */
  get bytesRead(): number {
    return this.fed
  }

  /** Starts collecting one action's output, ending at `boundary`. */
  begin(boundary: string, done: Deferred.Deferred<void>): void {
    this.kept = ""
    this.truncated = 0
    this.decoder = new StringDecoder("utf8")
    this.boundary = Buffer.from(boundary, "utf8")
    this.carry = Buffer.alloc(0)
    this.done = done
  }

  private add(text: string): void {
    if (text.length === 0) return
    const room = this.limit - this.kept.length
    if (room >= text.length) this.kept += text
    else {
      if (room > 0) this.kept += text.slice(0, room)
      this.truncated += text.length - Math.max(0, room)
    }
  }

  /** Feeds a chunk of the process's standard output. */
  feed(chunk: Uint8Array): void {
    this.fed += chunk.byteLength
    const boundary = this.boundary
    if (boundary === undefined) return
    const data = this.carry.length === 0 ? Buffer.from(chunk.buffer, chunk.byteOffset, chunk.byteLength) : Buffer.concat([this.carry, chunk])
    const at = data.indexOf(boundary)
    if (at >= 0) {
      this.add(this.decoder.write(data.subarray(0, at)))
      this.add(this.decoder.end())
      this.boundary = undefined
      this.carry = Buffer.alloc(0)
      const done = this.done
      this.done = undefined
      if (done !== undefined) Deferred.unsafeDone(done, Exit.void)
      return
    }
    const keep = Math.min(data.length, boundary.length - 1)
    this.add(this.decoder.write(data.subarray(0, data.length - keep)))
    this.carry = Buffer.from(data.subarray(data.length - keep))
  }

  /** What was collected so far (the action ended or was cut short). */
  result(): { readonly text: string; readonly truncated: number } {
    if (this.boundary !== undefined) {
      this.add(this.decoder.write(this.carry))
      this.add(this.decoder.end())
      this.boundary = undefined
      this.carry = Buffer.alloc(0)
    }
    return { text: this.kept, truncated: this.truncated }
  }
}

/** What the reply channel's reader passes on: a line, the channel's end, or a flood. */
export type ReplyLine = string | null | typeof flood
/** The code wrote more to the driver's reply channel than a driver ever does. */
export const flood: unique symbol = Symbol.for("@polyloop/sandbox/flood")

/** The longest line the reply channel may carry; what the code may write there besides, in all. */
export const maxReplyBytes = 16 * 1024 * 1024

/**
 * Splits a byte stream into lines of at most `max` bytes: an oversized line is not held, only
 * counted (`onOversized` with its size once it ends), so what the host keeps is bounded whatever
 * is written (design 0331, decision 5).
 */
export class LineSplitter {
  private parts: Array<Buffer> = []
  private held = 0
  private dropped = 0

  constructor(
    private readonly max: number,
    private readonly onLine: (line: string) => void,
    private readonly onOversized: (bytes: number) => void
  ) {}

  /** Bytes held now (at most `max`). */
  get holding(): number {
    return this.held
  }

  feed(chunk: Uint8Array): void {
    let data = Buffer.from(chunk.buffer, chunk.byteOffset, chunk.byteLength)
    while (data.length > 0) {
      const newline = data.indexOf(10)
      const piece = newline < 0 ? data : data.subarray(0, newline)
      if (this.dropped > 0 || this.held + piece.length > this.max) {
        this.dropped += this.held + piece.length
        this.parts = []
        this.held = 0
      } else if (piece.length > 0) {
        this.parts.push(Buffer.from(piece))
        this.held += piece.length
      }
      if (newline < 0) return
      this.end()
      data = data.subarray(newline + 1)
    }
  }

  private end(): void {
    if (this.dropped > 0) {
      const bytes = this.dropped
      this.dropped = 0
      this.onOversized(bytes)
      return
    }
    const line = Buffer.concat(this.parts).toString("utf8")
    this.parts = []
    this.held = 0
    this.onLine(line)
  }

  /** The stream ended: what is held is a last line. */
  finish(): void {
    if (this.dropped > 0) this.onOversized(this.dropped + this.held)
    else if (this.held > 0) this.onLine(Buffer.concat(this.parts).toString("utf8"))
    this.parts = []
    this.held = 0
    this.dropped = 0
  }
}
