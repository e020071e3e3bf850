/**
 * The `ActionExecutor` contract suite (SPEC §5.1, design 0007 decision 1), parameterised by
 * action language: the caller passes the actions to try and the statuses each may get —
 * written by hand for any action language, or generated from a tool registry with
 * `casesFromRegistry` (valid calls, invalid arguments, unknown tools, an action of the other
 * language). Every round of a property tries every declared case and one generated case of
 * each declared kind, so no kind is left out by chance. The suite never feeds one consumer's
 * action language to another's executor.
 * Properties: `execute` always completes with a valid `ActionOutcome` whose status is one the
 * caller declared; `replayPolicy` is total and stable; and, given a blocking action that runs
 * `ActionExecutorContract.block`, interruption passes through: the action's finalizer runs,
 * no outcome is returned, the fiber exits interrupted.
 *
 * @since 0.1.0
 */
import * as Arbitrary from "effect/Arbitrary"
import * as Cause from "effect/Cause"
import * as Context from "effect/Context"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Exit from "effect/Exit"
import * as FastCheck from "effect/FastCheck"
import * as Fiber from "effect/Fiber"
import * as Schema from "effect/Schema"
import type * as Scope from "effect/Scope"
import * as TestServices from "effect/TestServices"
import type * as Layer from "effect/Layer"
import type { Action, ToolCall } from "@polyloop/core/Action"
import { ActionExecutor, ReplayPolicy } from "@polyloop/core/ActionExecutor"
import { ActionOutcome, type ActionStatus } from "@polyloop/core/ActionOutcome"
import type * as ToolRegistry from "@polyloop/core/ToolRegistry"
import { jsonValue, text } from "./internal/arbitraries.js"
import { show } from "./internal/equal.js"
import * as Property from "./internal/property.js"
import { build, describeCause, describeExit } from "./internal/subject.js"
import { register } from "./internal/suite.js"

export {
  /** A contract was broken; the message says what was expected and what was seen. */
  ContractViolation,
  /** A property of a suite: `id`, `name`, `numRuns` and its generated cases. */
  type Property,
  /** The result of `check`. */
  type Report
} from "./internal/property.js"

/** Runs one property outside vitest (e.g. to prove it fails on a broken executor). */
export const check: (property: Property.Property, options?: Property.RunOptions) => Effect.Effect<Property.Report> = Property.run

/** What the suite observes of the blocking action: that it started, and that its finalizer ran. */
export class Probe extends Context.Tag("@polyloop/testing/ActionExecutorContract/Probe")<Probe, Probe.Service>() {}

/** @since 0.1.0 */
export declare namespace Probe {
  /** @since 0.1.0 */
  export interface Service {
    readonly started: Deferred.Deferred<void>
    readonly finalized: Deferred.Deferred<void>
  }
}

/**
 * The body of your blocking action (e.g. the handler of a `block` tool, or what your code
 * executor runs for a `sleep forever` program): signals it started, blocks until interrupted,
 * and signals when its finalizer runs.
 */
export const block: Effect.Effect<never, never, Probe> = Effect.flatMap(Probe, (probe) =>
  Deferred.succeed(probe.started, undefined).pipe(
    Effect.zipRight(Effect.never),
    Effect.ensuring(Deferred.succeed(probe.finalized, undefined))
  ))

/** One action to try and the statuses SPEC §5.1 allows for it. */
export interface ActionCase {
  readonly action: Action
  readonly expect: ReadonlyArray<ActionStatus>
  /** What the case is, for failure messages (e.g. "unknown tool"). */
  readonly label?: string
}

/**
 * The executor under test, built afresh per case with a fresh `Probe` in context (so a blocking
 * action's handler can run `block`): a layer, or a scoped effect making one.
 */
export type ExecutorUnderTest<E = never> =
  | Layer.Layer<ActionExecutor, E, Probe>
  | Effect.Effect<ActionExecutor.Service, E, Probe | Scope.Scope>

/**
 * The actions to try: a fixed case, or an arbitrary generating one kind of case (e.g. "calls of
 * unknown tools"). Each round of a property tries every fixed case and one draw of every arbitrary.
 */
