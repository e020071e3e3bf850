import { describe, expect, inject, it } from "vitest"
import { spawnSync } from "node:child_process"
import * as Path from "node:path"
import { findBinDir } from "./support/pg-server.js"
import { testPgUrl } from "./support/pg-url.js"

describe("the private PostgreSQL test server", () => {
  it("is running on 127.0.0.1 on a non-default port and accepts queries", () => {
    const url = testPgUrl()
    expect(inject("polyloopPgUrl")).toBe(url)
    const parsed = new URL(url)
    expect(parsed.hostname).toBe("127.0.0.1")
    expect(parsed.port).not.toBe("")
    expect(parsed.port).not.toBe("5432")
    const binDir = findBinDir()
    expect(binDir).toBeDefined()
    const psql = spawnSync(Path.join(binDir!, "psql"), [url, "-XAtc", "select current_database() || ' ' || current_setting('listen_addresses')"], {
      encoding: "utf8"
    })
    expect(psql.stderr).toBe("")
    expect(psql.stdout.trim()).toBe(`${parsed.pathname.slice(1)} 127.0.0.1`)
  })
})
