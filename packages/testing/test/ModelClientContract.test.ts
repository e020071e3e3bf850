import { describe, it } from "@effect/vitest"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import { ModelError } from "@polyloop/core/Errors"
import * as ModelClient from "@polyloop/core/ModelClient"
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
  refusal: (request: ModelClient.ModelRequest) => ModelError | undefined = () => undefined
): ModelClientContract.ClientUnderTest =>
(condition) =>
  ModelClient.layer((request) =>
    refusal(request) ?? transport(condition).pipe(
      Effect.catchAll(onTransport),
      Effect.flatMap((response) =>
        response.status === 200 && typeof response.body !== "string"
          ? Effect.succeed(mapReply(response.body))
          : Effect.fail(new ModelError({ retryable: retryable(response.status), status: response.status, message: `HTTP ${response.status}` }))
      )
    )
  )

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