export type CaseSource = ActionCase | FastCheck.Arbitrary<ActionCase>

/** Options of the executor suite. */
export interface Options {
  /**
   * The actions to try, in your executor's action language, with their allowed statuses: a list
   * of fixed cases and kinds of cases (each round tries all of them), or a single arbitrary.
   */
  readonly cases: FastCheck.Arbitrary<ActionCase> | ReadonlyArray<CaseSource>
  /** An action your executor runs through `block`: enables the interruption property. */
  readonly blockingAction?: Action
  /** Multiplies every property's number of generated cases (default 1). */
  readonly runsFactor?: number
  /** Per-test timeout in milliseconds for `suite` (default 30 000). */
  readonly timeout?: number
  /** A fast-check seed, to replay a failure printed by a previous run. */
  readonly seed?: number
  /** How long to wait for the blocking action to start, in milliseconds (default 5 000). */
  readonly startTimeout?: number
}

/** The identifiers of the executor properties. */
export type PropertyId = "completes" | "statuses" | "replayPolicy" | "interruption"

/** Options of `casesFromRegistry`. */
export interface RegistryCasesOptions {
  /**
   * The statuses a valid call of each tool may get (default: `Executed` or `EnvError` — the
   * call entered execution). Declare `["Executed"]` for a tool whose environment cannot break.
   */
  readonly expect?: Readonly<Record<string, ReadonlyArray<ActionStatus>>>
  /** Tools never called (e.g. the blocking tool, tools with real side effects). */
  readonly exclude?: ReadonlyArray<string>
}

const validArguments = (tool: ToolRegistry.ToolRegistry<unknown>["tools"][number]): FastCheck.Arbitrary<unknown> | undefined => {
  try {
    const encode = Schema.encodeUnknownEither(tool.parameters)
    return Arbitrary.make(tool.parameters)
      .map((value) => encode(value))
      .filter(Either.isRight)
      .map((right) => right.right)
  } catch {
    return undefined
  }
}

/**
 * Cases generated from a tool registry (the tool-call action language), one arbitrary per kind:
 * calls of unknown tools, code actions (the other language), and for each tool valid calls
 * (arguments from `Arbitrary.make` of its parameter Schema, encoded; weighted double) and calls
 * with arbitrary arguments. Each is classified by `registry.validate`: rejected calls and
 * foreign actions must be `NotExecuted`. Pass the list as `cases` (add your own cases to it):
 * every round of a property tries each kind.
 */
export const casesFromRegistry = (
  registry: ToolRegistry.ToolRegistry<unknown>,
  options: RegistryCasesOptions = {}
): ReadonlyArray<FastCheck.Arbitrary<ActionCase>> => {
  const excluded = new Set(options.exclude ?? [])
  const tools = registry.tools.filter((tool) => !excluded.has(tool.name))
  const classify = (call: ToolCall): ActionCase =>
    Either.match(registry.validate(call), {
      onLeft: (error) => ({ action: call, expect: ["NotExecuted"], label: error._tag === "UnknownTool" ? "an unknown tool" : "invalid arguments" }),
      onRight: (valid) => ({
        action: call,
        expect: options.expect?.[valid.tool.name] ?? ["Executed", "EnvError"],
        label: `a valid call of ${valid.tool.name}`
      })
    })
  const call = (name: FastCheck.Arbitrary<string>, args: FastCheck.Arbitrary<unknown>) =>
    FastCheck.record({ id: FastCheck.string({ maxLength: 8 }), name, args }).map(({ args, id, name }) =>
      classify({ _tag: "ToolCall", id, name, arguments: args })
    )
  const known = new Set(registry.names)
  const kinds: Array<FastCheck.Arbitrary<ActionCase>> = [
    call(text({ maxLength: 16 }).filter((name) => !known.has(name)), jsonValue),
    FastCheck.record({ language: text({ maxLength: 10 }), code: text() }).map(({ code, language }): ActionCase => ({
      action: { _tag: "CodeAction", language, code },
      expect: ["NotExecuted"],
      label: "an action of another language (code)"
    }))
  ]
  for (const tool of tools) {
    const valid = validArguments(tool)
    // Valid calls weigh double: they are the only ones that reach a handler.
    if (valid !== undefined) kinds.push(call(FastCheck.constant(tool.name), valid), call(FastCheck.constant(tool.name), valid))
    kinds.push(call(FastCheck.constant(tool.name), jsonValue))
  }
  return kinds
}

