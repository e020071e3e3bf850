/**
 * A code-action agent (dissect-like): the model acts by writing one fenced JavaScript block per
 * reply (read by `CodeBlockParser`); an `ActionExecutor` layer evaluates it in a fresh `node`
 * child process (`@effect/platform`'s `Command`) with a time limit. The model is scripted.
 *
 *   npx tsx examples/code-agent.ts
 *
 * The executor's statuses follow SPEC §5.1: whatever the code does — print, throw, exit
 * non-zero, run past the time limit — the action ran, so it is `Executed` and what happened is
 * the observation the model sees next; only a child process that cannot be started is
 * `EnvError` (the environment is broken, the run ends). Try it:
 *
 *   CODE_AGENT_RUNTIME=/no/such/node npx tsx examples/code-agent.ts
 *
 * The code may call `final_answer(value)`: the executor then reports the completion
 * (`envReportedCompletion`) and the run completes with `Completed(Environment)`.
 */
import * as Command from "@effect/platform/Command"
import type * as CommandExecutor from "@effect/platform/CommandExecutor"
import * as NodeContext from "@effect/platform-node/NodeContext"
import * as NodeRuntime from "@effect/platform-node/NodeRuntime"
import * as ActionExecutor from "@polyloop/core/ActionExecutor"
import * as ActionOutcome from "@polyloop/core/ActionOutcome"
import * as Agent from "@polyloop/core/Agent"
import * as AgentDefinition from "@polyloop/core/AgentDefinition"
import * as CodeBlockParser from "@polyloop/core/CodeBlockParser"
import * as EventSink from "@polyloop/core/EventSink"
import { runId } from "@polyloop/core/Ids"
import type { LoopEvent } from "@polyloop/core/LoopEvent"
import * as RunLogStore from "@polyloop/core/RunLogStore"
import * as StopReason from "@polyloop/core/StopReason"
import * as ToolRegistry from "@polyloop/core/ToolRegistry"
import * as ScriptedModel from "@polyloop/testing/ScriptedModel"
import * as Chunk from "effect/Chunk"
import * as Config from "effect/Config"
import * as Console from "effect/Console"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Schema from "effect/Schema"
import * as Stream from "effect/Stream"

// -----------------------------------------------------------------------------
// The executor: JavaScript in a child process, with a time limit
// -----------------------------------------------------------------------------

/** Options of the executor. */
export interface ExecutorOptions {
  /** The program that evaluates the code read from its standard input (default: this `node`). */
  readonly runtime: string
  /** How long one action may run (default 2 seconds). */
  readonly timeLimit?: Duration.DurationInput
  /** Characters of output kept in the observation; the rest is cut and counted (default 2000). */
  readonly outputLimit?: number
}

const finalAnswerMarker = "\u0000polyloop-final-answer:"

/** Defines `final_answer(value)` for the code: it prints a marker line the executor reads. */
const prelude = `globalThis.final_answer = (value) => { process.stdout.write(${JSON.stringify(`\n${finalAnswerMarker}`)} + JSON.stringify(value) + "\\n") };\n`

/**
 * Node's error report without what varies between machines and Node versions (the working
 * directory in file URLs, frames of Node's internals, the version line), so that two runs of
 * the same code show the model the same observation.
 */
const cleanStderr = (stderr: string, cwd: string): string =>
  stderr
    .split(`file://${cwd}/`).join("")
    .split("\n")
    .filter((line) => !/^\s+at .*node:internal/.test(line) && !/^Node\.js v\d/.test(line))
    .join("\n")
    .trim()

const collect = <E>(stream: Stream.Stream<Uint8Array, E>): Effect.Effect<string, E> =>
  Stream.decodeText(stream).pipe(Stream.runCollect, Effect.map((chunks) => Chunk.join(chunks, "")))

/** The child process could not be started: the environment is broken (the run ends with EnvError). */
export class StartFailed extends Schema.TaggedError<StartFailed>()("StartFailed", {
  /** The program that was to be started. */
  runtime: Schema.String,
  message: Schema.String,
  cause: Schema.optional(Schema.Defect)
}) {}

