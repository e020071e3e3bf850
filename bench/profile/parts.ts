/**
 * What the pure parts of one in-memory step cost, each alone (issue 35): the request's
 * fingerprint (two messages fed, one digest), the three records' encoding, the parse of the
 * reply. Interleaved in one process; CPU µs per step.
 *   tsx --conditions=@polyloop/source bench/profile/parts.ts
 */
import * as Ids from "@polyloop/core/Ids"
import * as NativeToolCallParser from "@polyloop/core/NativeToolCallParser"
import * as RunLogStore from "@polyloop/core/RunLogStore"
import * as Effect from "effect/Effect"
import * as Fingerprint from "../../packages/core/src/internal/fingerprint.js"
import * as F from "../lib/fixtures.js"
import { cpuMicros } from "../lib/measure.js"

const STEPS = 1000
const store = Effect.runSync(RunLogStore.makeMemory)
Effect.runSync(F.runOn(store, F.model(F.replies(STEPS)), F.request("parts", STEPS)).pipe(Effect.asVoid))
const log = Effect.runSync(store.readLog(Ids.runId("parts")))
const request = F.request("parts", STEPS)
const tools = request.tools.modelView()
const settings = request.agent.modelSettings
// The run's history, rebuilt as the loop has it at the end.
const messages = [
  { _tag: "System" as const, text: request.agent.systemPrompt },
  { _tag: "User" as const, text: request.task },
  ...log.replies.flatMap((r, k) => [
    { _tag: "Assistant" as const, text: r.reply.text, toolCalls: r.reply.toolCalls },
    { _tag: "Tool" as const, callId: r.reply.toolCalls[0]!.id, name: "noop", text: log.results[k]!.outcome.observation }
  ])
]
const parser = NativeToolCallParser.make()

const parts: Record<string, () => number> = {
  fingerprint: () => {
    const fp = Fingerprint.make(tools, settings)
    const growing = messages.slice(0, 2)
    let n = 0
    for (let k = 0; k < STEPS; k++) {
      n += fp.hash(growing).length
      growing.push(messages[2 + 2 * k]!, messages[3 + 2 * k]!)
    }
    return n
  },
  "encode 3 records": () => {
    let n = 0
    for (let k = 0; k < STEPS; k++) {
      n += RunLogStore.encodeRecord(log.replies[k]!).length + RunLogStore.encodeRecord(log.results[k]!).length + RunLogStore.encodeRecord(log.steps[k]!).length
    }
    return n
  },
  "JSON.stringify 3 records": () => {
    let n = 0
    for (let k = 0; k < STEPS; k++) n += JSON.stringify(log.replies[k]!).length + JSON.stringify(log.results[k]!).length + JSON.stringify(log.steps[k]!).length
    return n
  },
  "encode reply only": () => {
    let n = 0
    for (let k = 0; k < STEPS; k++) n += RunLogStore.encodeRecord(log.replies[k]!).length
    return n
  },
  "encode result only": () => {
    let n = 0
    for (let k = 0; k < STEPS; k++) n += RunLogStore.encodeRecord(log.results[k]!).length
    return n
  },
  parse: () => {
    let n = 0
    for (let k = 0; k < STEPS; k++) n += Effect.runSync(parser.parse(log.replies[k]!.reply))._tag.length
    return n
  }
}
const samples = new Map<string, Array<number>>()
for (let round = 0; round < 25; round++) {
  for (const [name, f] of Object.entries(parts)) {
    const c0 = cpuMicros()
    const sink = f()
    const c1 = cpuMicros()
    if (sink <= 0) throw new Error("nothing done")
    if (round >= 5) samples.set(name, [...(samples.get(name) ?? []), (c1 - c0) / STEPS])
  }
}
for (const [name, xs] of samples) {
  xs.sort((a, b) => a - b)
  process.stdout.write(`${name.padEnd(26)} ${xs[xs.length >> 1]!.toFixed(2)} µs/step\n`)
}
