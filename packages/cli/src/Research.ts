/**
 * The research commands of `polyloop` (issue 17, design 0170):
 *
 * - `export [RUN] --format jsonl|json|openai-chat|atif [--all --agent A --snapshot H --stop-reason R]`:
 *   one run, or every run the filters select (JSON lines of records that `import` reads back;
 *   one `openai-chat` line per run; `json` an array of `{ runId, records }`; `atif` one
 *   trajectory per line);
 * - `import FILE`: writes the runs of a JSON-lines export into the store (each run atomically;
 *   an existing run id is refused and nothing is written);
 * - `replay RUN [--agent MODULE]`: runs the agent again under `Replay.model` on an in-memory
 *   store and prints "identical" or the first divergence (non-zero exit);
 * - `fork RUN --at K --run NEW`: a fork with the parent's configuration;
 * - `stats [--json] [--agent A --snapshot H]`: how finished runs ended, per configuration; a
 *   conversation awaiting a message counts with its last turn's stop reason and its turns' sums.
 *
 * @since 0.1.0
 */
import * as Args from "@effect/cli/Args"
import * as Command from "@effect/cli/Command"
import * as Options from "@effect/cli/Options"
import * as FileSystem from "@effect/platform/FileSystem"
import * as Agent from "@polyloop/core/Agent"
import type * as AgentDefinition from "@polyloop/core/AgentDefinition"
import { defaultModelRetry } from "@polyloop/core/AgentDefinition"
import { DecisionParser } from "@polyloop/core/DecisionParser"
import * as EventSink from "@polyloop/core/EventSink"
import * as Fork from "@polyloop/core/Fork"
import type { RunId } from "@polyloop/core/Ids"
import * as JsonActionParser from "@polyloop/core/JsonActionParser"
import * as LogFile from "@polyloop/core/LogFile"
import * as NativeToolCallParser from "@polyloop/core/NativeToolCallParser"
import * as Replay from "@polyloop/core/Replay"
import type * as RunLog from "@polyloop/core/RunLog"
import * as RunLogStore from "@polyloop/core/RunLogStore"
import * as Snapshot from "@polyloop/core/Snapshot"
import * as Stats from "@polyloop/core/Stats"
import * as ToolRegistry from "@polyloop/core/ToolRegistry"
import * as Trajectory from "@polyloop/core/Trajectory"
import * as GovDoc from "./GovDoc.js"
import * as Console from "effect/Console"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Schema from "effect/Schema"
import * as nodeFs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { pathToFileURL } from "node:url"
import type { Common } from "./Approvals.js"
import { CliError } from "./CliError.js"
import * as Format from "./Format.js"
import * as Store from "./Store.js"
import * as Style from "./Style.js"

const runIdArg = Args.text({ name: "runId" }).pipe(Args.withDescription("the run id (see polyloop runs)"))

const filterOptions = {
  agent: Options.text("agent").pipe(Options.optional, Options.withDescription("only runs of this agent")),
  snapshot: Options.text("snapshot").pipe(Options.optional, Options.withDescription("only runs with this snapshot hash (a prefix of 8 or more characters is enough)")),
  stopReason: Options.text("stop-reason").pipe(
    Options.optional,
    Options.withDescription("only runs that ended so: Completed, Completed(Tool), BudgetExhausted(Steps), EnvError, …")
  )
}

/** The store's logs that pass the filters (a snapshot hash may be given by a prefix). */
const selectLogs = (filters: {
  readonly agent: Option.Option<string>
  readonly snapshot: Option.Option<string>
  readonly stopReason: Option.Option<string>
}, finishedOnly: boolean) =>
  Effect.gen(function*() {
    const snapshot = Option.getOrUndefined(filters.snapshot)
    if (snapshot !== undefined && snapshot.length < 8) return yield* new CliError({ message: `--snapshot needs at least 8 characters of the hash, not ${JSON.stringify(snapshot)}` })
    const logs = yield* Stats.select({
      ...(Option.isSome(filters.agent) ? { agent: filters.agent.value } : {}),
      ...(Option.isSome(filters.stopReason) ? { stopReason: filters.stopReason.value } : {}),
      ...(finishedOnly ? { status: "Finished" as const } : {})
    })
    return snapshot === undefined ? logs : logs.filter((log) => Option.exists(log.started, (s) => s.snapshotHash.startsWith(snapshot)))
  })

