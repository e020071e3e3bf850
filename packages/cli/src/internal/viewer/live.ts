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
 * line every 15 s, so a connection a proxy would drop as idle stays open.
 *
 * The polling is shared (design 0340): a `Hub` keeps one poller per run, and one for the list, in
 * an `RcMap`, alive while a stream of it is open (and `linger` more, so a reconnect does not
 * restart it). A poller keeps its latest event in a `SubscriptionRef`; each stream reads its
 * changes, starting from the current one. N pages open on one run cost one log read per interval.
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
import * as RcMap from "effect/RcMap"
import * as Schedule from "effect/Schedule"
import type * as Scope from "effect/Scope"
import * as Stream from "effect/Stream"
import * as SubscriptionRef from "effect/SubscriptionRef"
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

/** What one poller of a run sends, unframed: the events, the last one `done` for a finished run. */
const pollRun = (runId: RunId, interval: Duration.DurationInput): Stream.Stream<Sent, never, RunLogStore.RunLogStore> =>
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
        Stream.takeUntil((sent) => sent.done)
      )
    })
  )

/** What the list's poller sends, unframed (never done). */
const pollRuns = (interval: Duration.DurationInput): Stream.Stream<Sent, never, RunLogStore.RunLogStore> =>
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
      ).pipe(Stream.changes, Stream.map((text): Sent => ({ text, done: false }))))
  )

/** The shared live streams of one server. */
export interface Hub {
  /** The run's live transcript stream (see the module header). */
  readonly run: (runId: RunId) => Stream.Stream<string>
  /** The list's change stream. */
  readonly runs: Stream.Stream<string>
}

/** How long a poller lives on after its last stream closed. */
export const linger = Duration.seconds(1)

/** The key of the list's poller (a run id is 1 to 200 characters, never empty). */
const listKey = ""

/** A hub over the store in context, for the life of the scope (its pollers stop with it). */
export const makeHub = (interval: Duration.DurationInput): Effect.Effect<Hub, never, RunLogStore.RunLogStore | Scope.Scope> =>
  Effect.gen(function*() {
    const pollers = yield* RcMap.make({
      lookup: (key: string) =>
        Effect.gen(function*() {
          const latest = yield* SubscriptionRef.make(Option.none<Sent>())
          const polled = key === listKey ? pollRuns(interval) : pollRun(key as RunId, interval)
          yield* Effect.forkScoped(Stream.runForEach(polled, (sent) => SubscriptionRef.set(latest, Option.some(sent))))
          return latest
        }),
      idleTimeToLive: linger
    })
    const follow = (key: string): Stream.Stream<string> =>
      Stream.unwrapScoped(Effect.map(RcMap.get(pollers, key), (latest) =>
        latest.changes.pipe(
          Stream.filterMap((sent) => sent),
          Stream.takeUntil((sent) => sent.done),
          Stream.map((sent) => sent.text)
        ))).pipe(withFraming)
    return { run: (runId) => follow(runId), runs: follow(listKey) }
  })
