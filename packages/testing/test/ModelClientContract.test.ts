import { describe, it } from "@effect/vitest"
import * as Deferred from "effect/Deferred"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Stream from "effect/Stream"
import { ModelError } from "@polyloop/core/Errors"
import * as ModelClient from "@polyloop/core/ModelClient"
import * as ModelDelta from "@polyloop/core/ModelDelta"
import type { ModelReply } from "@polyloop/core/ModelReply"
import * as ModelClientContract from "../src/ModelClientContract.js"
import { breaks, holdsAll, registerBroken } from "./helpers.js"

/** What a simulated HTTP transport returns for a condition. */
type Response = { readonly status: 200; readonly body: ModelReply } | { readonly status: number; readonly body: string }

class TransportError {
  readonly _tag = "TransportError"
}

const transport = (condition: ModelClientContract.Condition): Effect.Effect<Response, TransportError> => {
  switch (condition._tag) {
    case "Reply":
      return Effect.succeed({ status: 200, body: condition.reply })
    case "TransportFailure":
      return Effect.fail(new TransportError())
    case "HttpStatus":
      return Effect.succeed({ status: condition.status, body: "error" })
    case "Hang":
      return Deferred.succeed(condition.started, undefined).pipe(
        Effect.zipRight(Effect.never),
        Effect.onInterrupt(() => Deferred.succeed(condition.aborted, undefined))
      )
  }
}

/** A client over the transport, with a pluggable classification of statuses. */
const client = (
  retryable: (status: number) => boolean,
  onTransport: (e: TransportError) => Effect.Effect<never, ModelError> = () => Effect.fail(new ModelError({ retryable: true, message: "connection failed" })),
  mapReply: (reply: ModelReply) => ModelReply = (reply) => reply,
  refusal: (request: ModelClient.ModelRequest) => ModelError | undefined = () => undefined,
  /** The deltas the client streams for a reply (default: the reply in chunks of 3 characters). */
  streamed: (reply: ModelReply) => ReadonlyArray<ModelDelta.ModelDelta> = (reply) => ModelDelta.chunked(reply, 3)
) =>
(condition: ModelClientContract.Condition): Layer.Layer<ModelClient.ModelClient> => {
  const generate = (request: ModelClient.ModelRequest) =>
    refusal(request) ?? transport(condition).pipe(
      Effect.catchAll(onTransport),
      Effect.flatMap((response) =>
        response.status === 200 && typeof response.body !== "string"
          ? Effect.succeed(mapReply(response.body))
          : Effect.fail(new ModelError({ retryable: retryable(response.status), status: response.status, message: `HTTP ${response.status}` }))
      )
    )
  return ModelClient.layer(generate, (request) => Stream.flatMap(Stream.fromEffect(generate(request)), (reply) => Stream.fromIterable(streamed(reply))))
}

const correct = client((status) => status === 429 || status >= 500)
const all = ModelClientContract.properties(correct, { exactReplies: true, hang: true })

/** A provider without seeds: requests that set one are what a client of it must refuse. */
const setsSeed = (request: ModelClient.ModelRequest): boolean => request.settings.seed !== undefined

/** `correct`, except that a request setting a seed fails with `error` instead of being sent. */
const refusingSeeds = (error: ModelError): ModelClientContract.ClientUnderTest =>
  client((status) => status === 429 || status >= 500, undefined, undefined, (request) => setsSeed(request) ? error : undefined)

describe("ModelClientContract", () => {
  it.live("a correct client satisfies every property", () => holdsAll(all), 60_000)

  it.live("a client that refuses the requests it declares with refuses satisfies every property", () =>
    holdsAll(ModelClientContract.properties(
      refusingSeeds(new ModelError({ retryable: false, message: "no seed setting" })),
      { exactReplies: true, hang: true, refuses: setsSeed }
    )), 60_000)

  it.live("a client that refuses requests it does not declare breaks replies", () =>
    breaks(
      ModelClientContract.properties(refusingSeeds(new ModelError({ retryable: false, message: "no seed setting" }))),
      "replies",
      /facing a provider that answers failed: ModelError: no seed setting/
    ), 60_000)

  it.live("a client that serves a request it declares it refuses breaks replies", () =>
    breaks(
      ModelClientContract.properties(correct, { refuses: setsSeed }),
      "replies",
      /returned a reply .*must fail with ModelError \(a request the client declares it refuses\)/
    ), 60_000)

  it.live("a client that refuses a declared request as retryable breaks replies", () =>
    breaks(
      ModelClientContract.properties(
        refusingSeeds(new ModelError({ retryable: true, message: "no seed setting" })),
        { refuses: setsSeed }
      ),
      "replies",
      /retryable: true.*must be retryable: false \(a request the client declares it refuses\)/
    ), 60_000)

  registerBroken(all, [
    {
      name: "a client that drops the provider's finish reason",
      props: () =>
        ModelClientContract.properties(
          client((status) => status === 429 || status >= 500, undefined, ({ finishReason: _dropped, ...reply }) => reply),
          { exactReplies: true }
        ),
      breaks: { replies: /another reply than the provider's: \$\.finishReason/ }
    },
    {
      name: "a client whose stream drops the reasoning",
      props: () =>
        ModelClientContract.properties(
          client((status) => status === 429 || status >= 500, undefined, undefined, undefined, (reply) =>
            ModelDelta.chunked(reply, 3).filter((delta) => delta._tag !== "ReasoningDelta")),
          { runsFactor: 4 }
        ),
      breaks: { streams: /folds into another reply than generate's: \$\.reasoning/ }
    },
    {
      name: "a client whose stream always fails, as permanent",
      props: () =>
        ModelClientContract.properties((condition) =>
          Layer.map(correct(condition), (context) => {
            const generating = Context.get(context, ModelClient.ModelClient)
            return Context.add(context, ModelClient.ModelClient, ModelClient.make(generating.generate, () => Stream.fail(new ModelError({ retryable: false, message: "no stream" }))))
          })
        ),
      breaks: { streams: /generate replied but the stream failed|stream .* failed with ModelError \{ retryable: false \}, generate with \{ retryable: true \}/ }
    },
    {
      name: "a client that treats 429 as permanent",
      props: () => ModelClientContract.properties(client((status) => status >= 500)),
      breaks: { retryable: /HTTP 429 failed with ModelError \{ retryable: false \}/ }
    },
    {
      name: "a client that retries every 4xx",
      props: () => ModelClientContract.properties(client((status) => status >= 400)),
      breaks: { notRetryable: /failed with ModelError \{ retryable: true \}.*must be retryable: false/ }
    },
    {
      name: "a client that dies on a transport failure",
      props: () => ModelClientContract.properties(client((status) => status === 429 || status >= 500, () => Effect.die(new Error("ECONNRESET")))),
      breaks: { retryable: /a transport failure exited with defect Error: ECONNRESET/ }
    },
    {
      name: "a client that does not abort the call when interrupted",
      props: () =>
        ModelClientContract.properties(
          (condition) =>
            ModelClient.layer(() =>
              Effect.flatMap(Effect.forkDaemon(transport(condition)), (fiber) => fiber.await).pipe(
                Effect.flatMap(() => Effect.fail(new ModelError({ retryable: true, message: "?" })))
              )
            ),
          { hang: true, hangTimeout: 300 }
        ),
      breaks: { interruption: /did not see the call aborted within 300 ms/ }
    }
  ])
})
