/**
 * A long run that would outgrow any context window, kept inside one by a history policy
 * (design 0300): a scripted agent reads 200 log files of 8 kB each (1.6 MB in all). Keeping
 * everything, the last request holds every file; under `maskObservations({ keepLast: 5,
 * every: 10 })` the model sees the last 5–14 files verbatim and a one-line placeholder for each
 * older one — while the log keeps every file in full; composed with `fitTokens({ window: 16000 })`
 * the oldest steps are also dropped, in blocks, so no request counts more than the budget (each
 * drop a `HistoryCompacted` record). The budgeted run is interrupted at step 120 and resumed: the
 * requests after the resume are byte-identical (same fingerprints) to an uninterrupted run's.
 *
 *   npx tsx examples/long-run.ts
 */
import * as Agent from "@polyloop/core/Agent"
import * as AgentDefinition from "@polyloop/core/AgentDefinition"
import * as EventSink from "@polyloop/core/EventSink"
import * as HistoryPolicy from "@polyloop/core/HistoryPolicy"
import * as Ids from "@polyloop/core/Ids"
import type * as Message from "@polyloop/core/Message"
import * as ModelReply from "@polyloop/core/ModelReply"
import * as NativeToolCallParser from "@polyloop/core/NativeToolCallParser"
import * as RunLogStore from "@polyloop/core/RunLogStore"
import * as TokenCounter from "@polyloop/core/TokenCounter"
import * as Tool from "@polyloop/core/Tool"
import * as ToolRegistry from "@polyloop/core/ToolRegistry"
import * as ScriptedModel from "@polyloop/testing/ScriptedModel"
import * as Console from "effect/Console"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as Layer from "effect/Layer"
import * as Schema from "effect/Schema"

const FILES = 200

const readLog = Tool.make({
  name: "read_log",
  description: "Reads one log file.",
  parameters: Schema.Struct({ file: Schema.Number }),
  replayPolicy: "Always",
  handler: ({ file }) =>
    Effect.succeed(Array.from({ length: 128 }, (_, i) => `2026-12-02T07:${String(i % 60).padStart(2, "0")} worker-${file} ok request ${i}`.padEnd(63, ".")).join("\n"))
})
const tools = ToolRegistry.make(readLog)

const script = [
  ...Array.from({ length: FILES }, (_, file) =>
    ModelReply.make({ text: "", toolCalls: [{ id: "", name: "read_log", argumentsText: JSON.stringify({ file }) }], usage: { inputTokens: 0, outputTokens: 1 } })),
  ModelReply.make({ text: "All 200 logs read: every worker is ok.", usage: { inputTokens: 0, outputTokens: 1 } })
]

const agentWith = (history: HistoryPolicy.HistoryPolicy) =>
  AgentDefinition.make({ name: "log-reader", systemPrompt: "Read every log, then report.", budget: { maxSteps: FILES + 5 }, history })

const characters = (messages: ReadonlyArray<Message.Message>) => messages.reduce((n, m) => n + m.text.length, 0)

/** The approximate count the budget uses (⌈characters / 4⌉ per text, 4 per message), without the tool definitions. */
const tokens = (messages: ReadonlyArray<Message.Message>) =>
  messages.reduce((n, m) => n + 4 + TokenCounter.approximateCount(m.text) + (m._tag === "Assistant" ? m.toolCalls.reduce((k, c) => k + TokenCounter.approximateCount(c.name) + TokenCounter.approximateCount(c.argumentsText), 0) : m._tag === "Tool" ? TokenCounter.approximateCount(m.name) : 0), 0)

const services = (store: RunLogStore.RunLogStore.Service, sink: Layer.Layer<EventSink.EventSink> = EventSink.layerNoop) =>
  Layer.mergeAll(NativeToolCallParser.layer(), Layer.orDie(ToolRegistry.layerExecutor(tools)), sink, Layer.succeed(RunLogStore.RunLogStore, store))

/** A whole run: its log, and the size of the largest request. */
const whole = (runId: string, history: HistoryPolicy.HistoryPolicy) =>
  Effect.gen(function*() {
    const store = yield* RunLogStore.makeMemory
    const model = yield* ScriptedModel.make(script)
    yield* Agent.run({ runId: Ids.runId(runId), agent: agentWith(history), task: "Read the 200 logs.", tools }).pipe(
      Effect.provide(Layer.merge(services(store), model.layer))
    )
    const requests = yield* model.requests
    return {
      log: yield* store.readLog(Ids.runId(runId)),
      largest: Math.max(...requests.map((seen) => characters(seen.request.messages))),
      largestTokens: Math.max(...requests.map((seen) => tokens(seen.request.messages))),
      last: requests[requests.length - 1]!.request.messages
    }
  })

const program = Effect.gen(function*() {
  const masking = HistoryPolicy.maskObservations({ keepLast: 5, every: 10 })
  const budget = HistoryPolicy.compose(masking, HistoryPolicy.fitTokens({ window: 16_000, headroom: 2_000 }))
  const all = yield* whole("keep-all", HistoryPolicy.keepAll)
  const masked = yield* whole("masked", masking)
  const fitted = yield* whole("fitted", budget)
  const logged = masked.log.results.reduce((n, r) => n + r.outcome.observation.length, 0)
  yield* Console.log(`logged observations: ${logged} characters (kept in full either way)`)
  yield* Console.log(`largest request, keeping everything: ${all.largest} characters`)
  yield* Console.log(`largest request, masking:            ${masked.largest} characters`)
  yield* Console.log(`largest request, masking + budget:   ${fitted.largest} characters, ${fitted.largestTokens} tokens (budget 14000); ${fitted.log.compactions.length} compactions recorded`)
  const placeholder = masked.last.find((m) => m._tag === "Tool" && m.text.startsWith("[output of"))
  yield* Console.log(`an older file as the model sees it: ${placeholder?.text ?? "(none)"}`)

  // Interrupted after step 120, then resumed: the same requests as the uninterrupted run.
  const store = yield* RunLogStore.makeMemory
  const request = { runId: Ids.runId("interrupted"), agent: agentWith(budget), task: "Read the 200 logs.", tools }
  const reached = yield* Deferred.make<void>()
  const sink = EventSink.layer((e) => (e._tag === "StepCompleted" && e.step === 120 ? Effect.zipRight(Deferred.succeed(reached, undefined), Effect.never) : Effect.void))
  const fiber = yield* Effect.fork(Effect.flatMap(ScriptedModel.make(script), (model) => Agent.run(request).pipe(Effect.provide(Layer.merge(services(store, sink), model.layer)))))
  yield* Deferred.await(reached)
  yield* Fiber.interrupt(fiber)
  yield* Console.log("interrupted after step 120")
  const result = yield* Effect.flatMap(ScriptedModel.make(script), (model) => Agent.run(request).pipe(Effect.provide(Layer.merge(services(store), model.layer))))
  const resumed = yield* store.readLog(request.runId)
  const same = resumed.replies.length === fitted.log.replies.length && resumed.replies.every((r, i) => r.requestHash === fitted.log.replies[i]?.requestHash)
  yield* Console.log(`resumed ${result.resumedCount} time(s), ${result.steps} steps: every request identical to the uninterrupted run's: ${same}`)
  yield* Console.log(`answer: ${result.stopReason._tag === "Completed" ? result.stopReason.answer ?? "" : result.stopReason._tag}`)
})

Effect.runPromise(program).catch((error: unknown) => {
  console.error(error)
  process.exitCode = 1
})
