import { assert, describe, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as Schema from "effect/Schema"
import type { Action } from "@polyloop/core/Action"
import * as ActionExecutor from "@polyloop/core/ActionExecutor"
import * as ActionOutcome from "@polyloop/core/ActionOutcome"
import { ToolEnvironmentError } from "@polyloop/core/Errors"
import * as Tool from "@polyloop/core/Tool"
import * as ToolRegistry from "@polyloop/core/ToolRegistry"
import * as ActionExecutorContract from "../src/ActionExecutorContract.js"
import { holdsAll, registerBroken } from "./helpers.js"

// The tool-call language: a registry and its derived executor.
const echo = Tool.make({
  name: "echo",
  description: "Echoes a text.",
  parameters: Schema.Struct({ text: Schema.String, times: Schema.optional(Schema.Int.pipe(Schema.between(1, 3))) }),
  handler: ({ text, times }) => Effect.succeed(text.repeat(times ?? 1))
})
const divide = Tool.make({
  name: "divide",
  description: "Divides; fails on zero.",
  parameters: Schema.Struct({ a: Schema.Number, b: Schema.Number }),
  handler: ({ a, b }) => (b === 0 ? Effect.fail({ _tag: "DivisionByZero" as const, message: "b is 0" }) : Effect.succeed(String(a / b)))
})
const database = Tool.make({
  name: "database",
  description: "A query against a database that is down.",
  parameters: Schema.Struct({ sql: Schema.String }),
  handler: () => Effect.fail(new ToolEnvironmentError({ message: "connection refused" }))
})
const crash = Tool.make({
  name: "crash",
  description: "Throws.",
  parameters: Schema.Struct({}),
  handler: () => Effect.sync((): string => { throw new RangeError("boom") })
})
const block = Tool.make({ name: "block", description: "Blocks.", parameters: Schema.Struct({}), handler: () => ActionExecutorContract.block })
const registry = ToolRegistry.make(echo, divide, database, crash, block)
const blockingAction: Action = { _tag: "ToolCall", id: "call_block", name: "block", arguments: {} }
const toolCases = ActionExecutorContract.casesFromRegistry(registry, {
  exclude: ["block"],
  expect: { echo: ["Executed"], divide: ["Executed"], crash: ["Executed"], database: ["EnvError"] }
})
const options = { cases: toolCases, blockingAction }
const derived = ToolRegistry.layerExecutor(registry)

/** Wraps the derived executor. */
const wrapDerived = (f: (inner: ActionExecutor.ActionExecutor.Service) => Partial<ActionExecutor.ActionExecutor.Service>) =>
  Effect.flatMap(registry.executor(), (inner) => Effect.succeed({ ...inner, ...f(inner) }))

// The code language: a toy executor of "js" expressions, with its own declared cases.
const codeExecutor = Effect.map(ActionExecutorContract.Probe, (probe) =>
  ActionExecutor.make({
    execute: (action) => {
      if (action._tag !== "CodeAction" || action.language !== "js") return Effect.succeed(ActionOutcome.notExecuted("this executor runs js code"))
      if (action.code === "block()") return Effect.provideService(ActionExecutorContract.block, ActionExecutorContract.Probe, probe)
      if (action.code === "db()") return Effect.succeed(ActionOutcome.envError("the sandbox is gone"))
      return Effect.succeed(ActionOutcome.executed(action.code.includes("throw") ? "Error: thrown" : "ok"))
    }
  }))
const codeCases: ReadonlyArray<ActionExecutorContract.ActionCase> = [
  { action: { _tag: "CodeAction", language: "js", code: "1 + 1" }, expect: ["Executed"] },
  { action: { _tag: "CodeAction", language: "js", code: "throw new Error()" }, expect: ["Executed"], label: "code that throws" },
  { action: { _tag: "CodeAction", language: "js", code: "db()" }, expect: ["EnvError"] },
  { action: { _tag: "CodeAction", language: "ruby", code: "1" }, expect: ["NotExecuted"], label: "another language" },
  { action: { _tag: "ToolCall", id: "x", name: "echo", arguments: {} }, expect: ["NotExecuted"], label: "a tool call" }
]

const all = ActionExecutorContract.properties(derived, options)

/** The derived executor, except that its replayPolicy throws on code actions (one kind of the generated cases). */
const throwsOnCode = wrapDerived((inner) => ({
  replayPolicy: (action) => {
    if (action._tag === "CodeAction") throw new Error("no policy")
    return inner.replayPolicy(action)
  }
}))

/** The code executor, except that it runs ruby (one of the declared cases) as if it were js. */
const runsRuby = Effect.map(codeExecutor, (inner) =>
  ActionExecutor.make({
    execute: (action) =>
      action._tag === "CodeAction" && action.language === "ruby" ? Effect.succeed(ActionOutcome.executed("1")) : inner.execute(action)
  }))

describe("ActionExecutorContract", () => {
  it.live("the derived executor satisfies every property with cases generated from its registry", () => holdsAll(all), 120_000)

  it.live("a code-action executor satisfies every property with its own cases (no action language is assumed)", () =>
    holdsAll(ActionExecutorContract.properties(codeExecutor, { cases: codeCases, blockingAction: { _tag: "CodeAction", language: "js", code: "block()" } })), 60_000)

  it.live("every round tries every declared case and every generated kind: one round finds a bug confined to one kind, whatever the seed", () =>
    Effect.gen(function*() {
      const generated = ActionExecutorContract.properties(throwsOnCode, options).replayPolicy
      const declared = ActionExecutorContract.properties(runsRuby, { cases: codeCases }).statuses
      assert.isDefined(generated)
      assert.isDefined(declared)
      for (let seed = 1; seed <= 40; seed++) {
        const fromRegistry = yield* ActionExecutorContract.check(generated!, { numRuns: 1, seed })
        assert.isFalse(fromRegistry.passed, `seed ${seed}: one round of replayPolicy missed the code action`)
        assert.match(fromRegistry.error, /replayPolicy\(an action of another language \(code\) .*\) threw/)
        const fromList = yield* ActionExecutorContract.check(declared!, { numRuns: 1, seed })
        assert.isFalse(fromList.passed, `seed ${seed}: one round of statuses missed the ruby case`)
        assert.match(fromList.error, /another language .* reported Executed/)
      }
    }), 60_000)

  registerBroken(all, [
    {
      name: "an executor that reports Executed for unknown tools",
      props: () =>
        ActionExecutorContract.properties(
          wrapDerived((inner) => ({
            execute: (action) =>
              action._tag === "ToolCall" && !registry.names.includes(action.name) ? Effect.succeed(ActionOutcome.executed("done")) : inner.execute(action)
          })),
          options
        ),
      breaks: { statuses: /an unknown tool .* reported Executed .*allows NotExecuted/ }
    },
    {
      name: "an executor that reports a broken environment as Executed",
      props: () =>
        ActionExecutorContract.properties(
          wrapDerived((inner) => ({
            execute: (action) => Effect.map(inner.execute(action), (o) => (o.status === "EnvError" ? ActionOutcome.executed(o.observation) : o))
          })),
          options
        ),
      breaks: { statuses: /a valid call of database .* reported Executed/ }
    },
    {
      name: "an executor that dies on a code action",
      props: () =>
        ActionExecutorContract.properties(
          wrapDerived((inner) => ({ execute: (action) => (action._tag === "CodeAction" ? Effect.die(new Error("not a tool call")) : inner.execute(action)) })),
          options
        ),
      breaks: { completes: /did not return an outcome: defect Error: not a tool call/ }
    },
    {
      name: "an executor whose replayPolicy throws on code actions",
      props: () => ActionExecutorContract.properties(throwsOnCode, options),
      breaks: { replayPolicy: /replayPolicy\(an action of another language \(code\) .*\) threw/ }
    },
    {
      // Effect re-asserts an interruption whatever the executor catches, so the bug shows as an
      // EnvError raised next to the interruption.
      name: "an executor that turns interruption into EnvError",
      props: () =>
        ActionExecutorContract.properties(
          wrapDerived((inner) => ({
            execute: (action) =>
              inner.execute(action).pipe(Effect.onInterrupt(() => Effect.die(new ToolEnvironmentError({ message: "interrupted" }))))
          })),
          options
        ),
      breaks: { interruption: /exited with defect ToolEnvironmentError: interrupted, interruption; it must exit interrupted, nothing else/ }
    },
    {
      name: "an executor that runs actions uninterruptibly",
      props: () =>
        ActionExecutorContract.properties(wrapDerived((inner) => ({ execute: (action) => Effect.uninterruptible(inner.execute(action)) })), {
          ...options,
          startTimeout: 300
        }),
      breaks: { interruption: /did not stop within 300 ms of being interrupted/ }
    },
    {
      name: "an executor that runs handlers in a detached fiber",
      props: () =>
        ActionExecutorContract.properties(
          wrapDerived((inner) => ({ execute: (action) => Effect.flatMap(Effect.forkDaemon(inner.execute(action)), Fiber.join) })),
          options
        ),
      breaks: { interruption: /finalizer had not run/ }
    }
  ])
})
