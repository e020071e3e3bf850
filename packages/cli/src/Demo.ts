/**
 * `polyloop demo`: runs the GovDoc-like tool-calling agent of `GovDoc.ts` on the run
 * store (the SQLite file `./polyloop.db` by default) with a scripted model, printing each step
 * as it happens from the loop's events, then a summary.
 *
 * - `--crash-at N` kills the process with SIGKILL during step N: right after the step's tool
 *   ran (its side effect is done, the step is not recorded yet), or right after the step's reply
 *   was logged when the step runs no tool. `--run <id>` (or `--resume`, the newest unfinished
 *   demo run) resumes it and shows how the interrupted step was settled.
 * - `--model <name>` or `POLYLOOP_API_KEY` switches to a real model through `@polyloop/ai`'s
 *   `OpenAiCompatible` client (`POLYLOOP_BASE_URL` for a server other than OpenAI's).
 * - `--json` prints the loop's events as JSON lines and the result as a last line.
 * - The model's replies stream (design 0180): each reply is printed as it arrives (the scripted
 *   model streams its replies in small pieces, a real model through `OpenAiCompatible.stream`),
 *   then the step's decision. `--json` does not stream: its lines are the durable events.
 *
 * Each demo run edits its own workspace directory under the system's temporary directory, named
 * after the store and the run id, so that a resumed run finds the files it was editing.
 *
 * @since 0.1.0
 */
import type * as FileSystem from "@effect/platform/FileSystem"
import * as Agent from "@polyloop/core/Agent"
import * as AgentDefinition from "@polyloop/core/AgentDefinition"
import * as EventSink from "@polyloop/core/EventSink"
import { RunId } from "@polyloop/core/Ids"
import * as JsonActionParser from "@polyloop/core/JsonActionParser"
import type { LoopEvent } from "@polyloop/core/LoopEvent"
import type * as ModelClient from "@polyloop/core/ModelClient"
import { totalTokens } from "@polyloop/core/ModelReply"
import * as NativeToolCallParser from "@polyloop/core/NativeToolCallParser"
import type { ParsedReply } from "@polyloop/core/ParsedReply"
import * as RunLogStore from "@polyloop/core/RunLogStore"
import * as Snapshot from "@polyloop/core/Snapshot"
import * as StopReason from "@polyloop/core/StopReason"
import { ToolContext } from "@polyloop/core/ToolContext"
import * as ToolRegistry from "@polyloop/core/ToolRegistry"
import * as GovDoc from "./GovDoc.js"
import * as ScriptedModel from "@polyloop/testing/ScriptedModel"
import * as Clock from "effect/Clock"
import * as Config from "effect/Config"
import * as Console from "effect/Console"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Random from "effect/Random"
import type * as Redacted from "effect/Redacted"
import * as Schema from "effect/Schema"
import * as nodeFs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { CliError, describe } from "./CliError.js"
import * as Format from "./Format.js"
import * as Store from "./Store.js"
import type { Style } from "./Style.js"

/** What `polyloop demo` was asked to do. */
export interface Options {
  readonly location: Store.Location
  /** Run (or resume) this run id; a fresh id when none. */
  readonly run: Option.Option<string>
  /** Resume the newest unfinished demo run of the store. */
  readonly resume: boolean
  /** Kill the process with SIGKILL during this step. */
  readonly crashAt: Option.Option<number>
  /** A real model's name (switches to `OpenAiCompatible`). */
  readonly model: Option.Option<string>
  readonly json: boolean
  readonly style: Style
}

/** The model real runs use when neither `--model` nor `POLYLOOP_MODEL` names one. */
export const defaultRealModel = "gpt-4o-mini"

/** The system prompt of real-model runs: the same agent, acting through native tool calls. */
const nativeSystemPrompt = [
  "You edit the documents of a workspace with the tools you are given, calling exactly one tool per reply.",
  "Check files before editing them. When the work is done, call submit with a one-line summary."
].join("\n")

/** Where the demo's files live for one run of one store. */
export const workspaceDir = (location: Store.Location, runId: string): string => {
  const store = Option.isSome(location.pg) ? "postgres" : path.resolve(location.db)
  const readable = runId.replace(/[^A-Za-z0-9._-]/g, "_").slice(0, 48)
  return path.join(os.tmpdir(), "polyloop-demo", `${readable}-${Snapshot.sha256(`${store}\u0000${runId}`).slice(0, 12)}`)
}

