/**
 * Which addresses `polyloop serve` treats as loopback, and which `Host` headers it answers while
 * bound to loopback (internal/viewer/address.ts); the checks on requests that change something
 * (internal/viewer/decisions.ts).
 */
import { assert, describe, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Address from "../src/internal/viewer/address.js"
import * as Decisions from "../src/internal/viewer/decisions.js"
import * as Prices from "../src/internal/viewer/prices.js"

describe("viewer addresses", () => {
  it("knows loopback IPs, v4 and v6, mapped or not", () => {
    for (const ip of ["127.0.0.1", "127.1.2.3", "::1", "0:0:0:0:0:0:0:1", "::ffff:127.0.0.1", "0::1", "[0::1]", "::ffff:7f00:1", "0000::0001"]) {
      assert.isTrue(Address.isLoopbackIp(ip), ip)
    }
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

describe("viewer hosts: normalised before they are compared (design 0340)", () => {
  it("normalises addresses and names as the browser does", () => {
    const cases: ReadonlyArray<readonly [string, string | undefined]> = [
      ["0::1", "::1"],
      ["[0:0::1]", "::1"],
      ["::ffff:127.0.0.1", "::ffff:7f00:1"],
      ["127.1", "127.0.0.1"],
      ["0x7f.0.0.1", "127.0.0.1"],
      ["2130706433", "127.0.0.1"],
      ["LocalHost.", "localhost"],
      ["Viewer.Example.COM", "viewer.example.com"],
      ["evil@127.0.0.1", undefined],
      ["a b", undefined],
      ["", undefined]
    ]
    for (const [host, normal] of cases) assert.strictEqual(Address.normaliseHost(host), normal, host)
  })

  it("reads Host headers strictly: name[:port] or [v6][:port], nothing else", () => {
    assert.deepStrictEqual(Address.parseHostHeader("[0::1]:7420"), { host: "::1", port: 7420 })
    assert.deepStrictEqual(Address.parseHostHeader("127.1"), { host: "127.0.0.1", port: undefined })
    for (const header of ["evil.example@127.0.0.1", "127.0.0.1/x", "127.0.0.1:99999", "127.0.0.1:", "a b", "[::1", undefined]) {
      assert.isUndefined(Address.parseHostHeader(header), String(header))
    }
  })

  it("allows loopback, the bound address (normalised) and the named hosts, whatever the bound address", () => {
    const exposed = Address.allowlist("10.1.2.3", ["Viewer.Example.com."])
    for (const header of ["10.1.2.3:7420", "viewer.example.com:7420", "localhost:7420", "[::1]:7420", "127.0.0.1"]) {
      assert.isTrue(Address.isAllowedHostHeader(header, exposed), header)
    }
    for (const header of ["evil.example:7420", "10.1.2.4:7420", "viewer.example.com.evil.example", undefined]) {
      assert.isFalse(Address.isAllowedHostHeader(header, exposed), String(header))
    }
    const v6 = Address.allowlist("0::1")
    assert.isTrue(Address.isAllowedHostHeader("[::1]:80", v6))
    assert.isFalse(Address.isAllowedHostHeader("evil.example", v6))
  })
})

describe("viewer decisions: what may change something", () => {
  const own = { "content-type": "application/json", "content-length": "120", host: "127.0.0.1:7420" }
  it("takes JSON from the viewer's own page, or from a script that names no origin", () => {
    assert.isUndefined(Decisions.refusal(own))
    assert.isUndefined(Decisions.refusal({ ...own, "content-type": "application/json; charset=utf-8" }))
    assert.isUndefined(Decisions.refusal({ ...own, origin: "http://127.0.0.1:7420", "sec-fetch-site": "same-origin" }))
  })

  it("refuses other content types, other sites and opaque origins", () => {
    assert.strictEqual(Decisions.refusal({ ...own, "content-type": "text/plain" })?.status, 415)
    assert.strictEqual(Decisions.refusal({ host: own.host })?.status, 415)
    assert.strictEqual(Decisions.refusal({ "content-type": "application/json", host: own.host })?.status, 411, "no stated length")
    assert.strictEqual(Decisions.refusal({ ...own, origin: "http://127.0.0.1:9999" })?.status, 403)
    assert.strictEqual(Decisions.refusal({ ...own, origin: "null" })?.status, 403)
    assert.strictEqual(Decisions.refusal({ ...own, origin: "not a url" })?.status, 403)
    assert.strictEqual(Decisions.refusal({ ...own, "sec-fetch-site": "same-site" })?.status, 403)
    assert.strictEqual(Decisions.refusal({ ...own, "sec-fetch-site": "cross-site" })?.status, 403)
    // The Origin is the attacker's own Host (DNS rebinding): equal, but not an allowed host.
    assert.strictEqual(Decisions.refusal({ ...own, host: "evil.example:7420", origin: "http://evil.example:7420" })?.status, 403)
    assert.strictEqual(Decisions.refusal({ ...own, origin: "https://127.0.0.1:7420" })?.status, 403)
  })

  it("refuses a body too large by its content-length, before reading it", () => {
    assert.strictEqual(Decisions.refusal({ ...own, "content-length": String(Decisions.maxBodyBytes + 1) })?.status, 413)
    assert.strictEqual(Decisions.refusal({ ...own, "content-length": "12abc" })?.status, 413)
    assert.isUndefined(Decisions.refusal({ ...own, "content-length": String(Decisions.maxBodyBytes) }))
  })

  it("records the page's name as a claim next to the server's identity", () => {
    assert.strictEqual(Decisions.recordedBy(undefined, "alice via polyloop serve"), "alice via polyloop serve")
    assert.strictEqual(Decisions.recordedBy("  ", "alice via polyloop serve"), "alice via polyloop serve")
    assert.strictEqual(Decisions.recordedBy("Grace", "alice via polyloop serve"), "Grace (named on the page; served as alice via polyloop serve)")
  })
})

describe("viewer prices: the table of --prices", () => {
  it("reads a table (currency default USD) and prices tokens by model, * for the rest", () => {
    const table = Prices.decode(JSON.stringify({ models: { "gpt-4o": { input: 2.5, output: 10 }, "*": { input: 1, output: 2 } } }))
    assert.isFalse(typeof table === "string", String(table))
    if (typeof table === "string") return
    assert.strictEqual(table.currency, "USD")
    assert.strictEqual(Prices.cost(table, "gpt-4o", { input: 1_000_000, output: 500_000 }), 7.5)
    assert.strictEqual(Prices.cost(table, "other", { input: 1_000_000, output: 1_000_000 }), 3)
    assert.strictEqual(Prices.cost(table, undefined, { input: 0, output: 1_000_000 }), 2)
    const strict = Prices.decode(JSON.stringify({ models: { a: { input: 1, output: 1 } } }))
    assert.isUndefined(typeof strict === "string" ? 0 : Prices.cost(strict, "b", { input: 1, output: 1 }), "no price for b, and no *")
  })

  it("says in one line what is wrong with a table that is not one", () => {
    for (const text of ["{", JSON.stringify({ models: { a: { input: -1, output: 1 } } }), JSON.stringify({ models: {}, extra: 1 }), "[]"]) {
      const decoded = Prices.decode(text)
      assert.isString(decoded, text)
      assert.notInclude(String(decoded), "\n")
    }
  })
})
