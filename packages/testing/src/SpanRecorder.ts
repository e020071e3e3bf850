/**
 * A tracer that keeps every span it makes, to test a program's spans without an OpenTelemetry
 * SDK: `const recorder = yield* SpanRecorder.make`, run the program under
 * `Effect.withTracer(recorder.tracer)`, then read `recorder.spans` (names, parents, attributes,
 * kinds). The spans are Effect's own (the built-in tracer makes them), so a program traced by it
 * pays what it pays under any tracer other than the built-in one — polyloop's per-step spans are made.
 *
 * @since 0.1.0
 */
import * as Effect from "effect/Effect"
import * as Tracer from "effect/Tracer"

/** The tracer and the spans it made, in the order they started. */
export interface SpanRecorder {
  readonly tracer: Tracer.Tracer
  readonly spans: ReadonlyArray<Tracer.Span>
}

/** A new recorder (its own list of spans). */
export const make: Effect.Effect<SpanRecorder> = Effect.map(Effect.tracer, (builtIn) => {
  const spans: Array<Tracer.Span> = []
  const tracer = Tracer.make({
    span: (name, parent, context, links, startTime, kind, options) => {
      const span = builtIn.span(name, parent, context, links, startTime, kind, options)
      spans.push(span)
      return span
    },
    context: builtIn.context
  })
  return { tracer, spans }
})

/** The name of a span's parent: `""` for a root span, `"external"` for a parent from outside Effect. */
export const parentName = (span: Tracer.Span): string =>
  span.parent._tag === "Some" ? (span.parent.value._tag === "Span" ? span.parent.value.name : "external") : ""
