/**
 * A run's spans exported to an OpenTelemetry collector over OTLP/HTTP (design 0212): the run, its
 * steps, each model call (`gen_ai.operation.name = "chat"`, the model, the tokens) and each tool
 * call (`execute_tool`, the tool's name and call id), with polyloop's run id and step.
 *
 *   OTEL_EXPORTER_OTLP_ENDPOINT=http://localhost:4318 npx tsx examples/otel.ts
 *
 * Any OTLP/HTTP endpoint takes them (an OpenTelemetry Collector, Jaeger, Grafana Tempo, Langfuse,
 * …); e.g. `docker run -p 16686:16686 -p 4318:4318 jaegertracing/all-in-one` and open
 * http://localhost:16686. The exporter is `@effect/opentelemetry`'s `Otlp.layerJson` over
 * `@effect/platform`'s HTTP client; the spans are sent in batches and flushed when the program ends.
 */
import * as Otlp from "@effect/opentelemetry/Otlp"
import * as NodeHttpClient from "@effect/platform-node/NodeHttpClient"
import * as NodeRuntime from "@effect/platform-node/NodeRuntime"
import * as Agent from "@polyloop/core/Agent"
import * as AgentDefinition from "@polyloop/core/AgentDefinition"
import * as Ids from "@polyloop/core/Ids"
import * as ModelReply from "@polyloop/core/ModelReply"
import * as NativeToolCallParser from "@polyloop/core/NativeToolCallParser"
import * as RunLogStore from "@polyloop/core/RunLogStore"
import * as StopReason from "@polyloop/core/StopReason"
import * as Tool from "@polyloop/core/Tool"
import * as ToolRegistry from "@polyloop/core/ToolRegistry"
import * as ScriptedModel from "@polyloop/testing/ScriptedModel"
import * as Config from "effect/Config"
import * as Console from "effect/Console"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Schema from "effect/Schema"

const weather = Tool.make({
  name: "weather",
  description: "The current temperature of a city, in °C.",
  parameters: Schema.Struct({ city: Schema.String }),
  replayPolicy: "Always",
  handler: ({ city }) => Effect.succeed(city === "Oslo" ? "4" : "18")
})
const tools = ToolRegistry.make(weather)
// The model's name goes on each model call's span (gen_ai.request.model).
const agent = AgentDefinition.make({
  name: "weather-bot",
  systemPrompt: "Answer with the tools.",
  budget: { maxSteps: 5 },
  modelSettings: { model: "gpt-4o-mini" }
})
// A scripted model, with the usage and finish reasons a provider reports.
const model = ScriptedModel.layer([
  ModelReply.make({
    toolCalls: [{ id: "call_oslo", name: "weather", argumentsText: "{\"city\":\"Oslo\"}" }],
    usage: { inputTokens: 120, outputTokens: 14 },
    finishReason: "tool_calls"
  }),
  ModelReply.make({ text: "It is 4 °C in Oslo.", usage: { inputTokens: 160, outputTokens: 9 }, finishReason: "stop" })
])

/** The OTLP exporter: `OTEL_EXPORTER_OTLP_ENDPOINT` (default http://localhost:4318), `OTEL_SERVICE_NAME`. */
const telemetry = Layer.unwrapEffect(
  Effect.gen(function*() {
    const baseUrl = yield* Config.string("OTEL_EXPORTER_OTLP_ENDPOINT").pipe(Config.withDefault("http://localhost:4318"))
    const serviceName = yield* Config.string("OTEL_SERVICE_NAME").pipe(Config.withDefault("polyloop-example"))
    yield* Console.log(`exporting spans to ${baseUrl}/v1/traces as service ${serviceName}`)
    return Otlp.layerJson({ baseUrl, resource: { serviceName } })
  })
).pipe(Layer.provide(NodeHttpClient.layerUndici))

const program = Agent.run({ runId: Ids.runId(`otel-${Date.now()}`), agent, task: "How warm is it in Oslo?", tools }).pipe(
  Effect.provide(Agent.layer({ store: RunLogStore.inMemory(), model, parser: NativeToolCallParser.layer(), tools })),
  Effect.flatMap((result) => Console.log(`${result.runId}: ${StopReason.format(result.stopReason)} after ${result.steps} steps`)),
  Effect.provide(telemetry) // the spans are flushed when this layer is released, at the end
)

NodeRuntime.runMain(program)
