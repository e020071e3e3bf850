/**
 * Streaming (design 0180): what a streaming step costs against a non-streaming one, in the same
 * process, interleaved, on the in-memory store (CPU µs per step: the loop's own work). The reply
 * of every step is a typical one — about 300 characters of text and one tool call — that a
 * streaming model gives as ~4-character pieces (about 90 deltas, a token stream), and a
 * non-streaming model gives whole. Four cases:
 *
 * - `whole`: `generate`, no streaming, `EventSink.noop` (the baseline);
 * - `streamedSilent`: `streaming: true` with `EventSink.noop` (deltas are folded, no event built);
 * - `streamedEvents`: `streaming: true` with a sink that takes every event (a `ModelDelta` per piece);
 * - `wholeEvents`: `generate` with that same sink (the baseline for the previous case).
 *
 *   npx tsx bench/streaming.ts [--label <name>] [--out <file>]
 *
 * Results are merged into `bench/results.streaming.json` (or `--out`) under the label; the
 * summary is in `bench/STREAMING.md`.
 */
import * as EventSink from "@polyloop/core/EventSink"
import * as ModelClient from "@polyloop/core/ModelClient"
import * as ModelDelta from "@polyloop/core/ModelDelta"
import * as ModelReply from "@polyloop/core/ModelReply"
import * as RunLogStore from "@polyloop/core/RunLogStore"
import * as Agent from "@polyloop/core/Agent"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Stream from "effect/Stream"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { fileURLToPath } from "node:url"
import * as F from "./lib/fixtures.js"
import { cpuMicros, interleave, now, option, round, stat } from "./lib/measure.js"

const benchDir = path.dirname(fileURLToPath(import.meta.url))
const label = option("--label") ?? "after"
const out = option("--out") ?? path.join(benchDir, "results.streaming.json")

const text = "I will call the no-op tool now, as the task asks, and look at what it answers before the next step. " +
  "Nothing else is needed: the budget decides when the run ends, so every step is the same call with its own number. " +
  "This sentence is here to make the reply as long as a typical one."

/** The reply of a step: the text above and one call of the no-op tool. */
const replyOf = (step: number): ModelReply.ModelReply =>
  ModelReply.make({
    text,
    toolCalls: [{ id: `call_${step}`, name: "noop", argumentsText: JSON.stringify({ n: step }) }],
    usage: { inputTokens: 10, outputTokens: 80 },
    finishReason: "tool_calls"
  })

const pieceSize = 4

/** The model: whole replies for `generate`, the same replies in pieces for `stream`; all precomputed. */
const modelOf = (steps: number): ModelClient.ModelClient.Service => {
  const replies = Array.from({ length: steps }, (_, k) => replyOf(k))
  const pieces = replies.map((reply) => ModelDelta.chunked(reply, pieceSize))
  const stepOf = (request: ModelClient.ModelRequest) => (request.messages.length - 2) / 2
  return ModelClient.make(
    (request) => Effect.succeed(replies[stepOf(request)]!),
    (request) => Stream.fromIterable(pieces[stepOf(request)]!)
  )
}

let counter = 0
let events = 0

/** A sink that takes every event (counts it): what an application listening to the run pays for. */
const counting: EventSink.EventSink.Service = {
  emit: () =>
    Effect.sync(() => {
      events += 1
    })
}

/** One run: [wall µs per step, CPU µs per step]. */
const runOnce = async (steps: number, streaming: boolean, sink: EventSink.EventSink.Service | undefined): Promise<readonly [number, number]> => {
  const store = Effect.runSync(RunLogStore.makeMemory)
  const services = F.loopServices.pipe(
    Context.add(ModelClient.ModelClient, modelOf(steps)),
    Context.add(RunLogStore.RunLogStore, store),
    (context) => (sink === undefined ? context : Context.add(context, EventSink.EventSink, sink))
  )
  const program = Agent.run({ ...F.request(`stream-${++counter}`, steps), streaming }).pipe(Effect.provide(services))
  const t0 = now()
  const c0 = cpuMicros()
  const result = await Effect.runPromise(program)
  const c1 = cpuMicros()
  const t1 = now()
  if (result.steps !== steps || result.effectiveSteps !== steps) throw new Error(`streaming bench: ${result.steps} steps instead of ${steps}`)
  return [((t1 - t0) * 1000) / steps, (c1 - c0) / steps]
}

