/**
 * Where the viewer listens: the host check (a non-loopback address only when asked for), TCP, or
 * a Unix socket made 0600 (design 0340, amended). On close the open connections are dropped
 * (live streams never end by themselves) and the server stops listening.
 *
 * @internal
 */
import type * as FileSystem from "@effect/platform/FileSystem"
import type * as HttpServer from "@effect/platform/HttpServer"
import * as NodeHttpServer from "@effect/platform-node/NodeHttpServer"
import type * as RunLogStore from "@polyloop/core/RunLogStore"
import * as Effect from "effect/Effect"
import type * as Scope from "effect/Scope"
import * as Fs from "node:fs"
import * as Http from "node:http"
import * as Address from "../viewer/address.js"
import * as Auth from "../viewer/auth.js"
import * as Defaults from "../viewer/defaults.js"
import { app } from "./app.js"
import { type AppOptions, type Bound, type Options, ServeError } from "./types.js"

/** Refuses a non-loopback host unless `exposed`; tells whether the host is loopback. */
export const checkHost = (host: string, port: number, exposed: boolean): Effect.Effect<boolean, ServeError> =>
  Address.resolve(host).pipe(
    Effect.mapError((message) => new ServeError({ reason: "Resolve", host, port, message: `cannot resolve ${host}: ${message}` })),
    Effect.flatMap((addresses) => {
      const loopback = addresses.length > 0 && addresses.every(Address.isLoopbackIp)
      if (loopback || exposed) return Effect.succeed(loopback)
      return Effect.fail(
        new ServeError({
          reason: "NonLoopback",
          host,
          port,
          message: `refusing to serve on ${host} (${addresses.join(", ")}): it is not a loopback address, so anyone who can reach it could try ` +
            `to read the runs (tasks, replies, tool output), with only the token between them and the runs; pass --host ${host} explicitly to serve there anyway`
        })
      )
    })
  )

/** The app's options that `Options` passes on as they are. */
const passed = (options: Options): Omit<AppOptions, "token" | "boundHost"> => ({
  ...(options.interval === undefined ? {} : { interval: options.interval }),
  ...(options.decider === undefined ? {} : { decider: options.decider }),
  ...(options.allowedHosts === undefined ? {} : { allowedHosts: options.allowedHosts }),
  ...(options.maxStreams === undefined ? {} : { maxStreams: options.maxStreams }),
  ...(options.maxStreamsPerClient === undefined ? {} : { maxStreamsPerClient: options.maxStreamsPerClient }),
  ...(options.prices === undefined ? {} : { prices: options.prices })
})

/** The viewer on TCP. */
export const serveTcp = (options: Options): Effect.Effect<Bound, ServeError, RunLogStore.RunLogStore | FileSystem.FileSystem | Scope.Scope> =>
  Effect.gen(function*() {
    const host = options.host ?? Defaults.host
    const port = options.port ?? Defaults.port
    const loopback = yield* checkHost(host, port, options.exposed ?? false)
    for (const allowedHost of options.allowedHosts ?? []) {
      if (Address.normaliseHost(allowedHost) === undefined) {
        return yield* new ServeError({ reason: "InvalidOption", host, port, message: `--allowed-host ${JSON.stringify(allowedHost)} is not a host name or address` })
      }
    }
    const token = options.token ?? (yield* Auth.generate)
    const loginCode = yield* Auth.generate
    const viewer = yield* app({ loginCode, ...passed(options), boundHost: host, token })
    const nodeServer = Http.createServer()
    const server: HttpServer.HttpServer = yield* NodeHttpServer.make(() => nodeServer, { host, port }).pipe(
      Effect.mapError((error) =>
        new ServeError({
          reason: "Listen",
          host,
          port,
          message: `cannot listen on ${host}:${port}: ${error.cause instanceof Error ? error.cause.message : String(error.cause)}`
        })
      )
    )
    // Runs before the server's own finalizer (which waits for every connection to end).
    yield* Effect.addFinalizer(() => Effect.sync(() => nodeServer.closeAllConnections()))
    yield* server.serve(viewer)
    const address = server.address
    const boundPort = address._tag === "TcpAddress" ? address.port : port
    const bare = host.startsWith("[") && host.endsWith("]") ? host.slice(1, -1) : host
    const urlHost = bare.includes(":") ? `[${bare}]` : bare
    const baseUrl = `http://${urlHost}:${boundPort}/`
    return { host, port: boundPort, url: `${baseUrl}#login=${loginCode}`, baseUrl, token, loopback }
  })

/**
 * The viewer on a Unix socket (design 0340, amended): the socket is bound while the process's
 * umask is 0177, so the file is created 0600 (never, even for a moment, open to other users);
 * the umask is restored as soon as the server listens. Requests need no token: reaching the
 * socket is the authentication. The `Host` and `Origin` checks stay (a client names `localhost`).
 */
export const serveSocket = (
  options: Options,
  socket: string
): Effect.Effect<Bound, ServeError, RunLogStore.RunLogStore | FileSystem.FileSystem | Scope.Scope> =>
  Effect.gen(function*() {
    const refuse = (reason: "InvalidOption" | "Listen", message: string) => new ServeError({ reason, host: `unix:${socket}`, port: 0, message })
    if (options.host !== undefined) return yield* refuse("InvalidOption", "--socket and --host exclude each other: a socket has no address")
    if (Fs.existsSync(socket)) return yield* refuse("InvalidOption", `${socket} exists: remove it first (a socket file is never replaced)`)
    const token = options.token ?? (yield* Auth.generate)
    const viewer = yield* app({ ...passed(options), boundHost: "localhost", token, socketOnly: true })
    const nodeServer = Http.createServer()
    // Removed when the server stops (after its own finalizer has closed it).
    yield* Effect.addFinalizer(() => Effect.sync(() => Fs.rmSync(socket, { force: true })))
    const server: HttpServer.HttpServer = yield* Effect.acquireUseRelease(
      Effect.sync(() => process.umask(0o177)),
      () => NodeHttpServer.make(() => nodeServer, { path: socket }),
      (previous) => Effect.sync(() => process.umask(previous))
    ).pipe(
      Effect.mapError((error) =>
        refuse("Listen", `cannot listen on ${socket}: ${error.cause instanceof Error ? error.cause.message : String(error.cause)}`)
      )
    )
    const mode = Fs.statSync(socket).mode & 0o777
    if (mode !== 0o600) return yield* refuse("Listen", `${socket} was created with mode ${mode.toString(8)}, not 600`)
    yield* Effect.addFinalizer(() => Effect.sync(() => nodeServer.closeAllConnections()))
    yield* server.serve(viewer)
    return { host: `unix:${socket}`, port: 0, url: "http://localhost/", baseUrl: "http://localhost/", token, loopback: true, socket }
  })
