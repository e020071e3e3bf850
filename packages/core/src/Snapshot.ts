/**
 * The snapshot of a run (SPEC §8): everything the model can see or that decides what it sees,
 * as canonical JSON (sorted keys, no whitespace) with its SHA-256. `RunStarted` records it; a
 * resume computes it again and refuses to continue under another configuration.
 *
 * @since 0.1.0
 */
import { createHash } from "node:crypto"
import * as Schema from "effect/Schema"
import { ReplayPolicy } from "./ActionExecutor.js"
import * as AgentDefinition from "./AgentDefinition.js"
import { Budget, ConversationBudget } from "./Budget.js"
import type { SnapshotDifference } from "./Errors.js"
import * as HistoryPolicy from "./HistoryPolicy.js"
import { ModelSettings } from "./ModelSettings.js"
import * as SyntheticObservations from "./SyntheticObservations.js"
import { approvalDescription } from "./Tool.js"
import type { ToolRegistry } from "./ToolRegistry.js"

/** polyloop's major.minor version, part of every snapshot (a new minor may render history differently). */
export const version = "0.1"

/** A tool as the snapshot holds it: its model view plus its replay policy and completion marker. */
export const SnapshotTool = Schema.Struct({
  name: Schema.String,
  description: Schema.String,
  /** The JSON Schema of the parameters, as sent to the model. */
  parameters: Schema.Unknown,
  replayPolicy: ReplayPolicy,
  completesRun: Schema.Boolean,
  /**
   * The tool's approval rule (design 0160): `"Required"` or `"When: <description>"`. Absent for
   * a tool without one, so snapshots of configurations without approvals keep their hash.
   */
  approval: Schema.optional(Schema.String)
})
/** @since 0.1.0 */
export interface SnapshotTool extends Schema.Schema.Type<typeof SnapshotTool> {}

/** The output schema as the snapshot holds it (design 0400). */
export const OutputPart = Schema.Struct({
  name: Schema.String,
  schema: Schema.Unknown,
  strict: Schema.Boolean,
  constrain: Schema.Boolean,
  attempts: Schema.Int,
  invalid: Schema.String
})
/** @since 0.3.0 */
export interface OutputPart extends Schema.Schema.Type<typeof OutputPart> {}

/** The output part of an agent's snapshot (design 0400); undefined when the agent has no output schema. */
export const outputPart = (agent: AgentDefinition.AgentDefinition): OutputPart | undefined =>
  agent.output === undefined ? undefined : {
    name: agent.output.name,
    schema: agent.output.jsonSchema,
    strict: agent.output.strict,
    constrain: agent.output.constrain,
    attempts: agent.outputAttempts ?? AgentDefinition.defaultOutputAttempts,
    invalid: agent.output.invalid
  }

/** The snapshot. `agent` holds the whole definition except `modelRetry`. */
export const Snapshot = Schema.Struct({
  polyloop: Schema.String,
  agent: Schema.Struct({
    name: Schema.String,
    systemPrompt: Schema.String,
    modelSettings: ModelSettings,
    budget: Budget,
    /** A conversation's budget (design 0300); absent when unset (every snapshot recorded before it). */
    conversationBudget: Schema.optional(ConversationBudget),
    syntheticObservations: SyntheticObservations.SyntheticObservations,
    observationLimit: Schema.NullOr(Schema.Int),
    historyRendering: AgentDefinition.HistoryRendering,
    /** Whether a step runs several calls of a reply (design 0150); absent in snapshots of version-1 logs, read as false. */
    parallelToolCalls: Schema.Boolean,
    /** The history policy (design 0300); absent: keep everything (every snapshot recorded before it). */
    history: Schema.optional(HistoryPolicy.HistoryPolicy),
    /**
     * The output schema and its use (design 0400): the name the provider is told, the JSON
     * Schema, the provider flags, `outputAttempts` and the text fed back. Absent when the agent
     * has none (every snapshot recorded before it).
     */
    output: Schema.optional(OutputPart)
  }),
  task: Schema.String,
  tools: Schema.Array(SnapshotTool),
  parser: Schema.String
})
/** @since 0.1.0 */
export interface Snapshot extends Schema.Schema.Type<typeof Snapshot> {}

/** What a snapshot is made of. */
export interface Input {
  readonly agent: AgentDefinition.AgentDefinition
  readonly task: string
  readonly tools: ToolRegistry<unknown>
  /** The decision parser's `id`. */
  readonly parserId: string
  /**
   * The value of `parallelToolCalls` when the agent leaves it unset: true for a new run; for a
   * resumed run, what its recorded snapshot says (`parallelToolCallsOf`). Default true.
   */
  readonly defaultParallelToolCalls?: boolean
}

