/**
 * The executor contract of `@polyloop/testing` on the sandbox executor: every code action gets a
 * valid outcome with a status SPEC §5.1 allows (Python code of any text: `Executed`, a syntax
 * error included; a tool call or another language: `NotExecuted`), `replayPolicy` is total and
 * stable, and interrupting a blocking program (`time.sleep`) passes through. The `Probe` the
 * suite watches is signalled around the sandbox's own `execute` of that program.
 */
import { beforeAll } from "@effect/vitest"
import * as NodeContext from "@effect/platform-node/NodeContext"
import type { Action } from "@polyloop/core/Action"
import * as RunLogStore from "@polyloop/core/RunLogStore"
import * as Sandbox from "@polyloop/sandbox/Sandbox"
import * as ActionExecutorContract from "@polyloop/testing/ActionExecutorContract"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as FastCheck from "effect/FastCheck"
import * as Layer from "effect/Layer"
import { ensureTools, testOptions } from "./support.js"

beforeAll(ensureTools, 600_000)

const blockingAction: Action = { _tag: "CodeAction", language: "python", code: "import time\ntime.sleep(1000)" }

const executor = Effect.gen(function*() {
  const probe = yield* ActionExecutorContract.Probe
  const inner = yield* Sandbox.make({ ...testOptions, languages: ["python"] }).pipe(
    Effect.provide(Layer.merge(RunLogStore.layerMemory, NodeContext.layer))
  )
  return {
    ...inner,
    execute: (action: Action) =>
      action === blockingAction
        ? Deferred.succeed(probe.started, undefined).pipe(
          Effect.zipRight(inner.execute(action)),
          Effect.ensuring(Deferred.succeed(probe.finalized, undefined))
        )
        : inner.execute(action)
  }
})

const code = (language: string, source: string) => ({ _tag: "CodeAction" as const, language, code: source })

ActionExecutorContract.suite("Sandbox.make (python, bubblewrap)", executor, {
  cases: [
    { action: code("python", "print(1 + 1)"), expect: ["Executed"], label: "a program" },
    { action: code("py", "raise ValueError('no')"), expect: ["Executed"], label: "a program that raises" },
    { action: code("python", "import sys\nsys.exit(3)"), expect: ["Executed"], label: "a program that exits non-zero" },
    { action: code("python", "final_answer(42)"), expect: ["Executed"], label: "final_answer" },
    { action: { _tag: "ToolCall", id: "c", name: "search", arguments: {} }, expect: ["NotExecuted"], label: "a tool call" },
    { action: code("ruby", "puts 1"), expect: ["NotExecuted"], label: "another language" },
    FastCheck.string({ maxLength: 40 }).map((source) => ({ action: code("python", source), expect: ["Executed"] as const, label: "any text as Python" }))
  ],
  blockingAction,
  runsFactor: 0.15,
  startTimeout: 20_000,
  timeout: 300_000
})
