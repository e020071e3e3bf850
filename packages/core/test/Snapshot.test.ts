/**
 * The snapshot: canonical JSON, SHA-256, what it holds (and does not), and the diff.
 */
import { assert, describe, it } from "@effect/vitest"
import * as AgentDefinition from "@polyloop/core/AgentDefinition"
import * as Snapshot from "@polyloop/core/Snapshot"
import * as Tool from "@polyloop/core/Tool"
import * as ToolRegistry from "@polyloop/core/ToolRegistry"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as fc from "fast-check"
import * as Schema from "effect/Schema"

const read = Tool.make({
  name: "read",
  description: "Reads a file.",
  parameters: Schema.Struct({ path: Schema.String }),
  handler: () => Effect.succeed("")
})
const submit = Tool.make({
  name: "submit",
  description: "Submits.",
  parameters: Schema.Struct({ answer: Schema.String }),
  replayPolicy: "Always",
  completesRun: true
})
const tools = ToolRegistry.make(read, submit)

const baseAgent = AgentDefinition.make({
  name: "snap-agent",
  systemPrompt: "Be brief.",
  budget: { maxSteps: 10, maxDuration: Duration.minutes(2) },
  modelSettings: { model: "m-1", temperature: 0 }
})

const input: Snapshot.Input = { agent: baseAgent, task: "Summarise.", tools, parserId: "P(1)" }

const shuffleKeys = (value: unknown, seed: number): unknown => {
  if (Array.isArray(value)) return value.map((v, i) => shuffleKeys(v, seed + i))
  if (typeof value === "object" && value !== null) {
    const entries = Object.entries(value)
    const rotated = entries.length === 0 ? entries : [...entries.slice(seed % entries.length), ...entries.slice(0, seed % entries.length)].reverse()
    return Object.fromEntries(rotated.map(([k, v]) => [k, shuffleKeys(v, seed + 1)]))
  }
  return value
}

