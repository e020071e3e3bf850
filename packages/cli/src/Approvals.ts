/**
 * The approval commands (design 0160): `polyloop pending` lists the calls suspended runs wait
 * for, with their arguments and action hash; `polyloop approve RUN CALL` and `polyloop reject
 * RUN CALL --reason …` record a decision with `Agent.decide` (the next `Agent.run` of the run, or
 * a worker, resumes it). `--hash` binds the decision to the action the person saw: a prefix of
 * at least 8 characters of the hash `pending` shows; another action's hash is refused.
 *
 * @since 0.1.0
 */
import * as Args from "@effect/cli/Args"
import * as Command from "@effect/cli/Command"
import * as Options from "@effect/cli/Options"
import * as Agent from "@polyloop/core/Agent"
import * as Approval from "@polyloop/core/Approval"
import type { RunId } from "@polyloop/core/Ids"
import type * as RunLog from "@polyloop/core/RunLog"
import * as RunLogStore from "@polyloop/core/RunLogStore"
import * as Config from "effect/Config"
import * as Console from "effect/Console"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import type * as Redacted from "effect/Redacted"
import * as Schema from "effect/Schema"
import { CliError } from "./CliError.js"
import * as Format from "./Format.js"
import * as Store from "./Store.js"
import * as Style from "./Style.js"

/** The options and helpers every subcommand shares (defined by `Cli`). */
export interface Common {
  readonly db: Options.Options<string>
  readonly pg: Options.Options<Option.Option<Redacted.Redacted>>
  readonly json: Options.Options<boolean>
  readonly location: (options: { readonly db: string; readonly pg: Option.Option<Redacted.Redacted> }) => Store.Location
  readonly decodeRunId: (value: string) => Effect.Effect<RunId, CliError>
}

const encodeWaiting = Schema.encodeSync(Schema.Array(Approval.Waiting))

/** The calls waiting for a decision: of one run, or of every suspended run (newest run first). */
export const waitingCalls = (runId: Option.Option<RunId>) =>
  Effect.gen(function*() {
    const store = yield* RunLogStore.RunLogStore
    const ids = Option.isSome(runId)
      ? [runId.value]
      : (yield* store.listRuns({ status: "Suspended" })).map((summary) => summary.runId as RunId)
    const waiting: Array<Approval.Waiting> = []
    for (const id of ids) waiting.push(...Approval.waiting(yield* store.readLog(id)))
    return waiting
  })

/** The waiting calls as a table: run, step, call, tool, arguments, hash (first 12), requested. */
export const renderWaiting = (style: Style.Style, waiting: ReadonlyArray<Approval.Waiting>): string =>
  Format.table(
    style,
    [{ header: "RUN" }, { header: "STEP", align: "right" }, { header: "CALL" }, { header: "TOOL" }, { header: "ARGUMENTS" }, { header: "HASH" }, {
      header: "REQUESTED (UTC)"
    }],
    waiting.map((w) => [
      w.runId,
      String(w.step),
      w.callId,
      w.tool,
      w.action._tag === "ToolCall" ? Format.preview(JSON.stringify(w.action.arguments) ?? "", 80) : Format.preview(w.action.code, 80),
      w.actionHash.slice(0, 12),
      Format.time(w.requestedAt)
    ])
  )

/** `polyloop pending [--run ID]`. */
export const pending = (common: Common) =>
  Command.make(
    "pending",
    {
      db: common.db,
      pg: common.pg,
      json: common.json,
      run: Options.text("run").pipe(Options.optional, Options.withDescription("only the calls this run waits for"))
    },
    (options) =>
      Effect.gen(function*() {
        const runId = Option.isSome(options.run) ? Option.some(yield* common.decodeRunId(options.run.value)) : Option.none()
        const waiting = yield* waitingCalls(runId)
        if (options.json) return yield* Console.log(JSON.stringify(encodeWaiting(waiting), null, 2))
        if (waiting.length === 0) return yield* Console.log(`no calls wait for a decision in ${Store.describe(common.location(options))}`)
        yield* Console.log(renderWaiting(yield* Style.detect, waiting))
      }).pipe(Effect.provide(Store.layerExisting(common.location(options))))
  ).pipe(
    Command.withDescription(
      "List the tool calls suspended runs wait for: run, step, call id, tool, arguments and the action's hash. Decide with approve / reject."
    )
  )

