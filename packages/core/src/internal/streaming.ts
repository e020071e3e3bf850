/**
 * The model call of a streaming step (design 0180): the client's deltas (or one burst from
 * `generate` when it does not stream) are announced as `ModelDelta` events and folded into the
 * reply; each call is one `attempt` of the step. Interruption and the stream's `ModelError`
 * pass through untouched (the caller retries).
 *
 * @internal
 */
import * as Effect from "effect/Effect"
import type { ModelError } from "../Errors.js"
import { streamOf } from "../ModelClient.js"
import type { ModelRequest } from "../ModelClient.js"
import * as ModelDelta from "../ModelDelta.js"
import type { ModelReply } from "../ModelReply.js"
import { emit, type Run } from "./run.js"

/** The reply of `request`, streamed; every evaluation of the effect is the next attempt. @internal */
export const modelCall = (run: Run, step: number, request: ModelRequest): Effect.Effect<ModelReply, ModelError> => {
  const stream = streamOf(run.model)
  let attempts = 0
  return Effect.suspend(() => {
    const attempt = attempts++
    const deltas = stream(request)
    if (run.silent) return ModelDelta.collect(deltas)
    const runId = run.runId
    return ModelDelta.collect(deltas, (delta) => emit(run, { _tag: "ModelDelta", runId, step, attempt, delta }))
  })
}
