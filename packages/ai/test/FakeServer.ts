/**
 * A fake OpenAI-style HTTP server for tests: a real `node:http` server on 127.0.0.1 (a real
 * socket, real HTTP) that records every request and answers from a script. It also reports,
 * per request, whether the client closed the connection before the answer was complete — how a
 * test observes that an interrupted or timed-out call really aborted its HTTP request.
 *
 * Not collected by vitest (no `.test.ts`); imported by the tests of this package.
 */
import * as Http from "node:http"
import type { AddressInfo } from "node:net"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as FiberId from "effect/FiberId"
import * as Queue from "effect/Queue"
import type * as Scope from "effect/Scope"

/** A request as the server received it. */
export interface Received {
  readonly method: string
  readonly path: string
  readonly headers: Http.IncomingHttpHeaders
  /** The body parsed as JSON (`undefined` if it was not JSON). */
  readonly body: unknown
  /** Completes when the client closes the connection before the answer was fully sent. */
  readonly abortedByClient: Deferred.Deferred<void>
}

/** How the server answers one request. */
export type Reply =
  | { readonly _tag: "Json"; readonly status: number; readonly body: unknown }
  | {
    readonly _tag: "Raw"
    readonly status: number
    readonly body: string
    readonly contentType: string
    readonly headers?: Readonly<Record<string, string>>
  }
  /** Never answers. */
  | { readonly _tag: "Hang" }
  /** Sends a 200 status and the first bytes of a body, then nothing more. */
  | { readonly _tag: "StallBody" }
  /** Sends a 200 status and the first bytes of a body, then destroys the connection. */
  | { readonly _tag: "BreakBody" }
  /** Resets the connection (TCP RST) without answering. */
  | { readonly _tag: "Reset" }
  /**
   * Server-Sent Events, written one at a time (each flushed on its own): before event `i` the
   * server waits for `gate(i)` when given (hold the end of a stream back); after `cutAfter`
   * events it destroys the connection (`"destroy"`) or ends the answer early (`"end"`).
   */
  | {
    readonly _tag: "Events"
    readonly events: ReadonlyArray<string>
    readonly gate?: ((index: number) => Promise<void> | undefined) | undefined
    readonly cutAfter?: number | undefined
    readonly cut?: "destroy" | "end" | undefined
  }
  /** Answers from the request as received (e.g. with calls of the tools it declares). */
  | { readonly _tag: "Respond"; readonly respond: (request: Received) => Reply }

/** A JSON answer. */
export const json = (body: unknown, status = 200): Reply => ({ _tag: "Json", status, body })
/** A raw answer. */
export const raw = (
  status: number,
  body: string,
  contentType = "application/json",
  headers: Readonly<Record<string, string>> = {}
): Reply => ({
  _tag: "Raw",
  status,
  body,
  contentType,
  headers
})
/** No answer at all. */
export const hang: Reply = { _tag: "Hang" }
/** Headers and part of the body, then nothing. */
export const stallBody: Reply = { _tag: "StallBody" }
/** Headers and part of the body, then the connection is destroyed. */
export const breakBody: Reply = { _tag: "BreakBody" }
/** The connection is reset once the request has arrived: no status, no body. */
export const reset: Reply = { _tag: "Reset" }
/** Server-Sent Events, one by one (see the `Events` reply); each element is one event's text, blank line included. */
export const events = (
  list: ReadonlyArray<string>,
  options: { readonly gate?: (index: number) => Promise<void> | undefined; readonly cutAfter?: number; readonly cut?: "destroy" | "end" } = {}
): Reply => ({ _tag: "Events", events: list, gate: options.gate, cutAfter: options.cutAfter, cut: options.cut })
/** An answer computed from the request received. */
export const respond = (f: (request: Received) => Reply): Reply => ({ _tag: "Respond", respond: f })

