/**
 * A `ModelRequest` rendered to a provider's request body with no server: the provider's
 * `ModelClient` layer (`OpenAiCompatible`, `OpenAiResponses`, `Anthropic`, with everything they do
 * to a body, `ToolResults.fixingBodies` included) over an `HttpClient` that keeps the body it is
 * given and answers with a canned reply. Used where a property renders hundreds of requests (a
 * loopback server would cost a connection each).
 *
 * Not collected by vitest (no `.test.ts`).
 */
import * as HttpClient from "@effect/platform/HttpClient"
import * as HttpClientResponse from "@effect/platform/HttpClientResponse"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Redacted from "effect/Redacted"
import { ModelClient, type ModelRequest } from "@polyloop/core/ModelClient"
import * as Anthropic from "@polyloop/ai/Anthropic"
import * as OpenAiCompatible from "@polyloop/ai/OpenAiCompatible"
import * as OpenAiResponses from "@polyloop/ai/OpenAiResponses"
import * as Replay from "./Replay.js"

/** The three wire shapes of a conversation (design 0300, decision 7). */
export type Wire = "Chat Completions" | "Responses" | "Anthropic"

const apiKey = Redacted.make("sk-render-DO-NOT-LEAK")
const baseUrl = "http://render.invalid/v1"

const clients: Record<Wire, Layer.Layer<ModelClient, never, HttpClient.HttpClient>> = {
  "Chat Completions": OpenAiCompatible.layer({ model: "recorded", baseUrl, apiKey }),
  Responses: OpenAiResponses.layer({ model: "o3", baseUrl, apiKey }),
  Anthropic: Anthropic.layer({ model: "claude-sonnet-4-5", baseUrl: "http://render.invalid", apiKey })
}

/** A recorded text reply of each API (fixtures/recorded/, sources in its SOURCES.md). */
const replies: Record<Wire, string> = {
  "Chat Completions": Replay.text("openai-chat-text.json"),
  Responses: JSON.stringify({
    ...(Replay.json("openai-responses-function-call.json") as Record<string, unknown>),
    output: [{ id: "msg_render", type: "message", status: "completed", role: "assistant", content: [{ type: "output_text", text: "Rendered.", annotations: [], logprobs: [] }] }]
  }),
  Anthropic: Replay.text("anthropic-cache-read.json")
}

/** Renders requests to one wire's bodies (JSON-parsed), in the order they are given. */
export const renderer = (wire: Wire): Effect.Effect<(request: ModelRequest) => Effect.Effect<unknown>> =>
  Effect.gen(function*() {
    let body: unknown = undefined
    const http = HttpClient.make((request) =>
      Effect.sync(() => {
        body = request.body._tag === "Uint8Array" ? JSON.parse(new TextDecoder().decode(request.body.body)) : undefined
        return HttpClientResponse.fromWeb(request, new Response(replies[wire], { status: 200, headers: { "content-type": "application/json" } }))
      })
    )
    const client = yield* Effect.provide(ModelClient, clients[wire].pipe(Layer.provide(Layer.succeed(HttpClient.HttpClient, http))))
    return (request) =>
      Effect.suspend(() => {
        body = undefined
        return Effect.map(Effect.orDie(client.generate(request)), () => body)
      })
  })
