/**
 * The event sink port: where the loop sends `LoopEvent`s.
 *
 * Contract: a failed delivery (`EventDeliveryError`) never interrupts the loop; the loop counts
 * it in `RunResult.eventDeliveryFailures`. Events of one run are delivered in order.
 *
 * @since 0.1.0
 */
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import type { EventDeliveryError } from "./Errors.js"
import type { LoopEvent } from "./LoopEvent.js"

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

/** A sink that drops every event. */
export const layerNoop: Layer.Layer<EventSink> = Layer.succeed(EventSink, make(() => Effect.void))
