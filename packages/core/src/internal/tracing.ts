/**
 * Spans on hot paths. Effect's built-in tracer keeps spans in memory where nobody outside the
 * process sees them, and a span costs more than a whole loop step; so per-step spans are made
 * only when another tracer is installed (`@effect/opentelemetry`, DevTools, a test tracer).
 *
 * @internal
 */
import * as Effect from "effect/Effect"
import type * as Tracer from "effect/Tracer"

/** Effect's built-in tracer. @internal */
export const builtInTracer: Tracer.Tracer = Effect.runSync(Effect.tracer)

/** Is a tracer other than the built-in one installed? @internal */
export const isTraced = (tracer: Tracer.Tracer): boolean => tracer !== builtInTracer

/** `Effect.withSpan` (no stack trace) when a tracer listens, else the effect itself. @internal */
export const withSpanIfTraced = (name: string, attributes: () => Record<string, unknown>) =>
<A, E, R>(effect: Effect.Effect<A, E, R>): Effect.Effect<A, E, R> =>
  Effect.tracerWith((tracer) =>
    isTraced(tracer) ? Effect.withSpan(effect, name, { attributes: attributes(), captureStackTrace: false }) : effect
  )