/**
 * The synthetic texts as the snapshot holds them: the `rejected` text is recorded when it is set
 * or when some tool declares approval (with the default), and absent otherwise (design 0160).
 */
const syntheticOf = (agent: AgentDefinition.AgentDefinition, tools: Snapshot["tools"]): SyntheticObservations.SyntheticObservations => {
  const synthetic = agent.syntheticObservations
  if (synthetic.rejected !== undefined || !tools.some((tool) => tool.approval !== undefined)) return synthetic
  return { ...synthetic, rejected: SyntheticObservations.defaultRejected }
}

/**
 * The agent part of a snapshot: the whole definition except `modelRetry`, defaults filled in,
 * for a run with these tools (as `toolsPart` gives them).
 */
export const agentPart = (
  agent: AgentDefinition.AgentDefinition,
  tools: Snapshot["tools"],
  defaultParallelToolCalls: boolean = true
): Snapshot["agent"] => ({
  name: agent.name,
  systemPrompt: agent.systemPrompt,
  modelSettings: agent.modelSettings,
  budget: agent.budget,
  // Absent when unset, so the snapshots (and hashes) of agents without one are what they were.
  ...(agent.conversationBudget === undefined ? {} : { conversationBudget: agent.conversationBudget }),
  syntheticObservations: syntheticOf(agent, tools),
  observationLimit: agent.observationLimit ?? null,
  historyRendering: agent.historyRendering ?? AgentDefinition.defaultHistoryRendering,
  parallelToolCalls: agent.parallelToolCalls ?? defaultParallelToolCalls,
  // Absent for keep-everything, so the snapshots (and hashes) of such runs are what they were.
  ...(agent.history === undefined || agent.history._tag === "KeepAll" ? {} : { history: agent.history }),
  // Absent without an output schema, so the snapshots (and hashes) of such agents are what they were.
  ...(agent.output === undefined ? {} : { output: outputPart(agent)! })
})

/** The tools part of a snapshot: the registry's model view with replay policies, completion markers and approvals. */
export const toolsPart = (registry: ToolRegistry<unknown>): Snapshot["tools"] =>
  registry.modelView().map((view) => {
    const tool = registry.get(view.name)
    const approval = tool._tag === "Some" ? approvalDescription(tool.value) : undefined
    return {
      name: view.name,
      description: view.description,
      parameters: view.parameters,
      replayPolicy: tool._tag === "Some" ? tool.value.replayPolicy : "Never",
      completesRun: tool._tag === "Some" ? tool.value.completesRun : false,
      ...(approval === undefined ? {} : { approval })
    }
  })

/** The snapshot of a configuration (defaults filled in: what the loop will actually use). */
export const make = (input: Input): Snapshot => {
  const tools = toolsPart(input.tools)
  return { polyloop: version, agent: agentPart(input.agent, tools, input.defaultParallelToolCalls), task: input.task, tools, parser: input.parserId }
}

const isPlainObject = (value: unknown): value is Readonly<Record<string, unknown>> =>
  typeof value === "object" && value !== null && !Array.isArray(value)

/**
 * A recorded snapshot value read as the current shape: a snapshot recorded before design 0150
 * has no `agent.parallelToolCalls`, and that run took one action per step, so it reads as
 * `false`. Any other value is returned as it is.
 */
export const upgrade = (recorded: unknown): unknown => {
  if (!isPlainObject(recorded) || !isPlainObject(recorded.agent) || "parallelToolCalls" in recorded.agent) return recorded
  return { ...recorded, agent: { ...recorded.agent, parallelToolCalls: false } }
}

/** The `parallelToolCalls` a recorded snapshot value says the run runs with (after `upgrade`); true if it says nothing readable. */
export const parallelToolCallsOf = (recorded: unknown): boolean => {
  const value = upgrade(recorded)
  return isPlainObject(value) && isPlainObject(value.agent) && typeof value.agent.parallelToolCalls === "boolean"
    ? value.agent.parallelToolCalls
    : true
}

/**
 * Canonical JSON text of a JSON-like value: object keys sorted by code unit, no whitespace,
 * `undefined` object members dropped (as `JSON.stringify` does), non-finite numbers as `null`.
 * Throws on values JSON cannot hold (a `bigint`, a cycle).
 */
