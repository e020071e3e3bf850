/**
 * Running an agent over an MCP registry with a scripted model (native tool calls), on a store
 * layer the test chooses.
 */
import * as Agent from "@polyloop/core/Agent"
import * as AgentDefinition from "@polyloop/core/AgentDefinition"
import * as EventSink from "@polyloop/core/EventSink"
import { runId } from "@polyloop/core/Ids"
import type { Message } from "@polyloop/core/Message"
import * as NativeToolCallParser from "@polyloop/core/NativeToolCallParser"
import type { RunLogStore } from "@polyloop/core/RunLogStore"
import * as ToolRegistry from "@polyloop/core/ToolRegistry"
import * as ScriptedModel from "@polyloop/testing/ScriptedModel"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"

/** The agent of the tests. */
export const agent = AgentDefinition.make({
  name: "mcp-test-agent",
  systemPrompt: "Use the tools.",
  budget: { maxSteps: 12 },
  modelSettings: { model: "scripted" }
})

/** Runs `id` over `tools` with the scripted replies; returns the result and the model's last request's messages. */
export const runAgent = (
  id: string,
  tools: ToolRegistry.ToolRegistry<never>,
  script: ScriptedModel.Script,
  store: Layer.Layer<RunLogStore>
) =>
  Effect.gen(function*() {
    const model = yield* ScriptedModel.make(script)
    const services = Layer.mergeAll(
      model.layer,
      NativeToolCallParser.layer(),
      ToolRegistry.layerExecutor(tools),
      store,
      EventSink.layerNoop
    )
    const result = yield* Agent.run({ runId: runId(id), agent, task: "Work with the files.", tools }).pipe(Effect.provide(services))
    const requests = yield* model.requests
    const last: ReadonlyArray<Message> = requests.at(-1)?.request.messages ?? []
    return { result, requests, last }
  })

/** The texts of the `Tool` messages, in order. */
export const toolTexts = (messages: ReadonlyArray<Message>): ReadonlyArray<string> =>
  messages.flatMap((message) => (message._tag === "Tool" ? [message.text] : []))
