/**
 * The loop test suite: `Agent.run` end to end over a store under test. A store package calls
 * `suite("sqlite", () => mySqliteLayer)` inside a vitest file; every test builds the layer
 * anew, so each test has a FRESH store (the layer must not share state between builds).
 *
 * It checks every row of SPEC §13 (what each failure becomes), the four budgets, resume after
 * an interruption at every step boundary of a six-step run (in the model call, in the tool
 * handler, after the step is durable), idempotence of a finished run, exclusive claims,
 * snapshot checks, parser defects, store write failures, event delivery failures and history
 * rendering. The parsers, tools and executors it uses are defined here, so the suite depends
 * on nothing but the store.
 *
 * @since 0.1.0
 */
import * as Cause from "effect/Cause"
import * as Data from "effect/Data"
import * as Deferred from "effect/Deferred"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Exit from "effect/Exit"
import * as Fiber from "effect/Fiber"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Schema from "effect/Schema"
import * as TestClock from "effect/TestClock"
import * as ActionExecutor from "@polyloop/core/ActionExecutor"
import * as ActionOutcome from "@polyloop/core/ActionOutcome"
import * as Agent from "@polyloop/core/Agent"
import * as AgentDefinition from "@polyloop/core/AgentDefinition"
import * as DecisionParser from "@polyloop/core/DecisionParser"
import { type ConcurrentWriter, EventDeliveryError, type RunError, StoreError, ToolEnvironmentError } from "@polyloop/core/Errors"
import * as EventSink from "@polyloop/core/EventSink"
import * as Ids from "@polyloop/core/Ids"
import type { LoopEvent } from "@polyloop/core/LoopEvent"
import type * as Message from "@polyloop/core/Message"
import type * as ModelClient from "@polyloop/core/ModelClient"
import * as ModelReply from "@polyloop/core/ModelReply"
import * as ParsedReply from "@polyloop/core/ParsedReply"
import * as RunLog from "@polyloop/core/RunLog"
import * as RunLogStore from "@polyloop/core/RunLogStore"
import * as SyntheticObservations from "@polyloop/core/SyntheticObservations"
import * as Tool from "@polyloop/core/Tool"
import * as ToolContext from "@polyloop/core/ToolContext"
import * as ToolRegistry from "@polyloop/core/ToolRegistry"
import { type Assert, vitest } from "./internal/vitest.js"
import * as ScriptedModel from "./ScriptedModel.js"

/** Options of the suite. */
export interface SuiteOptions {
  /** Per-test timeout in milliseconds (default 30 000). */
  readonly timeout?: number
}

// ---------------------------------------------------------------------------------------------
// Fixtures: a parser, tools, executors and sinks, all deterministic.
// ---------------------------------------------------------------------------------------------

const parserId = "AgentLoopSuite.parser/1"

/**
 * The suite's decision parser. Native tool calls: one → `Act` (arguments must be JSON);
 * several → `InvalidDecision`. Text: `FINISH: answer` → `Finish`; a line `ACT {"tool":…,"arguments":…}`
 * → `Act` on a tool call without an id (a text action language); one fenced block →
 * `CodeAction`; empty text → `NoAction`; anything else → `InvalidDecision`.
 */
const decide = (reply: ModelReply.ModelReply): ParsedReply.ParsedReply => {
  const calls = reply.toolCalls
  if (calls.length > 1) return ParsedReply.invalid("Reply with one tool call per step.")
  const call = calls[0]
  if (call !== undefined) {
    try {
      return ParsedReply.act({ _tag: "ToolCall", id: call.id, name: call.name, arguments: JSON.parse(call.argumentsText) as unknown })
    } catch {
      return ParsedReply.invalid(`The arguments of ${call.name} are not JSON.`)
    }
  }
  const text = reply.text.trim()
  if (text === "") return ParsedReply.noAction
  if (text.startsWith("FINISH:")) return ParsedReply.finish(text.slice("FINISH:".length).trim())
  const actLine = /^ACT (.*)$/m.exec(text)
  if (actLine !== null) {
    try {
      const parsed = JSON.parse(actLine[1]!) as { readonly tool?: unknown; readonly arguments?: unknown }
      if (typeof parsed.tool === "string") return ParsedReply.act({ _tag: "ToolCall", id: "", name: parsed.tool, arguments: parsed.arguments ?? {} })
    } catch {
      // falls through to the explanation below
    }
    return ParsedReply.invalid("An ACT line must carry a JSON object with a tool name.")
  }
  const fence = /^```(\w+)\n([\s\S]*?)\n```$/.exec(text)
  if (fence !== null) return ParsedReply.act({ _tag: "CodeAction", language: fence[1]!, code: fence[2]! })
  return ParsedReply.invalid(`No decision could be read from: ${text.slice(0, 40)}`)
}

const parser: DecisionParser.DecisionParser.Service = { id: parserId, parse: (reply) => Effect.sync(() => decide(reply)) }

/** An ordinary failure of a tool. */
class Oops extends Data.TaggedError("Oops")<{ readonly message: string }> {}

/** Where a handler should stop and wait to be interrupted. */
interface BlockPoint {
  readonly step: number
  readonly reached: Deferred.Deferred<void>
}

/** Tools with observable side effects; handlers record calls, contexts and interruptions. */
interface Fixture {
  readonly tools: ToolRegistry.ToolRegistry<ToolContext.ToolContext>
  /** Side effects performed (`write k=v`), in order. */
  readonly effects: Array<string>
  /** Handler calls per tool. */
  readonly calls: Map<string, number>
  /** Contexts seen by handlers. */
  readonly contexts: Array<ToolContext.ToolContext.Service>
  /** Handlers that saw an interruption. */
  readonly interrupted: Array<string>
  /** Blocks the next handler that runs at `point.step` (once), after its side effect. */
  readonly blockHandlerAt: (point: BlockPoint) => void
}

const makeFixture = (options?: { readonly completingFails?: boolean; readonly tickBy?: Duration.DurationInput }): Fixture => {
  const effects: Array<string> = []
  const calls = new Map<string, number>()
  const contexts: Array<ToolContext.ToolContext.Service> = []
  const interrupted: Array<string> = []
  let blockPoint: BlockPoint | undefined
  const instrument = <A>(
    name: string,
    before: (args: A) => Effect.Effect<void>,
    body: (args: A) => Effect.Effect<string, ToolEnvironmentError | Oops>
  ) =>
  (args: A) =>
    Effect.gen(function*() {
      const ctx = yield* ToolContext.ToolContext
      calls.set(name, (calls.get(name) ?? 0) + 1)
      contexts.push(ctx)
      yield* before(args)
      const block = blockPoint
      if (block !== undefined && block.step === ctx.step) {
        blockPoint = undefined
        yield* Deferred.succeed(block.reached, undefined)
        yield* Effect.never.pipe(
          Effect.onInterrupt(() =>
            Effect.sync(() => {
              interrupted.push(`${name}@${ctx.step}`)
            })
          )
        )
      }
      return yield* body(args)
    })
  const none = () => Effect.void
  const echo = Tool.make({
    name: "echo",
    description: "Echoes a text.",
    parameters: Schema.Struct({ text: Schema.String }),
    replayPolicy: "Always",
    handler: instrument("echo", none, (args: { readonly text: string }) => Effect.succeed(`echo: ${args.text}`))
  })
  const write = Tool.make({
    name: "write",
    description: "Writes a value under a key (a side effect that must not run twice).",
    parameters: Schema.Struct({ key: Schema.String, value: Schema.String }),
    replayPolicy: "Never",
    handler: instrument(
      "write",
      (args: { readonly key: string; readonly value: string }) =>
        Effect.sync(() => {
          effects.push(`write ${args.key}=${args.value}`)
        }),
      (args) => Effect.succeed(`wrote ${args.key}`)
    )
  })
  const submit = Tool.make({
    name: "submit",
    description: "Submits the final answer.",
    parameters: Schema.Struct({ answer: Schema.String }),
    replayPolicy: "Always",
    completesRun: true,
    handler: instrument("submit", none, (args: { readonly answer: string }) =>
      options?.completingFails === true && args.answer === "wrong"
        ? Effect.fail(new Oops({ message: "rejected submission" }))
        : Effect.succeed(`submitted ${args.answer}`))
  })
  const broken = Tool.make({
    name: "broken",
    description: "Talks to a database that is down.",
    parameters: Schema.Struct({}),
    handler: instrument("broken", none, () => Effect.fail(new ToolEnvironmentError({ message: "database unreachable at db:5432" })))
  })
  const flaky = Tool.make({
    name: "flaky",
    description: "Fails with an ordinary error.",
    parameters: Schema.Struct({}),
    replayPolicy: "Always",
    handler: instrument("flaky", none, () => Effect.fail(new Oops({ message: "bad input row 3" })))
  })
  const thrower = Tool.make({
    name: "thrower",
    description: "Throws.",
    parameters: Schema.Struct({}),
    replayPolicy: "Always",
    handler: instrument("thrower", none, () =>
      Effect.sync((): string => {
        throw new TypeError("cannot read property x of undefined")
      }))
  })
  const big = Tool.make({
    name: "big",
    description: "Returns n characters.",
    parameters: Schema.Struct({ n: Schema.Int }),
    replayPolicy: "Always",
    handler: instrument("big", none, (args: { readonly n: number }) => Effect.succeed("x".repeat(args.n)))
  })
  const tick = Tool.make({
    name: "tick",
    description: "Takes time.",
    parameters: Schema.Struct({}),
    replayPolicy: "Always",
    handler: instrument("tick", () => TestClock.adjust(options?.tickBy ?? "20 seconds"), () => Effect.succeed("tock"))
  })
  return {
    tools: ToolRegistry.make(echo, write, submit, broken, flaky, thrower, big, tick),
    effects,
    calls,
    contexts,
    interrupted,
    blockHandlerAt: (point) => {
      blockPoint = point
    }
  }
}

