/**
 * The `EventSink` contract suite (SPEC §5, §9): a healthy sink accepts every event; a sink that
 * can be read back delivers the events in the order emitted, none lost; a sink that cannot
 * deliver fails `emit` with `EventDeliveryError` only (no defect, no interruption, no silent
 * success), and a run through `Agent.run` with it finishes exactly as with no sink, counting
 * the failures. Events are generated from the `LoopEvent` Schema.
 *
 * @since 0.1.0
 */
import * as Cause from "effect/Cause"
import * as Chunk from "effect/Chunk"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as FastCheck from "effect/FastCheck"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Predicate from "effect/Predicate"
import * as Schema from "effect/Schema"
import type * as Scope from "effect/Scope"
import * as Agent from "@polyloop/core/Agent"
import * as AgentDefinition from "@polyloop/core/AgentDefinition"
import { EventSink } from "@polyloop/core/EventSink"
import * as EventSinkModule from "@polyloop/core/EventSink"
import { RunId } from "@polyloop/core/Ids"
import type { LoopEvent } from "@polyloop/core/LoopEvent"
import * as NativeToolCallParser from "@polyloop/core/NativeToolCallParser"
import * as RunLogStore from "@polyloop/core/RunLogStore"
import * as Tool from "@polyloop/core/Tool"
import * as ToolRegistry from "@polyloop/core/ToolRegistry"
import { loopEvent } from "./internal/arbitraries.js"
import { diff, show } from "./internal/equal.js"
import * as Property from "./internal/property.js"
import { build, describeCause, describeError } from "./internal/subject.js"
import { register } from "./internal/suite.js"
import * as ScriptedModel from "./ScriptedModel.js"

export {
  /** A contract was broken; the message says what was expected and what was seen. */
  ContractViolation,
  /** A property of a suite: `id`, `name`, `numRuns` and its generated cases. */
  type Property,
  /** The result of `check`. */
  type Report
} from "./internal/property.js"

/** Runs one property outside vitest (e.g. to prove it fails on a broken sink). */
export const check: (property: Property.Property, options?: Property.RunOptions) => Effect.Effect<Property.Report> = Property.run

/** One instance of a sink, and, for sinks that can be read back, how to read what it delivered. */
export interface SinkInstance {
  readonly sink: EventSink.Service
  /** The first `count` events the sink delivered, in delivery order (e.g. from a subscription or a file). */
  readonly readBack?: (count: number) => Effect.Effect<ReadonlyArray<LoopEvent>, unknown>
}

/** The sink under test: a layer (built afresh per case), or a scoped effect making an instance. */
export type SinkUnderTest<E = never> = Layer.Layer<EventSink, E> | Effect.Effect<SinkInstance, E, Scope.Scope>

/** Options of the sink suite. */
export interface Options<E = never> {
  /** An instance of your sink that cannot deliver (e.g. a file in a directory that does not exist). */
  readonly failing?: SinkUnderTest<E>
  /** Multiplies every property's number of generated cases (default 1). */
  readonly runsFactor?: number
  /** Per-test timeout in milliseconds for `suite` (default 30 000). */
  readonly timeout?: number
  /** A fast-check seed, to replay a failure printed by a previous run. */
  readonly seed?: number
}

/** The identifiers of the sink properties. */
export type PropertyId = "delivers" | "order" | "failureIsTyped" | "runSurvivesFailingSink"

const instance = <E>(subject: SinkUnderTest<E>, what: string): Effect.Effect<SinkInstance, Property.ContractViolation, Scope.Scope> =>
  Layer.isLayer(subject)
    ? Effect.map(build(EventSink, subject as Layer.Layer<EventSink, E>, what), (sink): SinkInstance => ({ sink }))
    : Effect.mapError(subject as Effect.Effect<SinkInstance, E, Scope.Scope>, (error) =>
      new Property.ContractViolation({ message: `could not build ${what}: ${describeError(error)}` }))

const events = FastCheck.array(loopEvent, { minLength: 1, maxLength: 12 })

const emitExit = (sink: EventSink.Service, event: LoopEvent) => Effect.exit(Effect.suspend(() => sink.emit(event)))

const add = Tool.make({
  name: "add",
  description: "Adds two numbers.",
  parameters: Schema.Struct({ a: Schema.Number, b: Schema.Number }),
  handler: ({ a, b }) => Effect.succeed(String(a + b))
})
const tools = ToolRegistry.make(add)
const agent = AgentDefinition.make({ name: "event-sink-contract", systemPrompt: "Add numbers.", budget: { maxSteps: 6 } })

/** Runs a small agent (a tool call, then an answer) with the given sink: its exit. */
const runAgent = (sink: EventSink.Service, runId: string) =>
  Effect.flatMap(ScriptedModel.make([ScriptedModel.toolCall("add", { a: 1, b: 2 }), ScriptedModel.text("3")]), (model) =>
    Agent.run({ runId: RunId.make(runId), agent, task: "1 + 2", tools }).pipe(
      Effect.provide(
        Layer.mergeAll(
          model.layer,
          NativeToolCallParser.layer(),
          Layer.succeed(EventSink, sink),
          RunLogStore.layerMemory,
          ToolRegistry.layerExecutor(tools)
        )
      ),
      Effect.exit
    ))