/**
 * An `ActionExecutor` that evaluates a JavaScript `CodeAction` in a fresh child process. The
 * scope of each evaluation owns the process: when the time limit cuts it (or the run is
 * interrupted), closing the scope kills the process.
 */
export const makeExecutor = (options: ExecutorOptions): Effect.Effect<ActionExecutor.ActionExecutor.Service, never, CommandExecutor.CommandExecutor> =>
  Effect.map(Effect.context<CommandExecutor.CommandExecutor>(), (context) => {
    const timeLimit = Duration.decode(options.timeLimit ?? Duration.seconds(2))
    const outputLimit = options.outputLimit ?? 2000

    const evaluate = (code: string) =>
      Effect.scoped(
        Effect.gen(function*() {
          const command = Command.make(options.runtime, "--input-type=module", "-").pipe(Command.feed(prelude + code))
          const child = yield* Command.start(command).pipe(Effect.mapError((error) => new StartFailed({ runtime: options.runtime, message: error.message, cause: error })))
          return yield* Effect.all([collect(child.stdout), collect(child.stderr), child.exitCode], { concurrency: "unbounded" }).pipe(
            Effect.map(([stdout, stderr, exitCode]) => ({ _tag: "Exited" as const, stdout, stderr, exitCode })),
            // A process that died by a signal has no exit code: still something the code did.
            Effect.catchAll((error) => Effect.succeed({ _tag: "Died" as const, message: error.message })),
            Effect.timeoutTo({ duration: timeLimit, onTimeout: () => ({ _tag: "TimedOut" as const }), onSuccess: (result) => result })
          )
        })
      )

    const execute = (action: Parameters<ActionExecutor.ActionExecutor.Service["execute"]>[0]) => {
      if (action._tag !== "CodeAction") {
        return Effect.succeed(ActionOutcome.notExecuted(`this executor runs JavaScript code, not tool calls (got a call to ${action.name})`))
      }
      return evaluate(action.code).pipe(
        Effect.map((result) => {
          switch (result._tag) {
            case "TimedOut":
              return ActionOutcome.executed(`TimeLimit: the code ran longer than ${Duration.format(timeLimit)} and was stopped`)
            case "Died":
              return ActionOutcome.executed(`the process died: ${result.message}`)
            case "Exited": {
              const lines = result.stdout.split("\n")
              const answers = lines.filter((line) => line.startsWith(finalAnswerMarker)).map((line) => line.slice(finalAnswerMarker.length))
              const printed = lines.filter((line) => !line.startsWith(finalAnswerMarker)).join("\n").trim()
              const parts = [
                printed === "" ? "(no output)" : printed,
                ...(result.stderr.trim() === "" ? [] : [`stderr:\n${cleanStderr(result.stderr, process.cwd())}`]),
                ...(result.exitCode === 0 ? [] : [`exit code ${result.exitCode}`]),
                ...answers.map((answer) => `final answer: ${answer}`)
              ]
              const text = parts.join("\n")
              const kept = text.length > outputLimit ? text.slice(0, outputLimit) : text
              return ActionOutcome.executed(kept, {
                envReportedCompletion: answers.length > 0 && result.exitCode === 0,
                truncatedChars: text.length - kept.length
              })
            }
          }
        }),
        Effect.catchTag("StartFailed", (failed) => Effect.succeed(ActionOutcome.envError(`cannot start ${failed.runtime}: ${failed.message}`))),
        Effect.provide(context)
      )
    }

    return ActionExecutor.make({ execute })
  })

/** The executor as a layer. */
export const layerExecutor = (options: ExecutorOptions): Layer.Layer<ActionExecutor.ActionExecutor, never, CommandExecutor.CommandExecutor> =>
  Layer.effect(ActionExecutor.ActionExecutor, makeExecutor(options))

// -----------------------------------------------------------------------------
// The agent and its scripted model
// -----------------------------------------------------------------------------