const usage = { inputTokens: 10, outputTokens: 2 } as const

const call = (name: string, args: unknown) => ScriptedModel.toolCall(name, args, { usage })
const say = (text: string) => ScriptedModel.text(text, usage)

const agent = (overrides?: Partial<Parameters<typeof AgentDefinition.make>[0]>): AgentDefinition.AgentDefinition =>
  AgentDefinition.make({
    name: "suite-agent",
    systemPrompt: "You are a careful agent.",
    budget: { maxSteps: 20 },
    modelRetry: { maxAttempts: 1, baseDelay: Duration.millis(1), maxDelay: Duration.millis(1) },
    ...overrides
  })

/** Where a sink should stop and wait to be interrupted. */
interface SinkBlock {
  readonly matches: (event: LoopEvent) => boolean
  readonly reached: Deferred.Deferred<void>
}

/** A sink that records events; `fail` decides which deliveries fail. */
interface RecordingSink {
  readonly events: Array<LoopEvent>
  readonly layer: Layer.Layer<EventSink.EventSink>
  /** Blocks in the next delivery of a matching event (once). */
  readonly blockAt: (block: SinkBlock) => void
}

const recordingSink = (fail: (event: LoopEvent, index: number) => boolean = () => false): RecordingSink => {
  const events: Array<LoopEvent> = []
  let blocking: SinkBlock | undefined
  return {
    events,
    blockAt: (block) => {
      blocking = block
    },
    layer: EventSink.layer((event) =>
      Effect.suspend(() => {
        const index = events.length
        events.push(event)
        const block = blocking
        if (block !== undefined && block.matches(event)) {
          blocking = undefined
          return Effect.zipRight(Deferred.succeed(block.reached, undefined), Effect.never)
        }
        return fail(event, index) ? Effect.fail(new EventDeliveryError({ message: `sink down (event ${index})` })) : Effect.void
      })
    )
  }
}

/** A code executor: runs `python`; `ENV` is a broken sandbox, `DONE` reports completion, `DIE` is a bug. */
const codeExecutor = (ran: Array<string>, options?: { readonly replay?: ActionExecutor.ReplayPolicy }): ActionExecutor.ActionExecutor.Service =>
  ActionExecutor.make({
    execute: (action) =>
      Effect.suspend(() => {
        if (action._tag !== "CodeAction") return Effect.succeed(ActionOutcome.notExecuted("CODE-EXECUTOR: tool calls are not supported"))
        if (action.language !== "python") return Effect.succeed(ActionOutcome.notExecuted(`CODE-EXECUTOR: no ${action.language} runtime`))
        ran.push(action.code)
        if (action.code === "ENV") return Effect.succeed(ActionOutcome.envError("sandbox process died (exit 137)"))
        if (action.code === "DIE") return Effect.die(new RangeError("executor bug"))
        if (action.code === "DONE") return Effect.succeed(ActionOutcome.executed("all tests pass", { envReportedCompletion: true }))
        return Effect.succeed(ActionOutcome.executed(`ran ${action.code}`))
      }),
    ...(options?.replay === undefined ? {} : { replayPolicy: () => options.replay! })
  })

// ---------------------------------------------------------------------------------------------
// Harness
// ---------------------------------------------------------------------------------------------

interface Services {
  readonly model: Layer.Layer<ModelClient.ModelClient>
  /** Default: the derived executor of the request's tools. */
  readonly executor?: ActionExecutor.ActionExecutor.Service
  readonly parser?: DecisionParser.DecisionParser.Service
  readonly sink?: Layer.Layer<EventSink.EventSink>
  /** Default: the store under test. */
  readonly store?: RunLogStore.RunLogStore.Service
}

/** A request whose tools' handlers need at most their `ToolContext`. */
interface SuiteRequest extends Agent.RunRequest {
  readonly tools: ToolRegistry.ToolRegistry<ToolContext.ToolContext>
}

interface Harness {
  readonly store: RunLogStore.RunLogStore.Service
  readonly run: (request: SuiteRequest, services: Services) => Effect.Effect<Agent.RunResult, RunError>
  readonly log: (runId: Ids.RunId) => Effect.Effect<RunLog.RunLog, StoreError>
}

const makeHarness = (store: RunLogStore.RunLogStore.Service): Harness => ({
  store,
  log: (runId) => store.readLog(runId),
  run: (request, services) =>
    Effect.gen(function*() {
      const executor = services.executor ?? (yield* Effect.orDie(request.tools.executor()))
      return yield* Agent.run(request).pipe(
        Effect.provide(
          Layer.mergeAll(
            services.model,
            ActionExecutor.layer(executor),
            DecisionParser.layer(services.parser ?? parser),
            services.sink ?? EventSink.layerNoop,
            Layer.succeed(RunLogStore.RunLogStore, services.store ?? store)
          )
        )
      )
    })
})

const request = (
  runId: string,
  tools: ToolRegistry.ToolRegistry<ToolContext.ToolContext>,
  overrides?: Partial<Parameters<typeof AgentDefinition.make>[0]>,
  task = "Do the task."
): SuiteRequest => ({ runId: Ids.runId(runId), agent: agent(overrides), task, tools })

/** The log as records without sequence numbers, resume records and resume counts (to compare runs). */
const comparable = (log: RunLog.RunLog): ReadonlyArray<unknown> =>
  RunLog.records(log)
    .filter((record) => record._tag !== "RunResumed")
    .map((record) => {
      const { seq: _seq, ...rest } = record
      if (rest._tag === "RunFinished") return { ...rest, counters: { ...rest.counters, resumedCount: 0 } }
      return rest
    })

const resultOfStep = (log: RunLog.RunLog, step: number) => log.results.find((r) => r.step === step)

const lastMessages = (requests: ReadonlyArray<ScriptedModel.SeenRequest>, step: number, n: number): ReadonlyArray<Message.Message> => {
  const seen = requests.filter((r) => r.call.step === step)
  const messages = seen[seen.length - 1]?.request.messages ?? []
  return messages.slice(messages.length - n)
}

/** A store whose chosen writes fail with `StoreError` (before reaching the store). */
const failingWrites = (
  store: RunLogStore.RunLogStore.Service,
  fails: (kind: "start" | "appendReply" | "completeStep" | "appendResume" | "finish", step: number) => boolean
): RunLogStore.RunLogStore.Service => {
  const guard = <A>(kind: Parameters<typeof fails>[0], step: number, runId: Ids.RunId, write: Effect.Effect<A, StoreError | ConcurrentWriter>) =>
    Effect.suspend(() =>
      fails(kind, step)
        ? Effect.fail(new StoreError({ reason: "Unavailable", runId, message: `injected: ${kind} of step ${step} failed` }))
        : write
    )
  return {
    ...store,
    start: (record) => guard("start", -1, record.runId, store.start(record)),
    appendReply: (runId, record) => guard("appendReply", record.step, runId, store.appendReply(runId, record)),
    completeStep: (runId, result, step) => guard("completeStep", step.step, runId, store.completeStep(runId, result, step)),
    appendResume: (runId, record) => guard("appendResume", record.fromStep, runId, store.appendResume(runId, record)),
    finish: (runId, record) => guard("finish", record.counters.steps, runId, store.finish(runId, record))
  }
}

/** The six-step run used by the resume tests: native calls, a Never tool twice, an invalid reply. */
const sixSteps: ReadonlyArray<ModelReply.ModelReply> = [
  call("echo", { text: "a" }),
  call("write", { key: "k1", value: "v1" }),
  say("let me think about it"),
  call("write", { key: "k2", value: "v2" }),
  call("echo", { text: "b" }),
  call("submit", { answer: "42" })
]