const callArg = Args.text({ name: "callId" }).pipe(Args.withDescription("the call id (see polyloop pending)"))
const hashOption = Options.text("hash").pipe(
  Options.optional,
  Options.withDescription("the action hash you reviewed (at least its first 8 characters, as polyloop pending shows): refused if the call's action is another")
)
const byOption = Options.text("by").pipe(Options.optional, Options.withDescription("who decides (default: $USER)"))

/** Who decides: `--by`, else `$USER`, else "polyloop cli". */
const decider = (by: Option.Option<string>) =>
  Option.match(by, {
    onSome: Effect.succeed,
    onNone: () => Config.string("USER").pipe(Config.withDefault("polyloop cli"), Effect.orElseSucceed(() => "polyloop cli"))
  })

/** The full requested hash when `given` is a prefix of it (8+ characters), else `given` itself (which `decide` refuses). */
const resolveHash = (runId: RunId, callId: string, given: Option.Option<string>) =>
  Effect.gen(function*() {
    if (Option.isNone(given)) return undefined
    const prefix = given.value.trim().toLowerCase()
    if (prefix.length < 8) return yield* new CliError({ message: `--hash needs at least 8 characters of the hash, not ${JSON.stringify(given.value)}` })
    const store = yield* RunLogStore.RunLogStore
    const requested = Approval.waiting(yield* store.readLog(runId)).find((w) => w.callId === callId)
    return requested !== undefined && requested.actionHash.startsWith(prefix) ? requested.actionHash : prefix
  })

interface DecideOptions {
  readonly db: string
  readonly pg: Option.Option<Redacted.Redacted>
  readonly json: boolean
  readonly runId: string
  readonly callId: string
  readonly hash: Option.Option<string>
  readonly by: Option.Option<string>
}

/** Records the decision and says what happens next. */
const decideWith = (common: Common, options: DecideOptions, decision: RunLog.Decision) =>
  Effect.gen(function*() {
    const runId = yield* common.decodeRunId(options.runId)
    const by = yield* decider(options.by)
    const actionHash = yield* resolveHash(runId, options.callId, options.hash)
    const record = yield* Agent.decide({ runId, callId: options.callId, decision, by, ...(actionHash === undefined ? {} : { actionHash }) })
    if (options.json) {
      const { at, callId, step } = record
      return yield* Console.log(JSON.stringify({ runId, step, callId, actionHash: record.actionHash, decision, by, at }, null, 2))
    }
    const store = yield* RunLogStore.RunLogStore
    const still = Approval.waiting(yield* store.readLog(runId))
    const verb = decision._tag === "Approve" ? "approved" : "rejected"
    const next = still.length === 0
      ? "the run can resume: run it again (Agent.run with the same run id), or a worker takes it up"
      : `the run still waits for ${still.map((w) => w.callId).join(", ")}`
    yield* Console.log(`${verb} call ${record.callId} of run ${runId} (step ${record.step}, by ${record.by}); ${next}`)
  }).pipe(Effect.provide(Store.layerExisting(common.location(options))))

const runArg = Args.text({ name: "runId" }).pipe(Args.withDescription("the suspended run (see polyloop pending)"))

/** `polyloop approve RUN CALL [--hash H] [--by NAME]`. */
export const approve = (common: Common) =>
  Command.make(
    "approve",
    { db: common.db, pg: common.pg, json: common.json, runId: runArg, callId: callArg, hash: hashOption, by: byOption },
    (options) => decideWith(common, options, Approval.approve)
  ).pipe(
    Command.withDescription("Approve a call a suspended run waits for (the first decision stands; --hash binds it to the action you reviewed).")
  )

/** `polyloop reject RUN CALL --reason TEXT [--hash H] [--by NAME]`. */
export const reject = (common: Common) =>
  Command.make(
    "reject",
    {
      db: common.db,
      pg: common.pg,
      json: common.json,
      runId: runArg,
      callId: callArg,
      hash: hashOption,
      by: byOption,
      reason: Options.text("reason").pipe(Options.withDescription("why (the model is told, through the agent's rejected text)"))
    },
    (options) => decideWith(common, options, Approval.reject(options.reason))
  ).pipe(Command.withDescription("Reject a call a suspended run waits for, with --reason (the model is told; the call is not run)."))
