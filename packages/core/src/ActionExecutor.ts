/**
 * The action executor port: runs an action and reports an `ActionOutcome`.
 *
 * Contract (SPEC §5.1, design 0007, decision 1): `status` is `Executed` when the action really
 * ran, whatever its result (a failing tool, code that threw, a non-zero exit are observations);
 * `NotExecuted` when it never entered execution (unknown tool, invalid arguments, refused,
 * wrong action language); `EnvError` when the environment itself is broken. `execute` has no
 * error channel: interruption passes through and is never turned into an outcome. A defect is
 * not caught by the library. `replayPolicy` says whether an interrupted action may run again
 * on resume (`"Never"` by default).
 *
 * @since 0.1.0
 */
import * as Context from "effect/Context"
import type * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Schema from "effect/Schema"
import type { Action } from "./Action.js"
import type { ActionOutcome } from "./ActionOutcome.js"

/** May an interrupted action run again on resume? */
export const ReplayPolicy = Schema.Literal("Never", "Always")
/** @since 0.1.0 */
export type ReplayPolicy = typeof ReplayPolicy.Type

/** The action executor port. */
export class ActionExecutor extends Context.Tag("@polyloop/core/ActionExecutor")<ActionExecutor, ActionExecutor.Service>() {}

/** @since 0.1.0 */
export declare namespace ActionExecutor {
  /** @since 0.1.0 */
  export interface Service {
    readonly execute: (action: Action) => Effect.Effect<ActionOutcome>
    readonly replayPolicy: (action: Action) => ReplayPolicy
  }
}

/** Makes an executor; `replayPolicy` defaults to `"Never"` for every action. */
export const make = (options: {
  readonly execute: ActionExecutor.Service["execute"]
  readonly replayPolicy?: ActionExecutor.Service["replayPolicy"]
}): ActionExecutor.Service => ({
  execute: options.execute,
  replayPolicy: options.replayPolicy ?? (() => "Never")
})

/** A layer from a service. */
export const layer = (service: ActionExecutor.Service): Layer.Layer<ActionExecutor> => Layer.succeed(ActionExecutor, service)
