/**
 * What a tool handler may know about the call it serves (beyond the seeds): the run, the step,
 * the call id and an idempotency key `runId/step/callId`, so a tool with side effects can make
 * them idempotent across a crash and a replay.
 *
 * @since 0.1.0
 */
import * as Context from "effect/Context"

/** The call a handler is serving. */
export class ToolContext extends Context.Tag("@polyloop/core/ToolContext")<ToolContext, ToolContext.Service>() {}

/** @since 0.1.0 */
export declare namespace ToolContext {
  /** @since 0.1.0 */
  export interface Service {
    readonly runId: string
    readonly step: number
    readonly callId: string
    /** `runId/step/callId`: stable across a crash and the replay of the same step. */
    readonly idempotencyKey: string
  }
}

/** Makes a context; the idempotency key is derived. */
export const make = (fields: { readonly runId: string; readonly step: number; readonly callId: string }): ToolContext.Service => ({
  runId: fields.runId,
  step: fields.step,
  callId: fields.callId,
  idempotencyKey: `${fields.runId}/${fields.step}/${fields.callId}`
})
