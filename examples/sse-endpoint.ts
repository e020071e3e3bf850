/**
 * An SSE endpoint over `Agent.stream` (design 0180): `GET /runs/<id>` runs the agent under that
 * run id and sends every event of the run as a Server-Sent Event as it happens — the model's
 * reply piece by piece (`ModelDelta`), each step, and last the result (`RunCompleted`). A browser
 * reads it with `new EventSource("/runs/weather-1")`. The log is what a non-streaming run writes:
 * the pieces are never stored; a client that disconnects interrupts the run, which resumes the
 * next time the id is asked for.
 *
 * Here the server listens on a free port and the program is its own client: it reads the events
 * with `fetch` and prints the reply as it arrives. Run: npx tsx examples/sse-endpoint.ts
 */
import * as HttpRouter from "@effect/platform/HttpRouter"
import * as HttpServer from "@effect/platform/HttpServer"
import * as HttpServerResponse from "@effect/platform/HttpServerResponse"
import * as NodeHttpServer from "@effect/platform-node/NodeHttpServer"
import * as NodeRuntime from "@effect/platform-node/NodeRuntime"
import * as Agent from "@polyloop/core/Agent"
import * as AgentDefinition from "@polyloop/core/AgentDefinition"
import * as EventSink from "@polyloop/core/EventSink"
import * as Ids from "@polyloop/core/Ids"
import * as NativeToolCallParser from "@polyloop/core/NativeToolCallParser"
import * as RunLogStore from "@polyloop/core/RunLogStore"
import * as StopReason from "@polyloop/core/StopReason"
import * as Tool from "@polyloop/core/Tool"
import * as ToolRegistry from "@polyloop/core/ToolRegistry"
import * as ScriptedModel from "@polyloop/testing/ScriptedModel"
import * as Console from "effect/Console"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Schema from "effect/Schema"
import * as Stream from "effect/Stream"
import { createServer } from "node:http"

const weather = Tool.make({
  name: "weather",
  description: "The current temperature of a city, in °C.",
  parameters: Schema.Struct({ city: Schema.String }),
  replayPolicy: "Always",
  handler: ({ city }) => Effect.succeed(city === "Oslo" ? "4" : "18")
})
const tools = ToolRegistry.make(weather)
const agent = AgentDefinition.make({ name: "weather-bot", systemPrompt: "Answer with the tools.", budget: { maxSteps: 5 } })

// A scripted model that streams its replies in pieces of 6 characters, 15 ms apart; a real one
// (`OpenAiCompatible.layerConfig()` from @polyloop/ai) streams what the provider sends.
const services = Agent.layer({
  store: RunLogStore.layerMemory,
  model: ScriptedModel.layer(
    [
      ScriptedModel.toolCall("weather", { city: "Oslo" }, { text: "Let me look the temperature up." }),
      "It is 4 °C in Oslo right now: a coat, a scarf and gloves will do."
    ],
    { streaming: { chunkSize: 6, delay: "15 millis" } }
  ),
  parser: NativeToolCallParser.layer(),
  tools
})

const encodeResult = Schema.encodeSync(Agent.RunResult)

/** One item of the run as a Server-Sent Event: its tag as the event name, its JSON as the data. */
const toEvent = (item: Agent.StreamItem): Effect.Effect<string> =>
  (item._tag === "RunCompleted"
    ? Effect.succeed(JSON.stringify({ _tag: item._tag, result: encodeResult(item.result) }))
    : Effect.orDie(EventSink.toJsonLine(item))).pipe(Effect.map((data) => `event: ${item._tag}\ndata: ${data}\n\n`))

// GET /runs/:id — the run's events as they happen; a failed run ends with an `error` event.
const router = HttpRouter.empty.pipe(
  HttpRouter.get(
    "/runs/:id",
    Effect.gen(function*() {
      const { id } = yield* HttpRouter.schemaPathParams(Schema.Struct({ id: Ids.RunId }))
      const events = Agent.stream({ runId: id, agent, task: "How warm is it in Oslo?", tools }).pipe(
        Stream.mapEffect(toEvent),
        Stream.catchAll((error) => Stream.succeed(`event: error\ndata: ${JSON.stringify({ _tag: error._tag, message: error.message })}\n\n`)),
        Stream.encodeText,
        Stream.provideLayer(services)
      )
      return HttpServerResponse.stream(events, { contentType: "text/event-stream", headers: { "cache-control": "no-cache" } })
    })
  )
)

/** The client: reads the events and prints the reply as it streams, then each step and the result. */
const readRun = (url: string) =>
  Effect.promise(async () => {
    const response = await fetch(url)
    const reader = response.body!.pipeThrough(new TextDecoderStream()).getReader()
    let buffer = ""
    let replying = false
    for (;;) {
      const { done, value } = await reader.read()
      if (done) break
      buffer += value
      let end = buffer.indexOf("\n\n")
      while (end >= 0) {
        const event = buffer.slice(0, end)
        buffer = buffer.slice(end + 2)
        end = buffer.indexOf("\n\n")
        const name = /^event: (.*)$/m.exec(event)?.[1]
        const data: unknown = JSON.parse(/^data: (.*)$/m.exec(event)?.[1] ?? "null")
        const record = typeof data === "object" && data !== null ? (data as Record<string, unknown>) : {}
        if (name === "ModelDelta") {
          const delta = record.delta as { _tag: string; text?: string; name?: string; arguments?: string }
          const piece = delta._tag === "TextDelta" ? delta.text : delta._tag === "ToolCallDelta" ? `${delta.name ?? ""}${delta.arguments ?? ""}` : ""
          if (piece === undefined || piece === "") continue
          process.stdout.write(`${replying ? "" : "model ▸ "}${piece}|`)
          replying = true
          continue
        }
        if (replying) process.stdout.write("\n")
        replying = false
        if (name === "StepCompleted") console.log(`step ${String(record.step)} completed (${String(record.decision)})`)
        if (name === "RunCompleted") {
          const result = Schema.decodeUnknownSync(Agent.RunResult)(record.result)
          console.log(`result: ${StopReason.format(result.stopReason)} after ${result.steps} steps`)
        }
        if (name === "error") console.log(`the run failed: ${JSON.stringify(record)}`)
      }
    }
  })

const program = Effect.gen(function*() {
  const address = (yield* HttpServer.HttpServer).address
  const port = address._tag === "TcpAddress" ? address.port : 0
  yield* Console.log(`SSE endpoint on http://127.0.0.1:${port}/runs/<id> ('|' marks where a piece of the reply ended)`)
  yield* readRun(`http://127.0.0.1:${port}/runs/weather-1`)
})

// The server (on a free port of the loopback interface) serves the router for as long as the program runs.
const server = Layer.provideMerge(HttpServer.serve(router), NodeHttpServer.layer(createServer, { port: 0, host: "127.0.0.1" }))

NodeRuntime.runMain(Effect.provide(program, server))
