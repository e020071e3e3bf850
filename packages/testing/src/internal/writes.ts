/**
 * Performing a generated run's writes on a store, shared by the contract's in-process
 * properties and the killed-writer child (`killedWriter.ts`), and the run a killed-writer case
 * writes: generated from a seed, so the parent and every child derive the same run without
 * passing records between processes.
 *
 * @internal
 */
import type { RunId } from "@polyloop/core/Ids"
import type { RunLogStore } from "@polyloop/core/RunLogStore"
import * as FastCheck from "effect/FastCheck"
import * as Arb from "./arbitraries.js"

/** Performs one generated write: the store call it stands for. */
export const perform = (store: RunLogStore.Service, runId: RunId, write: Arb.Write) => {
  switch (write._tag) {
    case "Start":
      return store.start(write.record)
    case "Reply":
      return store.appendReply(runId, write.record)
    case "Results":
      return store.appendResults(runId, write.results)
    case "Complete":
      return store.completeStep(runId, write.results, write.step)
    case "Resume":
      return store.appendResume(runId, write.record)
    case "Finish":
      return store.finish(runId, write.record)
  }
}

/** `start(seq 0)`, `completeStep(seq 7, 8)`, …: a write as the store call it makes. */
export const describeWrite = (write: Arb.Write): string => {
  const seqs = Arb.recordsOf(write).map((r) => r.seq)
  const method = { Start: "start", Reply: "appendReply", Results: "appendResults", Complete: "completeStep", Resume: "appendResume", Finish: "finish" }[write._tag]
  return `${method}(seq ${seqs.join(", ")})`
}

/**
 * The run a killed-writer case writes: 13–20 steps (with up to three results each, about the 60
 * records that 20–30 one-result steps made), the same for the same seed in every process.
 */
export const killedWriterRun = (seed: number): Arb.Run =>
  FastCheck.sample(Arb.run({ minSteps: 13, maxSteps: 20 }), { seed, numRuns: 1 })[0]!
