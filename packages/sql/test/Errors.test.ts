/**
 * How driver failures become `StoreError` reasons: by the driver's code (SQLite, PostgreSQL
 * SQLSTATE, Node's network codes), or — for the PostgreSQL pool's own failures, which carry no
 * code — by their message.
 */
import { assert, describe, it } from "@effect/vitest"
import { SqlError } from "@effect/sql/SqlError"
import { storeError } from "../src/internal/errors.js"

const failure = (cause: unknown) => new SqlError({ cause, message: "Failed to execute statement" })
const reasonOf = (cause: unknown) => storeError(failure(cause), { operation: "testing" }).reason

describe("driver failures as StoreError reasons", () => {
  it("the network carrying no connection: Unavailable", () => {
    for (const code of ["ECONNREFUSED", "ECONNRESET", "ETIMEDOUT", "EHOSTUNREACH", "ENOTFOUND", "EPIPE"]) {
      assert.strictEqual(reasonOf(Object.assign(new Error(`connect ${code}`), { code })), "Unavailable", code)
    }
  })

  it("the PostgreSQL pool's own failures, which have no code: Unavailable", () => {
    assert.strictEqual(reasonOf(new Error("timeout exceeded when trying to connect")), "Unavailable")
    assert.strictEqual(reasonOf(new Error("Connection terminated unexpectedly")), "Unavailable")
    assert.strictEqual(reasonOf(new Error("Connection terminated due to connection timeout")), "Unavailable")
  })

  it("codes keep their meaning; an unknown failure stays Unknown", () => {
    assert.strictEqual(reasonOf({ code: "SQLITE_FULL" }), "DiskFull")
    assert.strictEqual(reasonOf({ code: "SQLITE_BUSY" }), "Unavailable")
    assert.strictEqual(reasonOf({ code: "57P01" }), "Unavailable")
    assert.strictEqual(reasonOf({ code: "25006" }), "ReadOnly")
    assert.strictEqual(reasonOf(new Error("something else entirely")), "Unknown")
    assert.strictEqual(reasonOf({ code: "EWHATEVER" }), "Unknown")
  })

  it("PostgreSQL's protocol violation (08P01: a statement the server refuses, e.g. over 65,535 parameters) is not Unavailable: retrying cannot help", () => {
    assert.strictEqual(reasonOf({ code: "08P01" }), "Unknown")
    // The rest of class 08 is a connection that is gone or cannot be had.
    for (const code of ["08000", "08001", "08003", "08004", "08006"]) assert.strictEqual(reasonOf({ code }), "Unavailable", code)
  })

  it("a table or column of the store that is gone (SQLite's plain SQLITE_ERROR): SchemaVersion, as on PostgreSQL", () => {
    assert.strictEqual(reasonOf({ code: "SQLITE_ERROR", message: "no such table: polyloop_records" }), "SchemaVersion")
    assert.strictEqual(reasonOf({ code: "SQLITE_ERROR", message: "no such column: payload" }), "SchemaVersion")
    assert.strictEqual(reasonOf({ code: "42P01" }), "SchemaVersion")
    assert.strictEqual(reasonOf({ code: "SQLITE_ERROR", message: "near \"SELEC\": syntax error" }), "Unknown")
  })
})