export const canonicalJson = (value: unknown): string => {
  const seen = new Set<object>()
  const write = (v: unknown): string => {
    if (v === null || v === undefined || typeof v === "function" || typeof v === "symbol") return "null"
    if (typeof v === "number") return Number.isFinite(v) ? JSON.stringify(v === 0 ? 0 : v) : "null"
    if (typeof v === "string" || typeof v === "boolean") return JSON.stringify(v)
    if (typeof v === "bigint") throw new TypeError("canonicalJson: a bigint has no JSON form")
    if (seen.has(v)) throw new TypeError("canonicalJson: the value has a cycle")
    seen.add(v)
    let out: string
    if (Array.isArray(v)) {
      out = `[${v.map(write).join(",")}]`
    } else {
      const record = v as Readonly<Record<string, unknown>>
      const keys = Object.keys(record).filter((k) => {
        const member = record[k]
        return member !== undefined && typeof member !== "function" && typeof member !== "symbol"
      })
      keys.sort()
      out = `{${keys.map((k) => `${JSON.stringify(k)}:${write(record[k])}`).join(",")}}`
    }
    seen.delete(v)
    return out
  }
  return write(value)
}

/** The hex SHA-256 of a text (UTF-8). */
export const sha256 = (text: string): string => createHash("sha256").update(text, "utf8").digest("hex")

/** A snapshot ready to record: its canonical JSON value and the SHA-256 of its canonical text. */
export interface Encoded {
  /** The canonical JSON value (keys sorted), as stored in `RunStarted.snapshot`. */
  readonly value: unknown
  /** The canonical JSON text. */
  readonly json: string
  /** `sha256(json)`, as stored in `RunStarted.snapshotHash`. */
  readonly hash: string
}

const encodeSnapshot = Schema.encodeSync(Snapshot)

/** Encodes a snapshot (durations to milliseconds), canonicalises and hashes it. */
export const encode = (snapshot: Snapshot): Encoded => {
  const json = canonicalJson(encodeSnapshot(snapshot))
  return { value: JSON.parse(json), json, hash: sha256(json) }
}

/** The task text stood in by a placeholder while a definition's encoding is cached. */
const taskPlaceholder = "\u0000polyloop:task\u0000"

/** A definition's encoded snapshot with the task left out: the canonical text around it and the value. */
interface Template {
  readonly before: string
  readonly after: string
  readonly value: Readonly<Record<string, unknown>>
}

/** Freezes a JSON value and everything in it (a template's value is shared by every run's snapshot). */
const deepFreeze = <A>(value: A): A => {
  if (typeof value === "object" && value !== null && !Object.isFrozen(value)) {
    for (const member of Object.values(value)) deepFreeze(member)
    Object.freeze(value)
  }
  return value
}

const templates = new WeakMap<AgentDefinition.AgentDefinition, WeakMap<ToolRegistry<unknown>, Map<string, Template | null>>>()

const templateOf = (input: Input): Template | null => {
  let byTools = templates.get(input.agent)
  if (byTools === undefined) templates.set(input.agent, byTools = new WeakMap())
  let byParser = byTools.get(input.tools)
  if (byParser === undefined) byTools.set(input.tools, byParser = new Map())
  const key = `${input.defaultParallelToolCalls ?? true}\u0000${input.parserId}`
  const cached = byParser.get(key)
  if (cached !== undefined) return cached
  const encoded = encode(make({ ...input, task: taskPlaceholder }))
  const marker = JSON.stringify(taskPlaceholder)
  const at = encoded.json.indexOf(marker)
  // Only when the placeholder appears once (a definition could hold that text itself): else no template.
  const template = at < 0 || encoded.json.indexOf(marker, at + 1) >= 0
    ? null
    : { before: encoded.json.slice(0, at), after: encoded.json.slice(at + marker.length), value: deepFreeze(encoded.value as Readonly<Record<string, unknown>>) }
  byParser.set(key, template)
  return template
}

/**
 * `encode(make(input))`, with the encoding of the definition (agent, tools, parser) done once
 * per definition and registry and only the task spliced in per run: an `AgentDefinition` and a
 * `ToolRegistry` are immutable values, and the task is a plain string whose canonical form is
 * its JSON text. Gives exactly what `encode(make(input))` gives.
 */
export const encodeInput = (input: Input): Encoded => {
  const template = templateOf(input)
  if (template === null) return encode(make(input))
  const json = `${template.before}${JSON.stringify(input.task)}${template.after}`
  return { value: { ...template.value, task: input.task }, json, hash: sha256(json) }
}

/** The hash of any recorded snapshot value (canonicalised first). */
export const hash = (value: unknown): string => sha256(canonicalJson(value))

