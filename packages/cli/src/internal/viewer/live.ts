/**
 * The live streams of `polyloop serve`, as Server-Sent Events (encoded by `@effect/experimental`'s
 * `Sse.encoder`), fed by polling the store — so they see the writes of any process, on any
 * machine, for both stores (docs/design/0190-viewer.md):
 *
 * - a run's stream (`GET /api/runs/<id>/live`) reads the log every `interval` without decoding
 *   its records (cheap), and when the record count changed reads it again verified and sends the
 *   transcript document (`event: transcript`, `id:` the record count). A run that does not exist
 *   yet sends `event: missing` and is waited for; a store failure sends `event: problem` and the
 *   polling goes on. The stream ends after the document of a finished run.
 * - the list's stream (`GET /api/live`) sends `event: runs` with a change token whenever
 *   `listRuns` changed; the page fetches its page again.
 *
 * Both start with `retry:` (how long a browser waits before reconnecting) and send a comment
 * line every 15 s, so a connection a proxy would drop as idle stays open. When the client goes
 * away the server interrupts the response, which stops the polling.
 *
 * @internal
 */
import * as Sse from "@effect/experimental/Sse"
import type { RunId } from "@polyloop/core/Ids"
import * as RunLog from "@polyloop/core/RunLog"
import * as RunLogStore from "@polyloop/core/RunLogStore"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Option from "effect/Option"
import * as Schedule from "effect/Schedule"
import * as Stream from "effect/Stream"
import * as Transcript from "../../Transcript.js"
import * as RunsList from "./runsList.js"

/** How long a browser waits before reconnecting a dropped stream. */
const reconnectAfter = Duration.seconds(2)

/** How often an idle stream sends a comment line. */
const keepAliveEvery = Duration.seconds(15)

const event = (name: string, data: unknown, id?: string): string =>
  Sse.encoder.write({ _tag: "Event", event: name, id, data: JSON.stringify(data) })

const withFraming = <E, R>(events: Stream.Stream<string, E, R>): Stream.Stream<string, E, R> =>
  Stream.make(Sse.encoder.write(new Sse.Retry({ duration: reconnectAfter, lastEventId: undefined }))).pipe(
    Stream.concat(
      Stream.merge(events, Stream.tick(keepAliveEvery).pipe(Stream.drop(1), Stream.as(": keep-alive\n\n")), { haltStrategy: "left" })
    )
  )

type Probe =
  | { readonly _tag: "Missing" }
  | { readonly _tag: "Problem"; readonly message: string }
  | { readonly _tag: "Log"; readonly size: number }

const probeKey = (probe: Probe): string =>
  probe._tag === "Log" ? `log ${probe.size}` : probe._tag === "Problem" ? `problem ${probe.message}` : "missing"

/** What a poll of the run produced: the text to send, and whether the stream is done. */
interface Sent {
  readonly text: string
  readonly done: boolean
}

/** The run's live transcript stream (see the module header). */
export const run = (runId: RunId, interval: Duration.DurationInput): Stream.Stream<string, never, RunLogStore.RunLogStore> =>
  Stream.unwrap(
    Effect.map(RunLogStore.RunLogStore, (store) => {
      const probe: Effect.Effect<Probe> = store.readLog(runId).pipe(
        Effect.either,
        Effect.map(Either.match({
          onLeft: (error): Probe => ({ _tag: "Problem", message: error.message }),
          onRight: (log): Probe => (RunLog.isEmpty(log) ? { _tag: "Missing" } : { _tag: "Log", size: RunLog.size(log) })
        }))
      )
      const send = (found: Probe): Effect.Effect<Sent> => {
        switch (found._tag) {
          case "Missing":
            return Effect.succeed({ text: event("missing", { runId }), done: false })
          case "Problem":
            return Effect.succeed({ text: event("problem", { message: found.message }), done: false })
          case "Log":
            return store.readLog(runId, { verify: true }).pipe(
              Effect.either,
              Effect.map(Either.match({
                onLeft: (error): Sent => ({ text: event("problem", { message: error.message }), done: false }),
                onRight: (log): Sent =>
                  Option.match(Transcript.fromLog(log), {
                    onNone: () => ({ text: event("missing", { runId }), done: false }),
                    onSome: (transcript) => ({
                      text: event("transcript", Transcript.toJson(transcript), String(RunLog.size(log))),
                      done: Option.isSome(transcript.finished)
                    })
                  })
              }))
            )
        }
      }
      return Stream.repeatEffectWithSchedule(probe, Schedule.spaced(interval)).pipe(
        Stream.changesWith((a, b) => probeKey(a) === probeKey(b)),
        Stream.mapEffect(send),
        Stream.takeUntil((sent) => sent.done),
        Stream.map((sent) => sent.text),
        withFraming
      )
    })
  )

/** The list's change stream (see the module header). */
export const runs = (interval: Duration.DurationInput): Stream.Stream<string, never, RunLogStore.RunLogStore> =>
  Stream.unwrap(
    Effect.map(RunLogStore.RunLogStore, (store) =>
      Stream.repeatEffectWithSchedule(
        store.listRuns().pipe(
          Effect.either,
          Effect.map(Either.match({
            onLeft: (error) => event("problem", { message: error.message }),
            onRight: (all) => event("runs", { token: RunsList.changeToken(all), count: all.length })
          }))
        ),
        Schedule.spaced(interval)
      ).pipe(Stream.changes, withFraming))
  )