/** The command line that resumes a run (with `--db`/`--pg` when not the default). */
const resumeCommand = (options: Options, runId: string): string => {
  const where = Option.isSome(options.location.pg) ? " --pg <url>" : options.location.db === "./polyloop.db" ? "" : ` --db ${options.location.db}`
  return `npx polyloop demo --run ${runId}${where}`
}

/** Is this the model a real one, and how is it reached? */
interface RealModel {
  readonly model: string
  readonly baseUrl: string | undefined
  readonly apiKey: Redacted.Redacted | undefined
}

const realModelOf = (options: Options): Effect.Effect<Option.Option<RealModel>, CliError> =>
  Effect.gen(function*() {
    const read = <A>(config: Config.Config<A>) =>
      Effect.mapError(config, (error) => new CliError({ message: `bad model configuration: ${String(error).replace(/\s+/g, " ")}` }))
    const apiKey = yield* read(Config.option(Config.redacted("POLYLOOP_API_KEY")))
    const baseUrl = yield* read(Config.option(Config.nonEmptyString("POLYLOOP_BASE_URL")))
    const envModel = yield* read(Config.option(Config.nonEmptyString("POLYLOOP_MODEL")))
    if (Option.isNone(options.model) && Option.isNone(apiKey)) return Option.none()
    const model = Option.getOrElse(Option.orElse(options.model, () => envModel), () => defaultRealModel)
    if (Option.isNone(apiKey) && Option.isNone(baseUrl)) {
      return yield* new CliError({
        message: `--model ${model} needs a model server, and neither POLYLOOP_API_KEY nor POLYLOOP_BASE_URL is set: ` +
          `set POLYLOOP_API_KEY for OpenAI (plus POLYLOOP_BASE_URL for another provider, e.g. https://openrouter.ai/api/v1), ` +
          `or POLYLOOP_BASE_URL alone for a local server without a key (e.g. http://localhost:11434/v1 for Ollama); ` +
          `without --model and POLYLOOP_API_KEY the demo uses its scripted model`
      })
    }
    return Option.some({ model, baseUrl: Option.getOrUndefined(baseUrl), apiKey: Option.getOrUndefined(apiKey) })
  })

/** OpenAI's API root, where a real model is reached unless `POLYLOOP_BASE_URL` says otherwise. */
const openAiBaseUrl = "https://api.openai.com/v1"

/**
 * The real model's client: `@polyloop/ai`'s `OpenAiCompatible` over undici, loaded only when a
 * real model is asked for (the scripted demo and the other commands start faster without it).
 */
const realModelLayer = (m: RealModel): Layer.Layer<ModelClient.ModelClient> =>
  Layer.unwrapEffect(
    Effect.promise(async () => {
      const [OpenAiCompatible, NodeHttpClient] = await Promise.all([
        import("@polyloop/ai/OpenAiCompatible"),
        import("@effect/platform-node/NodeHttpClient")
      ])
      return OpenAiCompatible.layer({ model: m.model, baseUrl: m.baseUrl ?? openAiBaseUrl, apiKey: m.apiKey }).pipe(
        Layer.provide(NodeHttpClient.layerUndici)
      )
    })
  )

/** A fresh run id: `demo-<UTC date and time>-<4 random characters>`. */
const freshRunId = Effect.gen(function*() {
  const now = yield* Clock.currentTimeMillis
  const stamp = new Date(now).toISOString().slice(0, 19).replace(/[-:]/g, "").replace("T", "-")
  const suffix = (yield* Random.nextIntBetween(0, 36 ** 4)).toString(36).padStart(4, "0")
  return `demo-${stamp}-${suffix}`
})

const decodeRunId = (value: string) =>
  Schema.decodeUnknown(RunId)(value).pipe(Effect.mapError(() => new CliError({ message: `${JSON.stringify(value)} is not a valid run id (1 to 200 characters)` })))