/** Reads a run's log (fully decoded) or fails: no such run. */
const existingLog = (runId: RunId) =>
  Effect.gen(function*() {
    const store = yield* RunLogStore.RunLogStore
    const log = yield* store.readLog(runId, { verify: true })
    if (Option.isNone(log.started)) return yield* new CliError({ message: `no run with id ${JSON.stringify(runId)} in the store` })
    return log
  })

/** Several runs in one format: records concatenated (jsonl), a JSON array (json), one line per run (openai-chat, atif). */
const renderMany = (logs: ReadonlyArray<RunLog.RunLog>, format: Trajectory.Format) =>
  Effect.gen(function*() {
    switch (format) {
      case "jsonl":
        return logs.map(LogFile.toJsonl).join("")
      case "json":
        return `${JSON.stringify(logs.map((log) => JSON.parse(LogFile.toJson(log)) as unknown), null, 2)}\n`
      case "openai-chat":
        return (yield* Effect.forEach(logs, (log) => Trajectory.render(log, "openai-chat"))).join("")
      case "atif":
        return (yield* Effect.forEach(logs, Trajectory.atif)).map((t) => `${JSON.stringify(t)}\n`).join("")
    }
  })

const formats = ["jsonl", "json", "openai-chat", "atif"] as const

/** `polyloop export`. */
export const exportRuns = (common: Common) =>
  Command.make(
    "export",
    {
      db: common.db,
      pg: common.pg,
      runId: runIdArg.pipe(Args.optional),
      format: Options.choice("format", formats).pipe(
        Options.withDefault("jsonl" as const),
        Options.withDescription("jsonl: records, one per line (what import reads); json: one document; openai-chat: messages and tools per run; atif: Agent Trajectory Interchange Format")
      ),
      all: Options.boolean("all").pipe(Options.withDescription("every run the filters select, instead of one run")),
      ...filterOptions,
      out: Options.file("out").pipe(Options.optional, Options.withDescription("write to this file instead of standard output"))
    },
    (options) =>
      Effect.gen(function*() {
        const filtered = Option.isSome(options.agent) || Option.isSome(options.snapshot) || Option.isSome(options.stopReason)
        let text: string
        let count: number
        if (options.all) {
          if (Option.isSome(options.runId)) return yield* new CliError({ message: "give a run id or --all, not both" })
          const logs = yield* selectLogs(options, false)
          text = yield* renderMany(logs, options.format)
          count = logs.length
        } else {
          if (Option.isNone(options.runId)) return yield* new CliError({ message: "give a run id, or --all (with --agent, --snapshot, --stop-reason to select runs)" })
          if (filtered) return yield* new CliError({ message: "--agent, --snapshot and --stop-reason select runs for --all" })
          const log = yield* existingLog(yield* common.decodeRunId(options.runId.value))
          text = yield* Trajectory.render(log, options.format)
          count = 1
        }
        if (Option.isNone(options.out)) return yield* Effect.sync(() => process.stdout.write(text))
        const fs = yield* FileSystem.FileSystem
        const target = options.out.value
        yield* fs.writeFileString(target, text).pipe(Effect.mapError((error) => new CliError({ message: `cannot write ${target}: ${error.message}` })))
        yield* Console.error(`wrote ${count} run(s), ${text.length} characters (${options.format}) to ${target}`)
      }).pipe(Effect.provide(Store.layerExisting(common.location(options))))
  ).pipe(
    Command.withDescription(
      "Write a run (or, with --all, every run the filters select) as records (jsonl, json) or as a trajectory (openai-chat, atif), to standard output or --out."
    )
  )

/** `polyloop import FILE`. */
export const importLogs = (common: Common) =>
  Command.make(
    "import",
    { db: common.db, pg: common.pg, file: Args.file({ name: "file", exists: "yes" }).pipe(Args.withDescription("a JSON-lines export (polyloop export --format jsonl)")) },
    (options) =>
      Effect.gen(function*() {
        const fs = yield* FileSystem.FileSystem
        const text = yield* fs.readFileString(options.file).pipe(
          Effect.mapError((error) => new CliError({ message: `cannot read ${options.file}: ${error.message}` }))
        )
        const runs = yield* LogFile.parse(text).pipe(Effect.mapError((error) => new CliError({ message: `${options.file}: ${error.message}` })))
        yield* LogFile.write(runs).pipe(Effect.catchTag("InvalidLogFile", (error) => new CliError({ message: error.message })))
        yield* Console.log(`imported ${runs.length} run(s) into ${Store.describe(common.location(options))}: ${runs.map((r) => r.runId).join(", ")}`)
      }).pipe(Effect.provide(Store.layerCreate(common.location(options))))
  ).pipe(Command.withDescription("Write the runs of a JSON-lines export into the store (each run atomically; a run id already there is refused, nothing written)."))

