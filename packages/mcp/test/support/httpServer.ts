/**
 * The test server over Streamable HTTP on loopback, in the test's process (scoped): one SDK
 * server and transport per session, as the SDK's examples do, so a cancellation (a separate POST
 * in the same session) reaches the request it cancels.
 */
import { randomUUID } from "node:crypto"
import * as Http from "node:http"
import type { AddressInfo } from "node:net"
import { StreamableHTTPServerTransport } from "@modelcontextprotocol/sdk/server/streamableHttp.js"
import * as Effect from "effect/Effect"
import { makeTestServer, type TestServerOptions } from "./testServer.js"

/** A running server: its URL, and a way to drop every connection and stop answering (a dead server). */
export interface HttpTestServer {
  readonly url: string
  readonly kill: () => void
}

/** Starts the server on 127.0.0.1 (a free port); it stops when the scope closes. */
export const httpTestServer = (options: TestServerOptions = {}) =>
  Effect.acquireRelease(
    Effect.async<{ readonly server: Http.Server; readonly info: HttpTestServer }>((resume) => {
      const sessions = new Map<string, StreamableHTTPServerTransport>()
      const server = Http.createServer((req, res) => {
        const id = req.headers["mcp-session-id"]
        const existing = typeof id === "string" ? sessions.get(id) : undefined
        if (existing !== undefined) {
          void existing.handleRequest(req, res)
          return
        }
        const transport: StreamableHTTPServerTransport = new StreamableHTTPServerTransport({
          sessionIdGenerator: () => randomUUID(),
          onsessioninitialized: (sessionId) => {
            sessions.set(sessionId, transport)
          }
        })
        void makeTestServer(options).connect(transport).then(() => transport.handleRequest(req, res))
      })
      server.listen(0, "127.0.0.1", () => {
        const { port } = server.address() as AddressInfo
        resume(Effect.succeed({
          server,
          info: {
            url: `http://127.0.0.1:${port}/mcp`,
            kill: () => {
              server.close()
              server.closeAllConnections()
            }
          }
        }))
      })
    }),
    ({ server }) =>
      Effect.async<void>((resume) => {
        server.closeAllConnections()
        server.close(() => resume(Effect.void))
      })
  ).pipe(Effect.map(({ info }) => info))
