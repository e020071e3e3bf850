import { assert, describe, it } from "@effect/vitest"
import * as Action from "@polyloop/core/Action"
import * as ActionExecutor from "@polyloop/core/ActionExecutor"
import type * as ActionOutcome from "@polyloop/core/ActionOutcome"
import { InvalidArguments, MissingToolHandler, ToolEnvironmentError, UnknownTool } from "@polyloop/core/Errors"
import * as Tool from "@polyloop/core/Tool"
import * as ToolContext from "@polyloop/core/ToolContext"
import * as ToolRegistry from "@polyloop/core/ToolRegistry"
import * as Cause from "effect/Cause"
import * as Context from "effect/Context"
import * as Deferred from "effect/Deferred"
import type * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Exit from "effect/Exit"
import * as Fiber from "effect/Fiber"
import * as FiberId from "effect/FiberId"
import * as fc from "effect/FastCheck"
import * as JSONSchema from "effect/JSONSchema"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Ref from "effect/Ref"
import * as Schema from "effect/Schema"
import * as TestClock from "effect/TestClock"

// ---------------------------------------------------------------------------------------------
// Fixtures

class Oops extends Schema.TaggedError<Oops>()("Oops", { message: Schema.String }) {}

class MyBug extends Error {}

const ReadParams = Schema.Struct({ path: Schema.String, lines: Schema.optional(Schema.Int) })

const call = (name: string, args: unknown, id = "call_1"): Action.ToolCall => Action.ToolCall.make({ id, name, arguments: args })

const code: Action.Action = Action.CodeAction.make({ language: "python", code: "print(1)" })

/** The two fields the derived executor always fills the same way (SPEC §6). */
const assertFixedFields = (outcome: ActionOutcome.ActionOutcome) => {
  assert.strictEqual(outcome.envReportedCompletion, false)
  assert.strictEqual(outcome.observationTruncatedChars, 0)
}

/** A registry whose tools count their handler calls. */
const makeFixture = Effect.gen(function*() {
  const calls = yield* Ref.make(0)
  const count = Ref.update(calls, (n) => n + 1)
  const read = Tool.make({
    name: "read",
    description: "Reads a file",
    parameters: ReadParams,
    handler: (args) => Effect.as(count, `contents of ${args.path}${args.lines === undefined ? "" : ` (${args.lines} lines)`}`)
  })
  const broken = Tool.make({
    name: "broken",
    description: "The environment is down",
    parameters: Schema.Struct({}),
    handler: () => Effect.zipRight(count, new ToolEnvironmentError({ message: "database unreachable" }))
  })
  const failing = Tool.make({
    name: "failing",
    description: "Fails with a typed error",
    parameters: Schema.Struct({}),
    handler: () => Effect.zipRight(count, new Oops({ message: "the widget is misaligned" }))
  })
  const throwing = Tool.make({
    name: "throwing",
    description: "Throws inside an effect",
    parameters: Schema.Struct({}),
    handler: () =>
      Effect.zipRight(
        count,
        Effect.sync((): string => {
          throw new RangeError("index 7 out of range")
        })
      )
  })
  const throwingEagerly = Tool.make({
    name: "throwingEagerly",
    description: "Throws before returning an effect",
    parameters: Schema.Struct({}),
    handler: (): Effect.Effect<string> => {
      throw new MyBug("handler bug")
    }
  })
  const dying = Tool.make({
    name: "dying",
    description: "Dies with a custom error class",
    parameters: Schema.Struct({}),
    handler: () => Effect.zipRight(count, Effect.die(new MyBug("custom defect")))
  })
  const slow = Tool.make({
    name: "slow",
    description: "Takes ten seconds",
    parameters: Schema.Struct({}),
    timeout: "1 second",
    handler: () => Effect.zipRight(count, Effect.as(Effect.sleep("10 seconds"), "finally done"))
  })
  const submit = Tool.make({
    name: "submit",
    description: "Completes the run",
    parameters: Schema.Struct({ answer: Schema.String }),
    completesRun: true,
    replayPolicy: "Always",
    handler: (args) => (args.answer === "wrong" ? Effect.fail(new Oops({ message: "rejected" })) : Effect.succeed("accepted"))
  })
  const registry = ToolRegistry.make(read, broken, failing, throwing, throwingEagerly, dying, slow, submit)
  const executor = yield* registry.executor()
  return { registry, executor, calls, tools: { read, broken, failing, throwing, slow, submit } }
})

