/**
 * Trajectory exports (issue 17, design 0170): the `openai-chat` export of a tool-calling run is
 * typed as the `openai` package's chat request parameters (checked by the compiler) and holds
 * the history the model saw; the `atif` export validates against the ATIF JSON Schema kept in
 * `fixtures/atif` (written from Harbor's RFC 0001, which the RFC's own example also passes).
 */
import { assert, describe, it } from "@effect/vitest"
import * as Agent from "@polyloop/core/Agent"
import * as Ids from "@polyloop/core/Ids"
import * as RunLogStore from "@polyloop/core/RunLogStore"
import * as Trajectory from "@polyloop/core/Trajectory"
import * as ScriptedModel from "@polyloop/testing/ScriptedModel"
import { Ajv } from "ajv"
import addFormatsModule from "ajv-formats"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import type OpenAI from "openai"
import * as fs from "node:fs"
import * as Research from "./support/research-agent.js"

const STEPS = 10

const schema: unknown = JSON.parse(fs.readFileSync(new URL("./fixtures/atif/atif-v1.4.schema.json", import.meta.url), "utf8"))
const rfcExample: unknown = JSON.parse(fs.readFileSync(new URL("./fixtures/atif/rfc-0001-example.json", import.meta.url), "utf8"))

const addFormats = addFormatsModule as unknown as (ajv: Ajv) => Ajv
const ajv = addFormats(new Ajv({ allErrors: true, strict: true, strictRequired: false, allowUnionTypes: true }))
const validate = ajv.compile(schema as object)

const errorsOf = (value: unknown): string => (validate(value) ? "" : ajv.errorsText(validate.errors))

const recorded = (steps: number) =>
  Effect.gen(function*() {
    const model = yield* ScriptedModel.make((_request, call) => Research.replyAt(call.step, steps))
    yield* Agent.run(Research.request("run")).pipe(Effect.provide(Layer.merge(Research.services, model.layer)))
    const requests = yield* model.requests
    const log = yield* Effect.flatMap(RunLogStore.RunLogStore, (store) => store.readLog(Ids.runId("run")))
    return { log, requests }
  }).pipe(Effect.provide(RunLogStore.layerMemory))

