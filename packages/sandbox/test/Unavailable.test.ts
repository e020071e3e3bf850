/**
 * Building the sandbox fails with a typed `SandboxUnavailable` that says what is missing — no
 * bubblewrap, no interpreter, a CPU limit that cannot be set, a store without blobs — and the
 * unisolated mode runs only when it is named (`isolation: "none"`), with the same protocol,
 * limits and statuses.
 */
import { assert, beforeAll, describe, it } from "@effect/vitest"
import * as RunLogStore from "@polyloop/core/RunLogStore"
import * as Sandbox from "@polyloop/sandbox/Sandbox"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { ensureTools, run, testOptions } from "./support.js"

beforeAll(ensureTools, 600_000)

const build = (options: Sandbox.Options, store: Layer.Layer<RunLogStore.RunLogStore> = RunLogStore.layerMemory) =>
  Effect.flip(Layer.build(Sandbox.layer(options).pipe(Layer.provide(store))))

describe("Sandbox.layer", () => {
  it.scopedLive("without bubblewrap: SandboxUnavailable { missing: bubblewrap }", () =>
    Effect.gen(function*() {
      const error = yield* build({ bwrap: "/no/such/bwrap" })
      assert.strictEqual(error._tag, "SandboxUnavailable")
      assert.strictEqual(error.missing, "bubblewrap")
      assert.include(error.message, "/no/such/bwrap")
      assert.include(error.message, "apt-get install bubblewrap")
    }))

  it.scopedLive("without the interpreter: SandboxUnavailable { missing: interpreter }", () =>
    Effect.gen(function*() {
      const error = yield* build({ python: "/no/such/python3" })
      assert.strictEqual(error.missing, "interpreter")
      assert.include(error.detail, "/no/such/python3")
    }))

  it.scopedLive("a sandbox that cannot start (bwrap refuses its arguments): SandboxUnavailable with what bwrap said", () =>
    Effect.gen(function*() {
      const error = yield* build({ bwrap: "/bin/false" })
      assert.strictEqual(error._tag, "SandboxUnavailable")
      assert.include(error.detail, "exited before it was ready")
    }))

  it.scopedLive("user namespaces refused (a bwrap that says so): SandboxUnavailable { missing: user namespaces } with its words", () =>
    Effect.gen(function*() {
      const dir = fs.mkdtempSync(path.join(os.tmpdir(), "polyloop-fake-bwrap-"))
      fs.chmodSync(dir, 0o755)
      const fake = path.join(dir, "bwrap")
      fs.writeFileSync(fake, "#!/bin/sh\necho 'bwrap: setting up uid map: Permission denied' >&2\nexit 1\n", { mode: 0o755 })
      const error = yield* build({ bwrap: fake })
      fs.rmSync(dir, { recursive: true, force: true })
      assert.strictEqual(error.missing, "user namespaces")
      assert.include(error.detail, "setting up uid map: Permission denied")
    }))

  it.scopedLive("a host that may not set the interpreter's CPU limit (a prlimit that refuses --pid): SandboxUnavailable { missing: prlimit } with its words", () =>
    Effect.gen(function*() {
      const dir = fs.mkdtempSync(path.join(os.tmpdir(), "polyloop-fake-prlimit-"))
      fs.chmodSync(dir, 0o755)
      const fake = path.join(dir, "prlimit")
      fs.writeFileSync(fake, "#!/bin/sh\nif [ \"$1\" = --pid ]; then echo 'prlimit: failed to set the CPU resource limit: Operation not permitted' >&2; exit 1; fi\nexec /usr/bin/prlimit \"$@\"\n", { mode: 0o755 })
      const error = yield* build({ isolation: "none", prlimit: fake })
      fs.rmSync(dir, { recursive: true, force: true })
      assert.strictEqual(error.missing, "prlimit")
      assert.include(error.detail, "Operation not permitted")
    }))

  it.scopedLive("a store without blobs: SandboxUnavailable { missing: blob store }", () =>
    Effect.gen(function*() {
      const { blobs: _, ...withoutBlobs } = RunLogStore.make(RunLogStore.makeMemoryBackend())
      const error = yield* build({}, Layer.succeed(RunLogStore.RunLogStore, withoutBlobs))
      assert.strictEqual(error.missing, "blob store")
    }))

  it.live("isolation: \"none\", named explicitly, runs the same protocol without namespaces", () =>
    Effect.gen(function*() {
      const outcome = yield* run("plain", 0, "import os\nx = 1\nprint(os.getcwd().endswith('/workspace'), os.path.exists('/etc/passwd'))")
      assert.strictEqual(outcome.status, "Executed")
      assert.strictEqual(outcome.observation, "True True")
      const next = yield* run("plain", 1, "print(x + 1)\nraise KeyError('k')")
      assert.include(next.observation, "2\nTraceback")
      assert.include(next.observation, "KeyError: 'k'")
    }).pipe(Effect.provide(Sandbox.layer({ ...testOptions, isolation: "none" }).pipe(Layer.provide(RunLogStore.layerMemory)))))
})