const agent = AgentDefinition.make({
  name: "prime-counter",
  systemPrompt: "You answer questions by writing JavaScript. Each reply holds exactly one ```js code block; it runs in a fresh process " +
    "and you see what it prints. When you know the answer, call final_answer(answer) in your code.",
  budget: { maxSteps: 8, maxEffectiveSteps: 6 }
})

const task = "How many primes are there below 10,000, and what is their sum?"

const sieve = `const limit = 10000
const composite = new Uint8Array(limit)
const primes = []
for (let n = 2; n < limit; n++) {
  if (composite[n]) continue
  primes.push(n)
  for (let m = n * n; m < limit; m += n) composite[m] = 1
}
const sum = primes.reduce((a, b) => a + b, 0)`

const script: ReadonlyArray<ScriptedModel.Scripted> = [
  ScriptedModel.code("js", "console.log(primes.length)", { preamble: "Let me count them." }),
  ScriptedModel.code(
    "js",
    "const isPrime = (n) => { for (let d = 2; d * d <= n; d++) if (n % d === 0) return false; return true }\nlet n = 2, count = 0\nwhile (n < 10000) { if (isPrime(n)) count++ }\nconsole.log(count)",
    { preamble: "I forgot to define the primes. Trial division then." }
  ),
  "That took too long, so the answer must be about 1,200 primes.",
  ScriptedModel.code("js", `${sieve}\nconsole.log(primes.length, sum)`, { preamble: "My loop never advanced n. A sieve is faster:" }),
  ScriptedModel.code("js", `${sieve}\nfinal_answer(\`\${primes.length} primes, summing to \${sum}\`)`, { preamble: "Confirmed; reporting it." })
]

// -----------------------------------------------------------------------------
// Main
// -----------------------------------------------------------------------------

const print = (event: LoopEvent): Effect.Effect<void> => {
  switch (event._tag) {
    case "DecisionParsed": {
      const decision = event.decision
      return Console.log(
        decision._tag === "Act" && decision.actions[0]._tag === "CodeAction"
          ? `step ${event.step}: ${decision.actions[0].language} code\n${decision.actions[0].code.replace(/^/gm, "    | ")}`
          : decision._tag === "InvalidDecision"
          ? `step ${event.step}: InvalidDecision (fed back): ${decision.explanation}`
          : `step ${event.step}: ${decision._tag}`
      )
    }
    case "ActionExecuted": {
      const outcome = event.outcome
      const audit = outcome.observationIsSynthetic ? `\n  (the executor's own text, kept for audit: ${event.executorObservation})` : ""
      return Console.log(`  ${outcome.status}${outcome.envReportedCompletion ? " (reports completion)" : ""}:\n${outcome.observation.replace(/^/gm, "    > ")}${audit}`)
    }
    case "RunFinished":
      return Console.log(`stop: ${StopReason.format(event.stopReason)}`)
    default:
      return Effect.void
  }
}

const main = Effect.gen(function*() {
  const runtime = yield* Config.string("CODE_AGENT_RUNTIME").pipe(Config.withDefault(process.execPath))
  yield* Console.log(`task: ${task}\nruntime: ${runtime}\n`)
  const services = Agent.layer({
    store: RunLogStore.inMemory(),
    model: ScriptedModel.layer(script),
    parser: CodeBlockParser.layer({ language: "javascript", aliases: ["js"], finalAnswer: { call: "final_answer" } }),
    executor: layerExecutor({ runtime, timeLimit: "2 seconds" }), // the code runner instead of a registry's executor
    events: EventSink.layer(print)
  })
  const result = yield* Agent.run({ runId: runId("code-agent-1"), agent, task, tools: ToolRegistry.empty }).pipe(Effect.provide(services))
  yield* Console.log(`\nsteps: ${result.steps} (${result.effectiveSteps} effective)`)
  if (result.stopReason._tag !== "Completed") {
    return yield* Effect.fail(`the run did not complete: ${StopReason.format(result.stopReason)}`)
  }
}).pipe(Effect.provide(NodeContext.layer))

NodeRuntime.runMain(main)