/** The prose of a reply, without its JSON or code block. */
const prose = (text: string): string => {
  const cut = text.search(/```|\{/)
  return Format.preview(cut < 0 ? text : text.slice(0, cut), 100)
}

/** Writes a line straight to standard output and kills this process with SIGKILL: no cleanup, no flush, no finalizer. */
const killSelf = (line: string): Effect.Effect<never> =>
  Effect.zipRight(
    Effect.sync(() => {
      nodeFs.writeSync(1, `${line}\n`)
      process.kill(process.pid, "SIGKILL")
    }),
    Effect.never
  )

/** Runs the demo. */
export const run = (options: Options) =>
  Effect.gen(function*() {
    const store = yield* RunLogStore.RunLogStore
    const style = options.style
    const out = (line: string) => (options.json ? Effect.void : Console.log(line))

    if (options.resume && Option.isSome(options.run)) {
      return yield* new CliError({ message: "--resume and --run are exclusive: --resume picks the newest unfinished demo run" })
    }
    if (Option.isSome(options.crashAt) && options.crashAt.value < 0) {
      return yield* new CliError({ message: `--crash-at must be a step number (0 or more), not ${options.crashAt.value}` })
    }
    const real = yield* realModelOf(options)

    // Which run.
    let runIdText: string
    if (options.resume) {
      const unfinished = (yield* store.listRuns({ status: "Unfinished" })).filter((run) => run.agent === GovDoc.agent.name)
      const newest = unfinished[0]
      if (newest === undefined) {
        return yield* new CliError({ message: `no unfinished demo run to resume in ${Store.describe(options.location)}` })
      }
      runIdText = newest.runId
    } else {
      runIdText = Option.isSome(options.run) ? options.run.value : yield* freshRunId
    }
    const runId = yield* decodeRunId(runIdText)
    const log = yield* store.readLog(runId)
    const root = workspaceDir(options.location, runId)

    // The agent, its tools and the crash point.
    const agent: AgentDefinition.AgentDefinition = Option.isSome(real)
      ? { ...GovDoc.agent, systemPrompt: nativeSystemPrompt, modelSettings: { ...GovDoc.agent.modelSettings, model: real.value.model } }
      : GovDoc.agent
    const budget = agent.budget
    const interruptedStep = log.replies.length > log.steps.length ? log.steps.length : undefined
    const crashAt = Option.getOrUndefined(options.crashAt)
    if (crashAt !== undefined && Option.isSome(log.started) && Option.isNone(log.finished) && crashAt < log.steps.length) {
      return yield* new CliError({
        message: `run ${runId} has already completed steps 0 to ${log.steps.length - 1}; --crash-at must be ${log.steps.length} or more`
      })
    }
    const crashLine = (what: string) =>
      options.json
        ? JSON.stringify({ _tag: "Crash", runId, step: crashAt, signal: "SIGKILL", resume: resumeCommand(options, runId) })
        : `${style.red(`✗ SIGKILL at step ${crashAt}`)} ${what}\n  resume it with: ${style.bold(resumeCommand(options, runId))}`
    const tools = GovDoc.makeTools(root, {
      afterTool: (tool) =>
        Effect.flatMap(ToolContext, (context) =>
          context.step === crashAt
            ? killSelf(crashLine(`— ${tool} has run, the step is not recorded yet: killing this process`))
            : Effect.void)
    })
    /** Will the handler of an action of this decision run at `step`? (If not, the crash happens right after the reply is logged.) */
    const runsATool = (decision: ParsedReply, step: number): boolean => {
      if (decision._tag !== "Act") return false
      return decision.actions.some((action) => {
        if (action._tag !== "ToolCall") return false
        const validated = tools.validate(action)
        if (validated._tag === "Left") return false
        return !(step === interruptedStep && validated.right.tool.replayPolicy === "Never")
      })
    }

    // What happened so far.
    if (Option.isSome(log.finished)) {
      yield* out(`run ${runId} has already finished (${StopReason.format(log.finished.value.stopReason)}); Agent.run returns its recorded result and calls nothing.`)
    } else if (Option.isSome(log.started)) {
      const exists = nodeFs.existsSync(root)
      if (!exists) {
        return yield* new CliError({ message: `the workspace of run ${runId} (${root}) is gone, so the run cannot be resumed` })
      }
      yield* out(style.magenta(`↻ resuming run ${runId}: ${log.steps.length} step(s) recorded`))
      if (interruptedStep !== undefined) {
        yield* out(
          `  step ${interruptedStep}'s reply was logged before the process died, but the step was not completed: it is parsed again, and its action\n` +
            `  runs again only if its tool's replay policy is "Always"; a "Never" action is recorded as not executed, with a synthetic observation`
        )
      } else {
        yield* out(`  the process died between steps: the run goes on at step ${log.steps.length} with a new model call`)
      }
    } else {
      yield* GovDoc.seed(root).pipe(Effect.mapError((error) => new CliError({ message: `cannot prepare the workspace ${root}: ${error.message}` })))
    }
    if (!Option.isSome(log.finished)) {
      yield* out(`${style.bold("task")}       ${GovDoc.task}`)
      yield* out(`${style.bold("workspace")}  ${root}`)
      yield* out(`${style.bold("model")}      ${Option.match(real, { onNone: () => "scripted (GovDoc.ts)", onSome: (m) => `${m.model} via ${m.baseUrl ?? openAiBaseUrl}` })}`)
      yield* out(`${style.bold("store")}      ${Store.describe(options.location)}\n`)
    }

    // Printing each step as it happens.
    const summary = Option.getOrUndefined(RunLogStore.summarize(log))
    const used = { steps: summary?.steps ?? 0, effectiveSteps: summary?.effectiveSteps ?? 0, tokens: summary?.tokens ?? 0 }
    /** Reply texts by step: the logged ones (an interrupted step is settled from its logged reply), then the live ones. */
    const replies = new Map<number, string>(log.replies.map((replied) => [replied.step, replied.reply.text]))
    /** The reply being printed as it streams, and the steps whose reply was printed so. */
    let streamingNow: { readonly step: number; readonly attempt: number } | undefined
    const streamed = new Set<number>()
    const write = (text: string) => Effect.sync(() => void process.stdout.write(text))
    const showDelta = (event: Extract<LoopEvent, { _tag: "ModelDelta" }>): Effect.Effect<void> => {
      const delta = event.delta
      const piece = delta._tag === "TextDelta" || delta._tag === "RefusalDelta"
        ? delta.text
        : delta._tag === "ToolCallDelta"
        ? `${delta.name === undefined ? "" : `${delta.index > 0 ? " " : ""}${delta.name} `}${delta.arguments ?? ""}`
        : ""
      if (piece === "") return Effect.void
      const fresh = streamingNow === undefined || streamingNow.step !== event.step || streamingNow.attempt !== event.attempt
      const lead = fresh
        ? `${streamingNow === undefined ? "" : "\n"}${style.dim(event.attempt > 0 ? `      ↻ ▸ ` : `      ▸ `)}`
        : ""
      streamingNow = { step: event.step, attempt: event.attempt }
      streamed.add(event.step)
      return write(lead + style.dim(piece.replace(/\s*\n\s*/g, " ")))
    }
    const show = (event: LoopEvent): Effect.Effect<void> => {
      switch (event._tag) {
        case "ModelDelta":
          return showDelta(event)
        case "RunStarted":
          return out(`${style.green("▶")} started run ${style.bold(runId)} (agent ${agent.name}, snapshot sha256 ${event.snapshotHash.slice(0, 12)}…)`)
        case "RunResumed":
          return out(`${style.magenta("↻")} resumed run ${style.bold(runId)} at step ${event.fromStep}`)
        case "ModelReplied": {
          used.tokens += totalTokens(event.reply.usage)
          replies.set(event.step, event.reply.text)
          const ending = streamingNow === undefined ? Effect.void : write("\n")
          streamingNow = undefined
          return ending
        }
        case "DecisionParsed": {
          // A streamed reply was just printed whole; its prose is not repeated.
          const said = streamed.has(event.step) ? "" : prose(replies.get(event.step) ?? "")
          return out(`${style.bold(`step ${event.step}`)}  ${Format.decision(event.decision)}${said === "" ? "" : `\n        ${style.dim(`“${said}”`)}`}`)
        }
        case "ActionExecuted": {
          const outcome = event.outcome
          if (outcome.status === "Executed") used.effectiveSteps += 1
          const mark = outcome.status === "Executed" ? style.green("✓") : outcome.status === "NotExecuted" ? style.yellow("○") : style.red("✗")
          const synthetic = outcome.observationIsSynthetic ? ` ${style.magenta("[synthetic]")}` : ""
          const lines = [`        ${mark} ${Format.status(style, outcome.status)}${synthetic}  ${Format.preview(outcome.observation, 110)}`]
          if (event.replayed) {
            const tool = event.action._tag === "ToolCall" ? event.action.name : "the action"
            lines.push(
              style.magenta(
                outcome.observationIsSynthetic && event.executorObservation === ""
                  ? `        ↻ settled on resume: ${tool} (replay policy "Never") was in flight when the process died; it was NOT run again`
                  : `        ↻ settled on resume: ${tool} (replay policy "Always") was run again`
              )
            )
          }
          return out(lines.join("\n"))
        }
        case "StepCompleted":
          used.steps += 1
          return out(style.dim(`        ${Format.budgetUsed(used, budget)}`))
        default:
          return Effect.void
      }
    }
    const sink = (event: LoopEvent): Effect.Effect<void> =>
      Effect.gen(function*() {
        if (options.json) {
          const line = yield* Effect.orElseSucceed(EventSink.toJsonLine(event), () => JSON.stringify({ _tag: event._tag }))
          yield* Console.log(line)
        } else {
          yield* show(event)
        }
        if (event._tag === "DecisionParsed" && event.step === crashAt && !runsATool(event.decision, event.step)) {
          yield* killSelf(crashLine("— the step's reply is logged, the step is not completed: killing this process"))
        }
      })

    const model: Layer.Layer<ModelClient.ModelClient> = Option.match(real, {
      onNone: () =>
        ScriptedModel.layer(
          GovDoc.script,
          options.style.enabled ? { latency: "150 millis", streaming: { chunkSize: 5, delay: "12 millis" } } : { streaming: { chunkSize: 5 } }
        ),
      onSome: realModelLayer
    })
    const parser = Option.isSome(real) ? NativeToolCallParser.layer() : JsonActionParser.layer()
    const services = Layer.mergeAll(model, parser, ToolRegistry.layerExecutor(tools), EventSink.layer(sink))

    // A run killed by --crash-at is resumed at once: the SQL store takes over the claim of a
    // process of this machine that no longer runs (`reclaimDeadLocalOwners`).
    const result = yield* Agent.run({ runId, agent, task: GovDoc.task, tools, streaming: !options.json }).pipe(Effect.provide(services))

    if (options.json) {
      yield* Console.log(JSON.stringify({ _tag: "RunResult", ...Schema.encodeSync(Agent.RunResult)(result) }))
      return result
    }
    const after = yield* store.readLog(runId)
    const counters = Option.getOrUndefined(Option.map(after.finished, (f) => f.counters))
    const answer = result.stopReason._tag === "Completed" ? result.stopReason.answer : undefined
    const ok = result.stopReason._tag === "Completed"
    yield* out("")
    yield* out(`${ok ? style.green("■") : style.red("■")} run ${style.bold(runId)}: ${ok ? style.green(StopReason.format(result.stopReason)) : style.red(StopReason.format(result.stopReason))}`)
    if (answer !== undefined) yield* out(`  answer     ${answer}`)
    yield* out(
      `  used       ${Format.budgetUsed({ steps: result.steps, effectiveSteps: result.effectiveSteps, tokens: totalTokens(result.usage), ...(counters === undefined ? {} : { elapsed: counters.elapsed }) }, budget)}` +
        (result.resumedCount > 0 ? `, resumed ${result.resumedCount}×` : "")
    )
    if (nodeFs.existsSync(root)) {
      // A ledger that cannot be read is reported, never shown as "0 applied".
      const applied = yield* GovDoc.ledger(root).pipe(
        Effect.mapError((error) => new CliError({ message: `the run ended, but its writes cannot be checked: ${describe(error)}` }))
      )
      const keys = new Set(applied.map((entry) => entry.key))
      yield* out(`  writes     ${applied.length} applied, ${keys.size === applied.length ? "each idempotency key once" : style.red("an idempotency key applied twice")} (ledger ${path.join(root, GovDoc.ledgerFile)})`)
    }
    if (crashAt !== undefined && crashAt >= result.steps) {
      yield* out(style.yellow(`  note       the run ended before step ${crashAt}: nothing was killed`))
    }
    const where = Option.isSome(options.location.pg) ? " --pg <url>" : options.location.db === "./polyloop.db" ? "" : ` --db ${options.location.db}`
    yield* out(`\nlook at it: ${style.bold(`npx polyloop show ${runId}${where}`)}   ${style.bold(`npx polyloop runs${where}`)}   ${style.bold(`npx polyloop export ${runId}${where} --format jsonl`)}`)
    return result
  })

/** What the demo needs besides the store. */
export type Requirements = RunLogStore.RunLogStore | FileSystem.FileSystem
