/**
 * A conversation to the readers (issue 31, design 0300): `polyloop show` prints each turn — who
 * said what, where each turn ended — the openai-chat export holds every message as a user
 * message in order, ATIF has one user step per message (not folded into the observation before
 * it), the JSON lines export imports back byte for byte, and `verify` finds nothing.
 */
import { assert, describe, it } from "@effect/vitest"
import * as Serve from "@polyloop/cli/Serve"
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
import * as SqlRunLogStore from "@polyloop/sql/SqlRunLogStore"
import * as NodeContext from "@effect/platform-node/NodeContext"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Schema from "effect/Schema"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { polyloop } from "./support/cli-process.js"

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
      assert.include(shown, "Awaiting message: turn 2 Completed(Answer)")
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

  it.live("polyloop runs, stats and the viewer's runs list show a conversation awaiting a message with its last turn", () =>
    Effect.gen(function*() {
      const model = yield* ScriptedModel.make((request) => ModelReply.make({ text: `Answered: ${request.messages.filter((m) => m._tag === "User").at(-1)!.text}` }))
      const dir = fs.mkdtempSync(path.join(os.tmpdir(), "polyloop-conversation-cli-"))
      const db = path.join(dir, "polyloop.db")
      const sent = Effect.forEach(messages, (text, i) =>
        Agent.send({ runId: Ids.runId("chat"), messageId: `msg-${i}`, text, agent, tools }).pipe(
          Effect.provide(Layer.mergeAll(model.layer, NativeToolCallParser.layer(), Layer.orDie(ToolRegistry.layerExecutor(tools)), EventSink.layerNoop))
        ))
      yield* Effect.scoped(Layer.build(SqlRunLogStore.layerSqlite({ filename: db })).pipe(
        Effect.flatMap((context) => Effect.provide(sent, context))
      ))
      const runs = yield* Effect.promise(() => polyloop(dir, ["runs", "--db", db]))
      assert.strictEqual(runs.code, 0, runs.stderr)
      assert.match(runs.stdout, /chat\s+desk\s+awaiting message\s+turn 2: Completed\(Answer\)\s+3\b/)
      const awaiting = yield* Effect.promise(() => polyloop(dir, ["runs", "--db", db, "--status", "awaiting", "--json"]))
      assert.strictEqual(awaiting.code, 0, awaiting.stderr)
      const listed = JSON.parse(awaiting.stdout) as ReadonlyArray<{ readonly runId: string; readonly status: string; readonly conversation?: { readonly turns: number } }>
      assert.deepStrictEqual(listed.map((r) => [r.runId, r.status, r.conversation?.turns]), [["chat", "AwaitingMessage", 3]])
      const stats = yield* Effect.promise(() => polyloop(dir, ["stats", "--db", db]))
      assert.strictEqual(stats.code, 0, stats.stderr)
      assert.match(stats.stdout, /1 \(1 conversation, turns 3 \/ 3 \/ 3\)\s+Completed\(Answer\) 1/)
      // The viewer's runs list (GET /api/runs): its status, its last turn's stop reason, and the filters.
      const token = "conversation-readers-token"
      const listedByViewer = yield* Effect.scoped(Effect.gen(function*() {
        const bound = yield* Serve.serve({ port: 0, interval: Duration.millis(50), token })
        const get = (query: string) =>
          Effect.promise(async () => (await (await fetch(`${bound.baseUrl}api/runs?${query}`, { headers: { authorization: `Bearer ${token}` } })).json()) as {
            readonly runs: ReadonlyArray<{ readonly runId: string; readonly status: string; readonly stopReasonLabel: string | null }>
            readonly filters: { readonly statuses: ReadonlyArray<string>; readonly stopReasons: ReadonlyArray<string> }
          })
        const stats = yield* Effect.promise(async () =>
          (await (await fetch(`${bound.baseUrl}api/stats`, { headers: { authorization: `Bearer ${token}` } })).json()) as {
            readonly finished: number
            readonly groups: ReadonlyArray<{ readonly runs: number; readonly stopReasons: Record<string, number>; readonly conversations?: { readonly runs: number } }>
          }
        )
        return [yield* get(""), yield* get("status=AwaitingMessage&stopReason=Completed"), stats] as const
      })).pipe(Effect.provide(Layer.merge(SqlRunLogStore.layerSqlite({ filename: db }), NodeContext.layer)))
      const [all, filtered, viewerStats] = listedByViewer
      // The statistics page counts it as polyloop stats does.
      assert.deepStrictEqual(viewerStats.groups.map((g) => [g.runs, g.stopReasons, g.conversations?.runs]), [[1, { "Completed(Answer)": 1 }, 1]])
      assert.deepStrictEqual(all.runs.map((r) => [r.runId, r.status, r.stopReasonLabel]), [["chat", "AwaitingMessage", "turn 2: Completed(Answer)"]])
      assert.deepStrictEqual(all.filters.statuses, ["AwaitingMessage"])
      assert.includeMembers([...all.filters.stopReasons], ["Completed", "Completed(Answer)"])
      assert.deepStrictEqual(filtered.runs.map((r) => r.runId), ["chat"])
      fs.rmSync(dir, { recursive: true, force: true })
    }), { timeout: 60_000 })
})