const identifier = /^[A-Za-z_$][A-Za-z0-9_$]*$/

const child = (path: string, key: string): string =>
  identifier.test(key) ? (path === "" ? key : `${path}.${key}`) : `${path}[${JSON.stringify(key)}]`

/**
 * The differences between two JSON values, as `[path, recorded, current]` in path order
 * (`agent.systemPrompt`, `tools[0].parameters.properties.path.type`, …). A member present on one
 * side only shows `undefined` on the other. Equal values give no difference.
 */
export const diff = (recorded: unknown, current: unknown): ReadonlyArray<SnapshotDifference> => {
  const out: Array<SnapshotDifference> = []
  const walk = (path: string, a: unknown, b: unknown): void => {
    if (Array.isArray(a) && Array.isArray(b)) {
      const n = Math.max(a.length, b.length)
      for (let i = 0; i < n; i++) walk(`${path}[${i}]`, a[i], b[i])
      return
    }
    if (isPlainObject(a) && isPlainObject(b)) {
      const keys = new Set([...Object.keys(a), ...Object.keys(b)])
      for (const key of [...keys].sort()) walk(child(path, key), a[key], b[key])
      return
    }
    if (a === b) return
    if (a !== undefined && b !== undefined && canonicalJson(a) === canonicalJson(b)) return
    out.push([path, a, b])
  }
  walk("", recorded, current)
  return out
}

/**
 * The current snapshot as a run started before design 0140 recorded it: without
 * `agent.syntheticObservations.truncated` when that text is the default (a definition that
 * did not choose it). `undefined` when the current snapshot has no such form.
 */
const beforeTruncatedText = (current: unknown): unknown => {
  if (!isPlainObject(current) || !isPlainObject(current.agent)) return undefined
  const synthetic = current.agent.syntheticObservations
  if (!isPlainObject(synthetic) || synthetic.truncated !== SyntheticObservations.defaults.truncated) return undefined
  const { truncated: _dropped, ...older } = synthetic
  return { ...current, agent: { ...current.agent, syntheticObservations: older } }
}

/**
 * Whether a recorded snapshot (its hash) is the current configuration's: the same hash, or —
 * for a run started before design 0140, whose snapshot has no `truncated` text — the same hash
 * once the current default `truncated` text is left out; or — for a run started before design
 * 0150 — once `parallelToolCalls: false` is left out.
 */
export const matches = (recordedHash: string, current: Encoded): boolean => {
  if (recordedHash === current.hash) return true
  const older = beforeTruncatedText(current.value)
  if (older !== undefined && hash(older) === recordedHash) return true
  // Before design 0150 a snapshot had no `parallelToolCalls`: such a run took one action per
  // step, so it is the current configuration when that says `false` (with or without the
  // `truncated` text of design 0140).
  for (const form of [current.value, older]) {
    const oneActionPerStep = form === undefined ? undefined : beforeParallelToolCalls(form)
    if (oneActionPerStep !== undefined && hash(oneActionPerStep) === recordedHash) return true
  }
  return false
}

/** A snapshot value as a version before design 0150 would have recorded it: `parallelToolCalls: false` left out (else undefined). */
const beforeParallelToolCalls = (current: unknown): unknown => {
  if (!isPlainObject(current) || !isPlainObject(current.agent) || current.agent.parallelToolCalls !== false) return undefined
  const { parallelToolCalls: _dropped, ...older } = current.agent
  return { ...current, agent: older }
}

const toolsByName = (snapshot: unknown): Map<string, unknown> => {
  const out = new Map<string, unknown>()
  const tools = isPlainObject(snapshot) ? snapshot["tools"] : undefined
  if (!Array.isArray(tools)) return out
  for (const tool of tools) {
    if (isPlainObject(tool) && typeof tool["name"] === "string") out.set(tool["name"], tool)
  }
  return out
}

/**
 * The names of the tools whose snapshot entries differ between two recorded snapshot values
 * (schema, description, replay policy, completion marker), were added or were removed: recorded
 * order first, then the added ones (design 0230). A tool that only moved is not listed.
 */
export const changedTools = (recorded: unknown, current: unknown): ReadonlyArray<string> => {
  const before = toolsByName(recorded)
  const after = toolsByName(current)
  const changed: Array<string> = []
  for (const [name, tool] of before) {
    const now = after.get(name)
    if (now === undefined || canonicalJson(now) !== canonicalJson(tool)) changed.push(name)
  }
  for (const name of after.keys()) if (!before.has(name)) changed.push(name)
  return changed
}
