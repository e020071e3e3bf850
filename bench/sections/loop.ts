/**
 * 1. Loop overhead: µs per step of `Agent.run` on the in-memory store (precomputed tool-call
 * replies, a no-op tool), against the same steps as a bare hand-written loop.
 */
import * as RunLogStore from "@polyloop/core/RunLogStore"
import type * as ModelReply from "@polyloop/core/ModelReply"
import * as Effect from "effect/Effect"
import * as F from "../lib/fixtures.js"
import { cpuMicros, interleave, now, type Reps, stat, type Stat } from "../lib/measure.js"

/** One line of the loop table. */
export interface LoopRow {
  readonly steps: number
  /** µs per step, wall clock. */
  readonly polyloop: Stat
  /** µs per step, CPU time of the process (what a step costs, whatever else the machine runs). */
  readonly polyloopCpu: Stat
  readonly bare: Stat
  readonly bareCpu: Stat
  /** Median of polyloop / median of bare, CPU time. */
  readonly ratio: number
  /** The same ratio on wall-clock medians. */
  readonly ratioWall: number
}

interface BareRecord {
  readonly kind: "ModelReplied" | "ActionResulted" | "StepCompleted"
  readonly step: number
  readonly value: unknown
}

type BareMessage =
  | { readonly role: "system" | "user"; readonly text: string }
  | { readonly role: "assistant"; readonly text: string; readonly calls: ModelReply.ModelReply["toolCalls"] }
  | { readonly role: "tool"; readonly callId: string; readonly text: string }

/**
 * The same steps with no library: call the model (a precomputed reply), log the reply, parse
 * the call's JSON arguments, check them, run the no-op tool, log result and step, append the
 * reply and the observation to the history, count, check the budget. Returns the log length.
 */
export const bareLoop = (script: ReadonlyArray<ModelReply.ModelReply>, maxSteps: number): number => {
  const log: Array<BareRecord> = []
  const messages: Array<BareMessage> = [
    { role: "system", text: "You are a benchmark. Call the noop tool." },
    { role: "user", text: "Call the noop tool until the budget runs out." }
  ]
  const tool = (args: { readonly n: number }): string => (args.n >= 0 ? "ok" : "ok")
  let steps = 0
  let tokens = 0
  while (steps < maxSteps) {
    const reply = script[steps]!
    log.push({ kind: "ModelReplied", step: steps, value: reply })
    const call = reply.toolCalls[0]
    if (call === undefined || call.name !== "noop") throw new Error("bare loop: unexpected reply")
    const args: unknown = JSON.parse(call.argumentsText)
    if (typeof args !== "object" || args === null || typeof (args as { n?: unknown }).n !== "number") throw new Error("bad args")
    const observation = tool(args as { readonly n: number })
    log.push({ kind: "ActionResulted", step: steps, value: { callId: call.id, observation } })
    log.push({ kind: "StepCompleted", step: steps, value: { usage: reply.usage } })
    messages.push({ role: "assistant", text: reply.text, calls: reply.toolCalls })
    messages.push({ role: "tool", callId: call.id, text: observation })
    tokens += reply.usage.inputTokens + reply.usage.outputTokens
    steps++
  }
  return log.length + (tokens > 0 ? 0 : 1)
}

let runCounter = 0

/** One `Agent.run` of `steps` steps on a fresh in-memory store: [wall µs per step, CPU µs per step]. */
export const polyloopRun = async (script: ReadonlyArray<ModelReply.ModelReply>, steps: number): Promise<readonly [number, number]> => {
  const store = Effect.runSync(RunLogStore.makeMemory)
  const program = F.runOn(store, F.model(script), F.request(`loop-${++runCounter}`, steps))
  const t0 = now()
  const c0 = cpuMicros()
  const result = await Effect.runPromise(program)
  const c1 = cpuMicros()
  const t1 = now()
  if (result.steps !== steps || result.stopReason._tag !== "BudgetExhausted") throw new Error(`loop bench: run took ${result.steps} steps`)
  return [((t1 - t0) * 1000) / steps, (c1 - c0) / steps]
}

/** The bare loop, repeated until it has run about 50,000 steps: [wall µs per step, CPU µs per step]. */
const bareRun = (script: ReadonlyArray<ModelReply.ModelReply>, steps: number): readonly [number, number] => {
  const repeat = Math.max(1, Math.round(50_000 / steps))
  let sink = 0
  const t0 = now()
  const c0 = cpuMicros()
  for (let i = 0; i < repeat; i++) sink += bareLoop(script, steps)
  const c1 = cpuMicros()
  const t1 = now()
  if (sink !== repeat * steps * 3) throw new Error("bare loop: wrong log length")
  return [((t1 - t0) * 1000) / (steps * repeat), (c1 - c0) / (steps * repeat)]
}

/**
 * Brings both loops to steady state (JIT tiers, inline caches) before anything is measured:
 * `warmSteps` steps of each, in 200-step runs.
 */
export const warmUp = async (warmSteps: number): Promise<void> => {
  const script = F.replies(200)
  for (let done = 0; done < warmSteps; done += 200) {
    await polyloopRun(script, 200)
    bareRun(script, 200)
  }
}

/** Runs the section (after `warmUp`). */
export const run = async (sizes: ReadonlyArray<number>, repsFor: (steps: number) => Reps): Promise<ReadonlyArray<LoopRow>> => {
  const rows: Array<LoopRow> = []
  for (const steps of sizes) {
    const script = F.replies(steps)
    const cpu: Array<number> = []
    const bareCpu: Array<number> = []
    const samples = await interleave(repsFor(steps), {
      polyloop: async () => {
        const [wall, c] = await polyloopRun(script, steps)
        cpu.push(c)
        return wall
      },
      bare: async () => {
        const [wall, c] = bareRun(script, steps)
        bareCpu.push(c)
        return wall
      }
    })
    const reps = repsFor(steps)
    const polyloop = stat(samples.polyloop)
    const bare = stat(samples.bare)
    const polyloopCpu = stat(cpu.slice(reps.warmup))
    const bareCpuStat = stat(bareCpu.slice(reps.warmup))
    rows.push({
      steps,
      polyloop,
      polyloopCpu,
      bare,
      bareCpu: bareCpuStat,
      ratio: polyloopCpu.median / bareCpuStat.median,
      ratioWall: polyloop.median / bare.median
    })
  }
  return rows
}