/** `polyloop fork RUN --at K --run NEW`. */
export const fork = (common: Common) =>
  Command.make(
    "fork",
    {
      db: common.db,
      pg: common.pg,
      json: common.json,
      runId: runIdArg,
      at: Options.integer("at").pipe(Options.withDescription("the step the fork continues from (the parent's steps before it are copied)")),
      run: Options.text("run").pipe(Options.withDescription("the fork's run id"))
    },
    (options) =>
      Effect.gen(function*() {
        const from = yield* common.decodeRunId(options.runId)
        const runId = yield* common.decodeRunId(options.run)
        const forked = yield* Agent.fork({ from, atStep: options.at, runId }).pipe(
          Effect.catchTag("InvalidFork", (error) => new CliError({ message: error.message }))
        )
        if (options.json) {
          return yield* Console.log(JSON.stringify({ runId: forked.runId, forkedFrom: forked.forkedFrom, copiedRecords: forked.copiedRecords }))
        }
        yield* Console.log(
          `forked ${from} at step ${options.at} into ${runId} (${forked.copiedRecords} records copied); ` +
            `run it with the same configuration to continue from step ${options.at}`
        )
      }).pipe(Effect.provide(Store.layerExisting(common.location(options))))
  ).pipe(Command.withDescription("Start a new run from a recorded run's step K: the steps before K are copied (not run again); the parent is not touched."))

/** The runs forked from `runId` (read from every run's first record). */
export const forksOf = (runId: string) =>
  Effect.map(Stats.select(), (logs) =>
    new Set(logs.flatMap((log) => Option.match(Fork.parentOf(log), { onNone: () => [], onSome: (parent) => parent.runId === runId ? [Option.getOrThrow(log.started).runId as string] : [] }))))

// -----------------------------------------------------------------------------
// replay
// -----------------------------------------------------------------------------

const decodeSnapshot = Schema.decodeUnknownOption(Snapshot.Snapshot)

/** The demo's agent as a replay target: its tools on a fresh workspace, the parser and agent its snapshot names. */
const demoTarget = (snapshot: Snapshot.Snapshot): Effect.Effect<Replay.Target<unknown>, CliError, FileSystem.FileSystem> =>
  Effect.gen(function*() {
    const parser = [JsonActionParser.make(), NativeToolCallParser.make()].find((p) => p.id === snapshot.parser)
    if (parser === undefined) return yield* new CliError({ message: `the demo has no parser ${snapshot.parser}; pass --agent <module>` })
    const root = yield* Effect.sync(() => nodeFs.mkdtempSync(path.join(os.tmpdir(), "polyloop-replay-")))
    yield* GovDoc.seed(root).pipe(Effect.mapError((error) => new CliError({ message: `cannot prepare a workspace: ${error.message}` })))
    const tools = GovDoc.makeTools(root)
    const fs = yield* FileSystem.FileSystem
    // The demo's agent has no output schema (a snapshot holds its JSON Schema only, design 0400).
    const { observationLimit, output: _output, ...agent } = snapshot.agent
    const definition: AgentDefinition.AgentDefinition = { ...agent, ...(observationLimit === null ? {} : { observationLimit }), modelRetry: defaultModelRetry }
    return {
      request: (recorded) => ({ agent: definition, task: recorded.task, tools }),
      layer: Layer.mergeAll(Layer.succeed(DecisionParser, parser), ToolRegistry.layerExecutor(tools), EventSink.layerNoop).pipe(
        Layer.provide(Layer.succeed(FileSystem.FileSystem, fs))
      )
    }
  })

