/**
 * The loop suite's fixtures: its decision parser, tools with observable side effects (calls,
 * contexts, interruptions, a handler that blocks at a chosen step), a recording event sink, a
 * code executor, and the scripted replies' helpers — all deterministic, so the suite depends on
 * nothing but the store under test.
 *
 * @internal
 */
import * as Data from "effect/Data"
import * as Deferred from "effect/Deferred"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Schema from "effect/Schema"
import * as TestClock from "effect/TestClock"
import * as ActionExecutor from "@polyloop/core/ActionExecutor"
import * as ActionOutcome from "@polyloop/core/ActionOutcome"
import * as AgentDefinition from "@polyloop/core/AgentDefinition"
import * as DecisionParser from "@polyloop/core/DecisionParser"
import { EventDeliveryError, ToolEnvironmentError } from "@polyloop/core/Errors"
import * as EventSink from "@polyloop/core/EventSink"
import type { LoopEvent } from "@polyloop/core/LoopEvent"
import * as ModelReply from "@polyloop/core/ModelReply"
import * as ParsedReply from "@polyloop/core/ParsedReply"
import * as Tool from "@polyloop/core/Tool"
import * as ToolContext from "@polyloop/core/ToolContext"
import * as ToolRegistry from "@polyloop/core/ToolRegistry"
import * as ScriptedModel from "../../ScriptedModel.js"

export const parserId = "AgentLoopSuite.parser/1"

/**
 * The suite's decision parser. Native tool calls: one → `Act` (arguments must be JSON);
 * several → `InvalidDecision`. Text: `FINISH: answer` → `Finish`; a line `ACT {"tool":…,"arguments":…}`
 * → `Act` on a tool call without an id (a text action language); one fenced block →
 * `CodeAction`; empty text → `NoAction`; anything else → `InvalidDecision`.
 */
export const decide = (reply: ModelReply.ModelReply): ParsedReply.ParsedReply => {
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

export const parser: DecisionParser.DecisionParser.Service = { id: parserId, parse: (reply) => Effect.sync(() => decide(reply)) }

/** An ordinary failure of a tool. */
export class Oops extends Data.TaggedError("Oops")<{ readonly message: string }> {}

/** Where a handler should stop and wait to be interrupted. */
export interface BlockPoint {
  readonly step: number
  readonly reached: Deferred.Deferred<void>
}

/** Tools with observable side effects; handlers record calls, contexts and interruptions. */
export interface Fixture {
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

export const makeFixture = (options?: { readonly completingFails?: boolean; readonly tickBy?: Duration.DurationInput }): Fixture => {
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

export const usage = { inputTokens: 10, outputTokens: 2 } as const

export const call = (name: string, args: unknown) => ScriptedModel.toolCall(name, args, { usage })
export const say = (text: string) => ScriptedModel.text(text, usage)
/** A reply calling several tools at once (ids filled by the scripted model: `call_s<step>_<i>`). */
export const calls = (...list: ReadonlyArray<readonly [string, unknown]>): ModelReply.ModelReply =>
  ModelReply.make({ text: "", toolCalls: list.map(([name, args]) => ({ id: "", name, argumentsText: JSON.stringify(args) })), usage })

export const agent = (overrides?: Partial<Parameters<typeof AgentDefinition.make>[0]>): AgentDefinition.AgentDefinition =>
  AgentDefinition.make({
    name: "suite-agent",
    systemPrompt: "You are a careful agent.",
    budget: { maxSteps: 20 },
    modelRetry: { maxAttempts: 1, baseDelay: Duration.millis(1), maxDelay: Duration.millis(1) },
    ...overrides
  })

/** Where a sink should stop and wait to be interrupted. */
export interface SinkBlock {
  readonly matches: (event: LoopEvent) => boolean
  readonly reached: Deferred.Deferred<void>
}

/** A sink that records events; `fail` decides which deliveries fail. */
export interface RecordingSink {
  readonly events: Array<LoopEvent>
  readonly layer: Layer.Layer<EventSink.EventSink>
  /** Blocks in the next delivery of a matching event (once). */
  readonly blockAt: (block: SinkBlock) => void
}

export const recordingSink = (fail: (event: LoopEvent, index: number) => boolean = () => false): RecordingSink => {
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
export const codeExecutor = (ran: Array<string>, options?: { readonly replay?: ActionExecutor.ReplayPolicy }): ActionExecutor.ActionExecutor.Service =>
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
