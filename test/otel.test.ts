/**
 * OpenTelemetry, shown working (issue 21, design 0212): a run under `@effect/opentelemetry` with
 * the SDK's in-memory span exporter. The spans are run → step → model call / tool call, parented
 * correctly in one trace, with the GenAI semantic-convention attributes (the names checked against
 * `@opentelemetry/semantic-conventions`' own constants) and polyloop's run id and step.
 */
import { assert, describe, it } from "@effect/vitest"
import * as NodeSdk from "@effect/opentelemetry/NodeSdk"
import { SpanKind } from "@opentelemetry/api"
import { InMemorySpanExporter, type ReadableSpan, SimpleSpanProcessor } from "@opentelemetry/sdk-trace-base"
import {
  ATTR_GEN_AI_AGENT_NAME,
  ATTR_GEN_AI_OPERATION_NAME,
  ATTR_GEN_AI_PROVIDER_NAME,
  ATTR_GEN_AI_REQUEST_MODEL,
  ATTR_GEN_AI_REQUEST_TEMPERATURE,
  ATTR_GEN_AI_RESPONSE_FINISH_REASONS,
  ATTR_GEN_AI_TOOL_CALL_ID,
  ATTR_GEN_AI_TOOL_NAME,
  ATTR_GEN_AI_TOOL_TYPE,
  ATTR_GEN_AI_USAGE_INPUT_TOKENS,
  ATTR_GEN_AI_USAGE_OUTPUT_TOKENS
} from "@opentelemetry/semantic-conventions/incubating"
import * as Agent from "@polyloop/core/Agent"
import * as AgentDefinition from "@polyloop/core/AgentDefinition"
import * as Ids from "@polyloop/core/Ids"
import * as ModelClient from "@polyloop/core/ModelClient"
import * as ModelReply from "@polyloop/core/ModelReply"
import * as NativeToolCallParser from "@polyloop/core/NativeToolCallParser"
import * as RunLogStore from "@polyloop/core/RunLogStore"
import * as Telemetry from "@polyloop/core/Telemetry"
import * as Tool from "@polyloop/core/Tool"
import * as ToolRegistry from "@polyloop/core/ToolRegistry"
import * as ScriptedModel from "@polyloop/testing/ScriptedModel"
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
const agent = AgentDefinition.make({
  name: "weather-bot",
  systemPrompt: "Answer with the tools.",
  budget: { maxSteps: 5 },
  modelSettings: { model: "gpt-4o-mini", temperature: 0 }
})
// Replies as a provider sends them: the finish reason is the provider's word.
const call = (id: string, city: string, inputTokens: number, outputTokens: number) =>
  ModelReply.make({
    toolCalls: [{ id, name: "weather", argumentsText: JSON.stringify({ city }) }],
    usage: { inputTokens, outputTokens },
    finishReason: "tool_calls"
  })
const script = [
  call("call_oslo", "Oslo", 120, 14),
  call("call_rome", "Rome", 150, 15),
  ModelReply.make({ text: "Oslo 4 °C, Rome 18 °C.", usage: { inputTokens: 180, outputTokens: 9 }, finishReason: "stop" })
]

/** Runs the agent under the OpenTelemetry SDK; the finished spans as the exporter received them. */
const tracedRun = (
  runId: string,
  options: { readonly agent?: AgentDefinition.AgentDefinition; readonly model?: Layer.Layer<ModelClient.ModelClient> } = {}
) =>
  Effect.gen(function*() {
    const exporter = new InMemorySpanExporter()
    const telemetry = NodeSdk.layer(() => ({
      resource: { serviceName: "polyloop-otel-test" },
      spanProcessor: new SimpleSpanProcessor(exporter)
    }))
    const services = Agent.layer({
      store: RunLogStore.inMemory(),
      model: options.model ?? ScriptedModel.layer(script),
      parser: NativeToolCallParser.layer(),
      tools
    })
    // Read before the SDK's layer is released: shutting the provider down empties the exporter.
    return yield* Agent.run({ runId: Ids.runId(runId), agent: options.agent ?? agent, task: "How warm is it in Oslo and Rome?", tools }).pipe(
      Effect.provide(services),
      Effect.map((result) => ({ result, spans: exporter.getFinishedSpans() })),
      Effect.provide(telemetry)
    )
  })

const parentOf = (spans: ReadonlyArray<ReadableSpan>, span: ReadableSpan): ReadableSpan | undefined =>
  spans.find((s) => s.spanContext().spanId === span.parentSpanContext?.spanId)