/** A running fake server. */
export interface FakeServer {
  /** `http://127.0.0.1:<port>/v1`. */
  readonly baseUrl: string
  /** Adds answers, used in order; with none left the server answers 500. */
  readonly reply: (...replies: ReadonlyArray<Reply>) => Effect.Effect<void>
  /** The next request received (waits for it). */
  readonly next: Effect.Effect<Received>
  /** Every request received so far, in order. */
  readonly all: Effect.Effect<ReadonlyArray<Received>>
}

/** Starts a server for the scope; closing the scope closes every connection and the server. */
export const make: Effect.Effect<FakeServer, never, Scope.Scope> = Effect.gen(function*() {
  const script: Array<Reply> = []
  const received: Array<Received> = []
  const incoming = yield* Queue.unbounded<Received>()

  const answer = (reply: Reply, request: Received, res: Http.ServerResponse): void => {
    switch (reply._tag) {
      case "Json": {
        res.writeHead(reply.status, { "content-type": "application/json" })
        res.end(JSON.stringify(reply.body))
        return
      }
      case "Raw": {
        res.writeHead(reply.status, { ...reply.headers, "content-type": reply.contentType })
        res.end(reply.body)
        return
      }
      case "Hang":
        return
      case "StallBody": {
        res.writeHead(200, { "content-type": "application/json" })
        res.write("{\"choices\": [")
        return
      }
      case "BreakBody": {
        res.writeHead(200, { "content-type": "application/json", "content-length": "1000" })
        res.write("{\"choices\": [", () => res.destroy())
        return
      }
      case "Reset": {
        res.socket?.resetAndDestroy()
        return
      }
      case "Events": {
        res.writeHead(200, { "content-type": "text/event-stream", "cache-control": "no-cache" })
        const send = async () => {
          for (let i = 0; i < reply.events.length; i++) {
            if (reply.cutAfter !== undefined && i === reply.cutAfter) {
              if (reply.cut === "end") res.end()
              else res.destroy()
              return
            }
            const wait = reply.gate?.(i)
            if (wait !== undefined) await wait
            if (res.destroyed) return
            await new Promise<void>((done) => res.write(reply.events[i]!, () => done()))
          }
          res.end()
        }
        void send()
        return
      }
      case "Respond":
        return answer(reply.respond(request), request, res)
    }
  }

  const server = Http.createServer((req, res) => {
    const chunks: Array<Buffer> = []
    req.on("data", (chunk: Buffer) => chunks.push(chunk))
    req.on("end", () => {
      const text = Buffer.concat(chunks).toString("utf8")
      let body: unknown
      try {
        body = JSON.parse(text)
      } catch {
        body = undefined
      }
      const abortedByClient = Deferred.unsafeMake<void>(FiberId.none)
      res.on("close", () => {
        if (!res.writableFinished) Deferred.unsafeDone(abortedByClient, Effect.void)
      })
      const request: Received = {
        method: req.method ?? "",
        path: req.url ?? "",
        headers: req.headers,
        body,
        abortedByClient
      }
      received.push(request)
      incoming.unsafeOffer(request)
      answer(script.shift() ?? raw(500, "{\"error\":{\"message\":\"fake server: no scripted reply\"}}"), request, res)
    })
  })

  yield* Effect.acquireRelease(
    Effect.async<void>((resume) => {
      server.listen(0, "127.0.0.1", () => resume(Effect.void))
    }),
    () =>
      Effect.async<void>((resume) => {
        server.closeAllConnections()
        server.close(() => resume(Effect.void))
      })
  )
  const port = (server.address() as AddressInfo).port

  return {
    baseUrl: `http://127.0.0.1:${port}/v1`,
    reply: (...replies) => Effect.sync(() => void script.push(...replies)),
    next: Queue.take(incoming),
    all: Effect.sync(() => [...received])
  }
})

/** A loopback port nothing listens on (bound, then released). */
export const refusedPort: Effect.Effect<number> = Effect.async<number>((resume) => {
  const probe = Http.createServer()
  probe.listen(0, "127.0.0.1", () => {
    const port = (probe.address() as AddressInfo).port
    probe.close(() => resume(Effect.succeed(port)))
  })
})