const isOutcome = Schema.is(ActionOutcome)
const isReplayPolicy = Schema.is(ReplayPolicy)

const describeCase = (c: ActionCase): string => `${c.label ?? "action"} ${show(c.action)}`

const isArbitrary = (source: CaseSource): source is FastCheck.Arbitrary<ActionCase> => !("action" in source && "expect" in source)

/**
 * One round of cases: every fixed case and one draw of every arbitrary, so each kind the caller
 * declared is tried in every round, whatever the seed and the number of rounds.
 */
const kindsOf = (cases: Options["cases"]): ReadonlyArray<FastCheck.Arbitrary<ActionCase>> =>
  Array.isArray(cases)
    ? (cases as ReadonlyArray<CaseSource>).map((source) => (isArbitrary(source) ? source : FastCheck.constant(source)))
    : [cases as FastCheck.Arbitrary<ActionCase>]

/** The properties of the executor contract, keyed by id (`interruption` only with `blockingAction`). */
export const properties = <E>(executor: ExecutorUnderTest<E>, options: Options): Readonly<Partial<Record<PropertyId, Property.Property>>> => {
  const factor = options.runsFactor ?? 1
  const runs = (n: number) => Math.max(1, Math.round(n * factor))
  const kinds = kindsOf(options.cases)
  if (kinds.length === 0) {
    throw new Error("ActionExecutorContract: `cases` is empty; give the actions of your action language to try")
  }
  // A property checks about `n` cases, as whole rounds: every kind at least once.
  const rounds = (n: number) => Math.max(1, Math.ceil(runs(n) / kinds.length))
  const cases: FastCheck.Arbitrary<ReadonlyArray<ActionCase>> = FastCheck.tuple(...kinds)
  const eachCase = (check: (c: ActionCase) => Effect.Effect<void, Property.ContractViolation>) => (round: ReadonlyArray<ActionCase>) =>
    Effect.forEach(round, check, { discard: true })
  const makeProbe = Effect.map(Effect.all([Deferred.make<void>(), Deferred.make<void>()]), ([started, finalized]): Probe.Service => ({
    started,
    finalized
  }))
  const fresh = Effect.flatMap(makeProbe, (probe) =>
    Effect.map(Effect.provideService(build(ActionExecutor, executor, "the executor"), Probe, probe), (service) => ({ service, probe })))

  const execute = (service: ActionExecutor.Service, c: ActionCase) =>
    Effect.exit(Effect.suspend(() => service.execute(c.action))).pipe(
      Effect.flatMap((exit) =>
        Exit.isSuccess(exit)
          ? isOutcome(exit.value)
            ? Effect.succeed(exit.value)
            : Property.violation(`execute(${describeCase(c)}) returned ${show(exit.value)}, which is not an ActionOutcome`)
          : Property.violation(`execute(${describeCase(c)}) did not return an outcome: ${describeCause(exit.cause)}`)
      )
    )

  const props: Partial<Record<PropertyId, Property.Property>> = {
    completes: Property.make({
      id: "completes",
      name: "execute completes with a valid ActionOutcome for every action (no failure, no defect)",
      numRuns: rounds(50),
      arbitrary: cases,
      check: eachCase((c) => Effect.scoped(Effect.flatMap(fresh, ({ service }) => Effect.asVoid(execute(service, c)))))
    }),
    statuses: Property.make({
      id: "statuses",
      name: "every action gets a status SPEC §5.1 allows for it, as the caller declares",
      numRuns: rounds(100),
      arbitrary: cases,
      check: eachCase((c) =>
        Effect.scoped(
          Effect.gen(function*() {
            const { service } = yield* fresh
            const outcome = yield* execute(service, c)
            yield* Property.ensure(
              c.expect.includes(outcome.status),
              () => `execute(${describeCase(c)}) reported ${outcome.status} (${show(outcome.observation)}); SPEC §5.1 allows ${c.expect.join(" or ")}`
            )
          })
        )
      )
    }),
    replayPolicy: Property.make({
      id: "replayPolicy",
      name: "replayPolicy is total and stable: Never or Always, the same every time",
      numRuns: rounds(50),
      arbitrary: cases,
      check: eachCase((c) =>
        Effect.scoped(
          Effect.gen(function*() {
            const { service } = yield* fresh
            const policy = yield* Effect.try({
              try: () => [service.replayPolicy(c.action), service.replayPolicy(c.action)] as const,
              catch: (error) => new Property.ContractViolation({ message: `replayPolicy(${describeCase(c)}) threw ${show(String(error))}` })
            })
            yield* Property.ensure(isReplayPolicy(policy[0]), () => `replayPolicy(${describeCase(c)}) returned ${show(policy[0])}`)
            yield* Property.ensure(policy[0] === policy[1], () => `replayPolicy(${describeCase(c)}) returned ${policy[0]}, then ${policy[1]}`)
          })
        )
      )
    })
  }

  const blocking = options.blockingAction
  if (blocking !== undefined) {
    const startTimeout = options.startTimeout ?? 5_000
    props.interruption = Property.make({
      id: "interruption",
      name: "interruption passes through: the action's finalizer runs, no outcome is returned, the fiber exits interrupted",
      numRuns: runs(10),
      arbitrary: FastCheck.integer({ min: 0, max: 3 }),
      check: (yields) =>
        Effect.scoped(
          Effect.gen(function*() {
            const { probe, service } = yield* fresh
            // A daemon: an executor that cannot be interrupted must not hang the suite.
            const fiber = yield* Effect.forkDaemon(Effect.suspend(() => service.execute(blocking)))
            const first = yield* Effect.raceFirst(
              Effect.as(Deferred.await(probe.started), "started" as const),
              Effect.map(Fiber.await(fiber), (exit) => ({ exit }))
            ).pipe(
              Effect.timeoutFail({
                duration: startTimeout,
                onTimeout: () =>
                  new Property.ContractViolation({
                    message: `the blocking action ${show(blocking)} did not start within ${startTimeout} ms: run it through ActionExecutorContract.block`
                  })
              }),
              TestServices.provideLive
            )
            if (first !== "started") {
              return yield* Property.violation(
                `the blocking action ${show(blocking)} ended before it started blocking: ${describeExit(first.exit, (o) => show(o))}`
              )
            }
            for (let i = 0; i < yields; i++) yield* Effect.yieldNow()
            yield* Fiber.interruptFork(fiber)
            const exit = yield* Fiber.await(fiber).pipe(
              Effect.timeoutFail({
                duration: startTimeout,
                onTimeout: () =>
                  new Property.ContractViolation({
                    message: `execute did not stop within ${startTimeout} ms of being interrupted: the action must run interruptibly`
                  })
              }),
              TestServices.provideLive
            )
            if (Exit.isSuccess(exit)) {
              return yield* Property.violation(`the interrupted execute returned an outcome ${show(exit.value)}; interruption must pass through`)
            }
            yield* Property.ensure(
              Cause.isInterruptedOnly(exit.cause),
              () => `the interrupted execute exited with ${describeCause(exit.cause)}; it must exit interrupted, nothing else`
            )
            yield* Property.ensure(
              yield* Deferred.isDone(probe.finalized),
              () => "the blocking action's finalizer had not run when the interrupted execute exited"
            )
          })
        )
    })
  }
  return props
}

/** Registers the executor contract as vitest tests. Call it at the top level of a test file. */
export const suite = <E>(name: string, executor: ExecutorUnderTest<E>, options: Options): void =>
  register(`ActionExecutor contract: ${name}`, properties(executor, options) as Readonly<Record<string, Property.Property>>, {
    ...(options.timeout === undefined ? {} : { timeout: options.timeout }),
    ...(options.seed === undefined ? {} : { seed: options.seed })
  })
