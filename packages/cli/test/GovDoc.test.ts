/**
 * The GovDoc-like toolset's idempotency ledger (`GovDoc.ts`): a write is applied once per
 * idempotency key, and a ledger that cannot be read is a broken environment (`EnvError`), never
 * a guess that nothing was applied.
 */
import { assert, describe, it } from "@effect/vitest"
import * as FileSystem from "@effect/platform/FileSystem"
import * as NodeFileSystem from "@effect/platform-node/NodeFileSystem"
import * as Action from "@polyloop/core/Action"
import * as Effect from "effect/Effect"
import * as path from "node:path"
import * as GovDoc from "../src/GovDoc.js"

const append = (text: string, id = "call_1") =>
  Action.ToolCall.make({ id, name: "append_to_file", arguments: { path: "CHANGELOG.md", text } })

/** A seeded workspace in a temporary directory, removed with the scope. */
const workspace = Effect.gen(function*() {
  const fs = yield* FileSystem.FileSystem
  const root = yield* fs.makeTempDirectoryScoped({ prefix: "polyloop-govdoc-test-" })
  yield* GovDoc.seed(root)
  const executor = yield* GovDoc.makeTools(root).executor()
  return { fs, root, executor, ledgerPath: path.join(root, GovDoc.ledgerFile) }
})

describe("GovDoc ledger", () => {
  it.scoped("a write is recorded in the ledger under its idempotency key, and the same key is not applied twice", () =>
    Effect.gen(function*() {
      const { executor, fs, root } = yield* workspace
      const first = yield* executor.execute(append("- one"))
      assert.strictEqual(first.status, "Executed")
      assert.strictEqual(first.observation, "appended 1 line to CHANGELOG.md")
      const again = yield* executor.execute(append("- one"))
      assert.strictEqual(again.status, "Executed")
      assert.include(again.observation, "already applied")
      const entries = yield* GovDoc.ledger(root)
      assert.deepStrictEqual(entries.map((entry) => [entry.tool, entry.path]), [["append_to_file", "CHANGELOG.md"]])
      const changelog = yield* fs.readFileString(path.join(root, "CHANGELOG.md"))
      assert.strictEqual(changelog.split("- one").length - 1, 1)
    }).pipe(Effect.provide(NodeFileSystem.layer)))

  it.scoped("a corrupt ledger line is CorruptLedger naming the file and line; a write over it is EnvError and changes nothing", () =>
    Effect.gen(function*() {
      const { executor, fs, ledgerPath, root } = yield* workspace
      const good = JSON.stringify({ key: "k-1", tool: "append_to_file", path: "CHANGELOG.md" })
      yield* fs.writeFileString(ledgerPath, `${good}\n\n{"key": "k-2", "tool": "append_to_fi\n`)
      const error = yield* Effect.flip(GovDoc.ledger(root))
      assert.strictEqual(error._tag, "CorruptLedger")
      if (error._tag === "CorruptLedger") {
        assert.strictEqual(error.file, ledgerPath)
        assert.strictEqual(error.line, 3)
        assert.include(error.message, `${ledgerPath} is corrupt at line 3`)
      }
      const before = yield* fs.readFileString(path.join(root, "CHANGELOG.md"))
      const outcome = yield* executor.execute(append("- two"))
      assert.strictEqual(outcome.status, "EnvError")
      assert.include(outcome.observation, `the idempotency ledger ${ledgerPath} is corrupt at line 3`)
      assert.strictEqual(yield* fs.readFileString(path.join(root, "CHANGELOG.md")), before, "the write was not applied")
    }).pipe(Effect.provide(NodeFileSystem.layer)))

  it.scoped("a ledger line that is JSON but not an entry is corrupt too", () =>
    Effect.gen(function*() {
      const { fs, ledgerPath, root } = yield* workspace
      yield* fs.writeFileString(ledgerPath, `${JSON.stringify({ key: 7 })}\n`)
      const read = yield* Effect.flip(GovDoc.ledger(root))
      assert.strictEqual(read._tag, "CorruptLedger")
      assert.include(read.message, "at line 1")
    }).pipe(Effect.provide(NodeFileSystem.layer)))
})