type Boundary =
  | { readonly at: "model"; readonly step: number }
  | { readonly at: "tool"; readonly step: number }
  | { readonly at: "durable"; readonly step: number }

const boundaries: ReadonlyArray<Boundary> = [
  ...[0, 1, 2, 3, 4, 5].map((step): Boundary => ({ at: "model", step })),
  ...[0, 1, 3, 4, 5].map((step): Boundary => ({ at: "tool", step })),
  ...[0, 1, 2, 3, 4, 5].map((step): Boundary => ({ at: "durable", step }))
]

const describeBoundary = (b: Boundary): string =>
  b.at === "model"
    ? `during the model call of step ${b.step}`
    : b.at === "tool"
    ? `inside the tool handler of step ${b.step}`
    : `after step ${b.step} is durable`

// ---------------------------------------------------------------------------------------------
// The suite
// ---------------------------------------------------------------------------------------------

/**
 * Registers the loop tests under `describe(name)`. `makeStoreLayer` is called once per test and
 * the layer is built once per test: each test has a fresh, empty store.
 */
export const suite = <E>(name: string, makeStoreLayer: () => Layer.Layer<RunLogStore.RunLogStore, E>, options?: SuiteOptions): void => {
  const { describe, it, ...vitestApi } = vitest(`AgentLoopSuite.suite("${name}")`)
  const assert: Assert = vitestApi.assert
  const timeout = options?.timeout ?? 30_000

  const withHarness = <A, E2>(body: (h: Harness) => Effect.Effect<A, E2>): Effect.Effect<A, E | E2> =>
    Effect.flatMap(RunLogStore.RunLogStore, (store) => body(makeHarness(store))).pipe(Effect.provide(makeStoreLayer()))

  /** A test on TestClock (time moves only when a test moves it). */
  const test = <A, E2>(title: string, body: (h: Harness) => Effect.Effect<A, E2>) =>
    it.effect(title, () => withHarness(body), timeout)

  /** A test on the live clock (model retries sleep for real, briefly). */
  const liveTest = <A, E2>(title: string, body: (h: Harness) => Effect.Effect<A, E2>) =>
    it.live(title, () => withHarness(body), timeout)

  describe(name, () => {
    describe("SPEC §13: what each failure becomes", () => {
      test("a reply the parser cannot interpret is an InvalidDecision whose explanation is fed back; the run goes on", (h) =>
        Effect.gen(function*() {
          const f = makeFixture()
          const model = yield* ScriptedModel.make([say("hmm, what now?"), say("FINISH: done")])
          const result = yield* h.run(request("invalid-1", f.tools), { model: model.layer })
          assert.deepStrictEqual(result.stopReason, { _tag: "Completed", by: "Answer", answer: "done" })
          assert.strictEqual(result.steps, 2)
          assert.strictEqual(result.effectiveSteps, 0)
          const log = yield* h.log(Ids.runId("invalid-1"))
          const first = log.steps[0]!
          assert.strictEqual(first.decision._tag, "InvalidDecision")
          assert.deepStrictEqual(first.resultIds, [])
          assert.strictEqual(log.results.length, 0)
          const fed = lastMessages(yield* model.requests, 1, 2)
          assert.deepStrictEqual(fed, [
            { _tag: "Assistant", text: "hmm, what now?", toolCalls: [] },
            { _tag: "User", text: "No decision could be read from: hmm, what now?" }
          ])
        }))

      test("an unknown tool and invalid arguments are NotExecuted with the synthetic text filled from validation; the run goes on", (h) =>
        Effect.gen(function*() {
          const f = makeFixture()
          const model = yield* ScriptedModel.make([
            call("nope", {}),
            call("echo", { txt: 1 }),
            call("echo", { text: "ok" }),
            say("FINISH: done")
          ])
          const result = yield* h.run(request("notexec-1", f.tools), { model: model.layer })
          assert.deepStrictEqual(result.stopReason, { _tag: "Completed", by: "Answer", answer: "done" })
          assert.strictEqual(result.steps, 4)
          assert.strictEqual(result.effectiveSteps, 1)
          const log = yield* h.log(Ids.runId("notexec-1"))
          const names = f.tools.names.join(", ")
          const unknown = resultOfStep(log, 0)!
          assert.strictEqual(unknown.outcome.status, "NotExecuted")
          assert.isTrue(unknown.outcome.observationIsSynthetic)
          assert.strictEqual(unknown.outcome.observationTruncatedChars, 0)
          assert.strictEqual(
            unknown.outcome.observation,
            SyntheticObservations.fill(SyntheticObservations.defaults.notExecuted, { tool: "nope", issues: "unknown tool \"nope\"", tools: names })
          )
          const invalid = resultOfStep(log, 1)!
          assert.strictEqual(invalid.outcome.status, "NotExecuted")
          const validation = f.tools.validate({ _tag: "ToolCall", id: "x", name: "echo", arguments: { txt: 1 } })
          assert.isTrue(Either.isLeft(validation))
          assert.strictEqual(
            invalid.outcome.observation,
            SyntheticObservations.fill(SyntheticObservations.defaults.notExecuted, {
              tool: "echo",
              issues: Either.isLeft(validation) ? validation.left.message : "",
              tools: names
            })
          )
          assert.include(invalid.outcome.observation, "text")
          assert.strictEqual(f.calls.get("echo"), 1)
          // The synthetic text answers the native call in history.
          const fed = lastMessages(yield* model.requests, 1, 1)
          assert.deepStrictEqual(fed, [{ _tag: "Tool", callId: "call_s0_0", name: "nope", text: unknown.outcome.observation }])
        }))

      test("the executor's own text never enters history: it goes to executorObservation and the ActionExecuted event", (h) =>
        Effect.gen(function*() {
          const ran: Array<string> = []
          const sink = recordingSink()
          const model = yield* ScriptedModel.make([ScriptedModel.code("ruby", "puts 1", { usage }), say("FINISH: ok")])
          const tools = ToolRegistry.empty
          const result = yield* h.run(
            request("own-text-1", tools, {
              syntheticObservations: { notExecuted: "[{tool}] not run: {issues} (tools: {tools})" }
            }),
            { model: model.layer, executor: codeExecutor(ran), sink: sink.layer }
          )
          assert.strictEqual(result.steps, 2)
          const log = yield* h.log(Ids.runId("own-text-1"))
          const r = resultOfStep(log, 0)!
          assert.strictEqual(r.outcome.status, "NotExecuted")
          assert.strictEqual(r.outcome.observation, "[ruby] not run: the executor refused the ruby code action (tools: (none))")
          assert.strictEqual(r.executorObservation, "CODE-EXECUTOR: no ruby runtime")
          for (const seen of yield* model.requests) {
            for (const message of seen.request.messages) assert.notInclude(JSON.stringify(message), "CODE-EXECUTOR")
          }
          const executed = sink.events.find((e) => e._tag === "ActionExecuted")
          assert.isDefined(executed)
          if (executed?._tag === "ActionExecuted") {
            assert.strictEqual(executed.executorObservation, "CODE-EXECUTOR: no ruby runtime")
            assert.strictEqual(executed.outcome.observation, r.outcome.observation)
          }
          assert.deepStrictEqual(ran, [])
        }))

      test("a custom executor that refuses a valid tool call: synthetic text, not the executor's", (h) =>
        Effect.gen(function*() {
          const f = makeFixture()
          const model = yield* ScriptedModel.make([call("echo", { text: "hi" }), say("FINISH: ok")])
          const refusing = ActionExecutor.make({ execute: () => Effect.succeed(ActionOutcome.notExecuted("REFUSED-BY-POLICY-7")) })
          yield* h.run(request("refuse-1", f.tools), { model: model.layer, executor: refusing })
          const log = yield* h.log(Ids.runId("refuse-1"))
          const r = resultOfStep(log, 0)!
          assert.strictEqual(
            r.outcome.observation,
            SyntheticObservations.fill(SyntheticObservations.defaults.notExecuted, {
              tool: "echo",
              issues: "the executor refused the action",
              tools: f.tools.names.join(", ")
            })
          )
          assert.strictEqual(r.executorObservation, "REFUSED-BY-POLICY-7")
          assert.notInclude(JSON.stringify(yield* model.requests), "REFUSED-BY-POLICY-7")
        }))

      test("a tool that fails with an ordinary error or throws is Executed with `Name: message`; the run goes on", (h) =>
        Effect.gen(function*() {
          const f = makeFixture()
          const model = yield* ScriptedModel.make([call("flaky", {}), call("thrower", {}), say("FINISH: done")])
          const result = yield* h.run(request("ordinary-1", f.tools), { model: model.layer })
          assert.strictEqual(result.stopReason._tag, "Completed")
          assert.strictEqual(result.effectiveSteps, 2)
          const log = yield* h.log(Ids.runId("ordinary-1"))
          const flaky = resultOfStep(log, 0)!
          assert.strictEqual(flaky.outcome.status, "Executed")
          assert.strictEqual(flaky.outcome.observation, "Oops: bad input row 3")
          assert.isFalse(flaky.outcome.observationIsSynthetic)
          assert.isTrue(flaky.handlerFailed)
          const thrower = resultOfStep(log, 1)!
          assert.strictEqual(thrower.outcome.status, "Executed")
          assert.strictEqual(thrower.outcome.observation, "TypeError: cannot read property x of undefined")
          assert.notInclude(thrower.outcome.observation, "    at ")
          assert.deepStrictEqual(lastMessages(yield* model.requests, 2, 1), [
            { _tag: "Tool", callId: "call_s1_0", name: "thrower", text: "TypeError: cannot read property x of undefined" }
          ])
        }))

      test("a ToolEnvironmentError is EnvError: the run ends with StopReason.EnvError and no further model call", (h) =>
        Effect.gen(function*() {
          const f = makeFixture()
          const model = yield* ScriptedModel.make([call("broken", {}), say("FINISH: never reached")])
          const result = yield* h.run(request("env-1", f.tools), { model: model.layer })
          assert.deepStrictEqual(result.stopReason, { _tag: "EnvError", message: "database unreachable at db:5432" })
          assert.strictEqual(result.steps, 1)
          assert.strictEqual(result.effectiveSteps, 0)
          assert.strictEqual(yield* model.calls, 1)
          const log = yield* h.log(Ids.runId("env-1"))
          const r = resultOfStep(log, 0)!
          assert.strictEqual(r.outcome.status, "EnvError")
          assert.isTrue(r.outcome.observationIsSynthetic)
          assert.strictEqual(
            r.outcome.observation,
            SyntheticObservations.fill(SyntheticObservations.defaults.envError, {
              tool: "broken",
              issues: "the environment reported a failure",
              tools: f.tools.names.join(", ")
            })
          )
          assert.strictEqual(r.executorObservation, "database unreachable at db:5432")
          assert.deepStrictEqual(Option.map(log.finished, (x) => x.stopReason), Option.some(result.stopReason))
        }))

      test("an EnvError from a custom code executor ends the run too", (h) =>
        Effect.gen(function*() {
          const ran: Array<string> = []
          const model = yield* ScriptedModel.make([ScriptedModel.code("python", "x = 1", { usage }), ScriptedModel.code("python", "ENV", { usage }), say("FINISH: no")])
          const result = yield* h.run(request("env-2", ToolRegistry.empty), { model: model.layer, executor: codeExecutor(ran) })
          assert.deepStrictEqual(result.stopReason, { _tag: "EnvError", message: "sandbox process died (exit 137)" })
          assert.strictEqual(result.steps, 2)
          assert.strictEqual(result.effectiveSteps, 1)
          assert.deepStrictEqual(ran, ["x = 1", "ENV"])
        }))

      liveTest("a model unavailable after its retries fails the run with ModelError; the log stays resumable", (h) =>
        Effect.gen(function*() {
          const f = makeFixture()
          const runId = Ids.runId("model-down-1")
          const retry = { maxAttempts: 3, baseDelay: Duration.millis(1), maxDelay: Duration.millis(2) }
          const down = yield* ScriptedModel.make([call("echo", { text: "a" }), say("FINISH: done")], {
            failures: [{ step: 1, times: 100, retryable: true, message: "503 upstream" }]
          })
          const failed = yield* Effect.flip(h.run(request(runId, f.tools, { modelRetry: retry }), { model: down.layer }))
          assert.strictEqual(failed._tag, "ModelError")
          if (failed._tag === "ModelError") assert.isTrue(failed.retryable)
          // Step 0 once, then three attempts at step 1.
          assert.strictEqual(yield* down.calls, 4)
          const log = yield* h.log(runId)
          assert.strictEqual(log.steps.length, 1)
          assert.strictEqual(log.replies.length, 1)
          assert.isTrue(Option.isNone(log.finished))
          const up = yield* ScriptedModel.make([call("echo", { text: "a" }), say("FINISH: done")])
          const result = yield* h.run(request(runId, f.tools, { modelRetry: retry }), { model: up.layer })
          assert.deepStrictEqual(result.stopReason, { _tag: "Completed", by: "Answer", answer: "done" })
          assert.strictEqual(result.resumedCount, 1)
          assert.strictEqual(yield* up.calls, 1)
          assert.strictEqual(f.calls.get("echo"), 1)
        }))

      liveTest("a retryable ModelError is retried per modelRetry; a non-retryable one is not", (h) =>
        Effect.gen(function*() {
          const f = makeFixture()
          const retry = { maxAttempts: 3, baseDelay: Duration.millis(1), maxDelay: Duration.millis(2) }
          const flaky = yield* ScriptedModel.make([say("FINISH: done")], { failures: [{ times: 2, retryable: true }] })
          const ok = yield* h.run(request("retry-1", f.tools, { modelRetry: retry }), { model: flaky.layer })
          assert.strictEqual(ok.stopReason._tag, "Completed")
          assert.strictEqual(yield* flaky.calls, 3)
          const rejected = yield* ScriptedModel.make([say("FINISH: done")], { failures: [{ times: 1, retryable: false, status: 400 }] })
          const error = yield* Effect.flip(h.run(request("retry-2", f.tools, { modelRetry: retry }), { model: rejected.layer }))
          assert.strictEqual(error._tag, "ModelError")
          assert.strictEqual(yield* rejected.calls, 1)
        }))

      test("a store write that fails is a StoreError: nothing already written is lost and the run resumes", (h) =>
        Effect.gen(function*() {
          const f = makeFixture()
          const runId = Ids.runId("store-fail-1")
          const reference = yield* Effect.flatMap(RunLogStore.makeMemory, (memory) =>
            Effect.gen(function*() {
              const g = makeFixture()
              const model = yield* ScriptedModel.make(sixSteps)
              yield* makeHarness(memory).run(request(runId, g.tools), { model: model.layer })
              return yield* memory.readLog(runId)
            }))
          for (const kind of ["appendReply", "completeStep", "finish"] as const) {
            // A reply of step 3 (write, Never) that is never durable; the completion of step 4 (echo, Always); the finish.
            const failing = failingWrites(h.store, (k, step) => k === kind && (kind === "finish" || step === (kind === "appendReply" ? 3 : 4)))
            const before = yield* h.log(runId)
            const model = yield* ScriptedModel.make(sixSteps)
            const error = yield* Effect.flip(h.run(request(runId, f.tools), { model: model.layer, store: failing }))
            assert.strictEqual(error._tag, "StoreError", kind)
            const after = yield* h.log(runId)
            // Nothing already written was lost.
            assert.deepStrictEqual(RunLog.records(after).slice(0, RunLog.size(before)), RunLog.records(before))
          }
          const model = yield* ScriptedModel.make(sixSteps)
          const result = yield* h.run(request(runId, f.tools), { model: model.layer })
          assert.deepStrictEqual(result.stopReason, { _tag: "Completed", by: "Tool", answer: "submitted 42" })
          assert.strictEqual(result.resumedCount, 3)
          const log = yield* h.log(runId)
          assert.deepStrictEqual(comparable(log), comparable(reference))
          assert.deepStrictEqual(f.effects, ["write k1=v1", "write k2=v2"])
        }))

      test("a parser that throws crashes the run (a defect, not caught); with the bug fixed the run resumes", (h) =>
        Effect.gen(function*() {
          const f = makeFixture()
          const runId = Ids.runId("parser-bug-1")
          const buggy: DecisionParser.DecisionParser.Service = {
            id: parserId,
            parse: (reply) =>
              Effect.sync(() => {
                if (reply.text === "CRASH") throw new Error("parser bug")
                return decide(reply)
              })
          }
          const script = [call("echo", { text: "a" }), say("CRASH"), say("FINISH: done")]
          const model = yield* ScriptedModel.make(script)
          const exit = yield* Effect.exit(h.run(request(runId, f.tools), { model: model.layer, parser: buggy }))
          assert.isTrue(Exit.isFailure(exit) && Cause.isDie(exit.cause) && Option.isNone(Cause.failureOption(exit.cause)))
          const log = yield* h.log(runId)
          assert.strictEqual(log.steps.length, 1)
          assert.strictEqual(log.replies.length, 2)
          assert.isTrue(Option.isNone(log.finished))
          const again = yield* ScriptedModel.make(script)
          const result = yield* h.run(request(runId, f.tools), { model: again.layer })
          assert.deepStrictEqual(result.stopReason, { _tag: "Completed", by: "Answer", answer: "done" })
          // The crashed step's logged reply was re-parsed, not asked again.
          assert.deepStrictEqual((yield* again.requests).map((r) => r.call.step), [2])
          const final = yield* h.log(runId)
          assert.strictEqual(final.steps[1]!.decision._tag, "InvalidDecision")
        }))

      test("an executor defect crashes the run; on resume the interrupted action is not re-run (replay Never)", (h) =>
        Effect.gen(function*() {
          const ran: Array<string> = []
          const runId = Ids.runId("executor-bug-1")
          const script = [ScriptedModel.code("python", "DIE", { usage }), say("FINISH: done")]
          const model = yield* ScriptedModel.make(script)
          const exit = yield* Effect.exit(h.run(request(runId, ToolRegistry.empty), { model: model.layer, executor: codeExecutor(ran) }))
          assert.isTrue(Exit.isFailure(exit) && Cause.isDie(exit.cause))
          const log = yield* h.log(runId)
          assert.strictEqual(log.replies.length, 1)
          assert.strictEqual(log.steps.length, 0)
          const again = yield* ScriptedModel.make(script)
          const result = yield* h.run(request(runId, ToolRegistry.empty), { model: again.layer, executor: codeExecutor(ran) })
          assert.strictEqual(result.stopReason._tag, "Completed")
          assert.deepStrictEqual(ran, ["DIE"])
          const final = yield* h.log(runId)
          const r = resultOfStep(final, 0)!
          assert.strictEqual(r.outcome.status, "NotExecuted")
          assert.strictEqual(
            r.outcome.observation,
            SyntheticObservations.fill(SyntheticObservations.defaults.interrupted, {
              tool: "python",
              issues: "the run stopped while the action was in flight",
              tools: "(none)"
            })
          )
        }))

      test("a run interrupted mid-tool: the handler sees the interrupt, nothing is written for the step beyond ModelReplied, the claim is released", (h) =>
        Effect.gen(function*() {
          const f = makeFixture()
          const runId = Ids.runId("interrupt-tool-1")
          const reached = yield* Deferred.make<void>()
          f.blockHandlerAt({ step: 1, reached })
          const model = yield* ScriptedModel.make(sixSteps)
          const fiber = yield* Effect.fork(h.run(request(runId, f.tools), { model: model.layer }))
          yield* Deferred.await(reached)
          const before = yield* h.log(runId)
          yield* Fiber.interrupt(fiber)
          const exit = yield* Fiber.await(fiber)
          assert.isTrue(Exit.isInterrupted(exit))
          assert.deepStrictEqual(f.interrupted, ["write@1"])
          const log = yield* h.log(runId)
          assert.deepStrictEqual(log, before)
          assert.strictEqual(log.replies.length, 2)
          assert.strictEqual(log.steps.length, 1)
          assert.strictEqual(log.results.length, 1)
          // The claim was released: a new run resumes at once.
          const again = yield* ScriptedModel.make(sixSteps)
          const result = yield* h.run(request(runId, f.tools), { model: again.layer })
          assert.strictEqual(result.resumedCount, 1)
          assert.deepStrictEqual(f.effects, ["write k1=v1", "write k2=v2"])
        }))

      test("a run interrupted during the model call stops the call in flight", (h) =>
        Effect.gen(function*() {
          const f = makeFixture()
          const runId = Ids.runId("interrupt-model-1")
          const reached = yield* Deferred.make<void>()
          const model = yield* ScriptedModel.make(sixSteps, {
            onCall: (c) => (c.step === 2 ? Effect.zipRight(Deferred.succeed(reached, undefined), Effect.never) : Effect.void)
          })
          const fiber = yield* Effect.fork(h.run(request(runId, f.tools), { model: model.layer }))
          yield* Deferred.await(reached)
          yield* Fiber.interrupt(fiber)
          assert.strictEqual(yield* model.interruptions, 1)
          const log = yield* h.log(runId)
          assert.strictEqual(log.replies.length, 2)
          assert.strictEqual(log.steps.length, 2)
        }))

      test("a configuration changed between start and resume is refused with SnapshotMismatch and the log is unchanged", (h) =>
        Effect.gen(function*() {
          const f = makeFixture()
          const runId = Ids.runId("snapshot-1")
          const down = yield* ScriptedModel.make(sixSteps, { failures: [{ step: 2, times: 1, retryable: false }] })
          yield* Effect.flip(h.run(request(runId, f.tools), { model: down.layer }))
          const before = yield* h.log(runId)
          assert.strictEqual(before.steps.length, 2)
          const otherSchema = ToolRegistry.make(
            ...f.tools.tools.map((tool) =>
              tool.name === "echo"
                ? Tool.make({ name: "echo", description: tool.description, parameters: Schema.Struct({ text: Schema.String, loud: Schema.Boolean }), replayPolicy: "Always", handler: () => Effect.succeed("") })
                : tool
            )
          )
          const changes: ReadonlyArray<readonly [string, SuiteRequest, string]> = [
            ["system prompt", request(runId, f.tools, { systemPrompt: "You are a reckless agent." }), "agent.systemPrompt"],
            ["tool schema", request(runId, otherSchema), "tools[0].parameters"],
            ["budget", request(runId, f.tools, { budget: { maxSteps: 21 } }), "agent.budget.maxSteps"],
            ["task", request(runId, f.tools, {}, "Do another task."), "task"]
          ]
          for (const [what, changed, path] of changes) {
            const never = yield* ScriptedModel.make([])
            const error = yield* Effect.flip(h.run(changed, { model: never.layer }))
            assert.strictEqual(error._tag, "SnapshotMismatch", what)
            if (error._tag === "SnapshotMismatch") {
              assert.isTrue(error.differences.some(([p]) => p.startsWith(path)), `${what}: ${JSON.stringify(error.differences)}`)
            }
            assert.strictEqual(yield* never.calls, 0)
            assert.deepStrictEqual(yield* h.log(runId), before, what)
          }
          // modelRetry is not in the snapshot: a resume may change it.
          const up = yield* ScriptedModel.make(sixSteps)
          const result = yield* h.run(request(runId, f.tools, { modelRetry: { maxAttempts: 5, baseDelay: Duration.millis(7), maxDelay: Duration.seconds(1) } }), { model: up.layer })
          assert.strictEqual(result.stopReason._tag, "Completed")
          assert.strictEqual(result.resumedCount, 1)
        }))

      test("a run being run by another owner is refused with RunBusy and nothing is done", (h) =>
        Effect.gen(function*() {
          const f = makeFixture()
          const runId = Ids.runId("busy-1")
          const reached = yield* Deferred.make<void>()
          const gate = yield* Deferred.make<void>()
          const first = yield* ScriptedModel.make(sixSteps, {
            onCall: (c) => (c.step === 1 && c.attempt === 0 ? Effect.zipRight(Deferred.succeed(reached, undefined), Deferred.await(gate)) : Effect.void)
          })
          const fiber = yield* Effect.fork(h.run(request(runId, f.tools), { model: first.layer }))
          yield* Deferred.await(reached)
          const before = yield* h.log(runId)
          const second = yield* ScriptedModel.make(sixSteps)
          const error = yield* Effect.flip(h.run(request(runId, f.tools), { model: second.layer }))
          assert.strictEqual(error._tag, "RunBusy")
          assert.strictEqual(yield* second.calls, 0)
          assert.deepStrictEqual(yield* h.log(runId), before)
          yield* Deferred.succeed(gate, undefined)
          const result = yield* Fiber.join(fiber)
          assert.strictEqual(result.stopReason._tag, "Completed")
          assert.strictEqual(result.resumedCount, 0)
          assert.deepStrictEqual(f.effects, ["write k1=v1", "write k2=v2"])
        }))

      test("two runs started at once on one run id: exactly one runs, the other fails with RunBusy", (h) =>
        Effect.gen(function*() {
          const f = makeFixture()
          const runId = Ids.runId("busy-2")
          // Whichever run claims first stops at its first model call until the other has returned.
          const reached = yield* Deferred.make<void>()
          const gate = yield* Deferred.make<void>()
          const hold = {
            onCall: (c: ScriptedModel.Call) =>
              c.step === 0 && c.attempt === 0 ? Effect.zipRight(Deferred.succeed(reached, undefined), Deferred.await(gate)) : Effect.void
          }
          const a = yield* ScriptedModel.make(sixSteps, hold)
          const b = yield* ScriptedModel.make(sixSteps, hold)
          const fa = yield* Effect.fork(Effect.either(h.run(request(runId, f.tools), { model: a.layer })))
          const fb = yield* Effect.fork(Effect.either(h.run(request(runId, f.tools), { model: b.layer })))
          // The first to return is the refused one: the other is held at the gate.
          const refused = yield* Effect.raceFirst(Fiber.join(fa), Fiber.join(fb))
          assert.isTrue(Either.isLeft(refused) && refused.left._tag === "RunBusy", JSON.stringify(refused))
          yield* Deferred.await(reached)
          yield* Deferred.succeed(gate, undefined)
          const outcomes = [yield* Fiber.join(fa), yield* Fiber.join(fb)]
          const ok = outcomes.filter(Either.isRight)
          const busy = outcomes.filter((o) => Either.isLeft(o) && o.left._tag === "RunBusy")
          assert.strictEqual(ok.length, 1)
          assert.strictEqual(busy.length, 1)
          assert.strictEqual((yield* a.calls) + (yield* b.calls), 6)
          assert.deepStrictEqual(f.effects, ["write k1=v1", "write k2=v2"])
          const log = yield* h.log(runId)
          assert.strictEqual(log.resumes.length, 0)
          assert.strictEqual(log.steps.length, 6)
        }))

      test("an event sink that fails is counted and never interrupts the run", (h) =>
        Effect.gen(function*() {
          const f = makeFixture()
          const failing = recordingSink((event) => event._tag !== "RunFinished")
          const model = yield* ScriptedModel.make(sixSteps)
          const result = yield* h.run(request("sink-1", f.tools), { model: model.layer, sink: failing.layer })
          assert.strictEqual(result.stopReason._tag, "Completed")
          assert.strictEqual(result.steps, 6)
          const delivered = failing.events.length
          // Every event but RunFinished failed; RunFinished is emitted after its record.
          assert.strictEqual(result.eventDeliveryFailures, delivered - 1)
          assert.isAbove(result.eventDeliveryFailures, 6 * 4)
          const log = yield* h.log(Ids.runId("sink-1"))
          assert.deepStrictEqual(Option.map(log.finished, (x) => x.eventDeliveryFailures), Option.some(delivered - 1))
          const quiet = yield* ScriptedModel.make(sixSteps)
          const g = makeFixture()
          const clean = yield* h.run(request("sink-2", g.tools), { model: quiet.layer, sink: recordingSink().layer })
          assert.strictEqual(clean.eventDeliveryFailures, 0)
        }))

      test("an executor derived from another registry is refused with ExecutorRegistryMismatch before anything is written", (h) =>
        Effect.gen(function*() {
          const f = makeFixture()
          const narrowed = Either.getOrThrow(f.tools.restrictTo(["echo", "submit"]))
          const executor = yield* Effect.orDie(narrowed.executor())
          const model = yield* ScriptedModel.make(sixSteps)
          const error = yield* Effect.flip(h.run(request("mismatch-1", f.tools), { model: model.layer, executor }))
          assert.strictEqual(error._tag, "ExecutorRegistryMismatch")
          assert.isTrue(RunLog.isEmpty(yield* h.log(Ids.runId("mismatch-1"))))
          assert.strictEqual(yield* model.calls, 0)
          // The same narrowing on both sides is accepted.
          const ok = yield* ScriptedModel.make([call("echo", { text: "x" }), call("submit", { answer: "y" })])
          const result = yield* h.run(request("mismatch-2", narrowed), { model: ok.layer, executor })
          assert.deepStrictEqual(result.stopReason, { _tag: "Completed", by: "Tool", answer: "submitted y" })
        }))

      test("an invalid agent definition is refused with InvalidRunRequest before anything is written", (h) =>
        Effect.gen(function*() {
          const f = makeFixture()
          const error = yield* Effect.flip(h.run(request("invalid-req-1", f.tools, { budget: { maxSteps: 0 } }), { model: ScriptedModel.unreachable }))
          assert.strictEqual(error._tag, "InvalidRunRequest")
          assert.isTrue(RunLog.isEmpty(yield* h.log(Ids.runId("invalid-req-1"))))
        }))
    })

    describe("idempotence", () => {
      test("a finished run id returns its recorded result without calling the model or the executor", (h) =>
        Effect.gen(function*() {
          const f = makeFixture()
          const runId = Ids.runId("finished-1")
          const model = yield* ScriptedModel.make(sixSteps)
          const first = yield* h.run(request(runId, f.tools), { model: model.layer })
          const log = yield* h.log(runId)
          const dying = ActionExecutor.make({ execute: () => Effect.dieMessage("the executor must not be called") })
          const sink = recordingSink()
          const second = yield* h.run(request(runId, f.tools), { model: ScriptedModel.unreachable, executor: dying, sink: sink.layer })
          assert.deepStrictEqual(second, first)
          assert.deepStrictEqual(yield* h.log(runId), log)
          assert.deepStrictEqual(sink.events, [])
          // Even under another configuration: a finished run is history, not a resume.
          const third = yield* h.run(request(runId, f.tools, { systemPrompt: "changed" }), { model: ScriptedModel.unreachable, executor: dying })
          assert.deepStrictEqual(third, first)
          assert.deepStrictEqual(Schema.decodeUnknownSync(Agent.RunResult)(Schema.encodeSync(Agent.RunResult)(first)), first)
        }))

      test("a finished run returns its result even while another caller holds its claim; an unfinished one is refused with RunBusy", (h) =>
        Effect.gen(function*() {
          const f = makeFixture()
          const done = Ids.runId("finished-2")
          const model = yield* ScriptedModel.make(sixSteps)
          const first = yield* h.run(request(done, f.tools), { model: model.layer })
          const doneLog = yield* h.log(done)
          const open = Ids.runId("finished-3")
          const down = yield* ScriptedModel.make(sixSteps, { failures: [{ step: 2, times: 1, retryable: false }] })
          yield* Effect.flip(h.run(request(open, f.tools), { model: down.layer }))
          const openLog = yield* h.log(open)
          yield* Effect.scoped(
            Effect.gen(function*() {
              yield* h.store.claim(done)
              yield* h.store.claim(open)
              const again = yield* h.run(request(done, f.tools), { model: ScriptedModel.unreachable })
              assert.deepStrictEqual(again, first)
              const error = yield* Effect.flip(h.run(request(open, f.tools), { model: ScriptedModel.unreachable }))
              assert.strictEqual(error._tag, "RunBusy")
            })
          )
          assert.deepStrictEqual(yield* h.log(done), doneLog)
          assert.deepStrictEqual(yield* h.log(open), openLog)
        }))
    })

    describe("budgets", () => {
      test("maxSteps stops with BudgetExhausted(Steps)", (h) =>
        Effect.gen(function*() {
          const f = makeFixture()
          const model = yield* ScriptedModel.make(() => call("echo", { text: "again" }))
          const result = yield* h.run(request("steps-1", f.tools, { budget: { maxSteps: 3 } }), { model: model.layer })
          assert.deepStrictEqual(result.stopReason, { _tag: "BudgetExhausted", budget: "Steps" })
          assert.strictEqual(result.steps, 3)
          assert.strictEqual(yield* model.calls, 3)
        }))

      test("a model that keeps calling an unknown tool is stopped by maxSteps with zero effective steps", (h) =>
        Effect.gen(function*() {
          const f = makeFixture()
          const model = yield* ScriptedModel.make(() => call("delete_everything", { really: true }))
          const result = yield* h.run(request("unknown-loop-1", f.tools, { budget: { maxSteps: 7, maxEffectiveSteps: 1 } }), { model: model.layer })
          assert.deepStrictEqual(result.stopReason, { _tag: "BudgetExhausted", budget: "Steps" })
          assert.strictEqual(result.steps, 7)
          assert.strictEqual(result.effectiveSteps, 0)
        }))

      test("maxEffectiveSteps stops with BudgetExhausted(EffectiveSteps); invalid, NotExecuted and NoAction steps do not count", (h) =>
        Effect.gen(function*() {
          const f = makeFixture()
          const model = yield* ScriptedModel.make([
            say("gibberish"),
            call("echo", { text: "1" }),
            call("nope", {}),
            say(""),
            call("echo", { text: "2" }),
            call("echo", { text: "3" })
          ])
          const result = yield* h.run(request("effective-1", f.tools, { budget: { maxSteps: 10, maxEffectiveSteps: 2 } }), { model: model.layer })
          assert.deepStrictEqual(result.stopReason, { _tag: "BudgetExhausted", budget: "EffectiveSteps" })
          assert.strictEqual(result.steps, 5)
          assert.strictEqual(result.effectiveSteps, 2)
          const log = yield* h.log(Ids.runId("effective-1"))
          assert.deepStrictEqual(log.steps.map((s) => s.decision._tag), ["InvalidDecision", "Act", "Act", "NoAction", "Act"])
        }))

      test("maxTokens stops with BudgetExhausted(Tokens)", (h) =>
        Effect.gen(function*() {
          const f = makeFixture()
          const model = yield* ScriptedModel.make(() => call("echo", { text: "t" }))
          const result = yield* h.run(request("tokens-1", f.tools, { budget: { maxSteps: 100, maxTokens: 40 } }), { model: model.layer })
          assert.deepStrictEqual(result.stopReason, { _tag: "BudgetExhausted", budget: "Tokens" })
          assert.strictEqual(result.steps, 4)
          assert.deepStrictEqual(result.usage, { inputTokens: 40, outputTokens: 8 })
        }))

      test("maxDuration stops with BudgetExhausted(Duration), measured with Clock; time the run was down does not count", (h) =>
        Effect.gen(function*() {
          const f = makeFixture({ tickBy: "20 seconds" })
          const runId = Ids.runId("duration-1")
          const budget = { maxSteps: 100, maxDuration: Duration.minutes(1) }
          const reached = yield* Deferred.make<void>()
          const blocking = yield* ScriptedModel.make(() => call("tick", {}), {
            onCall: (c) => (c.step === 2 && c.attempt === 0 ? Effect.zipRight(Deferred.succeed(reached, undefined), Effect.never) : Effect.void)
          })
          const fiber = yield* Effect.fork(h.run(request(runId, f.tools, { budget }), { model: blocking.layer }))
          yield* Deferred.await(reached)
          yield* Fiber.interrupt(fiber)
          // Down for an hour.
          yield* TestClock.adjust("1 hour")
          const model = yield* ScriptedModel.make(() => call("tick", {}))
          const result = yield* h.run(request(runId, f.tools, { budget }), { model: model.layer })
          assert.deepStrictEqual(result.stopReason, { _tag: "BudgetExhausted", budget: "Duration" })
          assert.strictEqual(result.steps, 3)
          const log = yield* h.log(runId)
          assert.deepStrictEqual(log.steps.map((s) => s.elapsed), [20_000, 20_000, 20_000])
          assert.deepStrictEqual(Option.map(log.finished, (x) => x.counters.elapsed), Option.some(60_000))
        }))
    })

    describe("completion", () => {
      test("a completing tool that returned completes the run; one that failed does not", (h) =>
        Effect.gen(function*() {
          const f = makeFixture({ completingFails: true })
          const model = yield* ScriptedModel.make([call("submit", { answer: "wrong" }), call("submit", { answer: "right" })])
          const result = yield* h.run(request("complete-1", f.tools), { model: model.layer })
          assert.deepStrictEqual(result.stopReason, { _tag: "Completed", by: "Tool", answer: "submitted right" })
          assert.strictEqual(result.steps, 2)
          assert.strictEqual(result.effectiveSteps, 2)
          const log = yield* h.log(Ids.runId("complete-1"))
          assert.isTrue(resultOfStep(log, 0)!.handlerFailed)
          assert.isFalse(resultOfStep(log, 1)!.handlerFailed)
        }))

      test("an environment that reports completion completes the run (Completed(Environment))", (h) =>
        Effect.gen(function*() {
          const ran: Array<string> = []
          const model = yield* ScriptedModel.make([ScriptedModel.code("python", "x = 1", { usage }), ScriptedModel.code("python", "DONE", { usage }), say("FINISH: never")])
          const result = yield* h.run(request("complete-2", ToolRegistry.empty), { model: model.layer, executor: codeExecutor(ran) })
          assert.deepStrictEqual(result.stopReason, { _tag: "Completed", by: "Environment" })
          assert.strictEqual(result.steps, 2)
          assert.strictEqual(yield* model.calls, 2)
        }))

      test("EnvError is judged before completion and Finish before budgets", (h) =>
        Effect.gen(function*() {
          const f = makeFixture()
          const model = yield* ScriptedModel.make([say("FINISH: at the last step")])
          const result = yield* h.run(request("order-1", f.tools, { budget: { maxSteps: 1, maxTokens: 1 } }), { model: model.layer })
          assert.deepStrictEqual(result.stopReason, { _tag: "Completed", by: "Answer", answer: "at the last step" })
          const env = yield* ScriptedModel.make([call("broken", {})])
          const ended = yield* h.run(request("order-2", f.tools, { budget: { maxSteps: 1 } }), { model: env.layer })
          assert.strictEqual(ended.stopReason._tag, "EnvError")
        }))
    })

    describe("history rendering", () => {
      test("native tool calls render as Assistant{toolCalls} + Tool{callId}; the handler sees its ToolContext", (h) =>
        Effect.gen(function*() {
          const f = makeFixture()
          const model = yield* ScriptedModel.make([ScriptedModel.toolCall("echo", { text: "hi" }, { id: "abc", text: "calling", usage }), say("FINISH: done")])
          yield* h.run(request("render-1", f.tools), { model: model.layer })
          const requests = yield* model.requests
          assert.deepStrictEqual(requests[1]!.request.messages, [
            { _tag: "System", text: "You are a careful agent." },
            { _tag: "User", text: "Do the task." },
            { _tag: "Assistant", text: "calling", toolCalls: [{ id: "abc", name: "echo", argumentsText: "{\"text\":\"hi\"}" }] },
            { _tag: "Tool", callId: "abc", name: "echo", text: "echo: hi" }
          ])
          assert.deepStrictEqual(requests[0]!.request.tools, f.tools.modelView())
          assert.deepStrictEqual(f.contexts, [ToolContext.make({ runId: "render-1", step: 0, callId: "abc" })])
        }))

      test("a text action language gets call id call_<step> and its observation as a User message through the template", (h) =>
        Effect.gen(function*() {
          const f = makeFixture()
          const model = yield* ScriptedModel.make([
            say("I will echo.\nACT {\"tool\":\"echo\",\"arguments\":{\"text\":\"yo\"}}"),
            say("ACT {\"tool\":\"echo\",\"arguments\":{\"text\":\"again\"}}"),
            say("FINISH: done")
          ])
          yield* h.run(
            request("render-2", f.tools, { historyRendering: { observationTemplate: "<obs>{observation}</obs>" } }),
            { model: model.layer }
          )
          const log = yield* h.log(Ids.runId("render-2"))
          const action = resultOfStep(log, 1)!.action
          assert.strictEqual(action._tag === "ToolCall" ? action.id : "", "call_1")
          const step = log.steps[1]!.decision
          assert.deepStrictEqual(step._tag === "Act" ? step.actions : undefined, [action])
          assert.deepStrictEqual(f.contexts.map((c) => c.idempotencyKey), ["render-2/0/call_0", "render-2/1/call_1"])
          assert.deepStrictEqual(lastMessages(yield* model.requests, 2, 4), [
            { _tag: "Assistant", text: "I will echo.\nACT {\"tool\":\"echo\",\"arguments\":{\"text\":\"yo\"}}", toolCalls: [] },
            { _tag: "User", text: "<obs>echo: yo</obs>" },
            { _tag: "Assistant", text: "ACT {\"tool\":\"echo\",\"arguments\":{\"text\":\"again\"}}", toolCalls: [] },
            { _tag: "User", text: "<obs>echo: again</obs>" }
          ])
        }))

      test("code actions render through the default template; NoAction gets the noAction text", (h) =>
        Effect.gen(function*() {
          const ran: Array<string> = []
          const model = yield* ScriptedModel.make([ScriptedModel.code("python", "print(1)", { usage }), say(""), say("FINISH: done")])
          yield* h.run(request("render-3", ToolRegistry.empty), { model: model.layer, executor: codeExecutor(ran) })
          assert.deepStrictEqual(lastMessages(yield* model.requests, 2, 4), [
            { _tag: "Assistant", text: "```python\nprint(1)\n```", toolCalls: [] },
            { _tag: "User", text: "Observation:\nran print(1)" },
            { _tag: "Assistant", text: "", toolCalls: [] },
            { _tag: "User", text: SyntheticObservations.defaults.noAction }
          ])
          const log = yield* h.log(Ids.runId("render-3"))
          assert.deepStrictEqual(log.steps.map((s) => s.resultIds), [[Ids.resultIdFor(0)], [], []])
        }))

      test("an invalid native reply answers each tool call with the explanation (every call gets an answer)", (h) =>
        Effect.gen(function*() {
          const f = makeFixture()
          const two = ModelReply.make({
            text: "",
            toolCalls: [{ id: "a", name: "echo", argumentsText: "{}" }, { id: "b", name: "write", argumentsText: "{}" }],
            usage
          })
          const model = yield* ScriptedModel.make([two, say("FINISH: done")])
          yield* h.run(request("render-4", f.tools), { model: model.layer })
          assert.deepStrictEqual(lastMessages(yield* model.requests, 1, 3), [
            { _tag: "Assistant", text: "", toolCalls: two.toolCalls },
            { _tag: "Tool", callId: "a", name: "echo", text: "Reply with one tool call per step." },
            { _tag: "Tool", callId: "b", name: "write", text: "Reply with one tool call per step." }
          ])
        }))

      test("observationLimit cuts Executed observations entering history and counts the cut", (h) =>
        Effect.gen(function*() {
          const f = makeFixture()
          const model = yield* ScriptedModel.make([call("big", { n: 100 }), call("big", { n: 5 }), say("FINISH: done")])
          yield* h.run(request("limit-1", f.tools, { observationLimit: 10 }), { model: model.layer })
          const log = yield* h.log(Ids.runId("limit-1"))
          const cut = resultOfStep(log, 0)!
          assert.strictEqual(cut.outcome.observation, "x".repeat(10))
          assert.strictEqual(cut.outcome.observationTruncatedChars, 90)
          assert.strictEqual(cut.executorObservation, "x".repeat(100))
          const whole = resultOfStep(log, 1)!
          assert.strictEqual(whole.outcome.observation, "xxxxx")
          assert.strictEqual(whole.outcome.observationTruncatedChars, 0)
          assert.deepStrictEqual(lastMessages(yield* model.requests, 1, 1), [{ _tag: "Tool", callId: "call_s0_0", name: "big", text: "x".repeat(10) }])
        }))
    })

    describe("events", () => {
      test("events of a run are emitted in order, each after the record it reports", (h) =>
        Effect.gen(function*() {
          const f = makeFixture()
          const sink = recordingSink()
          const model = yield* ScriptedModel.make([call("echo", { text: "a" }), say("nonsense"), say("FINISH: ok")])
          yield* h.run(request("events-1", f.tools), { model: model.layer, sink: sink.layer })
          assert.deepStrictEqual(sink.events.map((e) => e._tag), [
            "RunStarted",
            "StepStarted",
            "ModelReplied",
            "DecisionParsed",
            "ActionExecuted",
            "StepCompleted",
            "StepStarted",
            "ModelReplied",
            "DecisionParsed",
            "StepCompleted",
            "StepStarted",
            "ModelReplied",
            "DecisionParsed",
            "StepCompleted",
            "RunFinished"
          ])
          const log = yield* h.log(Ids.runId("events-1"))
          const started = sink.events[0]
          assert.strictEqual(started?._tag === "RunStarted" ? started.snapshotHash : "", Option.getOrThrow(log.started).snapshotHash)
        }))
    })

    describe("resume after an interruption at every step boundary", () => {
      for (const boundary of boundaries) {
        test(`interrupted ${describeBoundary(boundary)}: the resumed log equals the uninterrupted one, and a Never tool never runs twice`, (h) =>
          Effect.gen(function*() {
            const runId = Ids.runId(`boundary-${boundary.at}-${boundary.step}`)
            // The uninterrupted reference, on a private memory store.
            const refFixture = makeFixture()
            const refModel = yield* ScriptedModel.make(sixSteps)
            const reference = yield* Effect.flatMap(RunLogStore.makeMemory, (memory) =>
              Effect.zipRight(
                makeHarness(memory).run(request(runId, refFixture.tools), { model: refModel.layer }),
                memory.readLog(runId)
              ))
            const refRequests = yield* refModel.requests

            const f = makeFixture()
            const reached = yield* Deferred.make<void>()
            const sink = recordingSink()
            let blocked = false
            const model = yield* ScriptedModel.make(sixSteps, {
              onCall: (c) =>
                boundary.at === "model" && c.step === boundary.step && !blocked
                  ? Effect.zipRight(
                    Effect.sync(() => {
                      blocked = true
                    }),
                    Effect.zipRight(Deferred.succeed(reached, undefined), Effect.never)
                  )
                  : Effect.void
            })
            if (boundary.at === "tool") f.blockHandlerAt({ step: boundary.step, reached })
            if (boundary.at === "durable") {
              sink.blockAt({ matches: (e) => e._tag === "StepCompleted" && e.step === boundary.step, reached })
            }
            const fiber = yield* Effect.fork(h.run(request(runId, f.tools), { model: model.layer, sink: sink.layer }))
            yield* Deferred.await(reached)
            const atInterrupt = yield* h.log(runId)
            yield* Fiber.interrupt(fiber)
            assert.isTrue(Exit.isInterrupted(yield* Fiber.await(fiber)))
            const afterInterrupt = yield* h.log(runId)
            // Nothing more was written once the fiber was interrupted.
            assert.deepStrictEqual(afterInterrupt, atInterrupt)
            const k = boundary.step
            if (boundary.at === "model") {
              assert.strictEqual(afterInterrupt.replies.length, k)
              assert.strictEqual(afterInterrupt.steps.length, k)
            } else if (boundary.at === "tool") {
              assert.strictEqual(afterInterrupt.replies.length, k + 1)
              assert.strictEqual(afterInterrupt.steps.length, k)
              assert.isUndefined(resultOfStep(afterInterrupt, k))
              assert.strictEqual(f.interrupted.length, 1)
            } else {
              assert.strictEqual(afterInterrupt.steps.length, k + 1)
              assert.isTrue(Option.isNone(afterInterrupt.finished))
            }

            const resumedModel = yield* ScriptedModel.make(sixSteps)
            const result = yield* h.run(request(runId, f.tools), { model: resumedModel.layer })
            assert.strictEqual(result.resumedCount, 1)
            assert.deepStrictEqual(result.stopReason, { _tag: "Completed", by: "Tool", answer: "submitted 42" })
            const final = yield* h.log(runId)
            assert.strictEqual(final.resumes.length, 1)
            assert.strictEqual(final.resumes[0]!.fromStep, afterInterrupt.steps.length)

            const neverCut = boundary.at === "tool" && sixSteps[k]!.toolCalls[0]!.name === "write"
            if (neverCut) {
              // The Never tool was cut mid-flight: its step completes as NotExecuted with the interrupted text.
              const patched = comparable(reference).map((record) => {
                const r = record as { readonly _tag: string; readonly step?: number }
                if (r._tag === "ActionResulted" && r.step === k) {
                  const resulted = record as Omit<RunLog.ActionResulted, "seq">
                  return {
                    ...resulted,
                    outcome: {
                      status: "NotExecuted",
                      observation: SyntheticObservations.fill(SyntheticObservations.defaults.interrupted, {
                        tool: "write",
                        issues: "the run stopped while the action was in flight",
                        tools: f.tools.names.join(", ")
                      }),
                      observationIsSynthetic: true,
                      envReportedCompletion: false,
                      observationTruncatedChars: 0
                    },
                    executorObservation: "",
                    handlerFailed: false
                  }
                }
                if (r._tag === "StepCompleted" && r.step === k) return { ...(record as Omit<RunLog.StepCompleted, "seq">), effective: false }
                if (r._tag === "RunFinished") {
                  const finished = record as Omit<RunLog.RunFinished, "seq">
                  return { ...finished, counters: { ...finished.counters, effectiveSteps: finished.counters.effectiveSteps - 1 } }
                }
                return record
              })
              assert.deepStrictEqual(comparable(final), patched)
            } else {
              assert.deepStrictEqual(comparable(final), comparable(reference))
              // The model saw exactly the history of the uninterrupted run.
              for (const seen of yield* resumedModel.requests) {
                const same = refRequests.find((r) => r.call.step === seen.call.step)
                assert.deepStrictEqual(seen.request, same?.request, `request of step ${seen.call.step}`)
              }
            }
            // A Never tool never runs twice: each write happened exactly once.
            assert.deepStrictEqual(f.effects, ["write k1=v1", "write k2=v2"])
            assert.strictEqual(f.calls.get("write"), 2)
            const echoes = f.calls.get("echo") ?? 0
            // An Always tool cut mid-flight runs again.
            assert.strictEqual(echoes, boundary.at === "tool" && (k === 0 || k === 4) ? 3 : 2)
          }))
      }
    })
  })
}

/** The actions a six-step scripted run takes (exported for benchmarks and examples that reuse it). */
export const sixStepScript: ReadonlyArray<ModelReply.ModelReply> = sixSteps

/** The suite's decision parser (tool calls, `ACT {...}` lines, fenced code, `FINISH:`), for reuse in examples and benchmarks. */
export const suiteParser: DecisionParser.DecisionParser.Service = parser