// ---------------------------------------------------------------------------------------------

describe("ToolRegistry: the derived executor (SPEC §6 table)", () => {
  it.effect("a code action (two action languages crossed) is NotExecuted with a synthetic sentence; no handler runs", () =>
    Effect.gen(function*() {
      const { calls, executor } = yield* makeFixture
      const report = yield* executor.executeReport(code)
      assert.strictEqual(report.outcome.status, "NotExecuted")
      assert.strictEqual(report.outcome.observationIsSynthetic, true)
      assert.include(report.outcome.observation, "code action")
      assert.strictEqual(report.handlerFailed, false)
      assert.isTrue(Option.isNone(report.tool))
      assertFixedFields(report.outcome)
      assert.strictEqual(yield* Ref.get(calls), 0)
    }))

  it.effect("an unknown tool is NotExecuted, synthetic, naming the tool; no handler runs", () =>
    Effect.gen(function*() {
      const { calls, executor } = yield* makeFixture
      const report = yield* executor.executeReport(call("delete_everything", {}))
      assert.strictEqual(report.outcome.status, "NotExecuted")
      assert.strictEqual(report.outcome.observationIsSynthetic, true)
      assert.include(report.outcome.observation, "delete_everything")
      assert.strictEqual(report.handlerFailed, false)
      assertFixedFields(report.outcome)
      assert.strictEqual(yield* Ref.get(calls), 0)
    }))

  it.effect("invalid arguments are NotExecuted with every Schema issue; no handler runs", () =>
    Effect.gen(function*() {
      const { calls, executor } = yield* makeFixture
      const report = yield* executor.executeReport(call("read", { path: 3, lines: "many" }))
      assert.strictEqual(report.outcome.status, "NotExecuted")
      assert.strictEqual(report.outcome.observationIsSynthetic, true)
      assert.include(report.outcome.observation, "read")
      // errors: "all" — both bad fields are reported, each with its path.
      assert.include(report.outcome.observation, "path: Expected string, actual 3")
      assert.include(report.outcome.observation, "lines: Expected number, actual \"many\"")
      assert.strictEqual(report.handlerFailed, false)
      assertFixedFields(report.outcome)
      // Excess properties are issues too: the model learns the exact shape.
      const excess = yield* executor.execute(call("read", { path: "a", colour: "red" }))
      assert.strictEqual(excess.status, "NotExecuted")
      assert.include(excess.observation, "colour")
      assert.strictEqual(yield* Ref.get(calls), 0)
    }))

  it.effect("a handler failing with ToolEnvironmentError is EnvError with that message", () =>
    Effect.gen(function*() {
      const { executor } = yield* makeFixture
      const report = yield* executor.executeReport(call("broken", {}))
      assert.deepStrictEqual(report.outcome, {
        status: "EnvError",
        observation: "database unreachable",
        observationIsSynthetic: false,
        envReportedCompletion: false,
        observationTruncatedChars: 0
      })
      assert.strictEqual(report.handlerFailed, true)
    }))

  it.effect("a handler failing with another typed error is Executed as `Tag: message`", () =>
    Effect.gen(function*() {
      const { executor } = yield* makeFixture
      const report = yield* executor.executeReport(call("failing", {}))
      assert.deepStrictEqual(report.outcome, {
        status: "Executed",
        observation: "Oops: the widget is misaligned",
        observationIsSynthetic: false,
        envReportedCompletion: false,
        observationTruncatedChars: 0
      })
      assert.strictEqual(report.handlerFailed, true)
    }))

  it.effect("a thrown exception is Executed with class name and message, no stack trace", () =>
    Effect.gen(function*() {
      const { executor } = yield* makeFixture
      for (
        const [tool, expected] of [
          ["throwing", "RangeError: index 7 out of range"],
          ["throwingEagerly", "MyBug: handler bug"],
          ["dying", "MyBug: custom defect"]
        ] as const
      ) {
        const report = yield* executor.executeReport(call(tool, {}))
        assert.strictEqual(report.outcome.status, "Executed", tool)
        assert.strictEqual(report.outcome.observation, expected)
        assert.notInclude(report.outcome.observation, "\n")
        assert.notInclude(report.outcome.observation, "    at ")
        assert.notInclude(report.outcome.observation, ".ts:")
        assert.strictEqual(report.outcome.observationIsSynthetic, false)
        assertFixedFields(report.outcome)
        assert.strictEqual(report.handlerFailed, true)
      }
    }))

  it.effect("a handler exceeding its timeout is Executed as `ToolTimeout: <name> exceeded <duration>` (TestClock)", () =>
    Effect.gen(function*() {
      const { executor } = yield* makeFixture
      const fiber = yield* Effect.fork(executor.executeReport(call("slow", {})))
      yield* TestClock.adjust("999 millis")
      assert.isTrue(Option.isNone(yield* Fiber.poll(fiber)), "still running before the timeout")
      yield* TestClock.adjust("1 millis")
      const report = yield* Fiber.join(fiber)
      assert.deepStrictEqual(report.outcome, {
        status: "Executed",
        observation: "ToolTimeout: slow exceeded 1s",
        observationIsSynthetic: false,
        envReportedCompletion: false,
        observationTruncatedChars: 0
      })
      assert.strictEqual(report.handlerFailed, true)
    }))

  it.effect("a timed-out handler is interrupted (its finalizer runs)", () =>
    Effect.gen(function*() {
      const finalized = yield* Ref.make(false)
      const started = yield* Deferred.make<void>()
      const slow = Tool.make({
        name: "slow",
        description: "",
        parameters: Schema.Struct({}),
        timeout: "2 seconds",
        handler: () =>
          Deferred.succeed(started, undefined).pipe(
            Effect.zipRight(Effect.never),
            Effect.onInterrupt(() => Ref.set(finalized, true))
          )
      })
      const executor = yield* ToolRegistry.make(slow).executor()
      const fiber = yield* Effect.fork(executor.execute(call("slow", {})))
      yield* Deferred.await(started)
      yield* TestClock.adjust("2 seconds")
      const outcome = yield* Fiber.join(fiber)
      assert.strictEqual(outcome.observation, "ToolTimeout: slow exceeded 2s")
      assert.isTrue(yield* Ref.get(finalized))
    }))

  it.effect("a handler that returns is Executed with what it returned", () =>
    Effect.gen(function*() {
      const { calls, executor } = yield* makeFixture
      const report = yield* executor.executeReport(call("read", { path: "notes.txt", lines: 3 }))
      assert.deepStrictEqual(report.outcome, {
        status: "Executed",
        observation: "contents of notes.txt (3 lines)",
        observationIsSynthetic: false,
        envReportedCompletion: false,
        observationTruncatedChars: 0
      })
      assert.strictEqual(report.handlerFailed, false)
      assert.strictEqual(Option.getOrThrow(report.tool).name, "read")
      assert.strictEqual(yield* Ref.get(calls), 1)
      // `execute` is `executeReport` without the report.
      assert.deepStrictEqual(yield* executor.execute(call("read", { path: "notes.txt", lines: 3 })), report.outcome)
    }))

  it.effect("a completing tool reports handlerFailed only when its handler did not return", () =>
    Effect.gen(function*() {
      const { executor } = yield* makeFixture
      const ok = yield* executor.executeReport(call("submit", { answer: "42" }))
      assert.strictEqual(ok.outcome.status, "Executed")
      assert.strictEqual(ok.handlerFailed, false)
      assert.isTrue(Option.exists(ok.tool, (tool) => tool.completesRun))
      const rejected = yield* executor.executeReport(call("submit", { answer: "wrong" }))
      assert.strictEqual(rejected.outcome.status, "Executed")
      assert.strictEqual(rejected.outcome.observation, "Oops: rejected")
      assert.strictEqual(rejected.handlerFailed, true)
      // The completion marker is the registry's; the outcome never claims completion.
      assert.strictEqual(ok.outcome.envReportedCompletion, false)
    }))

  it.effect("replayPolicy comes from the tool spec; refused actions (never executed) replay", () =>
    Effect.gen(function*() {
      const { executor } = yield* makeFixture
      assert.strictEqual(executor.replayPolicy(call("submit", { answer: "x" })), "Always")
      assert.strictEqual(executor.replayPolicy(call("read", { path: "x" })), "Never")
      // Refused before any handler runs: replaying only refuses again, history stays identical.
      assert.strictEqual(executor.replayPolicy(call("nope", {})), "Always")
      assert.strictEqual(executor.replayPolicy(call("read", { path: 42 })), "Always")
      assert.strictEqual(executor.replayPolicy(code), "Always")
    }))
})

