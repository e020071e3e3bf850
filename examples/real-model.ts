/**
 * A small tool-calling agent against a real model, through `@polyloop/ai`'s `OpenAiCompatible`
 * client: any server that speaks OpenAI's Chat Completions API (OpenAI, OpenRouter, vLLM,
 * Ollama, LM Studio, …).
 *
 *   POLYLOOP_API_KEY=sk-... npx tsx examples/real-model.ts
 *
 * Without `POLYLOOP_API_KEY` it explains what to set and exits with code 0. Every step is
 * printed as it happens; the run log is kept in memory (see the SQLite examples for a durable
 * one). Ctrl-C interrupts the run and aborts the model call in flight.
 */
import * as NodeHttpClient from "@effect/platform-node/NodeHttpClient"
import * as NodeRuntime from "@effect/platform-node/NodeRuntime"
import * as Config from "effect/Config"
import type * as ConfigError from "effect/ConfigError"
import * as ConfigProvider from "effect/ConfigProvider"
import * as Console from "effect/Console"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Schema from "effect/Schema"
import * as OpenAiCompatible from "@polyloop/ai/OpenAiCompatible"
import * as Agent from "@polyloop/core/Agent"
import * as AgentDefinition from "@polyloop/core/AgentDefinition"
import type { MissingToolHandler, RunError } from "@polyloop/core/Errors"
import * as EventSink from "@polyloop/core/EventSink"
import { runId } from "@polyloop/core/Ids"
import type { LoopEvent } from "@polyloop/core/LoopEvent"
import * as NativeToolCallParser from "@polyloop/core/NativeToolCallParser"
import * as RunLogStore from "@polyloop/core/RunLogStore"
import * as StopReason from "@polyloop/core/StopReason"
import * as Tool from "@polyloop/core/Tool"
import * as ToolRegistry from "@polyloop/core/ToolRegistry"

const defaultModel = "gpt-4o-mini"

const help = `This example runs a small tool-calling agent against a real model, and POLYLOOP_API_KEY is not set.

Set:
  POLYLOOP_API_KEY   the provider's API key (required; for a local server any value works)
  POLYLOOP_MODEL     a chat model that supports tool calls (default: ${defaultModel})
  POLYLOOP_BASE_URL  an OpenAI-compatible API root (default: ${OpenAiCompatible.defaultBaseUrl}), e.g.
                       https://openrouter.ai/api/v1
                       http://localhost:11434/v1   (Ollama)
                       http://localhost:8000/v1    (vLLM)
  POLYLOOP_TIMEOUT   cut of one model request, e.g. "90 seconds" (default: 60 seconds)

Then run:
  POLYLOOP_API_KEY=sk-... npx tsx examples/real-model.ts`

// -----------------------------------------------------------------------------
// The agent: two arithmetic tools and a word problem
// -----------------------------------------------------------------------------

const Operands = Schema.Struct({ a: Schema.Number, b: Schema.Number })

const multiply = Tool.make({
  name: "multiply",
  description: "Multiplies a by b.",
  parameters: Operands,
  handler: ({ a, b }) => Effect.succeed(String(a * b))
})

const subtract = Tool.make({
  name: "subtract",
  description: "Subtracts b from a.",
  parameters: Operands,
  handler: ({ a, b }) => Effect.succeed(String(a - b))
})

const tools = ToolRegistry.make(multiply, subtract)

const agent = AgentDefinition.make({
  name: "warehouse-clerk",
  systemPrompt: "You do arithmetic only with the tools, calling exactly one tool per reply. " +
    "When you know the result, reply with the answer in one short sentence and call no tool.",
  budget: { maxSteps: 8, maxTokens: 20_000 }
})

const task = "A warehouse has 17 shelves with 23 boxes each. 58 boxes are shipped out. How many boxes remain?"

// -----------------------------------------------------------------------------
// Printing each step as it happens
// -----------------------------------------------------------------------------

const show = (event: LoopEvent): Effect.Effect<void> => {
  switch (event._tag) {
    case "ModelReplied": {
      const reply = event.reply
      const calls = reply.toolCalls.map((call) => `${call.name}(${call.argumentsText})`).join(", ")
      const tokens = `[${reply.usage.inputTokens}+${reply.usage.outputTokens} tokens]`
      return Console.log(calls === "" ? `step ${event.step}: model says ${JSON.stringify(reply.text)} ${tokens}` : `step ${event.step}: model calls ${calls} ${tokens}`)
    }
    case "DecisionParsed":
      return event.decision._tag === "InvalidDecision"
        ? Console.log(`         invalid decision, fed back: ${event.decision.explanation}`)
        : Effect.void
    case "ActionExecuted":
      return Console.log(`         ${event.outcome.status}: ${event.outcome.observation}`)
    case "RunFinished":
      return Console.log(`finished: ${StopReason.format(event.stopReason)}`)
    default:
      return Effect.void
  }
}

// -----------------------------------------------------------------------------
// Main
// -----------------------------------------------------------------------------

/** POLYLOOP_* from the environment, with the example's default model. */
const configProvider = ConfigProvider.fromEnv().pipe(
  ConfigProvider.orElse(() => ConfigProvider.fromMap(new Map([["POLYLOOP_MODEL", defaultModel]])))
)

const explain = (error: RunError | MissingToolHandler | ConfigError.ConfigError): Effect.Effect<void> => {
  switch (error._tag) {
    case "ModelError":
      return Console.error(
        `The model call failed${error.retryable ? " (after retries)" : ""}: ${error.message}` +
          (error.status === 401 ? "\nCheck POLYLOOP_API_KEY." : error.status === 404 ? "\nCheck POLYLOOP_BASE_URL and POLYLOOP_MODEL." : "")
      )
    default:
      return Console.error(`The run failed: ${String(error)}`)
  }
}

const main = Effect.gen(function*() {
  const apiKey = yield* Config.option(Config.redacted("POLYLOOP_API_KEY"))
  if (Option.isNone(apiKey)) {
    return yield* Console.log(help)
  }
  const model = yield* Config.string("POLYLOOP_MODEL")
  yield* Console.log(`task: ${task}\nmodel: ${model}\n`)

  const services = Agent.layer({
    store: RunLogStore.inMemory(),
    model: OpenAiCompatible.layerConfig().pipe(Layer.provide(NodeHttpClient.layerUndici)),
    parser: NativeToolCallParser.layer(),
    tools,
    events: EventSink.layer((event) => show(event))
  })
  const result = yield* Agent.run({ runId: runId(`real-model-${Date.now()}`), agent, task, tools }).pipe(
    Effect.provide(services)
  )
  const answer = result.stopReason._tag === "Completed" ? result.stopReason.answer : undefined
  yield* Console.log(
    `\n${answer === undefined ? "no answer" : `answer: ${answer}`}\n` +
      `steps: ${result.steps} (${result.effectiveSteps} with an executed tool), ` +
      `tokens: ${result.usage.inputTokens} in + ${result.usage.outputTokens} out`
  )
}).pipe(
  Effect.tapError(explain),
  Effect.withConfigProvider(configProvider)
)

// Errors are explained above (no stack trace); a failure still exits with code 1.
NodeRuntime.runMain(main, { disableErrorReporting: true })
