/**
 * Which addresses `polyloop serve` treats as loopback, and which `Host` headers it answers while
 * bound to loopback (internal/viewer/address.ts); the checks on requests that change something
 * (internal/viewer/decisions.ts).
 */
import { assert, describe, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Address from "../src/internal/viewer/address.js"
import * as Decisions from "../src/internal/viewer/decisions.js"

describe("viewer addresses", () => {
  it("knows loopback IPs, v4 and v6, mapped or not", () => {
    for (const ip of ["127.0.0.1", "127.1.2.3", "::1", "0:0:0:0:0:0:0:1", "::ffff:127.0.0.1"]) assert.isTrue(Address.isLoopbackIp(ip), ip)
    for (const ip of ["0.0.0.0", "::", "10.0.0.1", "192.168.1.1", "::ffff:10.0.0.1", "128.0.0.1", "localhost", "127.0.0.1.example"]) {
      assert.isFalse(Address.isLoopbackIp(ip), ip)
    }
  })

  it.effect("resolves addresses to themselves and localhost to loopback, without a lookup", () =>
    Effect.gen(function*() {
      assert.deepStrictEqual(yield* Address.resolve("10.1.2.3"), ["10.1.2.3"])
      assert.deepStrictEqual(yield* Address.resolve("[::1]"), ["::1"])
      assert.deepStrictEqual(yield* Address.resolve("LocalHost"), ["127.0.0.1", "::1"])
    }))

  it("reads the host of a Host header, with or without a port, bracketed IPv6", () => {
    assert.strictEqual(Address.hostOfHeader("127.0.0.1:7420"), "127.0.0.1")
    assert.strictEqual(Address.hostOfHeader("[::1]:7420"), "::1")
    assert.strictEqual(Address.hostOfHeader("[::1]"), "::1")
    assert.strictEqual(Address.hostOfHeader("Example.COM"), "example.com")
  })

  it("answers loopback Host headers only (DNS rebinding gets a foreign name)", () => {
    for (const header of ["127.0.0.1:80", "localhost:7420", "LOCALHOST", "[::1]:1", "viewer.localhost:7420", "mybox:7420"]) {
      assert.isTrue(Address.isLoopbackHostHeader(header, "mybox"), header)
    }
    for (const header of [undefined, "", "attacker.example:7420", "localhost.attacker.example", "10.0.0.1:7420", "127.0.0.1.nip.io"]) {
      assert.isFalse(Address.isLoopbackHostHeader(header, "127.0.0.1"), String(header))
    }
  })
})

describe("viewer decisions: what may change something", () => {
  const own = { "content-type": "application/json", host: "127.0.0.1:7420" }
  it("takes JSON from the viewer's own page, or from a script that names no origin", () => {
    assert.isUndefined(Decisions.refusal(own))
    assert.isUndefined(Decisions.refusal({ ...own, "content-type": "application/json; charset=utf-8" }))
    assert.isUndefined(Decisions.refusal({ ...own, origin: "http://127.0.0.1:7420", "sec-fetch-site": "same-origin" }))
  })

  it("refuses other content types, other sites and opaque origins", () => {
    assert.strictEqual(Decisions.refusal({ ...own, "content-type": "text/plain" })?.status, 415)
    assert.strictEqual(Decisions.refusal({ host: own.host })?.status, 415)
    assert.strictEqual(Decisions.refusal({ ...own, origin: "http://127.0.0.1:9999" })?.status, 403)
    assert.strictEqual(Decisions.refusal({ ...own, origin: "null" })?.status, 403)
    assert.strictEqual(Decisions.refusal({ ...own, origin: "not a url" })?.status, 403)
    assert.strictEqual(Decisions.refusal({ ...own, "sec-fetch-site": "same-site" })?.status, 403)
    assert.strictEqual(Decisions.refusal({ ...own, "sec-fetch-site": "cross-site" })?.status, 403)
  })
})
