/**
 * A chat a person can use (issue 31, design 0300 decisions 6–9): one durable conversation on a
 * SQLite file, served over HTTP with a minimal page.
 *
 * - `POST /api/messages` `{ messageId, text }` — `Agent.send`: the message is durable before the
 *   answer `202` is sent (the page makes the id; a retried POST appends nothing). While a turn
 *   runs, the next message is refused with `409` (the page waits for the turn's end); one
 *   conversation answers one message at a time.
 * - `GET /api/events` — Server-Sent Events: the conversation as its log grows (the person's
 *   messages, the model's replies and tool calls, the observations, each turn's end), each event
 *   with its record's sequence number as `id`, so a reconnecting `EventSource` (after a restart)
 *   continues where it stopped (`Last-Event-ID`).
 * - `GET /` — the page: the conversation as text (nothing from a message or a model becomes
 *   markup), a box to write in.
 *
 * Kill the server in the middle of a turn and start it again: on start it finishes the turn that
 * was running (`Agent.run` on the conversation resumes it), the page reconnects and shows it; no
 * message is lost, no `"Never"` call runs twice.
 *
 * The model is scripted (it looks the order up, then answers, 300 ms per call, or
 * `CHAT_MODEL_LATENCY_MS`) unless
 * `POLYLOOP_BASE_URL` names an OpenAI-compatible server (`OpenAiCompatible.layerConfig`).
 *
 *   CHAT_DB=chat.db CHAT_PORT=8080 npx tsx examples/chat-server.ts
 */
import * as HttpRouter from "@effect/platform/HttpRouter"
import * as HttpServer from "@effect/platform/HttpServer"
import * as HttpServerRequest from "@effect/platform/HttpServerRequest"
import * as HttpServerResponse from "@effect/platform/HttpServerResponse"
import * as NodeHttpClient from "@effect/platform-node/NodeHttpClient"
import * as NodeHttpServer from "@effect/platform-node/NodeHttpServer"
import * as NodeRuntime from "@effect/platform-node/NodeRuntime"
import * as OpenAiCompatible from "@polyloop/ai/OpenAiCompatible"
import * as Agent from "@polyloop/core/Agent"
import * as AgentDefinition from "@polyloop/core/AgentDefinition"
import * as EventSink from "@polyloop/core/EventSink"
import * as Ids from "@polyloop/core/Ids"
import type * as ModelClient from "@polyloop/core/ModelClient"
import * as ModelReply from "@polyloop/core/ModelReply"
import * as NativeToolCallParser from "@polyloop/core/NativeToolCallParser"
import * as RunLog from "@polyloop/core/RunLog"
import { RunLogStore } from "@polyloop/core/RunLogStore"
import * as StopReason from "@polyloop/core/StopReason"
import * as Tool from "@polyloop/core/Tool"
import * as ToolRegistry from "@polyloop/core/ToolRegistry"
import * as SqlRunLogStore from "@polyloop/sql/SqlRunLogStore"
import * as ScriptedModel from "@polyloop/testing/ScriptedModel"
import * as Console from "effect/Console"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Ref from "effect/Ref"
import * as Schedule from "effect/Schedule"
import * as Schema from "effect/Schema"
import * as Stream from "effect/Stream"
import { createServer } from "node:http"

const conversation = Ids.runId("chat")

const lookup = Tool.make({
  name: "lookup_order",
  description: "Looks an order up by its number.",
  parameters: Schema.Struct({ order: Schema.String }),
  replayPolicy: "Always",
  handler: ({ order }) => Effect.succeed(`order ${order}: shipped on 2026-11-30, arriving in 2 days`)
})
const tools = ToolRegistry.make(lookup)
const agent = AgentDefinition.make({
  name: "order-desk",
  systemPrompt: "You answer customers about their orders. Look an order up before you answer.",
  budget: { maxSteps: 4 }
})

/** The scripted desk: a turn looks up the order its message names, then answers. */
const scripted = ScriptedModel.layer((request) => {
  const messages = request.messages
  const last = messages.at(-1)!
  let question = ""
  for (let i = messages.length - 1; i >= 0; i--) {
    const m = messages[i]!
    if (m._tag === "User") {
      question = m.text
      break
    }
  }
  const order = /\d+/.exec(question)?.[0]
  if (last._tag === "User" && order !== undefined) {
    return ModelReply.make({ text: "Let me look that up.", toolCalls: [{ id: "", name: "lookup_order", argumentsText: JSON.stringify({ order }) }] })
  }
  const found = last._tag === "Tool" ? ` ${last.text}.` : ""
  return ModelReply.make({ text: `You asked: "${question}".${found}` })
}, { latency: `${Number(process.env["CHAT_MODEL_LATENCY_MS"] ?? 300)} millis` })

