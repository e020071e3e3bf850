/**
 * A conversation to the readers (issue 31, design 0300): `polyloop show` prints each turn — who
 * said what, where each turn ended — the openai-chat export holds every message as a user
 * message in order, ATIF has one user step per message (not folded into the observation before
 * it), the JSON lines export imports back byte for byte, and `verify` finds nothing.
 */
import { assert, describe, it } from "@effect/vitest"
import * as Style from "@polyloop/cli/Style"
import * as Transcript from "@polyloop/cli/Transcript"
import * as Agent from "@polyloop/core/Agent"
import * as AgentDefinition from "@polyloop/core/AgentDefinition"
import * as EventSink from "@polyloop/core/EventSink"
import * as Ids from "@polyloop/core/Ids"
import * as LogFile from "@polyloop/core/LogFile"
import * as ModelReply from "@polyloop/core/ModelReply"
import * as NativeToolCallParser from "@polyloop/core/NativeToolCallParser"
import * as RunLog from "@polyloop/core/RunLog"
import * as RunLogAudit from "@polyloop/core/RunLogAudit"
import * as RunLogStore from "@polyloop/core/RunLogStore"
import * as Tool from "@polyloop/core/Tool"
import * as ToolRegistry from "@polyloop/core/ToolRegistry"
import * as Trajectory from "@polyloop/core/Trajectory"
import * as ScriptedModel from "@polyloop/testing/ScriptedModel"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Schema from "effect/Schema"

const lookup = Tool.make({
  name: "lookup",
  description: "Looks an order up.",
  parameters: Schema.Struct({ order: Schema.String }),
  replayPolicy: "Always",
  handler: ({ order }) => Effect.succeed(`order ${order}: shipped`)
})
const tools = ToolRegistry.make(lookup)
const agent = AgentDefinition.make({ name: "desk", systemPrompt: "You answer customers.", budget: { maxSteps: 4 } })
const messages = ["Where is order 17?", "And order 23?", "Thanks!"]

describe("a conversation to the readers", () => {
  it.effect("show, openai-chat, ATIF, JSON lines and verify understand turns", () =>
    Effect.gen(function*() {
      // Each turn: one lookup, then an answer naming the turn's question.
      const model = yield* ScriptedModel.make((request) => {
        const last = request.messages.at(-1)!
        return last._tag === "User"
          ? ModelReply.make({ text: "", toolCalls: [{ id: "", name: "lookup", argumentsText: JSON.stringify({ order: /\d+/.exec(last.text)?.[0] ?? "0" }) }] })
          : ModelReply.make({ text: `Answered: ${request.messages.filter((m) => m._tag === "User").at(-1)!.text}` })
      })
      const id = Ids.runId("chat")
      for (const [i, text] of messages.entries()) {
        yield* Agent.send({ runId: id, messageId: `msg-${i}`, text, agent, tools }).pipe(
          Effect.provide(Layer.mergeAll(model.layer, NativeToolCallParser.layer(), Layer.orDie(ToolRegistry.layerExecutor(tools)), EventSink.layerNoop))
        )
      }
      const store = yield* RunLogStore.RunLogStore
      const log = yield* store.readLog(id, { verify: true })
      assert.deepStrictEqual(RunLogAudit.logProblems(log), [])

      const shown = Transcript.render(Style.plain, yield* Transcript.read(id))
      assert.include(shown, "turn 0  message msg-0")
      assert.include(shown, "turn 1  message msg-1")
      assert.include(shown, "user         And order 23?")
      assert.include(shown, "turn 1 ended: Completed(Answer) after 2 steps")
      assert.include(shown, "a conversation of 3 finished turn(s) and 6 steps")
      assert.isBelow(shown.indexOf("turn 0 ended"), shown.indexOf("turn 1  message"))

      const chat = yield* Trajectory.openaiChat(log)
      const users = chat.messages.filter((m) => m.role === "user").map((m) => m.content)
      assert.deepStrictEqual(users, messages)

      const atif = yield* Trajectory.atif(log)
      const people = atif.steps.filter((s) => s.source === "user").map((s) => s.message)
      assert.deepStrictEqual(people, messages)
      for (const step of atif.steps.filter((s) => s.source === "agent")) {
        for (const result of step.observation?.results ?? []) assert.notInclude(messages.slice(1), result.content)
      }

      const exported = LogFile.toJsonl(log)
      const [again] = yield* LogFile.parse(exported)
      assert.strictEqual(LogFile.toJsonl(RunLog.fromRecords(again!.records)), exported)
    }).pipe(Effect.provide(RunLogStore.layerMemory)))
})