const main = async () => {
  const started = Date.now()
  const steps = 300
  // Without events: the no-op sink (`EventSink.noop`: the loop builds no event at all).
  const sinkFor = (withEvents: boolean) => (withEvents ? counting : EventSink.noop)
  const cases = {
    whole: [false, false],
    streamedSilent: [true, false],
    wholeEvents: [false, true],
    streamedEvents: [true, true]
  } as const
  // Warm-up: JIT tiers and inline caches, every case.
  for (let i = 0; i < 6; i++) for (const [streaming, withEvents] of Object.values(cases)) await runOnce(100, streaming, sinkFor(withEvents))
  const cpu: Record<keyof typeof cases, Array<number>> = { whole: [], streamedSilent: [], wholeEvents: [], streamedEvents: [] }
  const measured = (key: keyof typeof cases) => async () => {
    const [streaming, withEvents] = cases[key]
    const [wall, c] = await runOnce(steps, streaming, sinkFor(withEvents))
    cpu[key].push(c)
    return wall
  }
  const wall = await interleave({ warmup: 2, reps: 9 }, {
    whole: measured("whole"),
    streamedSilent: measured("streamedSilent"),
    wholeEvents: measured("wholeEvents"),
    streamedEvents: measured("streamedEvents")
  })
  const figure = (samples: ReadonlyArray<number>) => {
    const s = stat(samples)
    return { median: round(s.median), min: round(s.min), max: round(s.max) }
  }
  const deltasPerStep = ModelDelta.chunked(replyOf(0), pieceSize).length
  const cpuFig = Object.fromEntries(Object.entries(cpu).map(([k, v]) => [k, figure(v.slice(2))])) as Record<keyof typeof cases, ReturnType<typeof figure>>
  const result = {
    at: new Date().toISOString(),
    node: process.version,
    cpus: os.cpus().length,
    loadAverage: os.loadavg().map((l) => round(l, 2)),
    durationSeconds: Math.round((Date.now() - started) / 1000),
    stepsPerRun: steps,
    deltasPerStep,
    memoryCpuMicrosPerStep: cpuFig,
    memoryWallMicrosPerStep: Object.fromEntries(Object.entries(wall).map(([k, v]) => [k, figure(v)])),
    /** What streaming adds to a step, CPU µs (median differences), and per delta. */
    overhead: {
      silentSinkMicros: round(cpuFig.streamedSilent.median - cpuFig.whole.median),
      eventsMicros: round(cpuFig.streamedEvents.median - cpuFig.wholeEvents.median),
      eventsMicrosPerDelta: round((cpuFig.streamedEvents.median - cpuFig.wholeEvents.median) / deltasPerStep, 3),
      silentRatio: round(cpuFig.streamedSilent.median / cpuFig.whole.median, 3),
      eventsRatio: round(cpuFig.streamedEvents.median / cpuFig.wholeEvents.median, 3)
    }
  }
  const existing = fs.existsSync(out) ? (JSON.parse(fs.readFileSync(out, "utf8")) as { runs?: Record<string, Array<unknown>> }) : {}
  const runs = existing.runs ?? {}
  runs[label] = [...(runs[label] ?? []), result]
  fs.writeFileSync(out, `${JSON.stringify({ ...existing, runs }, null, 2)}\n`)
  process.stdout.write(`${label}: ${JSON.stringify(result)}\n`)
  if (events === 0) throw new Error("streaming bench: the counting sink saw no event")
}

await main()
