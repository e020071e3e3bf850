/**
 * The event sink port: where the loop sends `LoopEvent`s.
 *
 * Contract: a failed delivery (`EventDeliveryError`) never interrupts the loop; the loop counts
 * it in `RunResult.eventDeliveryFailures`. Events of one run are delivered in order. The loop
 * emits an event once the record it reports is durable (`ModelDelta`, a piece of a reply still
 * arriving when the run streams, reports no record: design 0180).
 *
 * Shipped sinks: `layerNoop` (drops everything), `layerPubSub` (subscribers get a `Stream`
 * through the `Events` service) and `layerJsonl(path)` (one JSON line per event, appended to a
 * file through `@effect/platform`'s `FileSystem`).
 *
 * @since 0.1.0
 */
import * as FileSystem from "@effect/platform/FileSystem"
import type { PlatformError } from "@effect/platform/Error"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as ParseResult from "effect/ParseResult"
import * as PubSub from "effect/PubSub"
import * as Schema from "effect/Schema"
import type * as Scope from "effect/Scope"
import * as Stream from "effect/Stream"
import { EventDeliveryError } from "./Errors.js"
import { LoopEvent } from "./LoopEvent.js"

/** The event sink port. */
export class EventSink extends Context.Tag("@polyloop/core/EventSink")<EventSink, EventSink.Service>() {}

/** @since 0.1.0 */
export declare namespace EventSink {
  /** @since 0.1.0 */
  export interface Service {
    readonly emit: (event: LoopEvent) => Effect.Effect<void, EventDeliveryError>
  }
}

/** Makes a sink from its `emit`. */
export const make = (emit: EventSink.Service["emit"]): EventSink.Service => ({ emit })

/** A layer from an `emit` function. */
export const layer = (emit: EventSink.Service["emit"]): Layer.Layer<EventSink> => Layer.succeed(EventSink, make(emit))

/** The sink that drops every event (the loop does not even build events for it). */
export const noop: EventSink.Service = make(() => Effect.void)

/** Is this the sink that drops every event? */
export const isNoop = (sink: EventSink.Service): boolean => sink === noop

/** A sink that drops every event. */
export const layerNoop: Layer.Layer<EventSink> = Layer.succeed(EventSink, noop)

/** The subscriber side of `layerPubSub`: live streams of the events the sink receives. */
export class Events extends Context.Tag("@polyloop/core/EventSink/Events")<Events, Events.Service>() {}

/** @since 0.1.0 */
export declare namespace Events {
  /** @since 0.1.0 */
  export interface Service {
    /**
     * Subscribes now: every event emitted after this effect returns is in the stream, in order.
     * The subscription lasts as long as the scope; the stream ends when the sink's layer is
     * released.
     */
    readonly subscribe: Effect.Effect<Stream.Stream<LoopEvent>, never, Scope.Scope>
    /** A stream that subscribes when it starts running (events emitted before that are not in it). */
    readonly stream: Stream.Stream<LoopEvent>
  }
}

/** Options of `layerPubSub`. */
export interface PubSubOptions {
  /**
   * Events a subscriber may have waiting. Unset: unbounded (a slow subscriber costs memory,
   * never time). Set: an event that a full subscriber cannot take is dropped and the emit fails
   * with `EventDeliveryError` (counted by the loop); the loop never waits for a subscriber.
   */
  readonly capacity?: number
}

/**
 * A sink that publishes every event to a `PubSub`; subscribers read it as a `Stream` through
 * `Events`. The `PubSub` is shut down when the layer is released, which ends the streams.
 */
export const layerPubSub = (options?: PubSubOptions): Layer.Layer<EventSink | Events> =>
  Layer.scopedContext(
    Effect.gen(function*() {
      const pubsub = yield* Effect.acquireRelease(
        options?.capacity === undefined ? PubSub.unbounded<LoopEvent>() : PubSub.dropping<LoopEvent>(options.capacity),
        PubSub.shutdown
      )
      const sink = make((event) =>
        Effect.flatMap(PubSub.publish(pubsub, event), (published) =>
          published
            ? Effect.void
            : Effect.fail(new EventDeliveryError({ message: `event ${event._tag} dropped: a subscriber has ${options?.capacity ?? 0} events waiting` }))
        )
      )
      const events: Events.Service = {
        subscribe: Stream.fromPubSub(pubsub, { scoped: true }),
        stream: Stream.fromPubSub(pubsub)
      }
      return Context.make(EventSink, sink).pipe(Context.add(Events, events))
    })
  )

const encodeEvent = Schema.encode(LoopEvent)

/** One event as a JSON line (no trailing newline), as `layerJsonl` writes it. */
export const toJsonLine = (event: LoopEvent): Effect.Effect<string, EventDeliveryError> =>
  encodeEvent(event).pipe(
    Effect.map((encoded) => JSON.stringify(encoded)),
    Effect.mapError(
      (error) =>
        new EventDeliveryError({
          message: `event ${event._tag} does not encode: ${ParseResult.TreeFormatter.formatErrorSync(error)}`,
          cause: error
        })
    )
  )

/**
 * A sink that appends one JSON line per event (the `LoopEvent` schema's encoding) to the file at
 * `path`, creating it if needed. Lines of concurrent runs never interleave. A failed write is an
 * `EventDeliveryError` (counted by the loop). The file stays open for the life of the layer.
 */
export const layerJsonl = (path: string): Layer.Layer<EventSink, PlatformError, FileSystem.FileSystem> =>
  Layer.scoped(
    EventSink,
    Effect.gen(function*() {
      const fs = yield* FileSystem.FileSystem
      const file = yield* fs.open(path, { flag: "a" })
      const lock = yield* Effect.makeSemaphore(1)
      const encoder = new TextEncoder()
      return make((event) =>
        toJsonLine(event).pipe(
          Effect.flatMap((line) =>
            lock.withPermits(1)(
              file.writeAll(encoder.encode(`${line}\n`)).pipe(
                Effect.mapError(
                  (error) => new EventDeliveryError({ message: `cannot append event ${event._tag} to ${path}: ${error.message}`, cause: error })
                )
              )
            )
          )
        )
      )
    })
  )
