/**
 * The loop's spans in the OpenTelemetry GenAI vocabulary (design 0212): `Agent.run` is an
 * `invoke_agent`, `Agent.model` a `chat` (kind client) with the request's model and settings and
 * the reply's usage and finish reason, `Agent.action` an `execute_tool` with the tool's name and
 * the call's id — beside polyloop's own `polyloop.run_id` and `polyloop.step`. Install a tracer
 * (`@effect/opentelemetry`'s `NodeSdk.layer`) to see them; without one, the per-step spans are
 * not made at all.
 *
 * @since 0.1.0
 */
import * as Effect from "effect/Effect"
import * as Tracing from "./internal/tracing.js"

/** The GenAI semantic-convention attribute names polyloop writes. */
export const Attributes = Tracing.GenAi

/**
 * For a `ModelClient` that knows its model when the agent's settings do not name one: annotates
 * the current span — the loop's `Agent.model` — with `gen_ai.request.model` and, when given,
 * `gen_ai.provider.name` (`"openai"`, `"anthropic"`, …). Does nothing when no tracer listens.
 */
export const annotateModel = (options: { readonly model: string; readonly provider?: string | undefined }): Effect.Effect<void> =>
  Effect.tracerWith((tracer) =>
    Tracing.isTraced(tracer)
      ? Effect.annotateCurrentSpan(
        options.provider === undefined
          ? { [Attributes.requestModel]: options.model }
          : { [Attributes.requestModel]: options.model, [Attributes.providerName]: options.provider }
      )
      : Effect.void
  )
