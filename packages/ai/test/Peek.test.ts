import { it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Schema from "effect/Schema"
import * as Agent from "@polyloop/core/Agent"
import * as AgentDefinition from "@polyloop/core/AgentDefinition"
import * as EventSink from "@polyloop/core/EventSink"
import { runId } from "@polyloop/core/Ids"
import * as ModelReply from "@polyloop/core/ModelReply"
import * as NativeToolCallParser from "@polyloop/core/NativeToolCallParser"
import * as RunLogStore from "@polyloop/core/RunLogStore"
import * as Tool from "@polyloop/core/Tool"
import * as ToolRegistry from "@polyloop/core/ToolRegistry"
import * as ScriptedModel from "@polyloop/testing/ScriptedModel"
import * as WireRender from "./WireRender.js"
import * as fs from "node:fs"

const lookup = Tool.make({ name: "lookup", description: "Looks an order up", parameters: Schema.Struct({ order: Schema.String }), replayPolicy: "Always", handler: ({ order }) => Effect.succeed(`order ${order}: shipped`) })
const registry = ToolRegistry.make(lookup)
const agent = AgentDefinition.make({ name: "desk", systemPrompt: "Answer about orders.", budget: { maxSteps: 4 } })
it.effect("peek", () => Effect.gen(function*() {
  const model = yield* ScriptedModel.make((request) => {
    const last = request.messages.at(-1)!
    return last._tag === "User" ? ModelReply.make({ text: "", toolCalls: [{ id: "", name: "lookup", argumentsText: JSON.stringify({ order: "17" }) }] }) : ModelReply.make({ text: "Shipped." })
  })
  const store = yield* RunLogStore.makeMemory
  for (const [i, text] of ["Where is order 17?", "And order 23?"].entries()) {
    yield* Agent.send({ runId: runId("chat"), messageId: `m${i}`, text, agent, tools: registry }).pipe(Effect.provide(Layer.mergeAll(model.layer, NativeToolCallParser.layer(), Layer.orDie(ToolRegistry.layerExecutor(registry)), EventSink.layerNoop, Layer.succeed(RunLogStore.RunLogStore, store))))
  }
  const requests = (yield* model.requests).map((s) => s.request)
  const out: Record<string, unknown> = {}
  for (const wire of ["Chat Completions", "Responses", "Anthropic"] as const) {
    const render = yield* WireRender.renderer(wire)
    out[wire] = yield* render(requests.at(-1)!)
  }
  fs.writeFileSync("/tmp/wt31/bodies.json", JSON.stringify(out, null, 2))
}))
