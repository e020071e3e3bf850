/**
 * The loop suite over the in-memory store.
 */
import * as RunLogStore from "@polyloop/core/RunLogStore"
import * as AgentLoopSuite from "@polyloop/testing/AgentLoopSuite"

AgentLoopSuite.suite("Agent.run on the memory store", () => RunLogStore.layerMemory)