describe("ToolRegistry: the derived executor on arbitrary actions", () => {
  const names = ["read", "broken", "failing", "throwing", "throwingEagerly", "dying", "submit"]
  const actions: fc.Arbitrary<Action.Action> = fc.oneof(
    fc.record({ language: fc.string(), code: fc.string() }).map((fields) => Action.CodeAction.make(fields)),
    fc.record({
      id: fc.string(),
      name: fc.oneof(fc.constantFrom(...names), fc.string()),
      arguments: fc.oneof(
        fc.jsonValue(),
        fc.constant({}),
        fc.record({ path: fc.string() }),
        fc.record({ answer: fc.constantFrom("42", "wrong") })
      )
    }).map((fields) => Action.ToolCall.make(fields))
  )

  it.effect.prop(
    "the fixed fields never change, and status, synthetic flag and handlerFailed agree (SPEC §5.1, §6)",
    { action: actions },
    ({ action }) =>
      Effect.gen(function*() {
        const { executor } = yield* makeFixture
        const report = yield* executor.executeReport(action)
        assertFixedFields(report.outcome)
        assert.strictEqual(report.outcome.observationIsSynthetic, report.outcome.status === "NotExecuted")
        if (report.outcome.status === "NotExecuted") {
          assert.isFalse(report.handlerFailed)
          assert.isTrue(Option.isNone(report.tool))
        } else {
          assert.isTrue(Option.isSome(report.tool))
        }
        if (report.outcome.status === "EnvError") assert.isTrue(report.handlerFailed)
        assert.deepStrictEqual(yield* executor.execute(action), report.outcome)
      }),
    { fastCheck: { numRuns: 150 } }
  )
})