const model: Layer.Layer<ModelClient.ModelClient> = process.env["POLYLOOP_BASE_URL"] !== undefined
  ? Layer.orDie(OpenAiCompatible.layerConfig()).pipe(Layer.provide(NodeHttpClient.layerUndici))
  : scripted

const services = Layer.mergeAll(model, NativeToolCallParser.layer(), Layer.orDie(ToolRegistry.layerExecutor(tools)))

/** One event of the page: a record of the conversation as text. */
interface ChatEvent {
  readonly seq: number
  readonly kind: "user" | "assistant" | "tool" | "turn-end"
  readonly text: string
  readonly turn?: number
}

const eventsOf = (log: RunLog.RunLog): ReadonlyArray<ChatEvent> =>
  RunLog.records(log).flatMap((record): ReadonlyArray<ChatEvent> => {
    switch (record._tag) {
      case "RunStarted":
        return [{ seq: record.seq, kind: "user", text: record.task, turn: 0 }]
      case "UserMessaged":
        return [{ seq: record.seq, kind: "user", text: record.text, turn: record.turn }]
      case "ModelReplied":
        return [{
          seq: record.seq,
          kind: "assistant",
          text: [record.reply.text, ...record.reply.toolCalls.map((c) => `→ ${c.name}(${c.argumentsText})`)].filter((t) => t !== "").join("\n")
        }]
      case "ActionResulted":
        return [{ seq: record.seq, kind: "tool", text: record.outcome.observation }]
      case "TurnFinished":
        return [{ seq: record.seq, kind: "turn-end", text: StopReason.format(record.stopReason), turn: record.turn }]
      default:
        return []
    }
  })

const page = `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>polyloop chat</title>
<style>
body { font: 15px system-ui, sans-serif; max-width: 46rem; margin: 2rem auto; color: #222; }
#log div { white-space: pre-wrap; margin: .4rem 0; padding: .5rem .7rem; border-radius: 8px; }
.user { background: #e8f0fe; } .assistant { background: #f1f3f4; } .tool { color: #555; font-size: 13px; font-family: monospace; }
.turn-end { color: #888; font-size: 12px; } form { display: flex; gap: .5rem; margin-top: 1rem; } input { flex: 1; padding: .5rem; }
#status { color: #888; font-size: 12px; }
</style></head>
<body><h1>polyloop chat</h1><div id="log"></div>
<form id="send"><input id="text" autocomplete="off" placeholder="Ask about an order, e.g. Where is order 17?"><button id="go">Send</button></form>
<div id="status">connecting…</div>
<script src="/page.js"></script></body></html>`

// The page's script: text only (textContent), one EventSource that reconnects by itself.
const script = `
const log = document.getElementById("log"), status = document.getElementById("status")
const input = document.getElementById("text"), button = document.getElementById("go")
let waiting = false
const busy = (on) => { waiting = on; button.disabled = on; input.disabled = on }
const events = new EventSource("/api/events")
events.onopen = () => { status.textContent = "connected" }
events.onerror = () => { status.textContent = "reconnecting…" }
events.onmessage = (e) => {
  const ev = JSON.parse(e.data)
  const div = document.createElement("div")
  div.className = ev.kind
  div.dataset.seq = String(ev.seq)
  div.textContent = ev.kind === "turn-end" ? "turn " + ev.turn + " ended: " + ev.text : ev.text
  log.append(div)
  if (ev.kind === "turn-end") busy(false)
  if (ev.kind === "user") busy(true)
}
document.getElementById("send").addEventListener("submit", async (e) => {
  e.preventDefault()
  const text = input.value.trim()
  if (text === "" || waiting) return
  busy(true)
  const response = await fetch("/api/messages", { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ messageId: crypto.randomUUID(), text }) })
  if (response.status === 202) input.value = ""
  else { status.textContent = "not sent: " + response.status; busy(false) }
})
`

const Posted = Schema.Struct({ messageId: Schema.String.pipe(Schema.minLength(1), Schema.maxLength(100)), text: Schema.String.pipe(Schema.minLength(1), Schema.maxLength(4000)) })

