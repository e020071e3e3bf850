/**
 * The floor under any loop built on polyloop's ports (issue 21, item 6): a run that calls the
 * same ports in the same order as a step of `Agent.run` — the model, the store (the reply), the
 * parser, the tool's handler under its `ToolContext`, the store (the result and the step) — and
 * does nothing else. No record is encoded or checked, no request is fingerprinted, no argument is
 * validated, no event, claim, snapshot or span; the store is an array. Its services are built
 * for the run as one layer node, the cheapest layer there is.
 *
 * It is not a loop anyone should use: it keeps none of polyloop's promises. It answers one
 * question — what do the ports' Effect calls alone cost per step, measured the way the peers
 * are — so that a per-step target can be set against what Effect itself costs.
 */
import * as DecisionParser from "@polyloop/core/DecisionParser"
import type * as Message from "@polyloop/core/Message"
import * as ModelClient from "@polyloop/core/ModelClient"
import type * as ModelReply from "@polyloop/core/ModelReply"
import * as NativeToolCallParser from "@polyloop/core/NativeToolCallParser"
import * as ToolContext from "@polyloop/core/ToolContext"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as F from "./fixtures.js"

/** The store of the floor: appends a value to the run's array. */
class FloorStore extends Context.Tag("bench/FloorStore")<FloorStore, {
  readonly append: (value: unknown) => Effect.Effect<void>
}>() {}

const handler = F.noop.handler!

/** The services of one run, built for it as one layer node: the benchmark model, the native parser, an array store. */
const servicesFor = (steps: number) =>
  Layer.effectContext(Effect.sync(() => {
    const log: Array<unknown> = []
    return Context.make(ModelClient.ModelClient, F.model(F.replies(steps))).pipe(
      Context.add(DecisionParser.DecisionParser, NativeToolCallParser.make()),
      Context.add(FloorStore, { append: (value) => Effect.sync(() => void log.push(value)) })
    )
  }))

/**
 * One floor run of `steps` steps; fails (as a defect) if a step's decision is not the one tool
 * call. `toolContext: false` calls the handler without providing its `ToolContext` — what a loop
 * that broke the spec's promise (a handler may read `ToolContext`) would save.
 */
export const run = (runId: string, steps: number, options: { readonly toolContext: boolean } = { toolContext: true }): Promise<number> => {
  const program = Effect.flatMap(
    Effect.all([ModelClient.ModelClient, DecisionParser.DecisionParser, FloorStore]),
    ([model, parser, store]) => {
      const messages: Array<Message.Message> = [
        { _tag: "System", text: "You are a benchmark. Call the noop tool." },
        { _tag: "User", text: "Call the noop tool until the budget runs out." }
      ]
      const tools = F.tools.modelView()
      const settings = {}
      const step = (k: number): Effect.Effect<number, unknown> =>
        k === steps ? Effect.succeed(k) : Effect.flatMap(model.generate({ messages, tools, settings }), (reply: ModelReply.ModelReply) =>
          Effect.flatMap(store.append(reply), () =>
            Effect.flatMap(parser.parse(reply), (decision) => {
              if (decision._tag !== "Act" || decision.actions[0]._tag !== "ToolCall") return Effect.dieMessage(`floor: step ${k} is not a tool call`)
              const call = decision.actions[0]
              const context = ToolContext.make({ runId, step: k, callId: call.id ?? `call_${k}` })
              const handled = handler(call.arguments as { readonly n: number })
              return Effect.flatMap(options.toolContext ? Effect.provideService(handled, ToolContext.ToolContext, context) : handled, (observation) =>
                Effect.flatMap(store.append({ step: k, observation }), () => {
                  messages.push({ _tag: "Assistant", text: reply.text, toolCalls: reply.toolCalls }, { _tag: "Tool", callId: context.callId, name: call.name, text: observation })
                  return step(k + 1)
                }))
            })))
      return Effect.orDie(step(0))
    }
  )
  return Effect.runPromise(Effect.provide(program, servicesFor(steps)))
}