describe("ToolRegistry: interruption passes through", () => {
  const sleeper = (finalized: Ref.Ref<boolean>, started: Deferred.Deferred<void>, timeout?: Duration.DurationInput) =>
    Tool.make({
      name: "sleeper",
      description: "Sleeps for an hour",
      parameters: Schema.Struct({}),
      ...(timeout === undefined ? {} : { timeout }),
      handler: () =>
        Effect.acquireRelease(Deferred.succeed(started, undefined), () => Ref.set(finalized, true)).pipe(
          Effect.zipRight(Effect.sleep("1 hour")),
          Effect.as("woke up"),
          Effect.scoped
        )
    })

  for (const timeout of [undefined, "2 hours" as const]) {
    it.effect(`interrupting a sleeping handler runs its finalizer and produces no outcome (timeout: ${timeout ?? "none"})`, () =>
      Effect.gen(function*() {
        const finalized = yield* Ref.make(false)
        const started = yield* Deferred.make<void>()
        const produced = yield* Ref.make(0)
        const executor = yield* ToolRegistry.make(sleeper(finalized, started, timeout)).executor()
        const fiber = yield* Effect.fork(
          executor.executeReport(call("sleeper", {})).pipe(Effect.tap(() => Ref.update(produced, (n) => n + 1)))
        )
        yield* Deferred.await(started)
        const exit = yield* Fiber.interrupt(fiber)
        assert.isTrue(Exit.isFailure(exit) && Cause.isInterruptedOnly(exit.cause), "the exit is an interruption")
        assert.isTrue(yield* Ref.get(finalized), "the handler's finalizer ran")
        assert.strictEqual(yield* Ref.get(produced), 0, "no outcome was produced")
        // Time passing afterwards changes nothing: the handler is gone.
        yield* TestClock.adjust("3 hours")
        assert.strictEqual(yield* Ref.get(produced), 0)
      }))
  }

  it.effect("a handler whose end carries both an interruption and a defect (a finalizer that dies while interrupted) is not turned into an outcome", () =>
    Effect.gen(function*() {
      const both = Tool.make({
        name: "both",
        description: "",
        parameters: Schema.Struct({}),
        handler: () => Effect.failCause(Cause.sequential(Cause.interrupt(FiberId.none), Cause.die(new Error("finalizer bug"))))
      })
      const executor = yield* ToolRegistry.make(both).executor()
      const exit = yield* Effect.exit(executor.executeReport(call("both", {})))
      assert.isTrue(Exit.isFailure(exit) && Cause.isInterrupted(exit.cause), "the interruption passes through")
      assert.isTrue(Exit.isFailure(exit) && Option.isSome(Cause.dieOption(exit.cause)), "with its defect")
    }))

  it.effect("a handler that interrupts itself is not turned into an outcome", () =>
    Effect.gen(function*() {
      const quitter = Tool.make({ name: "quitter", description: "", parameters: Schema.Struct({}), handler: () => Effect.interrupt })
      const executor = yield* ToolRegistry.make(quitter).executor()
      const exit = yield* Effect.exit(executor.execute(call("quitter", {})))
      assert.isTrue(Exit.isFailure(exit) && Cause.isInterruptedOnly(exit.cause))
    }))
})

