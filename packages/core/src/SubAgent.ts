/**
 * Agents that call agents (design 0392): `SubAgent.tool` makes a tool whose call the loop runs
 * as a durable **child run** — `Agent.run` on the child's agent, tools and task, under a run id
 * derived from the parent's run id, step and call id (`childRunId`). The child has its own log,
 * snapshot and budget; its final answer is the call's observation.
 *
 * Durable at every instant: a parent resumed after a crash runs the call again (a sub-agent's
 * replay policy is `"Always"`), which resumes the child from its log, or returns its recorded
 * result — the child is never started twice and its `"Never"` tools never run twice. What the
 * child cost (`RunResult.children`) counts in the parent's `maxSteps` and `maxTokens`, and a
 * child's budget is capped by what its parent has left (`capBudget`, default true). A child that
 * fails with a `RunError` — `Suspended` on a call waiting for a person, a `ModelError` — fails
 * the parent's run with it (nothing written for the call); interrupting the parent interrupts
 * the child.
 *
 * ```ts
 * const reader = SubAgent.tool({
 *   name: "read_file",
 *   description: "Ask a reader agent to summarise one file",
 *   parameters: Schema.Struct({ path: Schema.String }),
 *   agent: readerAgent,
 *   tools: readerTools,
 *   task: ({ path }) => `Summarise ${path} in three sentences.`
 * })
 * ```
 *
 * @since 0.1.0
 */
import type * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import type * as Schema from "effect/Schema"
import type * as AgentDefinition from "./AgentDefinition.js"
import type { DecisionParser } from "./DecisionParser.js"
import { ToolEnvironmentError } from "./Errors.js"
import type { RunId } from "./Ids.js"
import * as Child from "./internal/child.js"
import type { ModelClient } from "./ModelClient.js"
import * as Tool from "./Tool.js"
import type { DerivedExecutor, ToolRegistry } from "./ToolRegistry.js"

/** The options of `tool`. `O` is the child's answer type (its agent's output schema, design 0400). */
export interface Options<A, I, R, O = unknown> {
  /** The tool's name and description, as the parent's model sees them. */
  readonly name: string
  readonly description: string
  /** The call's arguments, decoded before the child starts (invalid: `NotExecuted`, no child). */
  readonly parameters: Schema.Schema<A, I, never>
  /**
   * The child's agent: its own prompt, model settings, budget and history policy. With an output
   * schema, the call's observation is the child's typed answer as its schema encodes it (JSON),
   * or what `observe` makes of it.
   */
  readonly agent: AgentDefinition.AgentDefinition<O>
  /**
   * How the child's typed answer reads to the parent's model (a pure function: a resumed call
   * renders the recorded answer again). Default: the JSON of the answer as the child's output
   * schema encodes it. Used only when the child's agent has an output schema.
   */
  readonly observe?: (output: O) => string
  /** The child's tools, every one with its handler (their services are the parent executor's). */
  readonly tools: ToolRegistry<R, never>
  /** The child's task from the call's arguments. Must be a pure function of them. */
  readonly task: (args: A) => string
  /** The child's model client; default the parent's. */
  readonly model?: ModelClient.Service
  /** The child's decision parser; default the parent's (a child acting by code needs its own). */
  readonly parser?: DecisionParser.Service
  /** Cap the child's `maxSteps` and `maxTokens` by what the parent has left. Default true. */
  readonly capBudget?: boolean
  /** The child's answer completes the parent's run. Default false. */
  readonly completesRun?: boolean
  /** The call needs a person's decision before the child starts (see `Tool.make`). */
  readonly approval?: Tool.Approval<A>
}

/** A sub-agent tool: a `Tool.Handled` the loop runs as a child run. */
export type SubAgentTool<A, R> = Tool.Handled<A, never, R> & Child.Carrier

/**
 * Makes a sub-agent tool. Its replay policy is `"Always"`: running the call again resumes the
 * child or reads its result. Run outside the loop (by an executor called directly), the tool's
 * handler fails with a `ToolEnvironmentError` saying so: a child run needs the loop's store and
 * model.
 */
export const tool = <A, I, R, O = unknown>(options: Options<A, I, R, O>): SubAgentTool<A, R> => {
  const output = options.agent.output
  const observe = options.observe
  const spec: Child.Spec = {
    agent: options.agent,
    // The child's typed answer as the parent's observation (design 0392, decision 7).
    answer: output === undefined
      ? undefined
      : (encoded) => Either.map(output.decodeRecorded(encoded), (value) => observe === undefined ? JSON.stringify(encoded) : observe(value)),
    tools: options.tools as ToolRegistry<unknown>,
    task: options.task as (args: unknown) => string,
    // The services the parent's executor captured include the child's (the tool's `R` is the
    // child registry's, so the parent registry's context holds them).
    executor: (captured: Context.Context<never> | undefined): Effect.Effect<DerivedExecutor> =>
      captured === undefined
        ? (options.tools.executor() as Effect.Effect<DerivedExecutor>)
        : Effect.provide(options.tools.executor() as Effect.Effect<DerivedExecutor, never, never>, captured),
    model: options.model,
    parser: options.parser,
    capBudget: options.capBudget ?? true
  }
  const made = Tool.make<A, I, never, R>({
    name: options.name,
    description: options.description,
    parameters: options.parameters,
    handler: () =>
      Effect.fail(
        new ToolEnvironmentError({
          message: `${options.name} is a sub-agent: its call runs as a child run inside Agent.run, not through an executor called directly`
        })
      ),
    replayPolicy: "Always",
    ...(options.completesRun === undefined ? {} : { completesRun: options.completesRun }),
    ...(options.approval === undefined ? {} : { approval: options.approval })
  })
  return { ...made, [Child.SpecTypeId]: spec }
}

/**
 * The run id of the child a sub-agent call starts: `<parent>/<step>/<callId>`, or
 * `child-<sha256>` of the three when that is over 200 characters or the call id holds a control
 * character (`child-u16-<sha256>` with a lone surrogate): what every store keeps verbatim
 * (design 0392, decision 8).
 */
export const childRunId: (parent: string, step: number, callId: string) => RunId = Child.childRunId

/** Is this tool a sub-agent? */
export const isSubAgent = (tool: Tool.Any): boolean => Child.specOf(tool) !== undefined
