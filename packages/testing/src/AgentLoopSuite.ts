/**
 * The loop test suite: `Agent.run` end to end over a store under test. A store package calls
 * `suite("sqlite", () => mySqliteLayer)` inside a vitest file; every test builds the layer
 * anew, so each test has a FRESH store (the layer must not share state between builds).
 *
 * It checks every row of SPEC §13 (what each failure becomes), the four budgets, resume after
 * an interruption at every step boundary of a six-step run (in the model call, in the tool
 * handler, after the step is durable), idempotence of a finished run, exclusive claims,
 * snapshot checks, parser defects, store write failures, event delivery failures and history
 * rendering. The parsers, tools and executors it uses are defined in the kit, so the suite
 * depends on nothing but the store.
 *
 * This file only assembles the suite; each concern is one file under `internal/loop/`:
 * `outcomes.ts` (what replies and actions become, completion), `failures.ts` (model, store,
 * parser and executor failures), `interruption.ts` (interruption and resume at every step
 * boundary), `claims.ts` (idempotence, claims, refused requests), `budgets.ts`, `history.ts`
 * (what the model sees), `events.ts`, `parallel.ts` (several tool calls in one reply, design 0150),
 * `approvals.ts`, `conversations.ts` (`Agent.send`'s turns, design 0300). They share `fixtures.ts` (parser, tools, sinks,
 * executors) and `harness.ts` (`Harness`, `SuiteContext`, shared helpers).
 *
 * Adding a concern: write `internal/loop/<concern>.ts` exporting
 * `register = (ctx: SuiteContext): void => { … }` that opens its own `ctx.describe(…)` blocks
 * (a block may reuse an existing title, e.g. "SPEC §13: what each failure becomes", to sit
 * beside its tests in reports) and registers tests with `ctx.test(title, (h) => effect)` (on
 * TestClock) or `ctx.liveTest` (live clock), each on a fresh store; asserts through
 * `const assert: Assert = ctx.assert`. Then add it to `concerns` below. Reuse the fixtures and
 * harness helpers rather than writing new ones, and give new runs distinct run ids.
 *
 * @since 0.1.0
 */
import type * as DecisionParser from "@polyloop/core/DecisionParser"
import type * as ModelReply from "@polyloop/core/ModelReply"
import * as RunLogStore from "@polyloop/core/RunLogStore"
import * as Effect from "effect/Effect"
import type * as Layer from "effect/Layer"
import * as Approvals from "./internal/loop/approvals.js"
import * as Budgets from "./internal/loop/budgets.js"
import * as Claims from "./internal/loop/claims.js"
import * as Conversations from "./internal/loop/conversations.js"
import * as Events from "./internal/loop/events.js"
import * as Failures from "./internal/loop/failures.js"
import { parser } from "./internal/loop/fixtures.js"
import { type Concern, type Harness, makeHarness, sixSteps, type SuiteContext } from "./internal/loop/harness.js"
import * as History from "./internal/loop/history.js"
import * as Interruption from "./internal/loop/interruption.js"
import * as Outcomes from "./internal/loop/outcomes.js"
import * as Parallel from "./internal/loop/parallel.js"
import * as SubAgents from "./internal/loop/subAgents.js"
import { vitest } from "./internal/vitest.js"

/** Options of the suite. */
export interface SuiteOptions {
  /** Per-test timeout in milliseconds (default 30 000). */
  readonly timeout?: number
}

/** The concerns, in the order their tests are registered. */
const concerns: ReadonlyArray<Concern> = [
  Outcomes.register,
  Failures.register,
  Interruption.register,
  Claims.register,
  Budgets.register,
  History.register,
  Events.register,
  Parallel.register,
  Approvals.register,
  Conversations.register,
  SubAgents.register
]

/**
 * Registers the loop tests under `describe(name)`. `makeStoreLayer` is called once per test and
 * the layer is built once per test: each test has a fresh, empty store.
 */
export const suite = <E>(name: string, makeStoreLayer: () => Layer.Layer<RunLogStore.RunLogStore, E>, options?: SuiteOptions): void => {
  const { describe, it, assert } = vitest(`AgentLoopSuite.suite("${name}")`)
  const timeout = options?.timeout ?? 30_000

  const withHarness = <A, E2>(body: (h: Harness) => Effect.Effect<A, E2>): Effect.Effect<A, E | E2> =>
    Effect.flatMap(RunLogStore.RunLogStore, (store) => body(makeHarness(store))).pipe(Effect.provide(makeStoreLayer()))

  const ctx: SuiteContext = {
    describe,
    assert,
    test: (title, body) => {
      it.effect(title, () => withHarness(body), timeout)
    },
    liveTest: (title, body) => {
      it.live(title, () => withHarness(body), timeout)
    }
  }

  describe(name, () => {
    for (const register of concerns) register(ctx)
  })
}

/** The actions a six-step scripted run takes (exported for benchmarks and examples that reuse it). */
export const sixStepScript: ReadonlyArray<ModelReply.ModelReply> = sixSteps

/** The suite's decision parser (tool calls, `ACT {...}` lines, fenced code, `FINISH:`), for reuse in examples and benchmarks. */
export const suiteParser: DecisionParser.DecisionParser.Service = parser
