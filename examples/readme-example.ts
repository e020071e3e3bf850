// The example of the README: tools, an agent, a durable run. Run: npx tsx examples/readme-example.ts (after npm run build)
import { NodeRuntime } from "@effect/platform-node"
import { Agent, AgentDefinition, Ids, NativeToolCallParser, StopReason, Tool, ToolRegistry } from "@polyloop/core"
import { SqlRunLogStore } from "@polyloop/sql"
import * as ScriptedModel from "@polyloop/testing/ScriptedModel" // the package root also holds the vitest suites
import { Console, Effect, Schema } from "effect"

// A tool: a parameter Schema (calls are validated against it; the model sees its JSON Schema) and a handler.
const weather = Tool.make({
  name: "weather",
  description: "The current temperature of a city, in °C.",
  parameters: Schema.Struct({ city: Schema.String }),
  replayPolicy: "Always", // a read: safe to run again if the process dies while it runs
  handler: ({ city }) => Effect.succeed(city === "Oslo" ? "4" : "18")
})
const tools = ToolRegistry.make(weather)
const agent = AgentDefinition.make({ name: "weather-bot", systemPrompt: "Answer with the tools.", budget: { maxSteps: 5 } })
// Every service of a run in one layer. A scripted model; OpenAiCompatible.layerConfig() from @polyloop/ai is a real one.
const services = Agent.layer({
  store: SqlRunLogStore.layerSqlite({ filename: "weather.db" }), // every step is durable here
  model: ScriptedModel.layer([ScriptedModel.toolCall("weather", { city: "Oslo" }), "It is 4 °C in Oslo."]),
  parser: NativeToolCallParser.layer(), // the model calls tools natively; a text reply is the answer
  tools // the executor derived from the registry runs the handlers
})

const program = Agent.run({ runId: Ids.runId("weather-1"), agent, task: "How warm is it in Oslo?", tools }).pipe(
  Effect.flatMap((result) => Console.log(`${StopReason.format(result.stopReason)} after ${result.steps} steps`)),
  Effect.provide(services)
)
NodeRuntime.runMain(program) // idempotent by run id: run again, it returns the recorded result, calls nothing
