/**
 * A `replayTarget` module for `polyloop replay --agent` (test/cli-research.test.ts): the research
 * agent of `research-agent.ts`. `REPLAY_SYSTEM_PROMPT` in the environment changes its system
 * prompt (to see a divergence from the command line).
 */
import type * as Replay from "@polyloop/core/Replay"
import * as Research from "./research-agent.js"

export const replayTarget: Replay.Target = {
  request: (recorded) => {
    const prompt = process.env["REPLAY_SYSTEM_PROMPT"]
    const { runId: _runId, ...request } = Research.request("replay", prompt === undefined ? {} : { systemPrompt: prompt })
    return { ...request, task: recorded.task }
  },
  layer: Research.services
}
