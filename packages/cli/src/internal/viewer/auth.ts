/**
 * The secret of one start of `polyloop serve` and the credentials made of it (designs 0340 and
 * 0370):
 *
 * - the **token** (256 random bits): scripts send `Authorization: Bearer <token>`;
 * - the **login code** (256 random bits, not the token): printed in the URL's fragment
 *   (`/#login=<code>`), good for one exchange at `POST /api/session` (the first wins: a code
 *   left in the browser's history is worthless);
 * - a **session** (`<nonce>.<mac>`), what the exchange (of the code, or of the token pasted on
 *   the page) answers: 128 random bits and an HMAC-SHA256, keyed by the token, of the nonce and
 *   the `Host` of the exchange. The page keeps it in its origin's `localStorage` (port-scoped,
 *   unlike a cookie) and sends it as `X-Polyloop-Session` (or `?session=` on a live stream);
 *   presented under another `Host` it is refused. No cookie is ever set.
 *
 * Every comparison is in constant time. Each credential names a *client* (the bearer holder, or
 * one session), the unit of the fair stream limits.
 *
 * @internal
 */
import * as Effect from "effect/Effect"
import * as Ref from "effect/Ref"
import * as Crypto from "node:crypto"

/** Who a request comes from: the token holder, or one browser session (by its nonce). */
export type Client = { readonly _tag: "Bearer" } | { readonly _tag: "Session"; readonly nonce: string } | { readonly _tag: "Socket" }

/** The key of a client (for the per-client stream counts). */
export const clientKey = (client: Client): string => (client._tag === "Session" ? `session ${client.nonce}` : client._tag)

/** Why an exchange was refused. */
export type Refusal = "WrongToken" | "WrongCode" | "LoginSpent"

/** A server's secret. */
export interface Secret {
  readonly token: string
  /** The one-time login code of the printed URL. */
  readonly loginCode: string
  /** Is this text the token? */
  readonly matches: (candidate: string) => boolean
  /**
   * The client a request authenticates as, or undefined: a bearer token, or a session valid for
   * `host` (the request's `Host` header) in the `x-polyloop-session` header or, when given,
   * `fromQuery` (a live stream's `?session=`).
   */
  readonly identify: (
    headers: Readonly<Record<string, string | undefined>>,
    fromQuery: string | null
  ) => Client | undefined
  /**
   * Exchanges a login for a session valid under `host`: the token (any number of times) or the
   * login code (once; concurrent exchanges of it: exactly one wins).
   */
  readonly exchange: (login: { readonly token: string } | { readonly login: string }, host: string) => Effect.Effect<string, Refusal>
}

const digest = (text: string): Buffer => Crypto.createHash("sha256").update(text, "utf8").digest()

const equal = (a: string, b: Buffer): boolean => Crypto.timingSafeEqual(digest(a), b)

/** A fresh 256-bit token, as 64 hex digits. */
export const generate: Effect.Effect<string> = Effect.sync(() => Crypto.randomBytes(32).toString("hex"))

const sessionShape = /^([0-9a-f]{32})\.([0-9a-f]{64})$/

/** The secret made of a token and the printed URL's login code (default: a fresh one, unknown to anyone). */
export const make = (token: string, loginCode?: string): Effect.Effect<Secret> =>
  Effect.gen(function*() {
    const expected = digest(token)
    const code = loginCode ?? (yield* generate)
    const expectedCode = digest(code)
    const spent = yield* Ref.make(false)
    const matches = (candidate: string): boolean => equal(candidate, expected)
    const mac = (host: string, nonce: string): string =>
      Crypto.createHmac("sha256", token).update(`polyloop-session\nhttp://${host.toLowerCase()}\n${nonce}`, "utf8").digest("hex")
    const sessionFor = (host: string): string => {
      const nonce = Crypto.randomBytes(16).toString("hex")
      return `${nonce}.${mac(host, nonce)}`
    }
    const validSession = (value: string, host: string): Client | undefined => {
      const shape = sessionShape.exec(value)
      if (shape === null) return undefined
      const nonce = shape[1]!
      return Crypto.timingSafeEqual(Buffer.from(mac(host, nonce), "hex"), Buffer.from(shape[2]!, "hex")) ? { _tag: "Session", nonce } : undefined
    }
    return {
      token,
      loginCode: code,
      matches,
      identify: (headers, fromQuery) => {
        const authorization = headers["authorization"]
        if (authorization !== undefined) {
          const bearer = /^Bearer\s+(\S+)\s*$/i.exec(authorization)
          if (bearer !== null && matches(bearer[1]!)) return { _tag: "Bearer" }
        }
        const host = headers["host"] ?? ""
        const session = headers["x-polyloop-session"] ?? fromQuery
        return session === undefined || session === null ? undefined : validSession(session, host)
      },
      exchange: (login, host) => {
        if ("token" in login) return matches(login.token) ? Effect.succeed(sessionFor(host)) : Effect.fail("WrongToken" as const)
        if (!equal(login.login, expectedCode)) return Effect.fail("WrongCode" as const)
        return Ref.modify(spent, (was): readonly [boolean, boolean] => [!was, true]).pipe(
          Effect.flatMap((won) => (won ? Effect.succeed(sessionFor(host)) : Effect.fail("LoginSpent" as const)))
        )
      }
    }
  })
