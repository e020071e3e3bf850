/**
 * `polyloop verify [RUN | --all]`: reads runs' logs in full — every record decoded with its
 * schema — and checks them: sequence numbers without gap or duplicate, the first record a
 * `RunStarted`, every result with its step and every step with its result (atomicity), steps in
 * order, nothing after `RunFinished`, and the store's summary of the run against its log
 * (`RunLogAudit`). Prints one line per problem (`<run>: <problem>`) and exits non-zero when
 * there is any; prints how many runs were verified when there is none.
 *
 * The cheaper check `polyloop runs` makes on the runs it lists (`cheapFindings`: the log decoded
 * without running the record schemas, then the same structural and summary checks) is here too.
 *
 * @since 0.1.0
 */
import * as Args from "@effect/cli/Args"
import * as Command from "@effect/cli/Command"
import * as Options from "@effect/cli/Options"
import { StoreError } from "@polyloop/core/Errors"
import type { RunId } from "@polyloop/core/Ids"
import * as RunLogAudit from "@polyloop/core/RunLogAudit"
import * as RunLogStore from "@polyloop/core/RunLogStore"
import * as Console from "effect/Console"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import type { Common } from "./Approvals.js"
import { CliError } from "./CliError.js"
import * as Store from "./Store.js"

/** One problem of one run. */
export interface Finding {
  readonly runId: string
  readonly problem: string
}

/** A store failure that is a problem of the run's records (they do not decode, or are out of sequence), not of the store. */
const isRecordProblem = (error: StoreError): boolean => error.reason === "Decode" || error.reason === "Corrupt"

/**
 * The problems of one run: its log read (in full when `verify`), its structure, and its summary
 * (when the store lists it). A log that cannot be read because its records are damaged is one
 * problem; a store that cannot be read at all fails.
 */
export const runFindings = (
  store: RunLogStore.RunLogStore.Service,
  runId: RunId,
  summary: Option.Option<RunLogStore.RunSummary>,
  options: { readonly verify: boolean }
): Effect.Effect<ReadonlyArray<Finding>, StoreError> =>
  store.readLog(runId, { verify: options.verify }).pipe(
    Effect.map((log) => {
      const problems = [
        ...RunLogAudit.logProblems(log),
        ...Option.match(summary, {
          onNone: () => (Option.isNone(log.started) ? ["the store has no run with this id"] : []),
          onSome: (s) => RunLogAudit.summaryProblems(s, log)
        })
      ]
      return problems.map((problem) => ({ runId, problem }))
    }),
    Effect.catchIf(
      (error): error is StoreError => error instanceof StoreError && isRecordProblem(error),
      (error) => Effect.succeed([{ runId, problem: error.message }])
    )
  )

/** The problems of every run a store lists (`verify`: full decoding). */
export const storeFindings = (
  store: RunLogStore.RunLogStore.Service,
  summaries: ReadonlyArray<RunLogStore.RunSummary>,
  options: { readonly verify: boolean }
): Effect.Effect<ReadonlyArray<Finding>, StoreError> =>
  Effect.map(
    Effect.forEach(summaries, (summary) => runFindings(store, summary.runId as RunId, Option.some(summary), options)),
    (all) => all.flat()
  )

/** The problems `polyloop runs` reports for the runs it lists: logs decoded without the record schemas. */
export const cheapFindings = (store: RunLogStore.RunLogStore.Service, summaries: ReadonlyArray<RunLogStore.RunSummary>) =>
  storeFindings(store, summaries, { verify: false })

/** `polyloop verify`. */
export const verify = (common: Common) =>
  Command.make(
    "verify",
    {
      db: common.db,
      pg: common.pg,
      json: common.json,
      runId: Args.text({ name: "runId" }).pipe(Args.optional, Args.withDescription("the run to verify (or --all)")),
      all: Options.boolean("all").pipe(Options.withDescription("verify every run of the store"))
    },
    (options) =>
      Effect.gen(function*() {
        if (Option.isSome(options.runId) === options.all) {
          return yield* new CliError({ message: "name one run to verify, or pass --all (not both)" })
        }
        const store = yield* RunLogStore.RunLogStore
        const summaries = yield* store.listRuns()
        let findings: ReadonlyArray<Finding>
        let verified: number
        if (Option.isSome(options.runId)) {
          const runId = yield* common.decodeRunId(options.runId.value)
          findings = yield* runFindings(store, runId, Option.fromNullable(summaries.find((s) => s.runId === runId)), { verify: true })
          verified = 1
        } else {
          findings = yield* storeFindings(store, summaries, { verify: true })
          verified = summaries.length
        }
        if (options.json) yield* Console.log(JSON.stringify(findings, null, 2))
        else for (const finding of findings) yield* Console.log(`${finding.runId}: ${finding.problem}`)
        if (findings.length > 0) {
          const runs = new Set(findings.map((f) => f.runId)).size
          return yield* new CliError({
            message: `${findings.length} problem${findings.length === 1 ? "" : "s"} in ${runs} of ${verified} run${verified === 1 ? "" : "s"}`
          })
        }
        if (!options.json) yield* Console.log(`${verified} run${verified === 1 ? "" : "s"} verified: no problems`)
      }).pipe(Effect.provide(Store.layerExisting(common.location(options))))
  ).pipe(
    Command.withDescription(
      "Check runs' logs in full: every record decodes, sequence without gaps, every result with its step, steps in order, the summary agrees with the log. One line per problem; exits non-zero if any."
    )
  )