const program = Effect.gen(function*() {
  const store = yield* RunLogStore
  const running = yield* Ref.make(false)

  /** Runs a turn in the background (it outlives the request that asked for it); `written` completes once the message is durable. */
  const turn = (effect: (sink: Layer.Layer<EventSink.EventSink>) => Effect.Effect<unknown, unknown, never>, written?: Deferred.Deferred<void>) =>
    Effect.gen(function*() {
      yield* Ref.set(running, true)
      const sink = EventSink.layer((event) =>
        written !== undefined && (event._tag === "RunStarted" || event._tag === "TurnStarted") ? Deferred.succeed(written, undefined) : Effect.void
      )
      yield* effect(sink).pipe(
        Effect.tapError((error) => Console.error(`the turn stopped: ${String(error)}`)),
        Effect.ignore,
        Effect.ensuring(Effect.zipRight(Ref.set(running, false), written === undefined ? Effect.void : Deferred.succeed(written, undefined))),
        Effect.forkDaemon
      )
    })

  // A turn that was running when the server stopped is finished first.
  const log = yield* store.readLog(conversation)
  if (Option.isSome(log.started) && log.turns.length < log.userMessages.length + 1) {
    yield* Console.log("finishing the turn that was running when the server stopped")
    const task = log.started.value.task
    yield* turn((sink) => Agent.run({ runId: conversation, agent, task, tools }).pipe(Effect.provide(Layer.mergeAll(services, sink, Layer.succeed(RunLogStore, store)))))
  }

  const router = HttpRouter.empty.pipe(
    HttpRouter.get("/", Effect.succeed(HttpServerResponse.html(page))),
    HttpRouter.get("/page.js", Effect.succeed(HttpServerResponse.text(script, { contentType: "text/javascript" }))),
    HttpRouter.post(
      "/api/messages",
      Effect.gen(function*() {
        const posted = yield* HttpServerRequest.schemaBodyJson(Posted)
        if (yield* Ref.get(running)) return HttpServerResponse.unsafeJson({ error: "a turn is running: send when it has ended" }, { status: 409 })
        const written = yield* Deferred.make<void>()
        yield* turn(
          (sink) =>
            Agent.send({ runId: conversation, messageId: posted.messageId, text: posted.text, agent, tools }).pipe(
              Effect.provide(Layer.mergeAll(services, sink, Layer.succeed(RunLogStore, store)))
            ),
          written
        )
        // Answered once the message is in the log (or its turn, for a retried message, is over).
        yield* Deferred.await(written)
        return HttpServerResponse.unsafeJson({ messageId: posted.messageId }, { status: 202 })
      }).pipe(Effect.catchTag("ParseError", "RequestError", () => Effect.succeed(HttpServerResponse.unsafeJson({ error: "expected { messageId, text }" }, { status: 400 }))))
    ),
    HttpRouter.get(
      "/api/events",
      Effect.gen(function*() {
        const request = yield* HttpServerRequest.HttpServerRequest
        const from = Number(request.headers["last-event-id"] ?? -1)
        const sent = yield* Ref.make(Number.isFinite(from) ? from : -1)
        // The log, read again every 200 ms; each record once, after the last the client has.
        const poll = Effect.gen(function*() {
          const log = yield* store.readLog(conversation)
          const after = yield* Ref.get(sent)
          const fresh = eventsOf(log).filter((e) => e.seq > after)
          if (fresh.length > 0) yield* Ref.set(sent, fresh.at(-1)!.seq)
          return fresh.map((e) => `id: ${e.seq}\ndata: ${JSON.stringify(e)}\n\n`).join("")
        })
        const stream = Stream.concat(
          Stream.succeed("retry: 500\n\n"),
          Stream.repeatEffectWithSchedule(Effect.orDie(poll), Schedule.spaced("200 millis")).pipe(Stream.filter((text) => text !== ""))
        )
        return HttpServerResponse.stream(Stream.encodeText(stream), { contentType: "text/event-stream", headers: { "cache-control": "no-cache" } })
      })
    )
  )
  const address = yield* HttpServer.HttpServer
  yield* Console.log(`polyloop chat on http://127.0.0.1:${address.address._tag === "TcpAddress" ? address.address.port : 0}/ (store ${file})`)
  return yield* Layer.launch(HttpServer.serve(router))
})

const file = process.env["CHAT_DB"] ?? "chat.db"
const port = Number(process.env["CHAT_PORT"] ?? 0)

NodeRuntime.runMain(
  program.pipe(
    Effect.provide(Layer.merge(SqlRunLogStore.layerSqlite({ filename: file }), NodeHttpServer.layer(createServer, { port, host: "127.0.0.1" })))
  )
)