describe("ToolRegistry.executor", () => {
  it.effect("fails with MissingToolHandler naming every tool without a handler", () =>
    Effect.gen(function*() {
      const withHandler = Tool.make({ name: "a", description: "", parameters: Schema.Struct({}), handler: () => Effect.succeed("a") })
      const b = Tool.make({ name: "b", description: "", parameters: Schema.Struct({}) })
      const c = Tool.make({ name: "c", description: "", parameters: Schema.Struct({}) })
      const registry = ToolRegistry.make(b, withHandler, c)
      const error = yield* Effect.flip(registry.executor())
      assert.instanceOf(error, MissingToolHandler)
      assert.deepStrictEqual(error.tools, ["b", "c"])
      assert.include(error.message, "b, c")
      // As a layer, the failure happens when the layer is built, before anything runs.
      const exit = yield* Effect.exit(Layer.build(ToolRegistry.layerExecutor(registry)).pipe(Effect.scoped))
      assert.deepStrictEqual(exit, Exit.fail(new MissingToolHandler({ tools: ["b", "c"] })))
      // A registry narrowed to the tools with handlers derives an executor.
      const narrowed = Either.getOrThrow(registry.restrictTo(["a"]))
      const executor = yield* narrowed.executor()
      assert.strictEqual((yield* executor.execute(call("a", {}))).observation, "a")
    }))

  it.effect("an empty registry derives an executor that runs nothing", () =>
    Effect.gen(function*() {
      const executor = yield* ToolRegistry.empty.executor()
      const outcome = yield* executor.execute(call("anything", {}))
      assert.strictEqual(outcome.status, "NotExecuted")
    }))

  it.effect("ToolContext reaches the handler when provided, and a standalone fallback when not", () =>
    Effect.gen(function*() {
      const whoami = Tool.make({
        name: "whoami",
        description: "",
        parameters: Schema.Struct({}),
        handler: () =>
          Effect.map(ToolContext.ToolContext, (ctx) => `${ctx.runId}|${ctx.step}|${ctx.callId}|${ctx.idempotencyKey}`)
      })
      const executor = yield* ToolRegistry.make(whoami).executor()
      const provided = yield* executor.execute(call("whoami", {}, "call_3")).pipe(
        Effect.provideService(ToolContext.ToolContext, ToolContext.make({ runId: "run-1", step: 3, callId: "call_3" }))
      )
      assert.strictEqual(provided.observation, "run-1|3|call_3|run-1/3/call_3")
      const standalone = yield* executor.execute(call("whoami", {}, "c9"))
      assert.strictEqual(standalone.observation, "standalone|0|c9|standalone/0/c9")
    }))

  it.effect("a ToolContext in scope when the executor is derived never shadows the call's own", () =>
    Effect.gen(function*() {
      const whoami = Tool.make({
        name: "whoami",
        description: "",
        parameters: Schema.Struct({}),
        handler: () => Effect.map(ToolContext.ToolContext, (ctx) => ctx.idempotencyKey)
      })
      const executor = yield* ToolRegistry.make(whoami).executor().pipe(
        Effect.provideService(ToolContext.ToolContext, ToolContext.make({ runId: "derivation", step: 9, callId: "x" }))
      )
      const outcome = yield* executor.execute(call("whoami", {}, "call_1")).pipe(
        Effect.provideService(ToolContext.ToolContext, ToolContext.make({ runId: "run-2", step: 1, callId: "call_1" }))
      )
      assert.strictEqual(outcome.observation, "run-2/1/call_1")
      assert.strictEqual((yield* executor.execute(call("whoami", {}, "c"))).observation, "standalone/0/c")
    }))

  it.effect("services the handlers need are taken when the executor is derived", () =>
    Effect.gen(function*() {
      class Greeting extends Context.Tag("test/Greeting")<Greeting, { readonly hello: (name: string) => string }>() {}
      const greet = Tool.make({
        name: "greet",
        description: "",
        parameters: Schema.Struct({ name: Schema.String }),
        handler: (args) => Effect.map(Greeting, (greeting) => greeting.hello(args.name))
      })
      const registry = ToolRegistry.make(greet)
      const derive = registry.executor()
      // Type level: the executor needs exactly what the handlers need (ToolContext excluded).
      const needs: Equals<Effect.Effect.Context<typeof derive>, Greeting> = true
      assert.isTrue(needs)
      const executor = yield* Effect.provideService(derive, Greeting, { hello: (name) => `hello, ${name}` })
      // No Greeting in context at execution time: the one captured at derivation is used.
      const outcome = yield* executor.execute(call("greet", { name: "Ada" }))
      assert.strictEqual(outcome.observation, "hello, Ada")
    }))
})

