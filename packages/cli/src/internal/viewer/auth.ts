/**
 * The secret of one start of `polyloop serve` (design 0340): a random token printed in the
 * page's URL (`/?token=…`), exchanged for an `HttpOnly; SameSite=Strict` cookie named after the
 * token's hash (two viewers on one host keep their own), or sent by scripts as
 * `Authorization: Bearer <token>`. Compared in constant time.
 *
 * @internal
 */
import * as Effect from "effect/Effect"
import * as Crypto from "node:crypto"

/** A server's secret and the name of its cookie. */
export interface Secret {
  readonly token: string
  readonly cookieName: string
  /** Does this request carry the token (cookie or bearer)? */
  readonly accepts: (headers: Readonly<Record<string, string | undefined>>) => boolean
  /** Is this text the token? */
  readonly matches: (candidate: string) => boolean
  /** The `Set-Cookie` value that keeps the token in the browser. */
  readonly setCookie: string
}

const digest = (text: string): Buffer => Crypto.createHash("sha256").update(text, "utf8").digest()

/** A fresh 256-bit token, as 64 hex digits. */
export const generate: Effect.Effect<string> = Effect.sync(() => Crypto.randomBytes(32).toString("hex"))

/** The cookies of a `Cookie` header, by name (the first of a repeated name wins). */
export const cookies = (header: string | undefined): ReadonlyMap<string, string> => {
  const found = new Map<string, string>()
  for (const part of (header ?? "").split(";")) {
    const eq = part.indexOf("=")
    if (eq < 0) continue
    const name = part.slice(0, eq).trim()
    if (name !== "" && !found.has(name)) found.set(name, part.slice(eq + 1).trim())
  }
  return found
}

/** The secret made of a token. */
export const make = (token: string): Secret => {
  const expected = digest(token)
  const matches = (candidate: string): boolean => Crypto.timingSafeEqual(digest(candidate), expected)
  const cookieName = `polyloop-${expected.toString("hex").slice(0, 12)}`
  return {
    token,
    cookieName,
    matches,
    accepts: (headers) => {
      const authorization = headers["authorization"]
      if (authorization !== undefined) {
        const bearer = /^Bearer\s+(\S+)\s*$/i.exec(authorization)
        if (bearer !== null && matches(bearer[1]!)) return true
      }
      const fromCookie = cookies(headers["cookie"]).get(cookieName)
      return fromCookie !== undefined && matches(fromCookie)
    },
    setCookie: `${cookieName}=${token}; HttpOnly; SameSite=Strict; Path=/`
  }
}
