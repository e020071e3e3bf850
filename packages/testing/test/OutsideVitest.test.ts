/**
 * The kit outside vitest: a plain Node process imports `@polyloop/testing` (its root module
 * loads, although vitest cannot be imported there), uses `ScriptedModel`, runs a contract
 * property with `check`, and gets an error that says why when it registers a suite.
 */
import { assert, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import { spawn } from "node:child_process"
import { createRequire } from "node:module"
import * as Path from "node:path"
import { fileURLToPath } from "node:url"

const here = Path.dirname(fileURLToPath(import.meta.url))
const tsx = createRequire(import.meta.url).resolve("tsx")

const runScript = (file: string) =>
  Effect.async<{ readonly code: number | null; readonly stdout: string; readonly stderr: string }>((resume) => {
    // Without vitest's environment: a child of a vitest worker would otherwise inherit VITEST=true.
    const env = Object.fromEntries(Object.entries(process.env).filter(([key]) => !key.startsWith("VITEST")))
    const child = spawn(process.execPath, ["--import", tsx, file], { cwd: here, env, stdio: ["ignore", "pipe", "pipe"] })
    let stdout = ""
    let stderr = ""
    child.stdout.on("data", (chunk: Buffer) => (stdout += chunk.toString("utf8")))
    child.stderr.on("data", (chunk: Buffer) => (stderr += chunk.toString("utf8")))
    child.on("close", (code) => resume(Effect.succeed({ code, stdout, stderr })))
    return Effect.sync(() => child.kill("SIGKILL"))
  })

it.live("@polyloop/testing loads in a plain Node process: ScriptedModel and check work, suite says it needs vitest", () =>
  Effect.gen(function*() {
    const { code, stderr, stdout } = yield* runScript(Path.join(here, "fixtures", "outside-vitest.ts"))
    assert.strictEqual(code, 0, `${stdout}\n${stderr}`)
    const lines = stdout.trim().split("\n")
    assert.strictEqual(lines[0], "reply: hello from the script")
    assert.strictEqual(lines[1], "prefix passed: true")
    assert.match(lines[2] ?? "", /^suite: the suite "RunLogStore contract: outside" registers vitest tests: call it in a test file that vitest runs \(here @effect\/vitest cannot be loaded: .+\)\. Outside vitest, run each property/)
  }), 60_000)
