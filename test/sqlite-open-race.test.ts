/**
 * Many processes opening one brand-new SQLite file at the same moment: each must wait for the
 * others and succeed, as the migration does. Every process switches the new file to WAL, which
 * takes the file's exclusive lock; SQLite does not call the busy handler for that upgrade when
 * another connection holds the shared lock, so without a retry the loser failed at once with
 * `StoreError(Unavailable) … database is locked [SQLITE_BUSY]` (about once in 90 two-process
 * attempts, and at almost every round of eight).
 *
 * Children are started from a compiled bundle (`support/bundle.ts`), print `ready` once loaded,
 * and open the store when the test writes a line to all of them at once.
 */
import { assert, describe, it } from "@effect/vitest"
import { runId } from "@polyloop/core/Ids"
import * as RunLog from "@polyloop/core/RunLog"
import * as RunLogStore from "@polyloop/core/RunLogStore"
import * as SqlRunLogStore from "@polyloop/sql/SqlRunLogStore"
import * as Effect from "effect/Effect"
import { spawn } from "node:child_process"
import { createRequire } from "node:module"
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import { fileURLToPath } from "node:url"
import { bundle } from "./support/bundle.js"

const here = Path.dirname(fileURLToPath(import.meta.url))
const driver = createRequire(import.meta.url).resolve("better-sqlite3")

/**
 * Another process holding the brand-new file's RESERVED lock (`BEGIN IMMEDIATE`) for
 * `millis`, or until `release()` is called, as a process in the middle of its own switch to WAL
 * does: a connection that then switches the file to WAL gets `SQLITE_BUSY` at once, whatever its
 * busy timeout.
 */
const holdLock = (file: string, millis: number | "until released") => {
  const release = `() => { db.exec("COMMIT"); db.close(); process.stdout.write("released\\n") }`
  const code = `const Database = require(process.argv[1]); const db = new Database(process.argv[2]);
db.exec("BEGIN IMMEDIATE"); process.stdout.write("held\\n");
${millis === "until released" ? `process.stdin.once("data", ${release})` : `setTimeout(${release}, ${millis})`}`
  const child = spawn(process.execPath, ["-e", code, driver, file], { stdio: ["pipe", "pipe", "inherit"] })
  let out = ""
  child.stdout.setEncoding("utf8")
  const held = new Promise<void>((resolve, reject) => {
    child.stdout.on("data", (chunk: string) => {
      out += chunk
      if (out.includes("held\n")) resolve()
    })
    child.on("close", () => reject(new Error(`the lock holder exited early: ${out}`)))
  })
  const exited = new Promise<string>((resolve) => child.on("close", () => resolve(out)))
  return { held, exited, release: () => child.stdin.end("release\n") }
}

interface Outcome {
  readonly line: string
  readonly stderr: string
  readonly code: number | null
}

/** Starts `count` children on `file`, releases them together once all are ready, and collects their results. */
const race = async (script: string, file: string, count: number): Promise<ReadonlyArray<Outcome>> => {
  const children = Array.from({ length: count }, (_, i) => {
    const child = spawn(process.execPath, [script, file, `race-${i}`], { stdio: ["pipe", "pipe", "pipe"] })
    let stdout = ""
    let stderr = ""
    let onReady: () => void = () => {}
    const ready = new Promise<void>((resolve) => {
      onReady = resolve
    })
    child.stdout.setEncoding("utf8")
    child.stdout.on("data", (chunk: string) => {
      stdout += chunk
      if (stdout.startsWith("ready\n")) onReady()
    })
    child.stderr.setEncoding("utf8")
    child.stderr.on("data", (chunk: string) => {
      stderr += chunk
    })
    const exited = new Promise<Outcome>((resolve) => {
      child.on("close", (code) => {
        onReady()
        resolve({ line: stdout.replace(/^ready\n/, "").trim(), stderr, code })
      })
    })
    return { child, ready, exited }
  })
  await Promise.all(children.map((c) => c.ready))
  for (const c of children) c.child.stdin.end("go\n")
  return Promise.all(children.map((c) => c.exited))
}

describe.sequential("SQLite: opening one brand-new file from many processes at once", () => {
  it("an open that meets the file locked by another process's switch to WAL waits for it and succeeds", async () => {
    const dir = Fs.mkdtempSync(Path.join(Os.tmpdir(), "polyloop-open-locked-"))
    try {
      const file = Path.join(dir, "fresh.db")
      const holder = holdLock(file, 1_000)
      await holder.held
      const id = runId("after-the-lock")
      const size = await Effect.runPromise(
        Effect.gen(function*() {
          const store = yield* RunLogStore.RunLogStore
          yield* store.start({
            _tag: "RunStarted",
            seq: 0,
            runId: id,
            task: "open a locked file",
            snapshot: {},
            snapshotHash: "0".repeat(64),
            startedAt: 0
          })
          return RunLog.size(yield* store.readLog(id))
        }).pipe(Effect.provide(SqlRunLogStore.layerSqlite({ filename: file, busyTimeout: "60 seconds" })))
      )
      assert.strictEqual(size, 1)
      assert.include(await holder.exited, "released", "the open waited for the holder to let go")
    } finally {
      Fs.rmSync(dir, { recursive: true, force: true })
    }
  }, 120_000)

  it("an open gives up with Unavailable when the lock is held longer than the busy timeout", async () => {
    const dir = Fs.mkdtempSync(Path.join(Os.tmpdir(), "polyloop-open-locked-"))
    try {
      const file = Path.join(dir, "fresh.db")
      // Held until the open has given up: a stall of this process cannot outlast the lock.
      const holder = holdLock(file, "until released")
      await holder.held
      const result = await Effect.runPromise(
        Effect.either(Effect.provide(RunLogStore.RunLogStore, SqlRunLogStore.layerSqlite({ filename: file, busyTimeout: "300 millis" })))
      )
      assert.strictEqual(result._tag, "Left")
      if (result._tag === "Left") {
        assert.strictEqual(result.left._tag, "StoreError")
        assert.strictEqual(result.left.reason, "Unavailable")
        assert.include(result.left.message, "SQLITE_BUSY")
      }
      holder.release()
      assert.include(await holder.exited, "released")
    } finally {
      Fs.rmSync(dir, { recursive: true, force: true })
    }
  }, 120_000)

  it("every process waits for the others and opens the store; every run is written", async () => {
    const script = await bundle(Path.join(here, "support", "open-race-child.ts"))
    const dir = Fs.mkdtempSync(Path.join(Os.tmpdir(), "polyloop-open-race-"))
    const rounds = 4
    const processes = 6
    const failures: Array<string> = []
    try {
      for (let round = 0; round < rounds; round++) {
        const file = Path.join(dir, `race-${round}.db`)
        const outcomes = await race(script, file, processes)
        outcomes.forEach((outcome, i) => {
          if (outcome.line !== "{\"ok\":true}") {
            failures.push(`round ${round}, process ${i}: ${outcome.line || `no result (exit ${outcome.code}): ${outcome.stderr.slice(0, 500)}`}`)
          }
        })
      }
      assert.deepStrictEqual(failures, [], `${failures.length} of ${rounds * processes} opens failed`)
    } finally {
      Fs.rmSync(dir, { recursive: true, force: true })
    }
  }, 300_000)
})