/** A replay target from a module's `replayTarget` export. */
const moduleTarget = (file: string) =>
  Effect.gen(function*() {
    const loaded = yield* Effect.tryPromise({
      try: () => import(pathToFileURL(path.resolve(file)).href) as Promise<{ readonly replayTarget?: Replay.Target<unknown> }>,
      catch: (error) => new CliError({ message: `cannot load ${file}: ${error instanceof Error ? error.message : String(error)}` })
    })
    if (loaded.replayTarget === undefined) return yield* new CliError({ message: `${file} exports no replayTarget (see Replay.Target)` })
    return loaded.replayTarget
  })

/** `polyloop replay RUN`. */
export const replay = (common: Common) =>
  Command.make(
    "replay",
    {
      db: common.db,
      pg: common.pg,
      json: common.json,
      runId: runIdArg,
      agent: Options.file("agent").pipe(
        Options.optional,
        Options.withDescription("a module exporting replayTarget (Replay.Target): the agent, tools, parser to replay with (default: the demo agent)")
      )
    },
    (options) =>
      Effect.gen(function*() {
        const runId = yield* common.decodeRunId(options.runId)
        const recorded = yield* existingLog(runId)
        const started = Option.getOrThrow(recorded.started)
        const target = yield* Option.match(options.agent, {
          onSome: moduleTarget,
          onNone: () =>
            Option.match(decodeSnapshot(started.snapshot), {
              onNone: () => Effect.fail(new CliError({ message: `the snapshot of ${runId} cannot be read by this version; pass --agent <module>` })),
              onSome: (snapshot) =>
                snapshot.agent.name === GovDoc.agent.name
                  ? demoTarget(snapshot)
                  : Effect.fail(new CliError({ message: `run ${runId} is not a demo run (agent ${snapshot.agent.name}); pass --agent <module> exporting replayTarget` }))
            })
        })
        const replayId = `${runId}~replay` as RunId
        const request = { ...target.request({ runId, task: started.task, snapshot: started.snapshot }), runId: replayId }
        const outcome = yield* Replay.run({ recorded, request }).pipe(
          Effect.provide(Layer.merge(Layer.orDie(target.layer), RunLogStore.layerMemory)),
          Effect.either
        )
        if (outcome._tag === "Left") {
          const error = outcome.left
          if (error._tag !== "ReplayDiverged") return yield* new CliError({ message: `replay of ${runId} failed: ${error.message}` })
          if (options.json) yield* Console.log(JSON.stringify(Schema.encodeSync(Replay.ReplayDiverged)(error)))
          return yield* new CliError({ message: error.message })
        }
        const comparison = outcome.right
        if (options.json) yield* Console.log(JSON.stringify(comparison))
        if (comparison._tag === "Differs") {
          return yield* new CliError({
            message: `replay of ${runId} differs at record ${comparison.index}: ${comparison.path} (recorded ${Format.preview(JSON.stringify(comparison.recorded) ?? "absent", 60)}, replayed ${Format.preview(JSON.stringify(comparison.replayed) ?? "absent", 60)})`
          })
        }
        if (!options.json) yield* Console.log(`identical: the replay of ${runId} reproduced its ${comparison.records} records (apart from ids and timestamps)`)
      }).pipe(Effect.provide(Store.layerExisting(common.location(options))))
  ).pipe(
    Command.withDescription(
      "Run a recorded run's agent again with the model replaced by the recorded replies, each request checked against its fingerprint; prints identical or the first divergence (exit 1). On an in-memory store: the store is not written."
    )
  )

// -----------------------------------------------------------------------------
// stats
// -----------------------------------------------------------------------------

const encodeGroups = Schema.encodeSync(Schema.Array(Stats.Group))
const encodeAgentGroups = Schema.encodeSync(Schema.Array(Stats.AgentGroup))

const showDistribution = (d: Stats.Distribution): string => `${d.median} / ${d.p90} / ${d.max}`

/** The rows `polyloop stats` prints by default at most (issue 45: a store of thousands of configurations). */
export const defaultStatsLimit = 50

/** A group's RUNS cell: its runs, and its conversations awaiting a message with their turns. */
const runsCell = (g: Stats.AgentGroup | Stats.Group): string =>
  g.conversations === undefined ? String(g.runs) : `${g.runs} (${g.conversations.runs} conversation${g.conversations.runs === 1 ? "" : "s"}, turns ${showDistribution(g.conversations.turns)})`

