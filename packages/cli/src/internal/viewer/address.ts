/**
 * Which addresses `polyloop serve` may bind without being told to, and which `Host` headers it
 * answers while bound to loopback (so a page of another site cannot read the runs through DNS
 * rebinding). See docs/design/0190-viewer.md.
 *
 * @internal
 */
import * as Effect from "effect/Effect"
import * as Dns from "node:dns"
import * as Net from "node:net"

/** Is this IP address (v4 or v6, as text) a loopback address? */
export const isLoopbackIp = (ip: string): boolean => {
  const family = Net.isIP(ip)
  if (family === 4) return ip.startsWith("127.")
  if (family === 6) {
    const lower = ip.toLowerCase()
    if (lower === "::1" || lower === "0:0:0:0:0:0:0:1") return true
    const mapped = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/.exec(lower)
    return mapped !== null && mapped[1]!.startsWith("127.")
  }
  return false
}

/**
 * The addresses a host name or address stands for (an address stands for itself; `localhost`
 * is loopback by definition, RFC 6761), or the resolver's error message.
 */
export const resolve = (host: string): Effect.Effect<ReadonlyArray<string>, string> => {
  const bare = host.startsWith("[") && host.endsWith("]") ? host.slice(1, -1) : host
  if (Net.isIP(bare) !== 0) return Effect.succeed([bare])
  if (bare.toLowerCase() === "localhost") return Effect.succeed(["127.0.0.1", "::1"])
  return Effect.tryPromise({
    try: () => Dns.promises.lookup(bare, { all: true }),
    catch: (error) => (error instanceof Error ? error.message : String(error))
  }).pipe(Effect.map((found) => found.map((entry) => entry.address)))
}

/** The host part of a `Host` header (`127.0.0.1:8080` → `127.0.0.1`, `[::1]:80` → `::1`). */
export const hostOfHeader = (header: string): string => {
  const value = header.trim().toLowerCase()
  if (value.startsWith("[")) {
    const end = value.indexOf("]")
    return end < 0 ? value : value.slice(1, end)
  }
  const colon = value.lastIndexOf(":")
  return colon < 0 ? value : value.slice(0, colon)
}

/**
 * May a request with this `Host` header be answered by a server bound to loopback? Loopback
 * addresses, `localhost` (and its subdomains, which browsers resolve to loopback) and the name
 * the server was bound by.
 */
export const isLoopbackHostHeader = (header: string | undefined, boundName: string): boolean => {
  if (header === undefined) return false
  const host = hostOfHeader(header)
  return isLoopbackIp(host) || host === "localhost" || host.endsWith(".localhost") || host === boundName.toLowerCase()
}