/** The properties of the sink contract, keyed by id (`order` only with `readBack`; the last two only with `failing`). */
export const properties = <E>(sink: SinkUnderTest<E>, options: Options<E> = {}): Readonly<Partial<Record<PropertyId, Property.Property>>> => {
  const factor = options.runsFactor ?? 1
  const runs = (n: number) => Math.max(1, Math.round(n * factor))
  const props: Partial<Record<PropertyId, Property.Property>> = {
    delivers: Property.make({
      id: "delivers",
      name: "a healthy sink accepts every event",
      numRuns: runs(30),
      arbitrary: events,
      check: (batch) =>
        Effect.scoped(
          Effect.gen(function*() {
            const { sink: s } = yield* instance(sink, "the sink")
            for (const event of batch) {
              const exit = yield* emitExit(s, event)
              if (Exit.isFailure(exit)) {
                return yield* Property.violation(`emit(${event._tag} ${show(event)}) on a healthy sink failed: ${describeCause(exit.cause)}`)
              }
            }
          })
        )
    }),
    order: Property.make({
      id: "order",
      name: "a sink that can be read back delivers the events emitted, in order, none lost",
      numRuns: runs(30),
      arbitrary: events,
      check: (batch) =>
        Effect.scoped(
          Effect.gen(function*() {
            const subject = yield* instance(sink, "the sink")
            const readBack = subject.readBack
            if (readBack === undefined) {
              return yield* Property.violation("the sink instance has no readBack: give one, or test a layer (this property then does not apply)")
            }
            for (const event of batch) {
              yield* Effect.mapError(subject.sink.emit(event), (error) =>
                new Property.ContractViolation({ message: `emit(${event._tag}) failed: ${describeError(error)}` }))
            }
            const delivered = yield* Effect.mapError(readBack(batch.length), (error) =>
              new Property.ContractViolation({ message: `readBack(${batch.length}) failed: ${describeError(error)}` }))
            yield* Option.match(diff(batch, delivered), {
              onNone: () => Effect.void,
              onSome: (d) => Property.violation(`the events read back differ from the ${batch.length} emitted, in order: ${d}`)
            })
          })
        )
    })
  }
  if (Layer.isLayer(sink)) delete props.order

  const failing = options.failing
  if (failing !== undefined) {
    props.failureIsTyped = Property.make({
      id: "failureIsTyped",
      name: "a sink that cannot deliver fails emit with EventDeliveryError only (no defect, no interruption, no silent success)",
      numRuns: runs(20),
      arbitrary: events,
      check: (batch) =>
        Effect.scoped(
          Effect.gen(function*() {
            const { sink: s } = yield* instance(failing, "the failing sink")
            for (const event of batch) {
              const exit = yield* emitExit(s, event)
              if (Exit.isSuccess(exit)) {
                return yield* Property.violation(
                  `emit(${event._tag}) on a sink that cannot deliver succeeded: failures must surface as EventDeliveryError so the loop counts them`
                )
              }
              const cause = exit.cause
              const failures = Chunk.toReadonlyArray(Cause.failures(cause))
              const typed = failures.length > 0 &&
                failures.every((error) => Predicate.isTagged(error, "EventDeliveryError")) &&
                Chunk.isEmpty(Cause.defects(cause)) &&
                !Cause.isInterrupted(cause)
              if (!typed) {
                return yield* Property.violation(
                  `emit(${event._tag}) on a sink that cannot deliver exited with ${describeCause(cause)}; it must fail with EventDeliveryError only`
                )
              }
            }
          })
        )
    })
    props.runSurvivesFailingSink = Property.make({
      id: "runSurvivesFailingSink",
      name: "a run through Agent.run with a sink that cannot deliver finishes as with no sink, counting the failures",
      numRuns: runs(3),
      arbitrary: FastCheck.constant(null),
      check: () =>
        Effect.scoped(
          Effect.gen(function*() {
            const { sink: s } = yield* instance(failing, "the failing sink")
            const reference = yield* runAgent(EventSinkModule.make(() => Effect.void), "reference")
            const exit = yield* runAgent(s, "with-failing-sink")
            if (Exit.isFailure(reference)) return yield* Property.violation(`the reference run failed: ${describeCause(reference.cause)}`)
            if (Exit.isFailure(exit)) {
              return yield* Property.violation(`the run with a sink that cannot deliver did not finish: ${describeCause(exit.cause)}`)
            }
            const { eventDeliveryFailures, runId: _runId, ...rest } = exit.value
            const { eventDeliveryFailures: _none, runId: _ref, ...expected } = reference.value
            yield* Option.match(diff(expected, rest), {
              onNone: () => Effect.void,
              onSome: (d) => Property.violation(`the run with a sink that cannot deliver ended differently from the run with no sink: ${d}`)
            })
            yield* Property.ensure(
              eventDeliveryFailures > 0,
              () => "the run with a sink that cannot deliver counted no delivery failure (eventDeliveryFailures is 0)"
            )
          })
        )
    })
  }
  return props
}

/** Registers the sink contract as vitest tests. Call it at the top level of a test file. */
export const suite = <E>(name: string, sink: SinkUnderTest<E>, options: Options<E> = {}): void =>
  register(`EventSink contract: ${name}`, properties(sink, options) as Readonly<Record<string, Property.Property>>, {
    ...(options.timeout === undefined ? {} : { timeout: options.timeout }),
    ...(options.seed === undefined ? {} : { seed: options.seed })
  })