/** The cells every row has after its key: stop reasons, steps, effective steps, tokens, resumes. */
const figureCells = (g: Stats.AgentGroup | Stats.Group): ReadonlyArray<string> => [
  Object.entries(g.stopReasons).sort(([a], [b]) => (a < b ? -1 : 1)).map(([reason, n]) => `${reason} ${n}`).join(", "),
  showDistribution(g.steps),
  showDistribution(g.effectiveSteps),
  showDistribution(g.tokens),
  `${g.resumedRuns} (${g.resumes}×)`
]

const figureColumns: ReadonlyArray<Format.Column> = [
  { header: "STOP REASONS" },
  { header: "STEPS med/p90/max", align: "right" },
  { header: "EFFECTIVE med/p90/max", align: "right" },
  { header: "TOKENS med/p90/max", align: "right" },
  { header: "RESUMED", align: "right" }
]

/** `polyloop stats`. */
export const stats = (common: Common) =>
  Command.make(
    "stats",
    {
      db: common.db,
      pg: common.pg,
      json: common.json,
      agent: filterOptions.agent,
      snapshot: filterOptions.snapshot,
      by: Options.choice("by", ["agent", "snapshot"]).pipe(
        Options.optional,
        Options.withDescription("one row per agent (over all its snapshots: the default) or per agent and snapshot (the default with --agent or --snapshot, and for --json)")
      ),
      limit: Options.integer("limit").pipe(
        Options.withDefault(defaultStatsLimit),
        Options.withDescription(`the most rows printed (0: all); the rest are counted on a last line; --json prints all`)
      )
    },
    (options) =>
      Effect.gen(function*() {
        if (options.limit < 0) return yield* new CliError({ message: `--limit must be 0 or more, not ${options.limit}` })
        // Finished runs and conversations awaiting a message (design 0300): `compute` leaves out the rest.
        const logs = yield* selectLogs({ ...options, stopReason: Option.none() }, false)
        const filtered = Option.isSome(options.agent) || Option.isSome(options.snapshot)
        const by = Option.getOrElse(options.by, () => (options.json || filtered ? "snapshot" : "agent"))
        if (options.json) {
          return yield* Console.log(JSON.stringify(by === "agent" ? encodeAgentGroups(Stats.computeByAgent(logs)) : encodeGroups(Stats.compute(logs)), null, 2))
        }
        const style = yield* Style.detect
        const limited = <A>(all: ReadonlyArray<A>, noun: string) => {
          const shown = options.limit === 0 ? all : all.slice(0, options.limit)
          const rest = all.length - shown.length
          return { shown, more: rest > 0 ? `… ${rest} more ${noun} (--limit 0 prints all, --agent one agent's)` : undefined }
        }
        if (by === "agent") {
          const groups = Stats.computeByAgent(logs)
          if (groups.length === 0) return yield* Console.log(`no finished runs in ${Store.describe(common.location(options))}`)
          const { more, shown } = limited(groups, "agents")
          yield* Console.log(
            Format.table(style, [{ header: "AGENT" }, { header: "SNAPSHOTS", align: "right" }, { header: "RUNS", align: "right" }, ...figureColumns], shown.map((g) => [g.agent, String(g.snapshots), runsCell(g), ...figureCells(g)]))
          )
          if (more !== undefined) yield* Console.log(more)
          return
        }
        const groups = Stats.compute(logs)
        if (groups.length === 0) return yield* Console.log(`no finished runs in ${Store.describe(common.location(options))}`)
        const { more, shown } = limited(groups, "configurations")
        yield* Console.log(
          Format.table(style, [{ header: "AGENT" }, { header: "SNAPSHOT" }, { header: "RUNS", align: "right" }, ...figureColumns], shown.map((g) => [g.agent, g.snapshotHash.slice(0, 12), runsCell(g), ...figureCells(g)]))
        )
        if (more !== undefined) yield* Console.log(more)
      }).pipe(Effect.provide(Store.layerExisting(common.location(options))))
  ).pipe(Command.withDescription("How finished runs (and conversations awaiting a message, by their last turn) ended, per agent (then per agent and snapshot with --by snapshot, --agent or --snapshot), at most --limit rows: stop reasons, steps, effective steps and tokens (median, p90, max), resumes. --json for scripts."))
