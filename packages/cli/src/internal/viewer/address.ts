/**
 * Addresses and hosts for `polyloop serve` (design 0340): which addresses are loopback, how an
 * address or a `Host` header is normalised before it is compared (the WHATWG URL parser, as the
 * browser itself does: `0::1` → `::1`, `127.1` → `127.0.0.1`, `LOCALHOST.` → `localhost`), and
 * the allowlist every request's `Host` (and a changing request's `Origin`) must be on.
 *
 * @internal
 */
import * as Effect from "effect/Effect"
import * as Dns from "node:dns"
import * as Net from "node:net"
import * as Os from "node:os"

const loopbackRanges = (() => {
  const list = new Net.BlockList()
  list.addSubnet("127.0.0.0", 8, "ipv4")
  list.addAddress("::1", "ipv6")
  list.addSubnet("::ffff:127.0.0.0", 104, "ipv6")
  return list
})()

/** Is this IP address (v4 or v6, as text, in any notation `net` reads) a loopback address? */
export const isLoopbackIp = (ip: string): boolean => {
  const bare = unbracket(ip)
  const family = Net.isIP(bare)
  if (family === 0) return false
  try {
    return loopbackRanges.check(bare, family === 4 ? "ipv4" : "ipv6")
  } catch {
    return false
  }
}

/** Is this address a wildcard (every interface)? */
export const isWildcard = (ip: string): boolean => {
  const normal = normaliseHost(ip)
  return normal === "0.0.0.0" || normal === "::"
}

const unbracket = (host: string): string => (host.startsWith("[") && host.endsWith("]") ? host.slice(1, -1) : host)

/**
 * A host (a name or an address, IPv6 bracketed or not) in the one form it is compared in:
 * addresses canonical (`0::1` → `::1`, `::ffff:127.0.0.1` → `::ffff:7f00:1`, `127.1` →
 * `127.0.0.1`), names lower-case without a trailing dot; undefined when it is neither.
 */
export const normaliseHost = (host: string): string | undefined => {
  const bare = unbracket(host.trim())
  if (bare === "") return undefined
  if (Net.isIP(bare) === 6) return unbracket(new URL(`http://[${bare}]/`).hostname)
  if (!/^[A-Za-z0-9._-]+$/.test(bare)) return undefined
  try {
    const name = new URL(`http://${bare}/`).hostname
    return name.endsWith(".") ? name.slice(0, -1) : name
  } catch {
    return undefined
  }
}

/** A `Host` header (or an origin's host) read: its normalised host and its port, if any. */
export interface HostPort {
  readonly host: string
  readonly port: number | undefined
}

/**
 * Reads a `Host` header: `name[:port]` or `[v6][:port]` and nothing else (no user info, path or
 * spaces), normalised; undefined when it is not one.
 */
export const parseHostHeader = (header: string | undefined): HostPort | undefined => {
  if (header === undefined) return undefined
  const match = /^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9._-]+)(?::(\d{1,5}))?$/.exec(header.trim())
  if (match === null) return undefined
  const host = normaliseHost(match[1]!)
  if (host === undefined) return undefined
  const port = match[2] === undefined ? undefined : Number(match[2])
  if (port !== undefined && port > 65535) return undefined
  return { host, port }
}

/** The host part of a `Host` header (`127.0.0.1:8080` → `127.0.0.1`, `[::1]:80` → `::1`), normalised; "" when it is not one. */
export const hostOfHeader = (header: string): string => parseHostHeader(header)?.host ?? ""

/** The hosts a server answers for. */
export interface Allowlist {
  /** Normalised hosts allowed besides the loopback ones. */
  readonly hosts: ReadonlySet<string>
}

/**
 * The allowlist of a server bound to `bound`: loopback (always), the bound address or name, the
 * machine's interface addresses when bound to a wildcard, and the `extra` hosts the user named.
 */
export const allowlist = (bound: string, extra: ReadonlyArray<string> = []): Allowlist => {
  const hosts = new Set<string>()
  const add = (host: string) => {
    const normal = normaliseHost(host)
    if (normal !== undefined && !isWildcard(normal)) hosts.add(normal)
  }
  add(bound)
  if (isWildcard(bound)) {
    for (const entries of Object.values(Os.networkInterfaces())) {
      for (const entry of entries ?? []) add(entry.address.split("%")[0]!)
    }
  }
  for (const host of extra) add(host)
  return { hosts }
}

/** Is this (normalised) host allowed: loopback names and addresses, or on the list? */
export const isAllowedHost = (host: string, allowed: Allowlist): boolean =>
  isLoopbackIp(host) || host === "localhost" || host.endsWith(".localhost") || allowed.hosts.has(host)

/** May a request with this `Host` header be answered? */
export const isAllowedHostHeader = (header: string | undefined, allowed: Allowlist): boolean => {
  const parsed = parseHostHeader(header)
  return parsed !== undefined && isAllowedHost(parsed.host, allowed)
}

/**
 * May a request with this `Host` header be answered by a server bound to loopback by
 * `boundName`? (The allowlist of that server, with no extra hosts.)
 */
export const isLoopbackHostHeader = (header: string | undefined, boundName: string): boolean =>
  isAllowedHostHeader(header, allowlist(boundName))

/**
 * The addresses a host name or address stands for (an address stands for itself; `localhost`
 * is loopback by definition, RFC 6761), or the resolver's error message.
 */
export const resolve = (host: string): Effect.Effect<ReadonlyArray<string>, string> => {
  const bare = unbracket(host)
  if (Net.isIP(bare) !== 0) return Effect.succeed([bare])
  const normal = normaliseHost(bare)
  if (normal === "localhost" || normal?.endsWith(".localhost") === true) return Effect.succeed(["127.0.0.1", "::1"])
  return Effect.tryPromise({
    try: () => Dns.promises.lookup(bare, { all: true }),
    catch: (error) => (error instanceof Error ? error.message : String(error))
  }).pipe(Effect.map((found) => found.map((entry) => entry.address)))
}
