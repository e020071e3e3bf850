/**
 * Issue 43, item 9: a code run is reproducible. Python is started so that `PYTHONHASHSEED=0`
 * applies (design 0331, decision 8): a run whose code prints a set and a string's hash, replayed
 * with `Replay.run` by another executor (another interpreter), is `Identical` — under `python3 -I`
 * the set's order and the hash differed between interpreters and the replay diverged.
 */
import { assert, beforeAll, describe, it } from "@effect/vitest"
import * as Agent from "@polyloop/core/Agent"
import * as AgentDefinition from "@polyloop/core/AgentDefinition"
import * as CodeBlockParser from "@polyloop/core/CodeBlockParser"
import * as EventSink from "@polyloop/core/EventSink"
import { runId } from "@polyloop/core/Ids"
import * as Replay from "@polyloop/core/Replay"
import { RunLogStore } from "@polyloop/core/RunLogStore"
import * as RunLogStoreModule from "@polyloop/core/RunLogStore"
import * as ToolRegistry from "@polyloop/core/ToolRegistry"
import * as Sandbox from "@polyloop/sandbox/Sandbox"
import * as ScriptedModel from "@polyloop/testing/ScriptedModel"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { ensureTools } from "./support.js"

const root = fs.mkdtempSync(path.join(os.tmpdir(), "polyloop-sandbox-replay-"))
fs.chmodSync(root, 0o711)

const agent = AgentDefinition.make({ name: "hasher", systemPrompt: "You act by Python code blocks.", budget: { maxSteps: 4 } })

const script: ReadonlyArray<ScriptedModel.Scripted> = [
  ScriptedModel.code("python", "words = {'alpha', 'beta', 'gamma', 'delta', 'epsilon', 'zeta'}\nprint(list(words), hash('abc'))"),
  ScriptedModel.code("python", "final_answer(sorted(words, key=hash)[0])")
]
const model = ScriptedModel.layer((request) => script[Math.min(script.length - 1, request.messages.filter((m) => m._tag === "Assistant").length)]!)

/** The code services with a sandbox of their own (a new interpreter), over the store given. */
const services = Layer.mergeAll(model, CodeBlockParser.layer({ language: "python" }), EventSink.layerNoop, Sandbox.layer({ languages: ["python"], root, wallTime: "10 seconds" }))

beforeAll(() => ensureTools(), 600_000)

describe("a code run replays identically", () => {
  it.live("Replay.run of a run whose code prints a set and a hash says Identical", () =>
    Effect.gen(function*() {
      const store = yield* RunLogStore
      yield* Agent.run({ runId: runId("recorded"), agent, task: "Hash some words.", tools: ToolRegistry.empty }).pipe(
        Effect.provide(Layer.provide(services, Layer.succeed(RunLogStore, store))),
        Effect.provideService(RunLogStore, store)
      )
      const recorded = yield* store.readLog(runId("recorded"))
      assert.strictEqual(recorded.results.length, 2)
      const comparison = yield* Replay.run({ recorded, request: { runId: runId("replayed"), agent, task: "Hash some words.", tools: ToolRegistry.empty } }).pipe(
        Effect.provide(Layer.provide(Layer.mergeAll(CodeBlockParser.layer({ language: "python" }), EventSink.layerNoop, Sandbox.layer({ languages: ["python"], root, wallTime: "10 seconds" })), Layer.succeed(RunLogStore, store))),
        Effect.provideService(RunLogStore, store)
      )
      assert.strictEqual(comparison._tag, "Identical", JSON.stringify(comparison))
    }).pipe(Effect.provide(RunLogStoreModule.layerMemory), Effect.scoped), 120_000)
})