describe("Trajectory", () => {
  it.effect("openai-chat: typed as the openai package's chat parameters; the messages the model saw, then its last reply", () =>
    Effect.gen(function*() {
      const { log, requests } = yield* recorded(STEPS)
      const chat = yield* Trajectory.openaiChat(log)
      // Compile-time check: the export is accepted where the openai client takes a chat request.
      const params: OpenAI.Chat.ChatCompletionCreateParamsNonStreaming = { model: "gpt-4o-mini", messages: [...chat.messages], tools: [...chat.tools] }
      assert.strictEqual(params.messages.length, 2 + 2 * STEPS)
      // The last request the model received is the exported messages but the last step's reply and observation.
      const last = requests[requests.length - 1]!.request
      assert.strictEqual(chat.messages.length, last.messages.length + 2)
      const roles = { System: "system", User: "user", Assistant: "assistant", Tool: "tool" } as const
      last.messages.forEach((message, i) => {
        const exported = chat.messages[i]!
        assert.strictEqual(exported.role, roles[message._tag])
        assert.strictEqual(exported.content ?? "", message.text)
      })
      assert.deepStrictEqual(chat.messages[0], { role: "system", content: Research.systemPrompt })
      assert.deepStrictEqual(chat.messages[1], { role: "user", content: Research.task })
      assert.deepStrictEqual(chat.messages[2], {
        role: "assistant",
        content: null,
        tool_calls: [{ id: "call_0", type: "function", function: { name: "add", arguments: "{\"a\":0,\"b\":1}" } }]
      })
      assert.deepStrictEqual(chat.messages[3], { role: "tool", tool_call_id: "call_0", content: "0 + 1 = 1" })
      // Step 7 took no action: its text reply, then the nudge as a user message.
      assert.deepStrictEqual(chat.messages[2 + 7 * 2], { role: "assistant", content: "Let me think about the next number." })
      assert.strictEqual(chat.messages[2 + 7 * 2 + 1]!.role, "user")
      const last2 = chat.messages[chat.messages.length - 1]!
      assert.strictEqual(last2.role, "tool")
      assert.deepStrictEqual(chat.tools.map((t) => t.function.name), ["add", "note", "submit"])
      assert.deepStrictEqual(chat.tools[0]!.function.parameters, (log.started._tag === "Some" ? (log.started.value.snapshot as { tools: Array<{ parameters: unknown }> }).tools[0]!.parameters : null))
      const line = yield* Trajectory.render(log, "openai-chat")
      assert.strictEqual(line.split("\n").length, 2)
      assert.deepStrictEqual(JSON.parse(line), JSON.parse(JSON.stringify(chat)))
    }))

  it("the ATIF schema accepts the RFC's own example and refuses broken trajectories", () => {
    assert.strictEqual(errorsOf(rfcExample), "")
    const example = rfcExample as { steps: Array<Record<string, unknown>> }
    assert.notStrictEqual(errorsOf({ ...example, session_id: undefined }), "")
    assert.notStrictEqual(errorsOf({ ...example, steps: [{ ...example.steps[0], source: "robot" }] }), "")
    assert.notStrictEqual(errorsOf({ ...example, steps: [{ ...example.steps[0], tool_calls: [] }] }), "")
    assert.notStrictEqual(errorsOf({ ...example, steps: [{ ...example.steps[1], tool_calls: [{ tool_call_id: "x", function_name: "f", arguments: "{}" }] }] }), "")
  })

  it.effect("atif: validates against the ATIF schema; steps numbered from 1, tool calls answered by their observations", () =>
    Effect.gen(function*() {
      const { log } = yield* recorded(STEPS)
      const trajectory = yield* Trajectory.atif(log)
      const json: unknown = JSON.parse(yield* Trajectory.render(log, "atif"))
      assert.strictEqual(errorsOf(json), "")
      assert.strictEqual(trajectory.schema_version, "ATIF-v1.4")
      assert.strictEqual(trajectory.session_id, "run")
      assert.deepStrictEqual(trajectory.steps.map((s) => s.step_id), Array.from({ length: STEPS + 2 }, (_, i) => i + 1))
      assert.deepStrictEqual(trajectory.steps.slice(0, 2).map((s) => [s.source, s.message]), [["system", Research.systemPrompt], ["user", Research.task]])
      const first = trajectory.steps[2]!
      assert.deepStrictEqual(first.tool_calls, [{ tool_call_id: "call_0", function_name: "add", arguments: { a: 0, b: 1 } }])
      assert.deepStrictEqual(first.observation, { results: [{ source_call_id: "call_0", content: "0 + 1 = 1" }] })
      assert.deepStrictEqual(first.metrics, { prompt_tokens: 100, completion_tokens: 5 })
      // The unknown tool of step 5: not executed, the synthetic text is what the model was sent.
      assert.strictEqual(trajectory.steps[2 + 5]!.extra?.["status"], "NotExecuted")
      assert.strictEqual(trajectory.steps[2 + 5]!.extra?.["observation_is_synthetic"], true)
      let prompt = 0
      for (const step of log.steps) prompt += step.usage.inputTokens
      assert.strictEqual(trajectory.final_metrics.total_prompt_tokens, prompt)
      assert.strictEqual(trajectory.extra?.["stop_reason"], "Completed(Tool)")
    }))

  it.effect("exports refuse a run that does not exist (typed), and every format renders a fork", () =>
    Effect.gen(function*() {
      const store = yield* RunLogStore.RunLogStore
      const empty = yield* store.readLog(Ids.runId("nothing"))
      const error = yield* Effect.flip(Trajectory.render(empty, "atif"))
      assert.strictEqual(error._tag, "StoreError")
      yield* Agent.run(Research.request("p")).pipe(Effect.provide(Layer.merge(Research.services, Research.model(4))))
      yield* Agent.fork({ from: Ids.runId("p"), atStep: 2, runId: Ids.runId("f") })
      const fork = yield* store.readLog(Ids.runId("f"))
      const atif = JSON.parse(yield* Trajectory.render(fork, "atif")) as { extra: { forked_from: unknown } }
      assert.strictEqual(errorsOf(atif), "")
      assert.deepStrictEqual(atif.extra.forked_from, { run_id: "p", step: 2 })
      for (const format of ["jsonl", "json", "openai-chat"] as const) assert.isTrue((yield* Trajectory.render(fork, format)).length > 0)
    }).pipe(Effect.provide(RunLogStore.layerMemory)))
})