type Equals<X, Y> = (<T>() => T extends X ? 1 : 2) extends (<T>() => T extends Y ? 1 : 2) ? true : false

describe("ToolRegistry: modelView, validate, restrictTo, duplicates, isDerivedFrom", () => {
  const noop = (name: string, parameters: Schema.Schema.AnyNoContext = Schema.Struct({})): Tool.Any =>
    Tool.make({ name, description: `the ${name} tool`, parameters, handler: () => Effect.succeed(name) })

  it("modelView gives name, description and the JSON Schema from JSONSchema.make, in registration order", () => {
    const Count = Schema.Struct({ n: Schema.NumberFromString, label: Schema.optional(Schema.String) })
    const registry = ToolRegistry.make(
      Tool.make({ name: "read", description: "Reads a file", parameters: ReadParams }),
      Tool.make({ name: "count", description: "Counts", parameters: Count })
    )
    const view = registry.modelView()
    assert.deepStrictEqual(view.map((tool) => tool.name), ["read", "count"])
    assert.deepStrictEqual(view[0], { name: "read", description: "Reads a file", parameters: JSONSchema.make(ReadParams) })
    assert.deepStrictEqual(view[1]?.parameters, JSONSchema.make(Count))
    const read = view[0]?.parameters as { properties: Record<string, { type: string }>; required: Array<string> }
    assert.strictEqual(read.properties.path?.type, "string")
    assert.deepStrictEqual(read.required, ["path"])
    // The model sends the encoded side: a NumberFromString parameter is a string in the view,
    // and validation decodes it.
    const count = view[1]?.parameters as {
      properties: Record<string, { $ref: string }>
      $defs: Record<string, { type: string }>
    }
    assert.strictEqual(count.properties.n?.$ref, "#/$defs/NumberFromString")
    assert.strictEqual(count.$defs.NumberFromString?.type, "string")
    const validated = Either.getOrThrow(registry.validate(call("count", { n: "5" })))
    assert.deepStrictEqual(validated.args, { n: 5 })
  })

  it("validate: unknown tool and invalid arguments as typed errors with the issues", () => {
    const registry = ToolRegistry.make(Tool.make({ name: "read", description: "", parameters: ReadParams }))
    const unknown = registry.validate(call("write", {}))
    assert.deepStrictEqual(unknown, Either.left(new UnknownTool({ name: "write", available: ["read"] })))
    const invalid = registry.validate(call("read", { lines: 1.5 }))
    assert.isTrue(Either.isLeft(invalid))
    if (Either.isLeft(invalid)) {
      assert.instanceOf(invalid.left, InvalidArguments)
      assert.include(invalid.left.issues, "path")
      assert.include(invalid.left.issues, "lines")
    }
    const ok = Either.getOrThrow(registry.validate(call("read", { path: "a" })))
    assert.deepStrictEqual(ok.args, { path: "a" })
    assert.strictEqual(ok.tool.name, "read")
  })

  it("validate is total even when a parameter schema has symbol keys", () => {
    const key = Symbol.for("test/secret")
    const registry = ToolRegistry.make(noop("sym", Schema.Struct({ [key]: Schema.String })))
    const result = registry.validate(call("sym", {}))
    assert.isTrue(Either.isLeft(result) && result.left._tag === "InvalidArguments")
    if (Either.isLeft(result)) assert.include(result.left.message, "Symbol(test/secret)")
  })

  const validationRegistry = ToolRegistry.make(
    noop("read", ReadParams),
    noop("none"),
    noop("tags", Schema.Struct({ tags: Schema.Array(Schema.String), mode: Schema.Literal("a", "b") })),
    noop("anything", Schema.Unknown),
    noop("count", Schema.Struct({ n: Schema.NumberFromString }))
  )
  const names = validationRegistry.names

  it.prop(
    "validate is pure and total on arbitrary JSON arguments and names",
    {
      name: fc.oneof(fc.constantFrom(...names), fc.string()),
      args: fc.oneof(fc.jsonValue(), fc.anything())
    },
    ({ args, name }) => {
      const first = validationRegistry.validate(call(name, args))
      const second = validationRegistry.validate(call(name, args))
      assert.deepStrictEqual(first, second)
      if (!names.includes(name)) {
        assert.isTrue(Either.isLeft(first) && first.left._tag === "UnknownTool")
      }
      if (Either.isRight(first)) assert.strictEqual(first.right.tool.name, name)
    },
    { fastCheck: { numRuns: 300 } }
  )

  it.prop(
    "restrictTo keeps each kept spec with its handler, in registration order",
    { kept: fc.subarray([...names]) },
    ({ kept }) => {
      const restricted = Either.getOrThrow(validationRegistry.restrictTo(kept))
      assert.deepStrictEqual(restricted.names, names.filter((name) => kept.includes(name)))
      for (const name of names) {
        const original = Option.getOrThrow(validationRegistry.get(name))
        const narrowed = restricted.get(name)
        if (kept.includes(name)) {
          assert.strictEqual(Option.getOrThrow(narrowed), original)
          assert.strictEqual(Option.getOrThrow(narrowed).handler, original.handler)
          assert.isDefined(original.handler)
        } else {
          assert.isTrue(Option.isNone(narrowed))
        }
      }
      assert.deepStrictEqual(restricted.modelView(), validationRegistry.modelView().filter((tool) => kept.includes(tool.name)))
    }
  )

  it.effect.prop(
    "a narrowed registry's executor runs the kept handlers and refuses the others",
    { kept: fc.subarray([...names], { minLength: 1 }) },
    ({ kept }) =>
      Effect.gen(function*() {
        const restricted = Either.getOrThrow(validationRegistry.restrictTo(kept))
        const executor = yield* restricted.executor()
        for (const name of ["none", "anything"]) {
          const outcome = yield* executor.execute(call(name, {}))
          if (kept.includes(name)) assert.deepStrictEqual([outcome.status, outcome.observation], ["Executed", name])
          else assert.strictEqual(outcome.status, "NotExecuted")
        }
      })
  )

  it.prop(
    "restrictTo rejects an unknown name with UnknownTool",
    { kept: fc.subarray([...names]), unknown: fc.string().filter((name) => !names.includes(name)) },
    ({ kept, unknown }) => {
      const result = validationRegistry.restrictTo([...kept, unknown])
      assert.deepStrictEqual(result, Either.left(new UnknownTool({ name: unknown, available: [...names] })))
    }
  )

  it("duplicate names are rejected", () => {
    const result = ToolRegistry.makeEither(noop("a"), noop("b"), noop("a"), noop("b"), noop("c"))
    assert.deepStrictEqual(result, Either.left(new ToolRegistry.DuplicateToolName({ names: ["a", "b"] })))
    assert.throws(() => ToolRegistry.make(noop("x"), noop("x")), /registered twice: x/)
  })

  it.effect("isDerivedFrom recognises the registry an executor came from, through restrictTo", () =>
    Effect.gen(function*() {
      const a = noop("a")
      const b = noop("b")
      const c = noop("c")
      const registry = ToolRegistry.make(a, b, c)
      const full = yield* registry.executor()
      assert.isTrue(ToolRegistry.isDerivedExecutor(full))
      assert.isTrue(ToolRegistry.isDerivedFrom(full, registry))
      const narrowed = yield* Either.getOrThrow(registry.restrictTo(["c", "a"])).executor()
      // Another narrowing to the same names (in any order) derives the same specs.
      assert.isTrue(ToolRegistry.isDerivedFrom(narrowed, Either.getOrThrow(registry.restrictTo(["a", "c"]))))
      assert.isFalse(ToolRegistry.isDerivedFrom(narrowed, registry))
      assert.isFalse(ToolRegistry.isDerivedFrom(full, Either.getOrThrow(registry.restrictTo(["a", "c"]))))
      // Same names, other specs: not derived from it.
      assert.isFalse(ToolRegistry.isDerivedFrom(full, ToolRegistry.make(noop("a"), noop("b"), noop("c"))))
      // A hand-written executor is not a derived one.
      const handWritten = ActionExecutor.make({ execute: () => Effect.die("unused") })
      assert.isFalse(ToolRegistry.isDerivedExecutor(handWritten))
    }))
})

describe("ToolRegistry.describeFailure", () => {
  it("is `Name: message` without a stack, for errors, tagged errors and odd values", () => {
    assert.strictEqual(ToolRegistry.describeFailure(new TypeError("bad")), "TypeError: bad")
    assert.strictEqual(ToolRegistry.describeFailure(new Oops({ message: "nope" })), "Oops: nope")
    assert.strictEqual(ToolRegistry.describeFailure(new MyBug("")), "MyBug")
    const withStack = new Error("top")
    assert.notInclude(ToolRegistry.describeFailure(withStack), "at ")
  })
})