describe("Snapshot", () => {
  it("sha256 is the real SHA-256", () => {
    assert.strictEqual(Snapshot.sha256("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
    assert.strictEqual(Snapshot.sha256(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")
    // UTF-8 bytes c3 a9 (checked with sha256sum)
    assert.strictEqual(Snapshot.sha256("é"), "4a99557e4033c3539de2eb65472017cad5f9557f7a0625a09f1c3f6e2ba69c4c")
  })

  it("canonicalJson sorts keys at every level, has no whitespace, drops undefined members", () => {
    assert.strictEqual(Snapshot.canonicalJson({ b: 1, a: { d: [3, { z: 1, y: 2 }], c: undefined }, "": null }), "{\"\":null,\"a\":{\"d\":[3,{\"y\":2,\"z\":1}]},\"b\":1}")
    assert.strictEqual(Snapshot.canonicalJson([undefined, -0, Number.NaN, "x"]), "[null,0,null,\"x\"]")
    assert.throws(() => Snapshot.canonicalJson({ n: BigInt(1) }))
    const cycle: Record<string, unknown> = {}
    cycle["self"] = cycle
    assert.throws(() => Snapshot.canonicalJson(cycle))
  })

  it.prop("canonicalJson is the same for any key order and parses back to the same value", [fc.jsonValue(), fc.nat()], ([value, seed]) => {
    const text = Snapshot.canonicalJson(value)
    assert.strictEqual(Snapshot.canonicalJson(shuffleKeys(value, seed)), text)
    assert.strictEqual(Snapshot.canonicalJson(JSON.parse(text)), text)
    assert.deepStrictEqual(JSON.parse(text), JSON.parse(JSON.stringify(value)))
  })

  it("holds everything the model can see, with defaults filled, and not modelRetry", () => {
    const encoded = Snapshot.encode(Snapshot.make(input))
    const value = encoded.value as Record<string, unknown>
    assert.deepStrictEqual(value, {
      agent: {
        budget: { maxDuration: 120_000, maxSteps: 10 },
        historyRendering: { observationTemplate: AgentDefinition.defaultHistoryRendering.observationTemplate },
        modelSettings: { model: "m-1", temperature: 0 },
        name: "snap-agent",
        observationLimit: null,
        parallelToolCalls: true,
        syntheticObservations: { ...baseAgent.syntheticObservations },
        systemPrompt: "Be brief."
      },
      parser: "P(1)",
      polyloop: Snapshot.version,
      task: "Summarise.",
      tools: tools.modelView().map((view) => ({
        completesRun: view.name === "submit",
        description: view.description,
        name: view.name,
        parameters: JSON.parse(JSON.stringify(view.parameters)) as unknown,
        replayPolicy: view.name === "submit" ? "Always" : "Never"
      }))
    })
    assert.strictEqual(encoded.json, Snapshot.canonicalJson(encoded.value))
    assert.strictEqual(encoded.hash, Snapshot.sha256(encoded.json))
    assert.strictEqual(Snapshot.hash(encoded.value), encoded.hash)
    assert.notInclude(encoded.json, "maxAttempts")
    assert.match(Snapshot.version, /^\d+\.\d+$/)
  })

  it("every part that decides what the model sees changes the hash; modelRetry does not", () => {
    const hash = (i: Snapshot.Input) => Snapshot.encode(Snapshot.make(i)).hash
    const base = hash(input)
    const otherRead = Tool.make({ name: "read", description: "Reads a file.", parameters: Schema.Struct({ path: Schema.String, lines: Schema.Number }) })
    const changes: ReadonlyArray<readonly [string, Snapshot.Input]> = [
      ["system prompt", { ...input, agent: { ...baseAgent, systemPrompt: "Be verbose." } }],
      ["agent name", { ...input, agent: { ...baseAgent, name: "other" } }],
      ["task", { ...input, task: "Translate." }],
      ["model settings", { ...input, agent: { ...baseAgent, modelSettings: { model: "m-1", temperature: 0.1 } } }],
      ["budget", { ...input, agent: { ...baseAgent, budget: { maxSteps: 11, maxDuration: Duration.minutes(2) } } }],
      ["duration", { ...input, agent: { ...baseAgent, budget: { maxSteps: 10, maxDuration: Duration.minutes(3) } } }],
      ["synthetic texts", { ...input, agent: { ...baseAgent, syntheticObservations: { ...baseAgent.syntheticObservations, noAction: "Act!" } } }],
      ["observation limit", { ...input, agent: { ...baseAgent, observationLimit: 100 } }],
      ["history rendering", { ...input, agent: { ...baseAgent, historyRendering: { observationTemplate: "Result: {observation}" } } }],
      ["parser", { ...input, parserId: "P(2)" }],
      ["tool schema", { ...input, tools: ToolRegistry.make(otherRead, submit) }],
      ["tool order", { ...input, tools: ToolRegistry.make(submit, read) }],
      ["replay policy", { ...input, tools: ToolRegistry.make({ ...read, replayPolicy: "Always" as const }, submit) }],
      ["completion marker", { ...input, tools: ToolRegistry.make(read, { ...submit, completesRun: false }) }]
    ]
    const seen = new Set([base])
    for (const [what, changed] of changes) {
      const h = hash(changed)
      assert.notStrictEqual(h, base, what)
      seen.add(h)
    }
    assert.strictEqual(seen.size, changes.length + 1)
    assert.strictEqual(hash({ ...input, agent: { ...baseAgent, modelRetry: { maxAttempts: 9, baseDelay: Duration.seconds(1), maxDelay: Duration.seconds(9) } } }), base)
    // The default history rendering written out is the same configuration.
    assert.strictEqual(hash({ ...input, agent: { ...baseAgent, historyRendering: AgentDefinition.defaultHistoryRendering } }), base)
  })

  it("diff lists [path, recorded, current] in path order", () => {
    const recorded = Snapshot.encode(Snapshot.make(input)).value
    const current = Snapshot.encode(
      Snapshot.make({ ...input, agent: { ...baseAgent, systemPrompt: "Be verbose.", budget: { maxSteps: 12, maxDuration: Duration.minutes(2) } } })
    ).value
    assert.deepStrictEqual(Snapshot.diff(recorded, current), [
      ["agent.budget.maxSteps", 10, 12],
      ["agent.systemPrompt", "Be brief.", "Be verbose."]
    ])
    assert.deepStrictEqual(Snapshot.diff(recorded, recorded), [])
    assert.deepStrictEqual(Snapshot.diff({ a: [1, 2], "b c": { x: 1 } }, { a: [1], "b c": { y: 1 } }), [
      ["a[1]", 2, undefined],
      ["[\"b c\"].x", 1, undefined],
      ["[\"b c\"].y", undefined, 1]
    ])
    assert.deepStrictEqual(Snapshot.diff(1, "1"), [["", 1, "1"]])
  })

  it.prop("diff is empty exactly when the canonical texts are equal", [fc.jsonValue(), fc.jsonValue()], ([a, b]) => {
    const equal = Snapshot.canonicalJson(a) === Snapshot.canonicalJson(b)
    assert.strictEqual(Snapshot.diff(JSON.parse(JSON.stringify(a)), JSON.parse(JSON.stringify(b))).length === 0, equal)
  })

  it.prop(
    "encodeInput (the definition encoded once, the task spliced in) gives exactly encode(make(input)), for any task",
    [fc.string({ unit: "grapheme" }), fc.boolean(), fc.constantFrom("P(1)", "P(2)")],
    ([task, parallel, parserId]) => {
      const each: Snapshot.Input = { ...input, task, parserId, defaultParallelToolCalls: parallel }
      const expected = Snapshot.encode(Snapshot.make(each))
      for (let i = 0; i < 2; i++) {
        const got = Snapshot.encodeInput(each)
        assert.strictEqual(got.json, expected.json)
        assert.strictEqual(got.hash, expected.hash)
        assert.deepStrictEqual(got.value, expected.value)
        assert.deepStrictEqual(Object.keys(got.value as object), Object.keys(expected.value as object))
      }
    }
  )

  it("encodeInput: a definition holding the task placeholder's text, a new definition or new tools are encoded afresh", () => {
    const tricky = AgentDefinition.make({ name: "tricky", systemPrompt: "\u0000polyloop:task\u0000", budget: { maxSteps: 5 } })
    for (const each of [{ ...input, agent: tricky }, { ...input, agent: tricky, task: "\u0000polyloop:task\u0000" }]) {
      assert.strictEqual(Snapshot.encodeInput(each).json, Snapshot.encode(Snapshot.make(each)).json)
    }
    const first = Snapshot.encodeInput(input)
    const other = AgentDefinition.make({ name: "other", systemPrompt: "Be brief.", budget: { maxSteps: 10, maxDuration: Duration.minutes(2) }, modelSettings: { model: "m-1", temperature: 0 } })
    const renamed = Snapshot.encodeInput({ ...input, agent: other })
    assert.notStrictEqual(renamed.hash, first.hash)
    assert.strictEqual(renamed.json, Snapshot.encode(Snapshot.make({ ...input, agent: other })).json)
    const fewer = Snapshot.encodeInput({ ...input, tools: ToolRegistry.make(read) })
    assert.notStrictEqual(fewer.hash, first.hash)
    assert.strictEqual(Snapshot.encodeInput(input).hash, first.hash)
  })
})