describe("OpenTelemetry", () => {
  it.effect("a run's spans: run → step → model call / tool call, one trace, GenAI attributes and polyloop's run id and step", () =>
    Effect.gen(function*() {
      const { result, spans } = yield* tracedRun("otel-1")
      assert.strictEqual(result.steps, 3)
      const named = (name: string) => spans.filter((s) => s.name === name)
      const [run] = named("Agent.run")
      assert.isDefined(run)
      assert.strictEqual(named("Agent.run").length, 1)
      assert.strictEqual(named("Agent.step").length, 3)
      assert.strictEqual(named("Agent.model").length, 3)
      assert.strictEqual(named("Agent.action").length, 2)
      // One trace, the run at its root.
      const traceId = run!.spanContext().traceId
      for (const span of spans) assert.strictEqual(span.spanContext().traceId, traceId, span.name)
      assert.isUndefined(parentOf(spans, run!))

      // The run: an agent invocation.
      assert.strictEqual(run!.attributes[ATTR_GEN_AI_OPERATION_NAME], "invoke_agent")
      assert.strictEqual(run!.attributes[ATTR_GEN_AI_AGENT_NAME], "weather-bot")
      assert.strictEqual(run!.attributes["polyloop.run_id"], "otel-1")

      // Steps under the run, in order.
      const steps = named("Agent.step").sort((a, b) => Number(a.attributes["polyloop.step"]) - Number(b.attributes["polyloop.step"]))
      steps.forEach((step, index) => {
        assert.strictEqual(parentOf(spans, step), run)
        assert.strictEqual(step.attributes["polyloop.run_id"], "otel-1")
        assert.strictEqual(step.attributes["polyloop.step"], index)
      })

      // Each model call under its step: a client "chat" span with the request's model and the reply's usage.
      const usages = [[120, 14], [150, 15], [180, 9]]
      for (const model of named("Agent.model")) {
        const step = Number(model.attributes["polyloop.step"])
        assert.strictEqual(parentOf(spans, model), steps[step])
        assert.strictEqual(model.kind, SpanKind.CLIENT)
        assert.strictEqual(model.attributes["polyloop.run_id"], "otel-1")
        assert.strictEqual(model.attributes[ATTR_GEN_AI_OPERATION_NAME], "chat")
        assert.strictEqual(model.attributes[ATTR_GEN_AI_REQUEST_MODEL], "gpt-4o-mini")
        assert.strictEqual(model.attributes[ATTR_GEN_AI_REQUEST_TEMPERATURE], 0)
        assert.strictEqual(model.attributes[ATTR_GEN_AI_USAGE_INPUT_TOKENS], usages[step]![0])
        assert.strictEqual(model.attributes[ATTR_GEN_AI_USAGE_OUTPUT_TOKENS], usages[step]![1])
        // The provider's word; @effect/opentelemetry 0.64 hands an array attribute to the SDK as JSON text.
        assert.deepStrictEqual(JSON.parse(String(model.attributes[ATTR_GEN_AI_RESPONSE_FINISH_REASONS])), [step < 2 ? "tool_calls" : "stop"])
      }

      // Each tool call under its step, after that step's model call: an "execute_tool" span naming the tool and the call.
      const calls = new Map([[0, "call_oslo"], [1, "call_rome"]])
      for (const action of named("Agent.action")) {
        const step = Number(action.attributes["polyloop.step"])
        assert.strictEqual(parentOf(spans, action), steps[step])
        assert.strictEqual(action.attributes["polyloop.run_id"], "otel-1")
        assert.strictEqual(action.attributes[ATTR_GEN_AI_OPERATION_NAME], "execute_tool")
        assert.strictEqual(action.attributes[ATTR_GEN_AI_TOOL_NAME], "weather")
        assert.strictEqual(action.attributes[ATTR_GEN_AI_TOOL_TYPE], "function")
        assert.strictEqual(action.attributes[ATTR_GEN_AI_TOOL_CALL_ID], calls.get(step))
        const model = named("Agent.model").find((m) => m.attributes["polyloop.step"] === step)!
        assert.isTrue(timeOf(action.startTime) >= timeOf(model.endTime))
        // The registry's own span sits under the action.
        const executes = named("ToolRegistry.execute").filter((s) => parentOf(spans, s) === action)
        assert.strictEqual(executes.length, 1)
      }
      for (const span of spans) assert.strictEqual(span.ended, true, span.name)
    }))

  it.effect("a client that knows its model (the settings name none) puts it on the model call's span: Telemetry.annotateModel", () =>
    Effect.gen(function*() {
      const unnamed = AgentDefinition.make({ name: "weather-bot", systemPrompt: "Answer with the tools.", budget: { maxSteps: 5 } })
      const scripted = yield* ScriptedModel.make(script)
      // A client configured with its model, as OpenAiCompatible is by POLYLOOP_MODEL.
      const model = ModelClient.layer((request) =>
        Effect.zipRight(Telemetry.annotateModel({ model: "claude-sonnet-4-5", provider: "anthropic" }), scripted.client.generate(request))
      )
      const { spans } = yield* tracedRun("otel-2", { agent: unnamed, model })
      const models = spans.filter((s) => s.name === "Agent.model")
      assert.strictEqual(models.length, 3)
      for (const span of models) {
        assert.strictEqual(span.attributes[ATTR_GEN_AI_REQUEST_MODEL], "claude-sonnet-4-5")
        assert.strictEqual(span.attributes[ATTR_GEN_AI_PROVIDER_NAME], "anthropic")
        assert.isUndefined(span.attributes[ATTR_GEN_AI_REQUEST_TEMPERATURE], "a setting that is not set is not an attribute")
      }
      // Only the model spans: the run and the steps are not annotated.
      for (const span of spans.filter((s) => s.name !== "Agent.model")) assert.isUndefined(span.attributes[ATTR_GEN_AI_REQUEST_MODEL], span.name)
    }))
})

const timeOf = ([seconds, nanos]: readonly [number, number]): bigint => BigInt(seconds) * 1_000_000_000n + BigInt(nanos)
